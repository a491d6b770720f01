"""Benchmark: the shuffle against Spark's own Kafka sink and source, side by side.

For each size (default 1M and 10M rows) the script generates synthetic rows once (a
Zipf-skewed string key, a timestamp, five numeric columns) into Parquet, then, ``--repeat``
times and alternating which goes first:

- write: ``write_shuffle`` (Arrow frames) vs Spark's ``kafka`` sink, one JSON message per
  row keyed by the key column (Kafka partitions by key: the same keyed layout);
- read: ``read_shuffle`` vs Spark's ``kafka`` source parsing the JSON back into columns;
  both end in Spark's ``noop`` sink so every row is materialized;
- per-key aggregation: ``apply_per_key`` over the shuffle read (no Exchange) vs
  ``groupBy(...).agg(...)`` over the Parquet source (Spark's own shuffle);
- the same aggregation done inside the reader (``aggregate_shuffle``), against the same
  ``groupBy`` measurement;
- the floor under any writer that runs in Python: the same rows, with their key group,
  handed to an empty ``mapInArrow`` that only counts them;

and samples the resident memory of Spark's Python worker processes during each phase.
It prints medians and writes every measurement to a JSON file.

Run::

    scripts/dev bench                          # 1M and 10M rows, 3 repeats
    scripts/dev bench --rows 1000000 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka.admin import AdminClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestration import localstack  # noqa: E402
from orchestration.shuffle import (  # noqa: E402
    ShuffleSpec,
    aggregate_shuffle,
    apply_per_key,
    read_shuffle,
    write_shuffle,
)
from orchestration.shuffle._kafka import ensure_topic  # noqa: E402
from orchestration.shuffle.commitlog import commit_topic  # noqa: E402
from orchestration.shuffle.spark import spark_session  # noqa: E402

WORK = ROOT / ".local" / "bench"
PHASES = (
    "arrow_handover",
    "shuffle_write",
    "spark_write",
    "shuffle_read",
    "spark_read",
    "shuffle_per_key",
    "spark_group_by",
    "shuffle_aggregate",
)
BASELINE_JARS = (
    "spark-sql-kafka-0-10_2.13",
    "spark-token-provider-kafka-0-10_2.13",
    "kafka-clients",
    "commons-pool2",
)


class WorkerMemory:
    """Samples the RSS of Spark's Python worker processes (peak of any single one)."""

    def __init__(self, interval: float = 0.1):
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                    if b"pyspark.daemon" not in cmd and b"pyspark.worker" not in cmd:
                        continue
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmRSS:"):
                            self.peak = max(self.peak, int(line.split()[1]) * 1024)
                except OSError:
                    continue
            self._stop.wait(self.interval)

    def __enter__(self) -> WorkerMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def timed(fn) -> tuple[float, int, object]:
    with WorkerMemory() as mem:
        start = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - start
    return seconds, mem.peak, out


def generate(spark, rows: int, path: Path) -> None:
    if (path / "_SUCCESS").exists():
        return
    # Zipf-like key: rank = floor(u^(-1/0.2)), folded into 100k keys: a heavy head
    # (~13% of rows on one key) and a long tail.
    spark.range(rows).selectExpr(
        "concat('key-', cast(pmod(floor(least(pow(rand(7), -5.0), 1e15)), 100000) as string)) as k",
        "timestamp_seconds(1356998400 + id % 86400) as ts",
        "cast(id as double) * 0.5 as a",
        "rand(11) * 100 as b",
        "cast(id % 1000 as bigint) as c",
        "cast(pmod(id * 7, 97) as int) as d",
        "randn(13) as e",
    ).write.mode("overwrite").parquet(str(path))


def logical_bytes_per_row(path: Path) -> float:
    """Uncompressed Arrow bytes per row, from the first row group of the Parquet source."""
    files = sorted(path.glob("*.parquet"))
    table = pq.ParquetFile(files[0]).read_row_group(0)
    return table.nbytes / max(table.num_rows, 1)


def drop_topics(kafka: dict, topics: list[str]) -> None:
    admin = AdminClient(kafka)
    for fut in admin.delete_topics(topics, operation_timeout=60).values():
        try:
            fut.result(60)
        except Exception:  # noqa: BLE001 - a topic that is already gone is fine here
            pass


