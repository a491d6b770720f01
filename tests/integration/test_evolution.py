"""Schema and partition evolution on the real broker: writes with schema_mode="merge",
alter_shuffle, and every read path reading runs of every version as the latest."""

import datetime as dt
import decimal
import threading
import time

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from orchestration.shuffle import (
    ShuffleLayoutError,
    ShuffleSpec,
    alter_shuffle,
    iter_keys,
    read_batches,
    read_shuffle,
    read_shuffle_stream,
    read_table,
    rewrite_shuffle,
    shuffle_log,
    write_shuffle,
    write_table,
    write_windows,
)
from orchestration.shuffle.core.keygroups import key_group_of

DAY = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)


def spec(topic, n=4, **kw):
    return ShuffleSpec(
        topic=topic, key="k", num_partitions=n, max_parallelism=32, event_time="ts", **kw
    )


def frame(lo, hi, **extra):
    ids = list(range(lo, hi))
    data = {
        "k": [f"k{i % 17}" for i in ids],
        "ts": [DAY + dt.timedelta(seconds=i) for i in ids],
        "n": pa.array([i if i % 7 else None for i in ids], pa.int32()),
        "x": pa.array([i / 4 for i in ids], pa.float32()),
    }
    for name, fn in extra.items():
        data[name] = fn(ids)
    return pa.table(data)


def by_id(table: pa.Table) -> list[dict]:
    rows = table.to_pylist()
    return sorted(rows, key=lambda r: (r["ts"], r["k"]))


def spark_rows(df) -> list[dict]:
    return sorted((r.asDict() for r in df.collect()), key=lambda r: (r["ts"], r["k"]))


def test_merge_alter_and_every_python_read_path(spark, kafka_conf, unique):
    topic = unique("evo")
    write_table(frame(0, 50), spec(topic), kafka=kafka_conf, window="w1")
    # Strict refuses a new column, naming it and the mode that takes it; nothing written.
    extra = frame(50, 100, country=lambda ids: [f"c{i % 3}" for i in ids])
    with pytest.raises(ShuffleLayoutError, match=r"column 'country'.*schema_mode='merge'"):
        write_table(extra, spec(topic), kafka=kafka_conf, window="w2")
    assert shuffle_log(topic, kafka=kafka_conf).layout.version == 1
    # Merge: a new column and a widened one, as a version recorded before the frames.
    wider = extra.set_column(2, "n", extra.column("n").cast(pa.int64()))
    r2 = write_table(wider, spec(topic), kafka=kafka_conf, window="w2", schema_mode="merge")
    assert r2.commit.layout_version == 2
    # A run lacking a column writes nulls for it (merge); a narrower type reads widened.
    r3 = write_table(
        frame(100, 130), spec(topic), kafka=kafka_conf, window="w3", schema_mode="merge"
    )
    assert r3.commit.layout_version == 2
    # Metadata-only changes: rename, drop, widen.
    layout = alter_shuffle(
        topic, kafka=kafka_conf, rename_columns={"x": "score"}, widen_columns={"score": "double"}
    )
    assert layout.version == 3
    layout = alter_shuffle(topic, kafka=kafka_conf, drop_columns=["country"])
    assert layout.version == 4
    # Re-added under the same name: a new field id, never the old values.
    layout = alter_shuffle(topic, kafka=kafka_conf, add_columns={"country": "string"})
    assert layout.schema.names == ["k", "ts", "n", "score", "country"]
    write_table(
        frame(130, 160, country=lambda ids: ["new"] * len(ids))
        .rename_columns(["k", "ts", "n", "score", "country"])
        .set_column(3, "score", pa.array([i / 4 for i in range(130, 160)], pa.float64()))
        .set_column(2, "n", pa.array([i if i % 7 else None for i in range(130, 160)], pa.int64())),
        spec(topic),
        kafka=kafka_conf,
        window="w4",
    )
    log = shuffle_log(topic, kafka=kafka_conf)
    assert [c.layout_version for c in log.visible()] == [1, 2, 2, 5]

    expected = []
    for i in range(160):
        expected.append(
            {
                "k": f"k{i % 17}",
                "ts": DAY + dt.timedelta(seconds=i),
                "n": i if i % 7 else None,
                "score": i / 4,
                "country": "new" if i >= 130 else None,
            }
        )
    expected.sort(key=lambda r: (r["ts"], r["k"]))
    table = read_table(topic, kafka=kafka_conf)
    assert table.schema.names == ["k", "ts", "n", "score", "country"]
    assert table.schema.field("n").type == pa.int64()
    assert table.schema.field("score").type == pa.float64()
    assert by_id(table) == expected
    assert by_id(pa.Table.from_batches(list(read_batches(topic, kafka=kafka_conf)))) == expected
    # A column selection of a renamed column reads the old run's values through its id.
    assert by_id(
        read_table(topic, kafka=kafka_conf, windows=["w1"], columns=["k", "ts", "score"])
    ) == [
        {k: r[k] for k in ("k", "ts", "score")}
        for r in expected
        if r["ts"] < DAY + dt.timedelta(seconds=50)
    ]
    keyed = [t for _, t in iter_keys(topic, kafka=kafka_conf)]
    assert by_id(pa.concat_tables(keyed)) == expected
    df = read_shuffle(spark, topic, kafka=kafka_conf, engine="python")
    assert [f.name for f in df.schema.fields] == ["k", "ts", "n", "score", "country"]
    got = spark_rows(df)
    for r in got:
        r["ts"] = r["ts"].astimezone(dt.UTC)
    assert got == expected
    assert df.groupBy("k").agg(F.sum("score").alias("s")).count() == 17


