"""Benchmark: the JVM read path against a bucketed Parquet table, plain Parquet and the Python
read path, side by side.

On a session built with :func:`orchestration.shuffle.jvm_spark_conf` (so reads run on the
JVM and Spark sees them as keyed), over the same synthetic rows as ``shuffle_bench`` (Zipf
string keys, a timestamp, five numeric columns), ``--repeat`` times alternating order:

- read: ``read_shuffle`` on the JVM / the bucketed table (``bucketBy(8, "k")``) / the Python
  read path, each into the ``noop`` sink;
- kafka: the same rows as one Kafka message per row (key ``k``, the row as JSON, written by
  Spark's ``kafka`` sink into a topic of as many partitions), read by Spark's ``kafka`` source
  back into the same columns (``from_json``), and read raw (key, value and the record columns,
  no parsing), each into the ``noop`` sink;
- agg: ``groupBy("k").agg(...)`` over the JVM read / over the bucketed table / over the
  plain Parquet source;
- join: two shuffles of the same layout joined on the key (the rows, and one row per key)
  / their two Parquet sources; Spark broadcasts the smaller side of both (it is a few MiB
  and the read reports its size), so neither plan has an Exchange;
- join, no broadcast: the same two joins with ``spark.sql.autoBroadcastJoinThreshold`` at
  -1, as between two inputs too large to broadcast: a sort-merge join, with no Exchange
  over the shuffles (a storage-partitioned join) and one on each side over Parquet;
- reuse: the write plus three consumers written in plain Spark (per-key totals, the largest
  gap between a key's consecutive events with a window ``lag``, each key's top three rows
  with ``row_number``) over the JVM read / the bucketed table's write plus the same three;
- sorted: the same rows written as sorted runs (``sort_by=("k", "ts")``, the per-key side
  ``sort_by=("k",)``) against unsorted ones (the write cost of sorting; from the Parquet
  source both take the columnar path, the sorted one a task per range of partitions that
  reads every row group and sorts in numpy), and against a bucketed table sorted the same way
  (``bucketBy(...).sortBy("k", "ts")``): the join with no broadcast (a sort-merge join
  with neither an Exchange nor a Sort over the sorted shuffles, asserted; Spark sorts the
  bucketed table's buckets, since a bucket of several files is not one sorted sequence, and
  both sides of the Parquet join), and the reuse of a sorted write by a window ``lag`` and
  each key's first three rows (``Window.partitionBy("k").orderBy("ts")``: no Sort over the
  sorted read, asserted) / the bucketed sorted table's write plus the same two.

Targets: read >= 1x the bucketed
table's and >= 30x Spark's ``kafka`` source reading the rows into their columns; agg >= 1x
over the bucketed table and >= 2x over plain Parquet; join >= 2x; reuse
<= 0.6 of the bucketed table's time. Sorted runs: the sorted join >= 2x the Parquet join
and >= 1.3x the bucketed sorted table's; the sorted reuse <= 0.5 of the bucketed sorted
table's; the write cost of sorting is stated (sorted / unsorted write, bound 2x). Medians go to
``.local/bench/jvm.json``.

Run::

    scripts/dev bench-jvm                       # 2M and 10M rows, 3 repeats
    scripts/dev bench-jvm --rows 2000000 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import uuid
from pathlib import Path

from bench.common import (
    BASELINE_JARS,
    ROOT,
    WORK,
    drop_topics,
    generate,
    group_by,
    noop,
    side_by_side,
    spark_consumers,
    spark_gaps,
    spark_kafka_rows,
    spark_kafka_source,
    spark_kafka_write,
)
from bench.results import per_size
from devstack import localstack
from orchestration.shuffle import (
    KafkaClient,
    ShuffleSpec,
    jvm_spark_conf,
    read_shuffle,
    spark_session,
    write_shuffle,
)
from orchestration.shuffle.core.commitlog import commit_topic
from orchestration.shuffle.spark.session import explain_text

# (target, ours, baseline, kind, bound): "speedup" is baseline / ours, at least the bound;
# "ratio" is ours / baseline, at most the bound.
TARGETS = (
    ("read vs bucketed", "jvm_read", "bucketed_read", "speedup", 1.0),
    ("read vs Spark's kafka source", "jvm_read", "kafka_source_read", "speedup", 30.0),
    ("agg vs bucketed", "jvm_agg", "bucketed_agg", "speedup", 1.0),
    ("agg vs Parquet", "jvm_agg", "parquet_agg", "speedup", 2.0),
    ("join vs Parquet", "jvm_join", "parquet_join", "speedup", 2.0),
    ("join vs Parquet, no broadcast", "jvm_join_smj", "parquet_join_smj", "speedup", 2.0),
    ("reuse vs bucketed", "jvm_reuse", "bucketed_reuse", "ratio", 0.6),
    ("read, JVM vs Python path", "jvm_read", "python_read", "speedup", 1.0),
    ("sorted join vs Parquet, no broadcast", "jvm_sorted_join_smj", "parquet_join_smj",
     "speedup", 2.0),
    ("sorted join vs bucketed sorted", "jvm_sorted_join_smj", "bucketed_sorted_join_smj",
     "speedup", 1.3),
    ("sorted reuse vs bucketed sorted", "jvm_sorted_reuse", "bucketed_sorted_reuse", "ratio",
     0.5),
    ("sorted write vs unsorted write", "write_sorted", "write_unsorted", "ratio", 2.0),
)  # fmt: skip


def sorted_consumers(df) -> None:
    """Two consumers whose windows a read sorted by (k, ts) serves as it is: the largest gap
    between a key's consecutive events (``lag``) and each key's first three rows."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spark_gaps(df)
    first = F.row_number().over(Window.partitionBy("k").orderBy("ts"))
    noop(df.withColumn("r", first).where("r <= 3").select("k", "ts", "b"))


