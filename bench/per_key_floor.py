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

    .venv/bin/python -m bench.per_key_floor                      # 1M rows, 3 repeats
    .venv/bin/python -m bench.per_key_floor --rows 10000000 --cores 2
"""

from __future__ import annotations

import argparse
import statistics
import sys

import pyarrow.parquet as pq

from bench.common import WORK, key_slices, per_key_pass


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
        times = [per_key_pass(frame, cuts, call) for _ in range(args.repeat)]
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
