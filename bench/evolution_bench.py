"""Benchmark: reads of an evolved shuffle. Runs written under an older schema version against
runs of the latest, and a grown shuffle's keyed read against the same rows written after the
growth alone.

On a session built with ``jvm_spark_conf`` (both read paths), the synthetic rows of
``bench.common.generate`` (``--rows``, Zipf string keys, a timestamp, five numeric columns):

- **versions**: one shuffle, a window ``old`` written under version 1, then
  ``alter_shuffle`` adds a column, renames ``b`` to ``b2`` and widens ``d`` (int -> bigint);
  a window ``new`` of the same rows written under the latest (``b2``, ``d`` bigint, the new
  column null). Side by side, ``--repeat`` times: each window read alone into Spark's
  ``noop`` sink on the JVM path (``jvm_old`` / ``jvm_new``) and the Python path, and
  ``read_table`` of it. Target: old within 1.1x of new on each path.
- **growth**: shuffle G has a window written at 8 partitions, grown to 16, then a window of
  16; shuffle H has the same two windows written at 16 partitions alone. A keyed JVM read of
  both windows, the first row of each key by a window over it (``row_number`` over
  ``partitionBy(k)``) into ``noop`` (no Exchange on either, checked), and the plain read, G
  against H. Target: G within 1.3x of H.

Medians and every run go to ``.local/bench/evolution.json``.

Run::

    scripts/dev bench-evolution                     # 2M rows, 5 repeats
    scripts/dev bench-evolution --rows 10000000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import uuid

from pyspark.sql import functions as F
from pyspark.sql.window import Window

from bench.common import WORK, drop_topics, generate, noop, side_by_side
from devstack import localstack
from orchestration.shuffle import (
    ShuffleSpec,
    alter_shuffle,
    jvm_spark_conf,
    read_shuffle,
    read_table,
    spark_session,
    write_shuffle,
)
from orchestration.shuffle.spark.session import explain_text


def medians(runs: dict[str, list[float]]) -> dict[str, float]:
    return {k: statistics.median(v) for k, v in runs.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=str(WORK / "evolution.json"))
    args = parser.parse_args(argv)
    kafka = {"bootstrap.servers": localstack.start()}
    spark = spark_session(
        app_name="kafka-shuffle-evolution-bench", conf=jvm_spark_conf(kafka=kafka)
    )
    tag = uuid.uuid4().hex[:6]
    topics: list[str] = []
    try:
        path = WORK / f"rows-{args.rows}"
        generate(spark, args.rows, path)
        rows = spark.read.parquet(str(path))

        # -- versions ------------------------------------------------------------------
        topic = f"bench.evolution-{tag}"
        topics.append(topic)
        spec = ShuffleSpec(topic, "k", 8, 128, event_time="ts")
        write_shuffle(rows, spec, kafka=kafka, window="old")
        alter_shuffle(
            topic, kafka=kafka, add_columns={"f": "string"}, rename_columns={"b": "b2"},
            widen_columns={"d": "bigint"},
        )  # fmt: skip
        latest = rows.withColumnRenamed("b", "b2").withColumn("d", F.col("d").cast("bigint"))
        write_shuffle(latest, spec, kafka=kafka, window="new", schema_mode="merge")

        def jvm(window: str):
            return lambda: noop(
                read_shuffle(spark, topic, kafka=kafka, windows=[window], engine="jvm")
            )

        def python(window: str):
            return lambda: noop(
                read_shuffle(spark, topic, kafka=kafka, windows=[window], engine="python")
            )

        def table(window: str):
            return lambda: read_table(topic, kafka=kafka, windows=[window])

        versions = side_by_side(
            [
                (("jvm_old", jvm("old")), ("jvm_new", jvm("new"))),
                (("python_old", python("old")), ("python_new", python("new"))),
                (("read_table_old", table("old")), ("read_table_new", table("new"))),
            ],
            args.repeat,
            "versions",
        )

        # -- growth --------------------------------------------------------------------
        grown, alone = f"bench.grown-{tag}", f"bench.alone-{tag}"
        topics += [grown, alone]
        first = rows.where("pmod(c, 2) = 0")
        second = rows.where("pmod(c, 2) = 1")
        write_shuffle(
            first, ShuffleSpec(grown, "k", 8, 128, event_time="ts"), kafka=kafka, window="a"
        )
        alter_shuffle(grown, kafka=kafka, num_partitions=16)
        write_shuffle(
            second, ShuffleSpec(grown, "k", 16, 128, event_time="ts"), kafka=kafka, window="b"
        )
        for window, part in (("a", first), ("b", second)):
            write_shuffle(part, ShuffleSpec(alone, "k", 16, 128, event_time="ts"), kafka=kafka,
                          window=window)  # fmt: skip

        def keyed(t: str):
            # A keyed window: the JVM read hands each key's rows to one task with no Exchange;
            # nothing is pushed into the read (an aggregation of a grown shuffle is not, since
            # a key's rows are in two Kafka partitions of one split, so groupBy would compare
            # Spark's aggregate with the read's own).
            df = read_shuffle(spark, t, kafka=kafka, engine="jvm")
            first = F.row_number().over(Window.partitionBy("k").orderBy("ts", "a"))
            return df.withColumn("r", first).where("r = 1")

        plans = {t: explain_text(keyed(t)) for t in (grown, alone)}
        exchange = {t: "Exchange" in p for t, p in plans.items()}
        growth = side_by_side(
            [
                (
                    ("grown_8_to_16", lambda: noop(keyed(grown))),
                    ("written_at_16", lambda: noop(keyed(alone))),
                ),
                (
                    (
                        "grown_plain_read",
                        lambda: noop(read_shuffle(spark, grown, kafka=kafka, engine="jvm")),
                    ),
                    (
                        "written_at_16_plain_read",
                        lambda: noop(read_shuffle(spark, alone, kafka=kafka, engine="jvm")),
                    ),
                ),
            ],
            args.repeat,
            "growth",
        )
        m = medians({**versions, **growth})
        ratios = {
            "jvm_old_over_new": m["jvm_old"] / m["jvm_new"],
            "python_old_over_new": m["python_old"] / m["python_new"],
            "read_table_old_over_new": m["read_table_old"] / m["read_table_new"],
            "grown_over_written_at_16": m["grown_8_to_16"] / m["written_at_16"],
            "grown_plain_read_over_written_at_16": m["grown_plain_read"]
            / m["written_at_16_plain_read"],
        }
        out = {
            "args": vars(args),
            "medians_s": m,
            "ratios": ratios,
            "exchange_in_keyed_plan": exchange,
            "runs_s": {**versions, **growth},
        }
        WORK.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(out, f, indent=2)
        for k, v in m.items():
            print(f"{k:24}{v * 1e3:10.1f} ms")
        for k, v in ratios.items():
            print(f"{k:28}{v:8.2f}")
        print(f"Exchange in the keyed plans: {exchange}")
        print(f"wrote {args.out}")
    finally:
        drop_topics(kafka, [t for x in topics for t in (x, x + "__commits")])
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
