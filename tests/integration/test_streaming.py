"""Streaming reads of a shuffle on the real broker and Spark: each committed run once, on
both read paths (the ``engine`` fixture: the Python source, then the JVM one)."""

import datetime as dt

import pandas as pd
import pytest

from orchestration.shuffle import (
    ShuffleSpec,
    ShuffleWriteError,
    apply_per_key,
    read_shuffle_stream,
    stream_metrics,
    summarize_stream_metrics,
    write_shuffle,
)
from orchestration.shuffle.errors import ShuffleOptionError
from orchestration.shuffle.spark.compat import ADMISSION_CONTROL
from orchestration.shuffle.testing import fail_write_attempts_below

pytestmark = pytest.mark.integration


def rows(spark, n, offset=0):
    return spark.range(offset, offset + n).selectExpr(
        "concat('k', cast(id % 13 as string)) as k",
        "id",
        "timestamp_seconds(1356998400 + id) as ts",
    )


def spec(topic):
    return ShuffleSpec(topic=topic, key="k", num_partitions=3, max_parallelism=12, event_time="ts")


def run_available_now(engine, spark, topic, kafka_conf, checkpoint, metrics=None, **kw):
    """Runs the stream with Trigger.AvailableNow; returns one list of rows per micro-batch
    (and extends ``metrics`` with the query's ``stream_metrics``)."""
    batches: list[list] = []

    def collect(df, batch_id):
        batches.append([tuple(r) for r in df.select("id", "_run_id", "_window").collect()])

    stream = read_shuffle_stream(
        spark, topic, kafka=kafka_conf, with_metadata=True, engine=engine, **kw
    )
    query = (
        stream.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    # The stream ran on the path asked for.
    sources = {s.description for p in query.recentProgress for s in p.sources}
    assert sources and all(("kafka-shuffle-jvm" in d) == (engine == "jvm") for d in sources)
    if metrics is not None:
        metrics.extend(stream_metrics(query))
    return [b for b in batches if b]


def test_restart_from_checkpoint_reads_every_run_once(spark, kafka_conf, unique, tmp_path, engine):
    topic = unique("st-restart")
    a = write_shuffle(rows(spark, 300), spec(topic), kafka=kafka_conf, window="w1")
    first = run_available_now(engine, spark, topic, kafka_conf, tmp_path / "chk")
    assert sorted(r[0] for b in first for r in b) == list(range(300))
    assert {r[1] for b in first for r in b} == {a.run_id}
    # Between two starts of the query: a failed run, a new window, a re-run of w1.
    with pytest.raises(ShuffleWriteError), fail_write_attempts_below(99):
        write_shuffle(rows(spark, 50, 9000), spec(topic), kafka=kafka_conf, window="w9")
    b = write_shuffle(rows(spark, 200, 1000), spec(topic), kafka=kafka_conf, window="w2")
    c = write_shuffle(rows(spark, 100, 2000), spec(topic), kafka=kafka_conf, window="w1")
    second = run_available_now(engine, spark, topic, kafka_conf, tmp_path / "chk")
    got = [r for batch in second for r in batch]
    assert {r[1] for r in got} == {b.run_id, c.run_id}
    assert sorted(r[0] for r in got) == list(range(1000, 1200)) + list(range(2000, 2100))
    # The re-run of w1 arrives as new data, marked with its window.
    assert {r[2] for r in got if r[1] == c.run_id} == {"w1"}
    # Nothing more to read.
    assert run_available_now(engine, spark, topic, kafka_conf, tmp_path / "chk") == []


def test_max_runs_per_trigger_gives_one_run_per_batch(spark, kafka_conf, unique, tmp_path, engine):
    topic = unique("st-limit")
    written = [
        write_shuffle(rows(spark, 40 * (i + 1), 100 * i), spec(topic), kafka=kafka_conf,
                      window=f"w{i}")
        for i in range(3)
    ]  # fmt: skip
    runs = [w.run_id for w in written]
    metrics: list = []
    if engine == "python" and not ADMISSION_CONTROL:
        # PySpark 4.0 and 4.1: a limit the Python source cannot honour is refused by name
        # and version, before any query starts; without it the stream reads every run.
        for limit in ({"max_runs_per_trigger": 1}, {"max_rows_per_trigger": 130}):
            with pytest.raises(ShuffleOptionError, match=f"{list(limit)}.*{spark.version}"):
                read_shuffle_stream(spark, topic, kafka=kafka_conf, engine=engine, **limit)
        batches = run_available_now(engine, spark, topic, kafka_conf, tmp_path / "all", metrics)
        assert sorted(r[0] for b in batches for r in b) == sorted(
            i for n in range(3) for i in range(100 * n, 100 * n + 40 * (n + 1))
        )
        assert {r[1] for b in batches for r in b} == set(runs)
        assert summarize_stream_metrics(metrics)["records"] == 240
        return
    batches = run_available_now(
        engine, spark, topic, kafka_conf, tmp_path / "one", metrics, max_runs_per_trigger=1
    )
    assert [{r[1] for r in b} for b in batches] == [{r} for r in runs]
    # The query's progress says what each batch read and how far behind the log's end it was
    # (in commit records: the two later commits, then one, then none).
    read = [m for m in metrics if m.records]
    assert [m.source for m in read] == ["kafka-shuffle"] * 3
    assert [m.runs for m in read] == [(r,) for r in runs]
    assert [m.records for m in read] == [40, 80, 120]
    assert [m.bytes for m in read] == [w.bytes for w in written]
    assert [m.offsets_behind.max for m in read] == [2, 1, 0]
    assert [m.topics for m in read] == [(topic,)] * 3
    summary = summarize_stream_metrics(metrics)
    assert summary["micro_batches"] == 3 and summary["records"] == 240
    assert summary["bytes"] == sum(w.bytes for w in written)
    assert summary["max_offsets_behind_latest"] == 0
    # By rows: 40 + 80 fit in 130, then 120 alone.
    batches = run_available_now(
        engine, spark, topic, kafka_conf, tmp_path / "rows", max_rows_per_trigger=130
    )
    assert [len(b) for b in batches] == [120, 120]


def test_latest_skips_earlier_runs_and_earliest_skips_superseded(
    spark, kafka_conf, unique, tmp_path, engine
):
    topic = unique("st-latest")
    before_old = dt.datetime.now(dt.UTC)
    old = write_shuffle(rows(spark, 60), spec(topic), kafka=kafka_conf, window="w1")
    latest = run_available_now(
        engine, spark, topic, kafka_conf, tmp_path / "latest", starting_offsets="latest"
    )
    assert latest == []
    before_new = dt.datetime.now(dt.UTC)
    new = write_shuffle(rows(spark, 70, 500), spec(topic), kafka=kafka_conf, window="w1")
    got = run_available_now(engine, spark, topic, kafka_conf, tmp_path / "latest")
    assert {r[1] for b in got for r in b} == {new.run_id}
    # A new query from earliest sees the visible run of w1 only, not the superseded one.
    fresh = run_available_now(engine, spark, topic, kafka_conf, tmp_path / "earliest")
    assert {r[1] for b in fresh for r in b} == {new.run_id} != {old.run_id}
    # From an instant: every run committed since is new data, superseded or not.
    since_new = run_available_now(
        engine, spark, topic, kafka_conf, tmp_path / "ts-new", starting_timestamp=before_new
    )
    assert {r[1] for b in since_new for r in b} == {new.run_id}
    since_old = run_available_now(
        engine, spark, topic, kafka_conf, tmp_path / "ts-old", starting_timestamp=before_old
    )
    assert [{r[1] for r in b} for b in since_old] == [{old.run_id, new.run_id}]


def test_micro_batches_are_keyed(spark, kafka_conf, unique, tmp_path, engine):
    topic = unique("st-keyed")
    write_shuffle(rows(spark, 500), spec(topic), kafka=kafka_conf, window="w1")
    results = []

    def per_key(pdf: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"k": [pdf["k"].iloc[0]], "n": [len(pdf)]})

    def each(df, batch_id):
        out = apply_per_key(df, "k", per_key, "k string, n long")
        plan = out._jdf.queryExecution().executedPlan().toString()
        results.append(("Exchange" in plan, sorted(map(tuple, out.collect()))))

    stream = read_shuffle_stream(spark, topic, kafka=kafka_conf, engine=engine)
    assert stream.isStreaming
    query = (
        stream.writeStream.foreachBatch(each)
        .option("checkpointLocation", str(tmp_path / "keyed"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    ((exchange, got),) = [r for r in results if r[1]]
    assert not exchange
    expected = rows(spark, 500).groupBy("k").count().collect()
    assert got == sorted((r.k, r["count"]) for r in expected)
