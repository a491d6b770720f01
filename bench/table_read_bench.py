"""Benchmark: consumers without Spark. ``read_table`` against a warm Spark session and
pyarrow reading the same rows from a local Parquet file, and against Kafka's own consumer
over the same bytes.

The synthetic rows of ``shuffle_bench`` (Zipf string keys, a timestamp, five numeric
columns) are written once as Parquet (``bench.common.generate``) and once as a window of a
shuffle of ``--partitions`` Kafka partitions. Then, ``--repeat`` times, side by side:

- small window (``--small-rows``, 1,000 by default):
  - ``read_table_small``: ``read_table(topic, windows=[w])`` (no Spark);
  - ``spark_parquet_small``: the warm session's ``spark.read.parquet(path).toArrow()``;
  - ``pyarrow_parquet_small``: ``pyarrow.parquet.read_table(path)``;
- large window (``--large-rows``, 10M by default):
  - ``read_table_large``: ``read_table`` of the window, in bytes per second (the commit
    record's bytes over the wall time);
  - ``read_batches_large``: ``read_batches`` of it, each batch dropped once counted, with
    the most bytes pyarrow held at once (``pyarrow.total_allocated_bytes``, sampled at
    each batch) against one batch per partition;
  - ``read_batches_kept_large``: ``read_batches`` of it, every batch kept (what
    ``read_table`` holds, without the table);
  - ``read_table``'s most bytes held by pyarrow at once, over the table's bytes (1: the rows
    are held once);
  - ``kafka_consumer_perf_test``: Kafka's ``ConsumerPerformance`` (a Java consumer, one
    thread, a fresh group each time) over every record of the data topic: its fetch rate,
    JVM start-up and group join excluded.

Medians and every measurement go to ``.local/bench/table_read.json``. Targets: the small
read at most 0.25 of Spark's Parquet read; the large read at least 0.8 of the perf test's
rate; ``read_batches`` at most 2x one batch per partition.

Run::

    scripts/dev bench-table-read                    # 1,000 and 10M rows, 5 repeats
    scripts/dev bench-table-read --large-rows 2000000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import WORK, consumer_perf_test, drop_topics, generate
from devstack import localstack
from orchestration.shuffle import (
    ShuffleSpec,
    read_batches,
    read_table,
    shuffle_log,
    spark_session,
    write_shuffle,
)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def held(fn):
    """Runs ``fn``: its seconds, the most bytes pyarrow held at once meanwhile (above what
    it held before) and what it returned."""
    base = pa.total_allocated_bytes()
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, pa.total_allocated_bytes() - base)
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    try:
        out = fn()
    finally:
        elapsed = time.perf_counter() - start
        stop.set()
        sampler.join()
    return elapsed, max(peak, pa.total_allocated_bytes() - base), out


def batches_peak(topic: str, kafka: dict, window: str) -> tuple[float, int, int]:
    """Seconds to stream the window through ``read_batches``, the most bytes pyarrow held
    at once meanwhile (above what it held before), and the largest batch's bytes."""

    def stream() -> int:
        largest = 0
        for batch in read_batches(topic, kafka=kafka, windows=[window]):
            largest = max(largest, batch.nbytes)
            del batch
        return largest

    elapsed, peak, largest = held(stream)
    return elapsed, peak, largest


