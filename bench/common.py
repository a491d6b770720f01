"""What the benchmarks share: the synthetic rows, Spark's own ways to do what the shuffle does
(the baselines), the functions both run, and the side-by-side timing of pairs.

Every benchmark in ``bench/`` imports from here (``from bench.common import ...``) and none
imports another. Spark's Python workers import this module too (the per-key functions are
pickled by reference), so the checkout must be on their ``PYTHONPATH``, as ``scripts/dev``
puts it.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from confluent_kafka.admin import AdminClient

ROOT = Path(__file__).resolve().parents[1]
# The benchmarks' sources, results and jars.
WORK = ROOT / ".local" / "bench"
# Spark's Kafka connector, the baselines' sink and source (resolved by Maven from bench/pom.xml).
BASELINE_JARS = (
    "spark-sql-kafka-0-10_2.13",
    "spark-token-provider-kafka-0-10_2.13",
    "kafka-clients",
    "commons-pool2",
)


def generate(spark, rows: int, path: Path, keys: int = 100_000) -> None:
    """``rows`` synthetic rows into Parquet at ``path`` (kept: a second call reads them):
    a Zipf-skewed string key ``k`` over ``keys`` keys, a timestamp ``ts`` and five numeric
    columns."""
    if (path / "_SUCCESS").exists():
        return
    # Zipf-like key: rank = floor(u^(-1/0.2)), folded into `keys` keys: a heavy head
    # (~13% of rows on one key) and a long tail.
    rank = "pmod(floor(least(pow(rand(7), -5.0), 1e15)), " + str(keys) + ")"
    spark.range(rows).selectExpr(
        f"concat('key-', cast({rank} as string)) as k",
        "timestamp_seconds(1356998400 + id % 86400) as ts",
        "cast(id as double) * 0.5 as a",
        "rand(11) * 100 as b",
        "cast(id % 1000 as bigint) as c",
        "cast(pmod(id * 7, 97) as int) as d",
        "randn(13) as e",
    ).write.mode("overwrite").parquet(str(path))


def drop_topics(kafka: dict, topics: list[str]) -> None:
    """Deletes ``topics``, waiting for each (one already gone is fine)."""
    if not topics:
        return
    admin = AdminClient(kafka)
    for fut in admin.delete_topics(topics, operation_timeout=60).values():
        try:
            fut.result(60)
        except Exception:  # noqa: BLE001 - a topic that is already gone is fine here
            pass


# -- the functions ours and the baselines both run -------------------------------------------


def per_key_stats(pdf):
    """T1's function, one key at a time: what applyInPandas users write."""
    return pd.DataFrame(
        {"k": [pdf["k"].iat[0]], "n": [len(pdf)], "sa": [pdf["a"].sum()], "mc": [pdf["c"].max()]}
    )


PER_KEY_SCHEMA = "k string, n long, sa double, mc long"


def per_key_stats_streamed(key: tuple, batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """T1's function in the iterator form of ``applyInPandas``: the same row per key, from
    the key's rows a batch at a time (never all of them in pandas at once)."""
    n, sa, mc = 0, 0.0, None
    for b in batches:
        n, sa = n + len(b), sa + float(b["a"].sum())
        top = b["c"].max()
        mc = top if mc is None else max(mc, top)
    yield pd.DataFrame({"k": [key[0]], "n": [n], "sa": [sa], "mc": [mc]})


def batch_stats(pdf):
    """T2's function over whole keys at once: a vectorized pandas aggregation."""
    g = pdf.groupby("k", as_index=False)
    return g.agg(n=("a", "size"), sa=("a", "sum"), mb=("b", "mean"), mc=("c", "max"))


BATCH_SCHEMA = "k string, n long, sa double, mb double, mc long"


AGGREGATIONS = {"n": ("a", "count"), "sa": ("a", "sum"), "mb": ("b", "mean"), "mc": ("c", "max")}


# -- Spark's own ways (the baselines) --------------------------------------------------------


def noop(df) -> None:
    """Runs ``df`` into Spark's ``noop`` sink: every row materialized, nothing written."""
    df.write.format("noop").mode("overwrite").save()


def spark_kafka_write(df, kafka: dict, topic: str) -> None:
    """The rows as Kafka users write them with Spark: one message per row, keyed by ``k``,
    the row as JSON, through Spark's ``kafka`` sink."""
    (
        df.selectExpr("k as key", "to_json(struct(*)) as value")
        .write.format("kafka")
        .option("kafka.bootstrap.servers", kafka["bootstrap.servers"])
        .option("topic", topic)
        .save()
    )


def spark_kafka_source(spark, kafka: dict, topic: str):
    """All of ``topic`` through Spark's ``kafka`` source: key, value and the record columns."""
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka["bootstrap.servers"])
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )


