"""Schema and partition evolution on the JVM read path, on the real broker and Spark: runs of
every version read as the latest (the same rows as the Python reader), keyed reads of a
grown shuffle with no Exchange, and ``ALTER TABLE`` on the catalog."""

import datetime as dt

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from orchestration.shuffle import (
    ShuffleLayoutError,
    ShuffleSpec,
    alter_shuffle,
    read_shuffle,
    read_shuffle_stream,
    read_table,
    shuffle_log,
    write_table,
)
from orchestration.shuffle.spark.session import explain_text
from tests.conftest import jvm_read_off, jvm_read_on

pytestmark = pytest.mark.integration

DAY = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)


@pytest.fixture
def jvm(spark, kafka_conf):
    keys = jvm_read_on(spark, kafka_conf)
    yield spark
    jvm_read_off(spark, keys)


def spec(topic, n=4):
    return ShuffleSpec(topic=topic, key="k", num_partitions=n, max_parallelism=32, event_time="ts")


def frame(lo, hi, n_type=None, **extra):
    ids = list(range(lo, hi))
    data = {
        "k": [f"k{i % 17}" for i in ids],
        "ts": [DAY + dt.timedelta(seconds=i) for i in ids],
        "n": pa.array([i if i % 7 else None for i in ids], n_type or pa.int32()),
        "x": pa.array([i / 4 for i in ids], pa.float32()),
    }
    for name, fn in extra.items():
        data[name] = fn(ids)
    return pa.table(data)


def rows(df):
    return sorted(tuple(r) for r in df.collect())


def exchanges(df) -> list[str]:
    return [line for line in explain_text(df).splitlines() if "Exchange" in line]


def test_every_version_reads_as_the_latest_on_the_jvm(jvm, kafka_conf, unique):
    topic = unique("evoj")
    write_table(frame(0, 50), spec(topic), kafka=kafka_conf, window="w1")
    extra = frame(50, 100, pa.int64(), country=lambda ids: [f"c{i % 3}" for i in ids])
    write_table(extra, spec(topic), kafka=kafka_conf, window="w2", schema_mode="merge")
    write_table(frame(100, 130), spec(topic), kafka=kafka_conf, window="w3", schema_mode="merge")
    alter_shuffle(
        topic, kafka=kafka_conf, rename_columns={"x": "score"}, widen_columns={"score": "double"}
    )
    alter_shuffle(topic, kafka=kafka_conf, drop_columns=["country"])
    alter_shuffle(topic, kafka=kafka_conf, add_columns={"country": "string"})
    j = read_shuffle(jvm, topic, kafka=kafka_conf, engine="jvm")
    p = read_shuffle(jvm, topic, kafka=kafka_conf, engine="python")
    # Not the key columns' metadata: it records each read's own parallelism.
    assert [(f.name, f.dataType) for f in j.schema] == [(f.name, f.dataType) for f in p.schema]
    assert j.columns == ["k", "ts", "n", "score", "country"]
    assert dict(j.dtypes)["n"] == "bigint" and dict(j.dtypes)["score"] == "double"
    assert rows(j) == rows(p)
    got = {r["ts"].astimezone(dt.UTC): r for r in j.collect()}
    for i in range(130):
        r = got[DAY + dt.timedelta(seconds=i)]
        assert r["score"] == i / 4 and r["n"] == (i if i % 7 else None)
        assert r["country"] is None  # re-added: never the dropped column's values
    # SQL on the catalog sees the latest schema too.
    names = [f.name for f in jvm.table(f"shuffle.`{topic}`").schema]
    assert names == ["k", "ts", "n", "score", "country"]
    # A selection of a renamed column alone, and grouping by the key with no Exchange.
    assert rows(j.select("k", "score")) == rows(p.select("k", "score"))
    grouped = j.groupBy("k").agg(F.sum("score").alias("s"))
    assert not exchanges(grouped)
    assert rows(grouped) == rows(p.groupBy("k").agg(F.sum("score").alias("s")))


def test_grown_shuffle_reads_keyed_on_the_jvm(jvm, kafka_conf, unique):
    topic = unique("evoj-grow")
    write_table(frame(0, 600), spec(topic, 4), kafka=kafka_conf, window="old")
    alter_shuffle(topic, kafka=kafka_conf, num_partitions=8)
    write_table(frame(600, 1200), spec(topic, 8), kafka=kafka_conf, window="new")
    j = read_shuffle(jvm, topic, kafka=kafka_conf, engine="jvm")
    p = read_shuffle(jvm, topic, kafka=kafka_conf, engine="python")
    assert j.count() == 1200 and rows(j) == rows(p)
    grouped = j.groupBy("k").agg(F.count("*").alias("c"), F.sum("n").alias("s"))
    assert not exchanges(grouped), exchanges(grouped)
    assert rows(grouped) == rows(p.groupBy("k").agg(F.count("*").alias("c"), F.sum("n").alias("s")))
    ranked = j.withColumn("r", F.row_number().over(Window.partitionBy("k").orderBy("ts")))
    assert not exchanges(ranked)
    assert ranked.filter("r = 1").count() == 17
    other = jvm.createDataFrame([(f"k{i}", i) for i in range(17)], "k string, w int")
    joined = j.join(read_shuffle(jvm, topic, kafka=kafka_conf, engine="jvm").select("k"), "k")
    assert not exchanges(joined)
    assert j.join(other, "k").count() == 1200
    # SQL on the catalog: GROUP BY the key, no Exchange.
    sql = jvm.sql(f"SELECT k, count(*) AS c FROM shuffle.`{topic}` GROUP BY k")
    assert not exchanges(sql)
    assert sum(r["c"] for r in sql.collect()) == 1200