def sorts(plan: str) -> list[str]:
    """The Sort nodes of a plan's text."""
    nodes = (line.strip().lstrip("+-*:( 0123456789)") for line in plan.splitlines())
    return [n for n in nodes if n.startswith("Sort ")]


def run_size(
    spark, kafka: dict, rows: int, repeat: int, partitions: int, skip: frozenset[str] = frozenset()
) -> dict:
    """Every pair at ``rows`` rows, ``repeat`` times; pairs whose first phase is in ``skip``
    are left out (and with ``kafka_source_read``, the Kafka messages they read are not
    written)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    src = WORK / f"source-{rows}.parquet"
    generate(spark, rows, src)
    df = spark.read.parquet(str(src))
    # The join's other side: one row per key (a dimension keyed as the rows are), so the
    # join's output is the rows, whatever the key skew.
    other_src = WORK / f"source-{rows}-per-key.parquet"
    if not (other_src / "_SUCCESS").exists():
        df.groupBy("k").agg(F.avg("a").alias("a2")).write.mode("overwrite").parquet(str(other_src))
    other = spark.read.parquet(str(other_src))
    tag = uuid.uuid4().hex[:8]
    topic, other_topic = f"bench.jvm.{tag}", f"bench.jvm2.{tag}"
    table = f"bench_jvm_bucketed_{tag}"

    sorted_topic, sorted_other_topic = f"bench.jvm.sorted.{tag}", f"bench.jvm2.sorted.{tag}"
    sorted_table, sorted_other_table = f"{table}_sorted", f"{table}_sorted_other"

    def spec(t: str, event_time: str | None = "ts", sort_by: tuple = ()) -> ShuffleSpec:
        return ShuffleSpec(
            topic=t, key=("k",), num_partitions=partitions, event_time=event_time, sort_by=sort_by
        )

    write_shuffle(df, spec(topic), kafka=kafka, window="bench")
    write_shuffle(other, spec(other_topic, None), kafka=kafka, window="bench")

    def sorted_write() -> None:
        write_shuffle(df, spec(sorted_topic, sort_by=("k", "ts")), kafka=kafka, window="bench")

    sorted_write()
    write_shuffle(other, spec(sorted_other_topic, None, ("k",)), kafka=kafka, window="bench")
    # The same rows as plain messages, one per row, keyed as Kafka users key them.
    messages = f"bench.jvm.rows.{tag}"
    if "kafka_source_read" not in skip:
        KafkaClient(kafka).ensure_topic(messages, partitions, config={"retention.ms": "-1"})
        spark_kafka_write(df, kafka, messages)

    def kafka_source():
        return spark_kafka_source(spark, kafka, messages)

    def kafka_rows():
        return spark_kafka_rows(spark, kafka, messages, df.schema)

    if "kafka_source_read" not in skip:
        assert kafka_rows().count() == df.count()

    def bucketed_write() -> None:
        spark.sql(f"DROP TABLE IF EXISTS {table}")
        df.write.bucketBy(partitions, "k").format("parquet").saveAsTable(table)

    bucketed_write()

    def bucketed_sorted_write() -> None:
        spark.sql(f"DROP TABLE IF EXISTS {sorted_table}")
        df.write.bucketBy(partitions, "k").sortBy("k", "ts").format("parquet").saveAsTable(
            sorted_table
        )

    bucketed_sorted_write()
    spark.sql(f"DROP TABLE IF EXISTS {sorted_other_table}")
    other.write.bucketBy(partitions, "k").sortBy("k").format("parquet").saveAsTable(
        sorted_other_table
    )

    def jvm_sorted() -> object:
        return read_shuffle(spark, sorted_topic, kafka=kafka, engine="jvm")

    def jvm_sorted_other() -> object:
        return read_shuffle(spark, sorted_other_topic, kafka=kafka, engine="jvm")

    def jvm() -> object:
        return read_shuffle(spark, topic, kafka=kafka, engine="jvm")

    def join(left, right) -> None:
        noop(left.join(right, "k"))

    def jvm_other() -> object:
        return read_shuffle(spark, other_topic, kafka=kafka, engine="jvm")

    def without_broadcast(run):
        """``run`` with Spark's broadcast threshold at -1, then the session's setting again."""

        def timed():
            key = "spark.sql.autoBroadcastJoinThreshold"
            before = spark.conf.get(key)
            spark.conf.set(key, "-1")
            try:
                return run()
            finally:
                spark.conf.set(key, before)

        return timed

    plan = explain_text(jvm().groupBy("k").count())
    assert "Exchange" not in plan, plan
    plan = without_broadcast(lambda: explain_text(jvm().join(jvm_other(), "k")))()
    assert "SortMergeJoin" in plan and "Exchange" not in plan, plan
    # Sorted runs: the same join, and the windows, with no Sort over the sorted reads.
    plan = without_broadcast(lambda: explain_text(jvm_sorted().join(jvm_sorted_other(), "k")))()
    assert "SortMergeJoin" in plan and "Exchange" not in plan and not sorts(plan), plan
    for w in (Window.partitionBy("k").orderBy("ts"),):
        plan = explain_text(jvm_sorted().withColumn("prev", F.lag("ts").over(w)))
        assert "Exchange" not in plan and not sorts(plan), plan
    pairs = [
        (("jvm_read", lambda: noop(jvm())), ("bucketed_read", lambda: noop(spark.table(table)))),
        (
            ("python_read", lambda: noop(read_shuffle(spark, topic, kafka=kafka, engine="python"))),
            None,
        ),
        (
            ("kafka_source_read", lambda: noop(kafka_rows())),
            ("kafka_source_raw_read", lambda: noop(kafka_source())),
        ),
        (
            ("jvm_agg", lambda: group_by(jvm())),
            ("bucketed_agg", lambda: group_by(spark.table(table))),
        ),
        (("parquet_agg", lambda: group_by(df)), None),
        (("jvm_join", lambda: join(jvm(), jvm_other())), ("parquet_join", lambda: join(df, other))),
        (
            ("jvm_join_smj", without_broadcast(lambda: join(jvm(), jvm_other()))),
            ("parquet_join_smj", without_broadcast(lambda: join(df, other))),
        ),
        (
            (
                "jvm_reuse",
                lambda: (
                    write_shuffle(df, spec(topic), kafka=kafka, window="bench"),
                    spark_consumers(jvm()),
                ),
            ),
            ("bucketed_reuse", lambda: (bucketed_write(), spark_consumers(spark.table(table)))),
        ),
        (
            ("write_sorted", sorted_write),
            ("write_unsorted", lambda: write_shuffle(df, spec(topic), kafka=kafka, window="bench")),
        ),
        (
            (
                "jvm_sorted_join_smj",
                without_broadcast(lambda: join(jvm_sorted(), jvm_sorted_other())),
            ),
            (
                "bucketed_sorted_join_smj",
                without_broadcast(
                    lambda: join(spark.table(sorted_table), spark.table(sorted_other_table))
                ),
            ),
        ),
        (
            ("jvm_sorted_reuse", lambda: (sorted_write(), sorted_consumers(jvm_sorted()))),
            (
                "bucketed_sorted_reuse",
                lambda: (bucketed_sorted_write(), sorted_consumers(spark.table(sorted_table))),
            ),
        ),
    ]
    pairs = [(a, b) for a, b in pairs if a[0] not in skip]
    times = side_by_side(pairs, repeat, f"rows={rows:>9}")
    shuffles = (topic, other_topic, sorted_topic, sorted_other_topic)
    drop_topics(kafka, [t for x in shuffles for t in (x, commit_topic(x))] + [messages])
    for t in (table, sorted_table, sorted_other_table):
        spark.sql(f"DROP TABLE IF EXISTS {t}")
    med = {k: statistics.median(v) for k, v in times.items()}
    targets = {}
    for name, ours, base, kind, bound in TARGETS:
        if ours not in med or base not in med:
            continue
        ratio = med[base] / med[ours] if kind == "speedup" else med[ours] / med[base]
        met = ratio >= bound if kind == "speedup" else ratio <= bound
        targets[name] = {
            "ours": ours, "baseline": base, "ours_seconds": med[ours],
            "baseline_seconds": med[base], "kind": kind, "ratio": ratio, "bound": bound,
            "met": met,
        }  # fmt: skip
    return {"times": times, "medians": med, "targets": targets}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="2000000,10000000", help="comma-separated sizes")
    parser.add_argument(
        "--repeat", default="3", help="runs per phase: one number, or one per size (3,3,1)"
    )
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated phases (the first of a pair, e.g. kafka_source_read) to leave out",
    )
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[2]"))
    parser.add_argument("--out", default=str(WORK / "jvm.json"))
    args = parser.parse_args(argv)
    kafka = {"bootstrap.servers": localstack.start()}
    # Spark's Kafka connector (the baseline's source and the sink that writes its messages)
    # beside the jars of jvm_spark_conf.
    jars = localstack.resolve_jars(ROOT / "bench" / "pom.xml", WORK / "jars")
    ours = jvm_spark_conf(kafka=kafka)
    have = {Path(j).name for j in ours["spark.jars"].split(",")}  # kafka-clients: the same one
    baseline = [
        str(p)
        for p in sorted(jars.glob("*.jar"))
        if p.name.startswith(BASELINE_JARS) and p.name not in have
    ]
    conf = {
        **ours,
        "spark.jars": ",".join([ours["spark.jars"], *baseline]),
        "spark.driver.memory": "6g",
        "spark.sql.shuffle.partitions": str(args.partitions),
        "spark.sql.warehouse.dir": str(WORK / "spark-warehouse"),
    }
    spark = spark_session(master=args.master, app_name="kafka-shuffle-jvm-bench", conf=conf)
    report: dict = {"master": args.master, "cores": os.cpu_count(), "sizes": {}}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    sizes = [int(r) for r in args.rows.split(",")]
    skip = frozenset(p for p in args.skip.split(",") if p)
    for rows, repeat in zip(sizes, per_size(args.repeat, sizes, 3), strict=True):
        print(f"== {rows} rows, {repeat} run(s) of each phase", flush=True)
        report["sizes"][str(rows)] = run_size(spark, kafka, rows, repeat, args.partitions, skip)
        report["sizes"][str(rows)]["repeat"] = repeat
        out.write_text(json.dumps(report, indent=2))
    for rows, r in report["sizes"].items():
        for name, t in r["targets"].items():
            want = ">=" if t["kind"] == "speedup" else "<="
            print(
                f"{int(rows) / 1e6:g}M {name:<30} {t['ours_seconds']:7.3f}s vs "
                f"{t['baseline_seconds']:7.3f}s: {t['ratio']:.2f} (target {want} {t['bound']:g}): "
                f"{'met' if t['met'] else 'MISSED'}"
            )
    print(f"\nall measurements: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