def test_growth_reads_old_and_new_runs_keyed(spark, kafka_conf, unique):
    topic = unique("evo-grow")
    write_table(frame(0, 400), spec(topic, n=4), kafka=kafka_conf, window="old")
    layout = alter_shuffle(topic, kafka=kafka_conf, num_partitions=8)
    assert layout.num_partitions == 8 and layout.version == 2
    # A writer still naming 4 writes on 8 (the count it had before growth).
    r = write_table(frame(400, 800), spec(topic, n=4), kafka=kafka_conf, window="new")
    assert max(r.offsets) >= 4 and r.commit.layout_version == 2
    # Any other count is refused, naming both.
    with pytest.raises(ShuffleLayoutError, match="num_partitions is 8 .grown from 4., not 6"):
        write_table(frame(0, 10), spec(topic, n=6), kafka=kafka_conf, window="x")
    table = read_table(topic, kafka=kafka_conf, with_metadata=True)
    assert table.num_rows == 800
    assert sorted(table.column("ts").to_pylist()) == [
        DAY + dt.timedelta(seconds=i) for i in range(800)
    ]
    # Each Spark partition of the Python read holds exactly its key groups of both runs.
    df = read_shuffle(spark, topic, kafka=kafka_conf, engine="python", parallelism=8)
    assert df.rdd.getNumPartitions() == 8
    parts = df.rdd.mapPartitionsWithIndex(lambda i, rows: [(i, r["k"]) for r in rows]).collect()
    assert len(parts) == 800
    for i, k in parts:
        assert key_group_of(k, 32) * 8 // 32 == i
    # key_groups= and other parallelisms stay exact across both runs.
    some = read_table(topic, kafka=kafka_conf, key_groups=(3, 11))
    want = sum(1 for i in range(800) if 3 <= key_group_of(f"k{i % 17}", 32) < 11)
    assert some.num_rows == want
    for parallelism in (3, 16):
        d = read_shuffle(spark, topic, kafka=kafka_conf, engine="python", parallelism=parallelism)
        assert d.count() == 800
        assert d.groupBy("k").count().count() == 17