def make_phases(spark, kafka: dict, df, json_schema, spec: ShuffleSpec, theirs: str) -> list:
    """The three pairs of phases: (ours name, ours fn, baseline name, baseline fn)."""
    ours = spec.topic

    def w_ours():
        return write_shuffle(df, spec, kafka=kafka, window="bench")

    def w_theirs():
        (
            df.selectExpr("k as key", "to_json(struct(*)) as value")
            .write.format("kafka")
            .option("kafka.bootstrap.servers", kafka["bootstrap.servers"])
            .option("topic", theirs)
            .save()
        )

    def r_ours():
        read_shuffle(spark, ours, kafka=kafka).write.format("noop").mode("overwrite").save()

    def r_theirs():
        from pyspark.sql import functions as F

        (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", kafka["bootstrap.servers"])
            .option("subscribe", theirs)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
            .select(F.from_json(F.col("value").cast("string"), json_schema).alias("r"))
            .select("r.*")
            .write.format("noop")
            .mode("overwrite")
            .save()
        )

    def agg(pdf):
        g = pdf.groupby("k", as_index=False)
        return g.agg(n=("a", "size"), sa=("a", "sum"), mb=("b", "mean"), mc=("c", "max"))

    agg_schema = "k string, n long, sa double, mb double, mc long"

    def k_ours():
        out = apply_per_key(
            read_shuffle(spark, ours, kafka=kafka), "k", agg, agg_schema, per="batch"
        )
        out.write.format("noop").mode("overwrite").save()

    def k_theirs():
        from pyspark.sql import functions as F

        (
            df.groupBy("k")
            .agg(
                F.count("a").alias("n"),
                F.sum("a").alias("sa"),
                F.avg("b").alias("mb"),
                F.max("c").alias("mc"),
            )
            .write.format("noop")
            .mode("overwrite")
            .save()
        )

    def handover():
        from pyspark.sql import functions as F

        def count(batches):
            rows = sum(b.num_rows for b in batches)
            yield pa.record_batch({"rows": [rows]})

        keyed = df.withColumn("_key_group", F.pmod(F.hash("k"), F.lit(spec.max_parallelism)))
        return keyed.mapInArrow(count, "rows long").collect()

    def a_ours():
        aggs = {"n": ("a", "count"), "sa": ("a", "sum"), "mb": ("b", "mean"), "mc": ("c", "max")}
        aggregate_shuffle(spark, ours, kafka=kafka, aggregations=aggs).write.format("noop").mode(
            "overwrite"
        ).save()

    return [
        # The writer's floor: Spark -> Python hand-over alone, no Kafka.
        ("arrow_handover", handover, None, None),
        ("shuffle_write", w_ours, "spark_write", w_theirs),
        ("shuffle_read", r_ours, "spark_read", r_theirs),
        ("shuffle_per_key", k_ours, "spark_group_by", k_theirs),
        # Compared with the spark_group_by measurement above.
        ("shuffle_aggregate", a_ours, None, None),
    ]


