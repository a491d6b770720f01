"""What T1's own function costs, with no Spark and no Kafka: the floor of any per-key path.

Reads the bench's 200k-key Parquet source (written by ``scripts/dev bench``) into one pandas
frame sorted by key, then times, in this one process:

- ``slices``: cutting each key's rows out as ``apply_per_key`` hands them over (``iloc`` and
  an index from 0), with no function;
- ``fn``: the same, calling T1's ``per_key_stats`` on each key and concatenating the
  results in groups of 4096, as ``apply_per_key`` does.

Dividing by the cores gives the least time any engine that calls this function once per key
can take; T1's baseline (``applyInPandas``) divided by that is the highest speedup T1 can
show with this function.

Run::

    .venv/bin/python bench/per_key_floor.py                      # 1M rows, 3 repeats
    .venv/bin/python bench/per_key_floor.py --rows 10000000 --cores 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from shuffle_bench import WORK, per_key_stats  # noqa: E402

EMIT_EVERY = 4096


def key_slices(frame: pd.DataFrame) -> list[tuple[int, int]]:
    keys = frame["k"].to_numpy()
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    bounds = np.append(starts, len(keys)).tolist()
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def run(frame: pd.DataFrame, cuts: list[tuple[int, int]], call: bool) -> float:
    started = time.perf_counter()
    outs = []
    for s, e in cuts:
        part = frame.iloc[s:e]
        part.index = pd.RangeIndex(e - s)
        if call:
            outs.append(per_key_stats(part))
            if len(outs) >= EMIT_EVERY:
                pd.concat(outs, ignore_index=True)
                outs = []
    if outs:
        pd.concat(outs, ignore_index=True)
    return time.perf_counter() - started


def function_cpu(src: Path) -> dict:
    """CPU seconds of one pass over ``src``'s keys without the function and one with it, in
    this process: their difference is the function's own cost, what T1's overhead excludes."""
    frame = pq.read_table(src).to_pandas().sort_values("k", kind="stable", ignore_index=True)
    cuts = key_slices(frame)
    cpu = {}
    for label, call in (("slices", False), ("fn", True)):
        started = time.process_time()
        run(frame, cuts, call)
        cpu[label] = time.process_time() - started
    return {
        "keys": len(cuts),
        "rows": len(frame),
        "slices_cpu_seconds": cpu["slices"],
        "fn_cpu_seconds": cpu["fn"],
        "function_cpu_seconds": max(cpu["fn"] - cpu["slices"], 0.0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args(argv)
    src = WORK / f"source-{args.rows}-k200000.parquet"
    if not src.exists():
        parser.error(f"{src} is missing: run `scripts/dev bench --rows {args.rows}` first")
    frame = pq.read_table(src).to_pandas().sort_values("k", kind="stable", ignore_index=True)
    cuts = key_slices(frame)
    for label, call in (("slices", False), ("fn", True)):
        times = [run(frame, cuts, call) for _ in range(args.repeat)]
        median = statistics.median(times)
        print(
            f"{label:<7} {len(cuts):,} keys, {len(frame):,} rows: median {median:.2f} s "
            f"({median / len(cuts) * 1e6:.0f} us per key); over {args.cores} cores "
            f"at best {median / args.cores:.2f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
