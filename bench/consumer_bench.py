"""Benchmark: a consumer of the reference pipeline on pandas against its Spark version.

One day of flights (``--day``) is written as a run of a shuffle keyed by ``tailnum`` (8
partitions, as the pipeline's producer writes it). Then, for ``aircraft_delay_streaks`` and
``carrier_hourly_otp``, side by side ``--repeat`` times, each doing what its asset does:

- ``spark_<consumer>``: in a warm Spark session built as the pipeline builds its own (the
  JVM read path, the same driver options), a planned shuffle read of the day, the consumer
  on Spark (``run_consumer``: ``apply_per_key`` or ``groupBy``), its Parquet output written
  and counted;
- ``pandas_<consumer>``: the day read with ``read_table`` into pandas (as the shuffle IO
  manager loads an input annotated ``pandas.DataFrame``), the consumer on pandas
  (``run_pandas_consumer``), its Parquet file written with pyarrow.

Then ``--cold-repeat`` times, each in a new Python process, as a Dagster run of the asset in a
process of its own pays it: ``cold_spark_<consumer>`` (the session's start included) and
``cold_pandas_<consumer>`` (no Spark at all), from the process's start to its end.

The two versions' outputs are compared (sorted, exactly). Medians, ratios and every
measurement go to ``.local/bench/consumer.json``. Target: the pandas version at least 3x
faster than its Spark version (spark / pandas >= 3), results equal.

Run::

    scripts/dev bench-consumer                    # 5 repeats warm, 3 cold
    scripts/dev bench-consumer --repeat 3 --cold-repeat 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid

import pyarrow as pa

from bench.common import ROOT, WORK, drop_topics, side_by_side
from devstack import localstack

CONSUMERS = ("aircraft_delay_streaks", "carrier_hourly_otp")
KEYS = {"aircraft_delay_streaks": ["tailnum"], "carrier_hourly_otp": ["carrier", "hour"]}


def spark_of(kafka: dict):
    """A session built as the reference pipeline builds its own (jobs/definitions.py)."""
    from jobs.definitions import DRIVER_JAVA_OPTIONS
    from orchestration.shuffle import jvm_spark_conf, spark_session

    conf = {**jvm_spark_conf(kafka=kafka), "spark.driver.extraJavaOptions": DRIVER_JAVA_OPTIONS}
    return spark_session(master="local[2]", app_name="kafka-shuffle-bench-consumer", conf=conf)


def on_spark(spark, kafka: dict, topic: str, day: str, name: str, out: str) -> dict:
    from assets.pipeline import run_consumer
    from orchestration.shuffle import plan_shuffle_read

    read = plan_shuffle_read(spark, topic, kafka=kafka, windows=[day])
    return run_consumer(name, read, out)


def on_pandas(kafka: dict, topic: str, day: str, name: str, out: str) -> dict:
    from assets.pipeline import run_pandas_consumer
    from assets.warehouse import WarehouseResource
    from orchestration.shuffle import read_table
    from orchestration.shuffle.table_read import to_pandas

    frame = to_pandas(read_table(topic, kafka=kafka, windows=[day]))
    return run_pandas_consumer(name, frame, WarehouseResource(path=str(WORK)), out)


def cold(kind: str, kafka: dict, topic: str, day: str, name: str, out: str) -> float:
    """Seconds of a new process that runs the consumer once (``--one``)."""
    cmd = [sys.executable, "-m", "bench.consumer_bench", "--one", kind, "--topic", topic,
           "--day", day, "--consumer", name, "--out-path", out,
           "--bootstrap", kafka["bootstrap.servers"]]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - start


def same_rows(a: str, b: str, keys: list[str]) -> bool:
    import pyarrow.parquet as pq

    order = [(k, "ascending") for k in keys]
    left = pq.read_table(a)
    right = pq.read_table(b).select(left.schema.names).cast(left.schema)
    return left.sort_by(order).equals(right.sort_by(order))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--day", default="2013-01-02")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cold-repeat", type=int, default=3)
    parser.add_argument("--out", default=str(WORK / "consumer.json"))
    # One consumer run in this process, for the cold measurements.
    parser.add_argument("--one", choices=["spark", "pandas"], help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--consumer", help=argparse.SUPPRESS)
    parser.add_argument("--out-path", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.one:
        kafka = {"bootstrap.servers": args.bootstrap}
        if args.one == "pandas":
            on_pandas(kafka, args.topic, args.day, args.consumer, args.out_path)
        else:
            spark = spark_of(kafka)
            on_spark(spark, kafka, args.topic, args.day, args.consumer, args.out_path)
            spark.stop()
        return 0

    from assets.flights_data import flights_of_day
    from orchestration.shuffle import ShuffleSpec, write_shuffle

    kafka = {"bootstrap.servers": localstack.start()}
    spark = spark_of(kafka)
    topic = f"bench.consumer-{uuid.uuid4().hex[:8]}"
    outs = {
        (kind, name): str(WORK / "consumer" / kind / name)
        for kind in ("spark", "pandas", "cold_spark", "cold_pandas")
        for name in CONSUMERS
    }
    results: dict[str, list[float]] = {}
    equal: dict[str, bool] = {}
    try:
        day_rows = spark.createDataFrame(flights_of_day(args.day)).filter("tailnum is not null")
        spec = ShuffleSpec(topic, key="tailnum", num_partitions=8, max_parallelism=128)
        rows = write_shuffle(day_rows, spec, kafka=kafka, window=args.day).rows
        pairs = []
        for name in CONSUMERS:
            # Warm: each version once, untimed.
            on_spark(spark, kafka, topic, args.day, name, outs["spark", name])
            on_pandas(kafka, topic, args.day, name, outs["pandas", name])
            pairs.append(
                (
                    (f"spark_{name}", lambda n=name: on_spark(
                        spark, kafka, topic, args.day, n, outs["spark", n])),
                    (f"pandas_{name}", lambda n=name: on_pandas(
                        kafka, topic, args.day, n, outs["pandas", n])),
                )
            )  # fmt: skip
        results.update(side_by_side(pairs, args.repeat, "warm"))
        for name in CONSUMERS:
            equal[name] = same_rows(outs["spark", name], outs["pandas", name], KEYS[name])
        for i in range(args.cold_repeat):
            for name in CONSUMERS:
                kinds = ["spark", "pandas"] if i % 2 == 0 else ["pandas", "spark"]
                for kind in kinds:
                    s = cold(kind, kafka, topic, args.day, name, outs[f"cold_{kind}", name])
                    results.setdefault(f"cold_{kind}_{name}", []).append(s)
                    print(f"  cold repeat={i} {kind}_{name:<26} {s:8.3f}s", flush=True)
    finally:
        spark.stop()
        drop_topics(kafka, [topic])
    medians = {k: statistics.median(v) for k, v in results.items()}
    ratios = {}
    for name in CONSUMERS:
        ratios[f"{name}: spark / pandas, warm (target >= 3)"] = (
            medians[f"spark_{name}"] / medians[f"pandas_{name}"]
        )
        if f"cold_spark_{name}" in medians:
            ratios[f"{name}: spark / pandas, each in a new process"] = (
                medians[f"cold_spark_{name}"] / medians[f"cold_pandas_{name}"]
            )
    out = {
        "day": args.day,
        "rows": rows,
        "results_equal": equal,
        "medians": medians,
        "ratios": ratios,
        "runs": results,
        "pyarrow": pa.__version__,
    }
    WORK.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    for k, v in medians.items():
        print(f"{k}: {v:.3f}s")
    for k, v in ratios.items():
        print(f"{k}: {v:.2f}")
    print(f"results equal: {equal}")
    print(f"results: {args.out}")
    return 0 if all(equal.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