def run_size(spark, kafka: dict, rows: int, repeat: int, partitions: int, mp: int) -> dict:
    src = WORK / f"source-{rows}.parquet"
    generate(spark, rows, src)
    bpr = logical_bytes_per_row(src)
    df = spark.read.parquet(str(src))
    json_schema = df.schema
    results: dict[str, list[dict]] = {k: [] for k in PHASES}
    for i in range(repeat):
        ours = f"bench.shuffle.{uuid.uuid4().hex[:8]}"
        theirs = f"bench.spark.{uuid.uuid4().hex[:8]}"
        ensure_topic(kafka, theirs, partitions, {"retention.ms": "-1"})
        spec = ShuffleSpec(
            topic=ours, key=("k",), num_partitions=partitions, max_parallelism=mp, event_time="ts"
        )

        # Create both topics outside the timings: the baseline's topic is made up front too.
        write_shuffle(df.limit(0), spec, kafka=kafka, window="setup")
        pairs = make_phases(spark, kafka, df, json_schema, spec, theirs)
        for a_name, a_fn, b_name, b_fn in pairs:
            order = [(a_name, a_fn)] + ([(b_name, b_fn)] if b_fn else [])
            if i % 2:
                order.reverse()
            for name, fn in order:
                seconds, peak, out = timed(fn)
                entry = {"seconds": seconds, "worker_peak_rss": peak}
                if name == "shuffle_write":
                    entry["kafka_bytes"] = out.bytes
                results[name].append(entry)
                print(
                    f"  rows={rows:>9} repeat={i} {name:<16} {seconds:8.2f}s "
                    f"{rows / seconds / 1e3:9.0f}k rows/s  worker peak {peak / 2**20:6.0f} MiB",
                    flush=True,
                )
        drop_topics(kafka, [ours, commit_topic(ours), theirs])
    summary = {}
    for name, entries in results.items():
        med = statistics.median(e["seconds"] for e in entries)
        summary[name] = {
            "median_seconds": med,
            "rows_per_s": rows / med,
            "logical_mb_per_s": rows * bpr / med / 1e6,
            "worker_peak_rss_mib": max(e["worker_peak_rss"] for e in entries) / 2**20,
            "runs": entries,
        }
    for a, b in (
        ("shuffle_write", "spark_write"),
        ("shuffle_read", "spark_read"),
        ("shuffle_per_key", "spark_group_by"),
        ("shuffle_aggregate", "spark_group_by"),
        ("arrow_handover", "spark_write"),
    ):
        summary[f"{a}_vs_{b}_speedup"] = summary[b]["median_seconds"] / summary[a]["median_seconds"]
    summary["logical_bytes_per_row"] = bpr
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1000000,10000000", help="comma-separated sizes")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--max-parallelism", type=int, default=128)
    parser.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[2]"))
    parser.add_argument("--out", default=str(WORK / "results.json"))
    parser.add_argument(
        "--no-worker-reuse",
        action="store_true",
        help="fresh Python worker per task, so worker peak memory is per phase, not cumulative",
    )
    args = parser.parse_args(argv)

    kafka = {"bootstrap.servers": localstack.start()}
    jars = localstack.resolve_jars(ROOT / "bench" / "pom.xml", WORK / "jars")
    wanted = [str(p) for p in sorted(jars.glob("*.jar")) if p.name.startswith(BASELINE_JARS)]
    spark = spark_session(
        master=args.master,
        app_name="kafka-shuffle-bench",
        conf={
            "spark.jars": ",".join(wanted),
            "spark.driver.memory": "6g",
            "spark.sql.shuffle.partitions": str(args.partitions),
            "spark.python.worker.reuse": str(not args.no_worker_reuse).lower(),
        },
    )
    report = {
        "master": args.master,
        "partitions": args.partitions,
        "python_worker_reuse": not args.no_worker_reuse,
        "sizes": {},
    }
    for rows in (int(r) for r in args.rows.split(",")):
        print(f"== {rows} rows", flush=True)
        report["sizes"][rows] = run_size(
            spark, kafka, rows, args.repeat, args.partitions, args.max_parallelism
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print("\nmedians (side by side in this run):")
    print(
        f"{'rows':>10} {'phase':<16} {'seconds':>8} {'k rows/s':>9} {'MB/s':>7} {'worker MiB':>10}"
    )
    for rows, s in report["sizes"].items():
        for name in PHASES:
            e = s[name]
            print(
                f"{rows:>10} {name:<16} {e['median_seconds']:8.2f} {e['rows_per_s'] / 1e3:9.0f} "
                f"{e['logical_mb_per_s']:7.1f} {e['worker_peak_rss_mib']:10.0f}"
            )
        print(
            f"{rows:>10} speedups: write {s['shuffle_write_vs_spark_write_speedup']:.2f}x, "
            f"read {s['shuffle_read_vs_spark_read_speedup']:.2f}x, per-key vs groupBy "
            f"{s['shuffle_per_key_vs_spark_group_by_speedup']:.2f}x, aggregate in the reader "
            f"vs groupBy {s['shuffle_aggregate_vs_spark_group_by_speedup']:.2f}x; "
            f"Spark sink / Arrow hand-over alone (a Python writer's ceiling) "
            f"{s['arrow_handover_vs_spark_write_speedup']:.2f}x"
        )
    print(f"\nall measurements: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