def batches_kept(topic: str, kafka: dict, window: str) -> float:
    """Seconds to read the window through ``read_batches`` keeping every batch (what
    ``read_table`` holds, without the table)."""

    def keep() -> list:
        return list(read_batches(topic, kafka=kafka, windows=[window]))

    return held(keep)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small-rows", type=int, default=1_000)
    parser.add_argument("--large-rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--out", default=str(WORK / "table_read.json"))
    args = parser.parse_args(argv)

    kafka = {"bootstrap.servers": localstack.start()}
    spark = spark_session(master="local[2]", app_name="kafka-shuffle-bench-table-read")
    spark.sparkContext.setLogLevel("ERROR")
    suffix = uuid.uuid4().hex[:8]
    paths = {
        "small": WORK / f"table-read-{args.small_rows}",
        "large": WORK / f"table-read-{args.large_rows}",
    }
    rows = {"small": args.small_rows, "large": args.large_rows}
    topics = {size: f"bench.table-read-{size}-{suffix}" for size in rows}
    results: dict[str, list[float]] = {}
    peaks: list[dict] = []
    table_held: list[float] = []
    try:
        for size, path in paths.items():
            generate(spark, rows[size], path)
            spec = ShuffleSpec(topics[size], key="k", num_partitions=args.partitions)
            write_shuffle(spark.read.parquet(str(path)), spec, kafka=kafka, window="w")
        log = shuffle_log(topics["large"], kafka=kafka)
        large_bytes = log.latest_by_window()["w"].bytes
        large_records = sum(
            r.last - r.first + 1 for r in log.latest_by_window()["w"].partitions.values()
        )
        small = str(paths["small"])
        # Warm: the session's first Parquet read and the first shuffle read, untimed.
        spark.read.parquet(small).toArrow()
        read_table(topics["small"], kafka=kafka, windows=["w"])
        for i in range(args.repeat):
            runs = {
                "read_table_small": lambda: read_table(topics["small"], kafka=kafka, windows=["w"]),
                "spark_parquet_small": lambda: spark.read.parquet(small).toArrow(),
                "pyarrow_parquet_small": lambda: pq.read_table(small),
            }
            order = list(runs) if i % 2 == 0 else list(reversed(runs))
            for name in order:
                results.setdefault(name, []).append(timed(runs[name]))
            large = [
                ("read_table_large", None),
                ("kafka_consumer_perf_test", None),
                ("read_batches_large", None),
                ("read_batches_kept_large", None),
            ]
            for name, _ in large if i % 2 == 0 else reversed(large):
                if name == "read_table_large":
                    s, peak, table = held(
                        lambda: read_table(topics["large"], kafka=kafka, windows=["w"])
                    )
                    results.setdefault(name, []).append(large_bytes / s)
                    table_held.append(peak / table.nbytes)
                    del table
                elif name == "read_batches_kept_large":
                    s = batches_kept(topics["large"], kafka, "w")
                    results.setdefault(name, []).append(large_bytes / s)
                elif name == "read_batches_large":
                    s, peak, largest = batches_peak(topics["large"], kafka, "w")
                    results.setdefault(name, []).append(large_bytes / s)
                    peaks.append(
                        {"peak_bytes": peak, "largest_batch_bytes": largest,
                         "bound_bytes": 2 * largest * args.partitions}
                    )  # fmt: skip
                else:
                    rate = consumer_perf_test(kafka, topics["large"], large_records)
                    results.setdefault(name, []).append(rate)
            print(f"repeat {i + 1}/{args.repeat}: " + ", ".join(
                f"{k} {v[-1]:.4g}" for k, v in results.items()
            ), flush=True)  # fmt: skip
    finally:
        spark.stop()
        drop_topics(kafka, list(topics.values()))
    medians = {k: statistics.median(v) for k, v in results.items()}
    ratios = {
        "small: read_table / spark_parquet (target <= 0.25)": medians["read_table_small"]
        / medians["spark_parquet_small"],
        "small: read_table / pyarrow_parquet": medians["read_table_small"]
        / medians["pyarrow_parquet_small"],
        "large: read_table / consumer perf test (target >= 0.8)": medians["read_table_large"]
        / medians["kafka_consumer_perf_test"],
        "large: read_batches / consumer perf test": medians["read_batches_large"]
        / medians["kafka_consumer_perf_test"],
        "large: read_batches keeping every batch / consumer perf test": medians[
            "read_batches_kept_large"
        ]
        / medians["kafka_consumer_perf_test"],
        "read_batches peak / (2 x largest batch x partitions) (target <= 1)": max(
            p["peak_bytes"] / p["bound_bytes"] for p in peaks
        ),
        "read_table: most bytes held / the table's bytes (largest)": max(table_held),
    }
    out = {
        "rows": rows,
        "partitions": args.partitions,
        "large_bytes": large_bytes,
        "medians": medians,
        "ratios": ratios,
        "runs": results,
        "read_batches_memory": peaks,
    }
    WORK.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    for k, v in ratios.items():
        print(f"{k}: {v:.3f}")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