def test_spark_write_with_merge_and_a_refusal_before_any_frame(spark, kafka_conf, unique):
    topic = unique("evo-spark")
    base = spark.range(0, 300).selectExpr(
        "concat('k', cast(id % 13 as string)) as k",
        f"timestamp_seconds({int(DAY.timestamp())} + id) as ts",
        "cast(id as int) as n",
    )
    write_shuffle(base, spec(topic), kafka=kafka_conf, window="a")
    added = base.withColumn("price", (F.col("n") / 3).cast("decimal(10,2)")).withColumn(
        "n", F.col("n").cast("long")
    )
    r = write_shuffle(added, spec(topic), kafka=kafka_conf, window="b", schema_mode="merge")
    assert r.commit.layout_version == 2
    # No mode allows a type that is not a promotion: refused before a frame is written.
    ends = shuffle_log(topic, kafka=kafka_conf)
    bad = base.withColumn("n", F.col("n").cast("string"))
    with pytest.raises(ShuffleLayoutError, match=r"any schema mode: column 'n' has type string"):
        write_shuffle(bad, spec(topic), kafka=kafka_conf, window="c", schema_mode="merge")
    after = shuffle_log(topic, kafka=kafka_conf)
    assert len(after.commits) == len(ends.commits) and after.layout.version == 2
    df = read_shuffle(spark, topic, kafka=kafka_conf, engine="python")
    rows = {(r["k"], r["n"], r["price"]) for r in df.collect()}
    assert len(rows) == 600
    assert ("k0", 0, None) in rows and ("k0", 0, decimal.Decimal("0.00")) in rows
    assert dict(df.dtypes)["n"] == "bigint" and dict(df.dtypes)["price"] == "decimal(10,2)"
    # write_windows takes the mode for each window's run: strict refuses every window (each
    # failure named), merge writes them.
    by_day = added.withColumn("day", F.when(F.col("n") % 2 == 0, "e").otherwise("o"))
    strict = write_windows(by_day, spec(topic), kafka=kafka_conf, windows=["e", "o"],
                           window_column="day")  # fmt: skip
    assert sorted(strict.failed) == ["e", "o"] and "schema_mode='merge'" in strict.failed["e"]
    merged = write_windows(by_day, spec(topic), kafka=kafka_conf, windows=["e", "o"],
                           window_column="day", schema_mode="merge")  # fmt: skip
    assert not merged.failed and merged.committed["e"].commit.layout_version == 3
    got = read_shuffle(spark, topic, kafka=kafka_conf, engine="python", windows=["e", "o"])
    assert got.count() == 300 and got.where("day = 'e'").count() == 150


def test_concurrent_merge_writes_and_alter_never_leave_a_run_under_a_wrong_version(
    kafka_conf, unique
):
    topic = unique("evo-race")
    write_table(frame(0, 10), spec(topic), kafka=kafka_conf, window="w0")
    errors: list[BaseException] = []
    results = {}

    def writer(i):
        try:
            extra = {f"c{i}": (lambda ids, i=i: [f"v{i}"] * len(ids))}
            results[i] = write_table(
                frame(100 * i, 100 * i + 20, **extra),
                spec(topic),
                kafka=kafka_conf,
                window=f"w{i}",
                schema_mode="merge",
            )
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    def changer():
        try:
            alter_shuffle(topic, kafka=kafka_conf, rename_columns={"x": "score"})
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(1, 4)]
    threads.append(threading.Thread(target=changer))
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    # A writer that read the schema before the rename wrote "x" under a version that has
    # it (read as "score"); one after is refused before writing, naming the rename.
    for exc in errors:
        assert isinstance(exc, ShuffleLayoutError), exc
        assert "column 'x' was renamed to 'score'" in str(exc)
    log = shuffle_log(topic, kafka=kafka_conf)
    assert "x" not in log.layout.schema.names and "score" in log.layout.schema.names
    assert log.layout.version == 2 + len(results)
    table = read_table(topic, kafka=kafka_conf)
    for i in results:
        mine = table.filter(pa.compute.equal(table.column(f"c{i}"), f"v{i}"))
        assert mine.num_rows == 20
        assert sorted(mine.column("score").to_pylist()) == [
            j / 4 for j in range(100 * i, 100 * i + 20)
        ]
    assert table.num_rows == 10 + 20 * len(results)
    assert pd.isna(table.to_pandas()["score"]).sum() == 0
    # Once the writers know the new name, every one writes.
    extra = {"c9": lambda ids: ["v9"] * len(ids)}
    t = frame(900, 920, **extra).rename_columns(["k", "ts", "n", "score", "c9"])
    write_table(t, spec(topic), kafka=kafka_conf, window="w9", schema_mode="merge")


def test_a_stream_stops_at_a_later_version_and_a_restart_reads_it(
    spark, kafka_conf, unique, tmp_path
):
    topic = unique("evo-stream")
    write_table(frame(0, 30), spec(topic), kafka=kafka_conf, window="a")
    got: list[dict] = []

    def start(trigger):
        stream = read_shuffle_stream(spark, topic, kafka=kafka_conf, engine="python")
        return (
            stream.writeStream.foreachBatch(
                lambda df, _: got.extend(r.asDict() for r in df.collect())
            )
            .option("checkpointLocation", str(tmp_path / "chk"))
            .trigger(**trigger)
            .start()
        )

    query = start({"processingTime": "1 second"})
    deadline = time.monotonic() + 120
    while len(got) < 30 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(got) == 30 and "country" not in got[0]
    extra = frame(30, 60, country=lambda ids: ["fr"] * len(ids))
    write_table(extra, spec(topic), kafka=kafka_conf, window="b", schema_mode="merge")
    # The running query keeps the schema it started with: it stops, saying to restart.
    with pytest.raises(Exception, match="restart it") as caught:
        query.awaitTermination(120)
    assert "written under layout version 2, after this stream started with version 1" in str(
        caught.value
    )
    assert len(got) == 30
    query = start({"availableNow": True})
    query.awaitTermination(120)
    assert query.exception() is None
    assert len(got) == 60 and {r["country"] for r in got[30:]} == {"fr"}