def spark_kafka_rows(spark, kafka: dict, topic: str, schema):
    """What :func:`spark_kafka_write` wrote, read back into its columns (``from_json``)."""
    from pyspark.sql import functions as F

    parsed = F.from_json(F.col("value").cast("string"), schema).alias("r")
    return spark_kafka_source(spark, kafka, topic).select(parsed).select("r.*")


def grouped(df):
    """``groupBy("k").agg(...)`` of ``AGGREGATIONS``, as a DataFrame (its plan to look at)."""
    from pyspark.sql import functions as F

    return df.groupBy("k").agg(
        F.count("a").alias("n"),
        F.sum("a").alias("sa"),
        F.avg("b").alias("mb"),
        F.max("c").alias("mc"),
    )


def group_by(df) -> None:
    """T2/T3's baseline: ``groupBy("k").agg(...)`` of ``AGGREGATIONS``, into ``noop``."""
    noop(grouped(df))


def spark_gaps(df) -> None:
    """The gaps consumer as Spark runs it: a window ``lag`` per key, then the largest."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ts = F.col("ts").cast("double")
    gap = ts - F.lag(ts).over(Window.partitionBy("k").orderBy("ts"))
    noop(
        df.withColumn("gap", gap)
        .groupBy("k")
        .agg(F.count("*").alias("n"), F.max("gap").alias("max_gap"))
    )


def spark_top3(df) -> None:
    """The top-three consumer as Spark runs it: ``row_number`` per key by ``b``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rank = F.row_number().over(Window.partitionBy("k").orderBy(F.desc("b")))
    noop(df.withColumn("r", rank).where("r <= 3").select("k", "ts", "b"))


def spark_consumers(df) -> None:
    """The same three consumers as Spark runs them: each from the source, through its own
    shuffle."""
    group_by(df)
    spark_gaps(df)
    spark_top3(df)


# -- timing ----------------------------------------------------------------------------------


def seconds(fn) -> float:
    """The wall seconds ``fn()`` takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def side_by_side(pairs: list, repeat: int, label: str) -> dict[str, list[float]]:
    """Each pair ``(name, fn)`` twice over ``repeat`` times, alternating which goes first (a
    pair whose second is None is one phase alone): the seconds of every run."""
    out: dict[str, list[float]] = {}
    for i in range(repeat):
        for a, b in pairs:
            order = [a] + ([b] if b else [])
            if i % 2:
                order.reverse()
            for name, fn in order:
                s = seconds(fn)
                out.setdefault(name, []).append(s)
                print(f"  {label} repeat={i} {name:<32} {s:8.3f}s", flush=True)
    return out


# -- T1's function alone: the floor of any per-key path --------------------------------------

EMIT_EVERY = 4096


def key_slices(frame: pd.DataFrame) -> list[tuple[int, int]]:
    """(start, end) of each run of one key in ``frame``, sorted by key."""
    keys = frame["k"].to_numpy()
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    bounds = np.append(starts, len(keys)).tolist()
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def per_key_pass(frame: pd.DataFrame, cuts: list[tuple[int, int]], call: bool) -> float:
    """Seconds to cut each key's rows out of ``frame`` as ``apply_per_key`` hands them over
    (``iloc`` and an index from 0) and, with ``call``, to call T1's function on each, its
    results concatenated in groups of ``EMIT_EVERY``."""
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
        per_key_pass(frame, cuts, call)
        cpu[label] = time.process_time() - started
    return {
        "keys": len(cuts),
        "rows": len(frame),
        "slices_cpu_seconds": cpu["slices"],
        "fn_cpu_seconds": cpu["fn"],
        "function_cpu_seconds": max(cpu["fn"] - cpu["slices"], 0.0),
    }


def consumer_perf_test(kafka: dict, topic: str, records: int) -> float:
    """Kafka's ``ConsumerPerformance`` over every record of ``topic``: its fetch rate, in
    bytes per second (the tool reports MB as 2^20 bytes)."""
    from devstack import localstack

    cmd = [
        localstack.java_executable(), "-cp", localstack.kafka_classpath(),
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server", kafka["bootstrap.servers"],
        "--topic", topic,
        "--messages", str(records),
        "--group", f"perf-{uuid.uuid4().hex[:8]}",
        "--timeout", "60000",
        "--hide-header",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=True).stdout
    # One CSV line: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg,
    # nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    fields = [f.strip() for f in out.strip().splitlines()[-1].split(",")]
    consumed = int(fields[4])
    if consumed < records:
        raise RuntimeError(f"ConsumerPerformance read {consumed} of {records} records:\n{out}")
    mb, fetch_ms = float(fields[2]), float(fields[7])
    return mb * 2**20 / (fetch_ms / 1000)