def test_alter_table_on_the_catalog(jvm, kafka_conf, unique):
    topic = unique("evoj-alter")
    write_table(frame(0, 40), spec(topic), kafka=kafka_conf, window="a")
    t = f"shuffle.`{topic}`"
    jvm.sql(f"ALTER TABLE {t} ADD COLUMN country STRING")
    jvm.sql(f"ALTER TABLE {t} RENAME COLUMN x TO score")
    jvm.sql(f"ALTER TABLE {t} ALTER COLUMN n TYPE BIGINT")
    jvm.sql(f"ALTER TABLE {t} ALTER COLUMN score TYPE DOUBLE")
    log = shuffle_log(topic, kafka=kafka_conf)
    assert log.layout.version == 5
    assert log.layout.schema.names == ["k", "ts", "n", "score", "country"]
    assert log.layout.schema.field("n").type == pa.int64()
    assert {v.made_by for v in log.layout.versions[1:]} == {"ALTER TABLE"}
    # Python writes under the version the JVM recorded, and both paths read both runs.
    more = frame(40, 60, pa.int64(), country=lambda ids: ["fr"] * len(ids)).rename_columns(
        ["k", "ts", "n", "score", "country"]
    )
    more = more.set_column(3, "score", more.column("score").cast(pa.float64()))
    write_table(more, spec(topic), kafka=kafka_conf, window="b")
    jvm.sql(f"ALTER TABLE {t} DROP COLUMN country")
    j = read_shuffle(jvm, topic, kafka=kafka_conf, engine="jvm")
    p = read_shuffle(jvm, topic, kafka=kafka_conf, engine="python")
    assert j.columns == ["k", "ts", "n", "score"] and rows(j) == rows(p)
    assert read_table(topic, kafka=kafka_conf).num_rows == 60
    # Refusals name the column and the rule; nothing is changed.
    for statement, says in [
        (f"ALTER TABLE {t} DROP COLUMN k", "column 'k' is a key column"),
        (f"ALTER TABLE {t} RENAME COLUMN ts TO t2", "the event-time column"),
        (f"ALTER TABLE {t} ADD COLUMN must INT NOT NULL", "not nullable"),
    ]:
        with pytest.raises(Exception, match=says):
            jvm.sql(statement)
    assert shuffle_log(topic, kafka=kafka_conf).layout.version == 6


def test_a_jvm_stream_stops_at_a_later_version(jvm, kafka_conf, unique, tmp_path):
    topic = unique("evoj-stream")
    write_table(frame(0, 30), spec(topic), kafka=kafka_conf, window="a")
    got: list = []
    stream = read_shuffle_stream(jvm, topic, kafka=kafka_conf, engine="jvm")
    query = (
        stream.writeStream.foreachBatch(lambda df, _: got.extend(df.collect()))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(processingTime="1 second")
        .start()
    )
    import time

    deadline = time.monotonic() + 120
    while len(got) < 30 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(got) == 30
    extra = frame(30, 60, country=lambda ids: ["fr"] * len(ids))
    write_table(extra, spec(topic), kafka=kafka_conf, window="b", schema_mode="merge")
    with pytest.raises(Exception, match="restart"):
        query.awaitTermination(120)
    assert len(got) == 30
    again = read_shuffle_stream(jvm, topic, kafka=kafka_conf, engine="jvm")
    query = (
        again.writeStream.foreachBatch(lambda df, _: got.extend(df.collect()))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert len(got) == 60 and {r["country"] for r in got[30:]} == {"fr"}


def test_a_writer_naming_a_count_never_had_is_refused(kafka_conf, unique):
    topic = unique("evoj-count")
    write_table(frame(0, 10), spec(topic, 4), kafka=kafka_conf, window="a")
    alter_shuffle(topic, kafka=kafka_conf, num_partitions=8)
    with pytest.raises(ShuffleLayoutError, match=r"num_partitions is 8 \(grown from 4\), not 6"):
        write_table(frame(0, 10), spec(topic, 6), kafka=kafka_conf, window="b")