def test_rewrite_into_a_new_key_and_more_key_groups_is_resumable(spark, kafka_conf, unique):
    source = unique("evo-src")
    for day in range(3):
        write_table(
            frame(100 * day, 100 * day + 60),
            spec(source),
            kafka=kafka_conf,
            window=f"d{day}",
            complete_until=DAY + dt.timedelta(days=day + 1),
        )
    alter_shuffle(source, kafka=kafka_conf, rename_columns={"x": "score"})
    target = ShuffleSpec(
        topic=unique("evo-dst"), key="n", num_partitions=6, max_parallelism=96, event_time="ts"
    )
    # The new key must have no nulls: rows of n null are refused, that run fails alone.
    first = rewrite_shuffle(source, target, kafka=kafka_conf, windows=["d0", "d1"])
    assert set(first.failed) and not first.copied  # every window holds a null n
    fixed = unique("evo-src2")
    for day in range(3):
        write_table(
            frame(100 * day, 100 * day + 60).set_column(
                2, "n", pa.array(list(range(100 * day, 100 * day + 60)), pa.int32())
            ),
            spec(fixed),
            kafka=kafka_conf,
            window=f"d{day}",
            complete_until=DAY + dt.timedelta(days=day + 1),
        )
    seen = []
    part = rewrite_shuffle(fixed, target, kafka=kafka_conf, windows=["d0"])
    assert len(part.copied) == 1 and not part.failed
    rest = rewrite_shuffle(fixed, target, kafka=kafka_conf, spark=spark,
                           on_run=lambda c, r: seen.append((c.window, r)))  # fmt: skip
    assert len(rest.skipped) == 1 and len(rest.copied) == 2
    assert [w for w, _ in seen] == ["d0", "d1", "d2"] and seen[0][1] is None
    src_log, dst_log = (shuffle_log(t, kafka=kafka_conf) for t in (fixed, target.topic))
    for w, c in src_log.latest_by_window().items():
        copy = dst_log.latest_by_window()[w]
        assert copy.attrs["rewritten_from_run"] == c.run_id
        assert copy.complete_until == c.complete_until
        assert (copy.event_time_min, copy.event_time_max) == (c.event_time_min, c.event_time_max)
        assert copy.rows == c.rows
    assert dst_log.layout.key == ("n",) and dst_log.layout.max_parallelism == 96
    assert by_id(read_table(target.topic, kafka=kafka_conf)) == by_id(
        read_table(fixed, kafka=kafka_conf)
    )
    # Run again: nothing left to copy.
    again = rewrite_shuffle(fixed, target, kafka=kafka_conf)
    assert not again.copied and len(again.skipped) == 3


def test_a_change_that_loses_its_version_is_worked_out_again(kafka_conf, unique):
    """Two changes worked out against the same version: the first in the log is that
    version, the other is recorded as the next one, against it (its record of the taken
    number deleted), and a run never records a version that lost."""
    from orchestration.shuffle import KafkaClient
    from orchestration.shuffle.core.evolution import Alteration, alter
    from orchestration.shuffle.kafka.commitlog import write_version

    topic = unique("evo-lost")
    write_table(frame(0, 10), spec(topic), kafka=kafka_conf, window="a")
    stale = shuffle_log(topic, kafka=kafka_conf).layout  # version 1
    alter_shuffle(topic, kafka=kafka_conf, add_columns={"first": "string"})
    tries = []

    def add_second(latest):
        tries.append(latest.version)
        change = Alteration(add=(pa.field("second", pa.string()),))
        return alter(topic, latest.layout_version(), change, latest.pinned, 32)

    got = write_version(KafkaClient(kafka_conf), stale, add_second, "a test")
    assert tries == [1, 2]
    assert got.version == 3 and got.schema.names[-2:] == ["first", "second"]
    log = shuffle_log(topic, kafka=kafka_conf)
    assert log.layout.version == 3 and log.layout.schema.names[-2:] == ["first", "second"]
    assert [v.made_by for v in log.layout.versions[1:]] == ["alter_shuffle", "a test"]
    # The losing record was deleted: nothing in the log is a second version 2.
    assert not log.bad_records
