"""The JVM read path (``kafka-shuffle-jvm``) on the real broker and a real SparkSession built
from ``jvm_spark_conf``: the same rows as the Python source, and keyed plans Spark sees."""

import datetime as dt
import time
from dataclasses import replace

import pandas as pd
import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from orchestration.shuffle import (
    KafkaClient,
    apply_per_key,
    jvm_available,
    jvm_spark_conf,
    key_group_of,
    partition_of,
    plan_shuffle_read,
    read_shuffle,
    shuffle_log,
    write_shuffle,
)
from orchestration.shuffle.kafka.commitlog import write_commit
from orchestration.shuffle.spark.perkey import shuffle_scan_options
from orchestration.shuffle.spark.session import explain_text
from tests.conftest import delete_topics, jvm_read_off, jvm_read_on
from tests.integration.test_shuffle import DAY, rows_df, spec_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def jspark(kafka_conf):
    """A session built as a user builds one for the JVM path: ``jvm_spark_conf`` and nothing
    else of the project's. When an earlier test module already runs a session in this process
    (``spark.jars`` is fixed when a session starts), the jars are added to it with ``ADD
    JAR`` and the catalog settings set, and taken away again afterwards, so that later tests
    read with the Python source as before."""
    from pyspark import SparkContext

    conf = jvm_spark_conf(kafka=kafka_conf)
    if SparkContext._active_spark_context is None:
        session = (
            SparkSession.builder.master("local[2,3]")
            .appName("kafka-shuffle-jvm-tests")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.shuffle.partitions", "4")
            .config(map=conf)
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("WARN")
        yield session
        session.stop()
        return
    session = SparkSession.builder.getOrCreate()
    keys = jvm_read_on(session, kafka_conf)
    yield session
    jvm_read_off(session, keys)


def by_id(df):
    return sorted((tuple(r) for r in df.collect()), key=lambda r: r[1])


def both(spark, topic, kafka, **kw):
    """The same read on both paths: (jvm, python) DataFrames."""
    return (
        read_shuffle(spark, topic, kafka=kafka, engine="jvm", **kw),
        read_shuffle(spark, topic, kafka=kafka, engine="python", **kw),
    )


def fields(df):
    # Not the key columns' metadata: it records each read's own parallelism.
    return [(f.name, f.dataType, f.nullable) for f in df.schema]


def scans(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def exchanges(df) -> list[str]:
    return [line for line in explain_text(df).splitlines() if "Exchange" in line]


def test_session_has_the_jvm_path(jspark, kafka_conf):
    assert jvm_available(jspark)
    conf = jvm_spark_conf(kafka=kafka_conf, catalog="shuffle")
    assert conf["spark.sql.catalog.shuffle"] == "io.kafkashuffle.spark.ShuffleCatalog"
    assert (
        conf["spark.sql.catalog.shuffle.kafka.bootstrap.servers"] == kafka_conf["bootstrap.servers"]
    )


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_plain_read_equals_the_python_path(jspark, kafka_conf, unique, compression):
    topic = unique("jvm-plain")
    df = rows_df(jspark)
    write_shuffle(df, spec_for(topic), kafka=kafka_conf, window="d1", compression=compression)
    jvm, py = both(jspark, topic, kafka_conf)
    assert "kafka-shuffle topic=" in scans(jvm) and "keyed" in scans(jvm)
    assert "(Python)" in scans(py)
    assert fields(jvm) == fields(py)
    assert [f.dataType for f in jvm.schema] == [f.dataType for f in df.schema]
    assert by_id(jvm) == by_id(py) == by_id(df)
    # 5,000 rows: a small read, one split on the JVM (test_jvm_small_read.py).
    assert "splits=1 small keyed" in scans(jvm) and jvm.rdd.getNumPartitions() == 1
    # parallelism=None is one split per Kafka partition: partition i holds partition i's keys.
    each = read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm", parallelism=None)
    assert "splits=4 keyed" in scans(each) and by_id(each) == by_id(df)
    keys_by_split = each.rdd.glom().map(lambda rs: sorted({r.k for r in rs})).collect()
    assert len(keys_by_split) == 4
    for i, keys in enumerate(keys_by_split):
        assert keys and all(partition_of(key_group_of(k, 32), 32, 4) == i for k in keys)


def test_large_frames_equal_the_python_path(jspark, kafka_conf, unique):
    # Frames of several MiB: Arrow C++ cuts their LZ4 buffers into linked blocks.
    topic = unique("jvm-large")
    df = jspark.range(0, 300_000, numPartitions=2).selectExpr(
        "concat('key-', cast(id % 997 as string)) as k", "id", "uuid() as u", "rand(7) as x"
    )
    write_shuffle(df, spec_for(topic, event_time=None), kafka=kafka_conf)

    def digest(d):
        return d.select(
            F.count("*"), F.sum(F.xxhash64("k", "id", "u", "x") % 1000003), F.sum("id")
        ).first()

    jvm, py = both(jspark, topic, kafka_conf)
    assert digest(jvm) == digest(py)
    assert digest(jvm)[0] == 300_000


def test_every_lz4_match_shape_equals_the_python_path(jspark, kafka_conf, unique):
    # The JVM decodes LZ4 with word copies: values whose repeats have every period from 1 to
    # 24 bytes (short periods overlap the bytes being written), runs of every length, bytes
    # that do not compress, and nulls.
    topic = unique("jvm-lz4")
    df = jspark.range(0, 60_000, numPartitions=2).selectExpr(
        "concat('k', cast(id % 101 as string)) as k",
        "id",
        "repeat(substr('abcdefghijklmnopqrstuvwxyz', 1, cast(id % 24 + 1 as int)),"
        " cast(id % 37 as int)) as periodic",
        "unhex(sha2(cast(id as string), 256)) as noise",
        "case when id % 3 = 0 then null else cast(id % 5 as int) end as small",
    )
    write_shuffle(df, spec_for(topic, event_time=None), kafka=kafka_conf, compression="lz4")

    def digest(d):
        return d.select(
            F.count("*"),
            F.sum(F.xxhash64("k", "id", "periodic", "noise", "small") % 1000003),
            F.sum(F.length("periodic")),
            F.count("small"),
        ).first()

    jvm, py = both(jspark, topic, kafka_conf)
    assert digest(jvm) == digest(py) == digest(df)
    # A projection decompresses only its columns' buffers.
    some = jvm.select("small", "id").where("id % 7 = 0")
    want = df.select("small", "id").where("id % 7 = 0")
    assert sorted(some.collect(), key=lambda r: r.id) == sorted(want.collect(), key=lambda r: r.id)


def test_every_flat_type_with_nulls_equals_the_python_path(jspark, kafka_conf, unique):
    # The JVM reads flat columns at their buffers' addresses; nested and decimal columns go
    # through Arrow's own accessors. Every type, with and without nulls, must read the same.
    topic = unique("jvm-types")
    df = jspark.range(0, 3_000, numPartitions=2).selectExpr(
        "concat('k', cast(id % 17 as string)) as k",
        "id",
        "id % 2 = 0 as flag",
        "case when id % 3 = 0 then null else id % 2 = 1 end as maybe_flag",
        "cast(id % 100 as tinyint) as b",
        "cast(id % 1000 as smallint) as s",
        "case when id % 4 = 0 then null else cast(id as int) end as i",
        "cast(id / 7 as float) as f",
        "case when id % 6 = 0 then null else cast(id as double) / 3 end as d",
        "date_add(date'2026-01-01', cast(id % 400 as int)) as day",
        "timestamp_seconds(1767225600 + id * 61) as ts",
        "cast(timestamp_seconds(1767225600 + id) as timestamp_ntz) as ntz",
        "case when id % 5 = 0 then null else repeat('é', cast(id % 9 as int)) end as txt",
        "case when id % 7 = 0 then null else unhex(hex(id)) end as bin",
        "cast(id as decimal(12, 3)) / 8 as dec",
        "array(id, id + 1) as arr",
        "named_struct('a', id, 'b', cast(id as string)) as st",
    )
    write_shuffle(df, spec_for(topic, event_time=None), kafka=kafka_conf)
    jvm, py = both(jspark, topic, kafka_conf)
    assert jvm.schema.simpleString() == py.schema.simpleString() == df.schema.simpleString()
    assert by_id(jvm) == by_id(py) == by_id(df)


def test_windows_runs_and_supersession(jspark, kafka_conf, unique):
    topic = unique("jvm-win")
    spec = spec_for(topic)
    write_shuffle(rows_df(jspark, 1000), spec, kafka=kafka_conf, window="d1")
    d2 = DAY + dt.timedelta(days=1)
    r2 = write_shuffle(
        rows_df(jspark, 800, day=d2, offset=10_000), spec, kafka=kafka_conf, window="d2"
    )
    # A re-run of d1 supersedes the first.
    r3 = write_shuffle(rows_df(jspark, 600, offset=20_000), spec, kafka=kafka_conf, window="d1")
    for kw in ({}, {"windows": ["d1"]}, {"runs": [r2.run_id]}, {"windows": ["d1", "d2"]}):
        # parallelism 1 and 2: splits of several partitions, whose first ranges are fetched
        # at once, then each partition's later ranges (the other runs) on its own.
        for par in ({}, {"parallelism": 1}, {"parallelism": 2}):
            jvm, py = both(jspark, topic, kafka_conf, **kw, **par)
            assert by_id(jvm) == by_id(py), (kw, par)
    jvm, _ = both(jspark, topic, kafka_conf, windows=["d1"])
    assert jvm.count() == 600 and r3.rows == 600


@pytest.mark.parametrize("parallelism", [2, 6, 8])
def test_other_parallelism_stays_correct_and_reports_nothing(
    jspark, kafka_conf, unique, parallelism
):
    topic = unique("jvm-par")
    df = rows_df(jspark, 3000)
    write_shuffle(df, spec_for(topic), kafka=kafka_conf)
    jvm, py = both(jspark, topic, kafka_conf, parallelism=parallelism)
    assert jvm.rdd.getNumPartitions() == parallelism
    assert "keyed" not in scans(jvm)
    assert by_id(jvm) == by_id(py) == by_id(df)
    grouped = jvm.groupBy("k").count()
    if parallelism < 4:
        # Splits of whole partitions: the read counts each key itself, no Exchange.
        assert "aggregated=[COUNT(*)] by [k]" in scans(grouped) and not exchanges(grouped)
    else:
        # Partitions cut by key group: Spark is told nothing, so grouping adds its Exchange.
        assert exchanges(grouped)
    assert sorted(map(tuple, grouped.collect())) == sorted(
        map(tuple, df.groupBy("k").count().collect())
    )


def test_event_time_range(jspark, kafka_conf, unique):
    topic = unique("jvm-et")
    spec = spec_for(topic)
    write_shuffle(rows_df(jspark, 2000), spec, kafka=kafka_conf, window="d1")
    d2 = DAY + dt.timedelta(days=1)
    write_shuffle(rows_df(jspark, 1000, day=d2, offset=5000), spec, kafka=kafka_conf, window="d2")
    noon = DAY + dt.timedelta(hours=12)
    for rng in ((noon, d2), (noon, None), (None, noon), (d2, d2 + dt.timedelta(hours=1))):
        jvm, py = both(jspark, topic, kafka_conf, event_time_range=rng)
        got = by_id(jvm)
        assert got == by_id(py), rng
        start, end = rng
        assert all(
            (start is None or r[2] >= start.replace(tzinfo=None))
            and (end is None or r[2] < end.replace(tzinfo=None))
            for r in got
        )


def test_metadata_columns(jspark, kafka_conf, unique):
    topic = unique("jvm-meta")
    write_shuffle(rows_df(jspark, 1500), spec_for(topic), kafka=kafka_conf, window="d1")
    r2 = write_shuffle(
        rows_df(jspark, 500, offset=9000), spec_for(topic), kafka=kafka_conf, window=None
    )
    for kw in ({}, {"parallelism": 8}, {"event_time_range": (DAY + dt.timedelta(hours=6), None)}):
        jvm, py = both(jspark, topic, kafka_conf, with_metadata=True, **kw)
        assert jvm.columns[-5:] == ["_partition", "_key_group", "_run_id", "_offset", "_window"]
        assert fields(jvm) == fields(py)
        assert by_id(jvm) == by_id(py), kw
    jvm, _ = both(jspark, topic, kafka_conf, with_metadata=True)
    rows = jvm.collect()
    assert {r._window for r in rows if r._run_id == r2.run_id} == {None}
    assert all(r._key_group == key_group_of(r.k, 32) for r in rows)
    assert all(r._partition == partition_of(r._key_group, 32, 4) for r in rows)
    # Projection: only what is asked for is built.
    assert sorted(jvm.select("id", "_offset").collect()) == sorted((r.id, r._offset) for r in rows)


# Both reads are small (one split each) by default; parallelism=None reads one split per Kafka
# partition. Either way, keyed.
@pytest.mark.parametrize(
    "selection, scan", [({}, "splits=1 small keyed"), ({"parallelism": None}, "splits=4 keyed")]
)
def test_keyed_operations_plan_no_exchange(jspark, kafka_conf, unique, selection, scan):
    left, right = unique("jvm-ops-a"), unique("jvm-ops-b")
    df = rows_df(jspark, 4000)
    write_shuffle(df, spec_for(left), kafka=kafka_conf)
    other = jspark.range(0, 3000).selectExpr(
        "concat('k', cast(id % 71 as string)) as k", "id * 2 as id2"
    )
    write_shuffle(other, spec_for(right, event_time=None), kafka=kafka_conf)
    jvm, py = both(jspark, left, kafka_conf, **selection)
    jvm_r, py_r = both(jspark, right, kafka_conf, **selection)
    assert scan in scans(jvm) and scan in scans(jvm_r)

    def agg(d):
        return d.groupBy("k").agg(F.count("*").alias("n"), F.sum("id").alias("s"))

    def window(d):
        return d.withColumn("prev", F.lag("id").over(Window.partitionBy("k").orderBy("id")))

    def per_key(d):
        return d.groupBy("k").applyInPandas(
            lambda p: pd.DataFrame({"k": [p.k.iloc[0]], "n": [len(p)]}), "k string, n long"
        )

    def sql(d):
        name = unique("v").replace("-", "_")
        d.createOrReplaceTempView(name)
        return jspark.sql(f"SELECT k, count(*) AS n, max(x) AS mx FROM {name} GROUP BY k")

    def join(d, e):
        return d.join(e, "k").select("k", "id", "id2")

    cases = {
        "groupBy.agg": (agg(jvm), agg(py)),
        "window": (window(jvm), window(py)),
        "applyInPandas": (per_key(jvm), per_key(py)),
        "sql group by": (sql(jvm), sql(py)),
        "join": (join(jvm, jvm_r), join(py, py_r)),
    }
    # These shuffles are small enough to broadcast, and the JVM read reports its size. As for
    # two shuffles too large to broadcast, Spark may not here (the next test covers a small
    # one).
    threshold = jspark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    jspark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        for name, (on_jvm, on_python) in cases.items():
            assert exchanges(on_jvm) == [], (name, explain_text(on_jvm))
            assert exchanges(on_python), name  # the Python source reports no partitioning
            got, want = on_jvm.collect(), on_python.collect()
            assert sorted(map(tuple, got)) == sorted(map(tuple, want)), name
    finally:
        jspark.conf.set("spark.sql.autoBroadcastJoinThreshold", threshold)


def test_statistics_let_spark_broadcast_a_small_read(jspark, kafka_conf, unique):
    # The scan reports the plan's rows (from the commit records) and a size estimate: a
    # join with a small shuffle broadcasts it, as it would a small file.
    big, small = unique("jvm-stats-a"), unique("jvm-stats-b")
    write_shuffle(rows_df(jspark, 4000), spec_for(big), kafka=kafka_conf)
    dim = jspark.range(0, 53).selectExpr("concat('k', cast(id as string)) as k", "id as kid")
    write_shuffle(dim, spec_for(small, event_time=None), kafka=kafka_conf)
    left = read_shuffle(jspark, big, kafka=kafka_conf, engine="jvm")
    right = read_shuffle(jspark, small, kafka=kafka_conf, engine="jvm")

    def scan_stats(d):
        return d._jdf.queryExecution().optimizedPlan().collectLeaves().head().stats()

    # Rows times the columns' default widths (Spark keeps the row count only with CBO on).
    width = right._jdf.schema().defaultSize()
    assert scan_stats(right).sizeInBytes() == 53 * width
    full = scan_stats(left).sizeInBytes()
    assert full == 4000 * left._jdf.schema().defaultSize()
    # Key-group sub-ranges of partitions (8 splits of 4 partitions): their share of the rows.
    half = read_shuffle(jspark, big, kafka=kafka_conf, engine="jvm", parallelism=8)
    assert 0.9 * full <= scan_stats(half).sizeInBytes() <= 1.1 * full
    joined = left.join(right, "k")
    assert "BroadcastHashJoin" in explain_text(joined), explain_text(joined)
    assert joined.count() == 4000


def test_partition_function_is_the_writers(jspark, kafka_conf, unique):
    rows = jspark.sql(
        "SELECT k, id, maybe, shuffle.partition_of_32_4(k) AS p1, "
        "shuffle.partition_of_128_8(maybe, id, k) AS p3, "
        "pmod(hash(maybe, id, k), 128) * 8 div 128 AS q3 "
        "FROM (SELECT concat('k', cast(id % 97 as string)) AS k, id, "
        "CASE WHEN id % 5 = 0 THEN NULL ELSE cast(id % 11 AS int) END AS maybe "
        "FROM range(2000))"
    ).collect()
    assert all(r.p1 == partition_of(key_group_of(r.k, 32), 32, 4) for r in rows)
    assert all(r.p3 == r.q3 for r in rows)


def test_apply_per_key_on_a_jvm_read(jspark, kafka_conf, unique):
    topic = unique("jvm-perkey")
    write_shuffle(rows_df(jspark, 2000), spec_for(topic), kafka=kafka_conf)

    def count(p: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"k": [p.k.iloc[0]], "n": [len(p)]})

    jvm, py = both(jspark, topic, kafka_conf)
    # The per-key work runs inside the reader on either path: the JVM read's options are
    # the plan the Python reader executes.
    assert shuffle_scan_options(jvm) is not None
    got = apply_per_key(jvm, "k", count, schema="k string, n long")
    want = apply_per_key(py, "k", count, schema="k string, n long")
    assert sorted(map(tuple, got.collect())) == sorted(map(tuple, want.collect()))


def test_catalog_table_read_in_sql_alone(jspark, kafka_conf, unique):
    # No Python planner: the catalog reads the commit log and plans on the JVM, with the same
    # rules (supersession by window, runs, windows, event time) as the Python path.
    topic = unique("jvm-cat")
    spec = spec_for(topic)
    write_shuffle(rows_df(jspark, 1000), spec, kafka=kafka_conf, window="d1")
    d2 = DAY + dt.timedelta(days=1)
    r2 = write_shuffle(
        rows_df(jspark, 700, day=d2, offset=10_000), spec, kafka=kafka_conf, window="d2"
    )
    table = jspark.table(f"shuffle.`{topic}`")
    assert table.columns == ["k", "id", "ts", "x", "maybe"]
    assert jspark.table(f"shuffle.with_metadata.`{topic}`").columns[-1] == "_window"
    assert by_id(jspark.sql(f"SELECT * FROM shuffle.`{topic}`")) == by_id(
        read_shuffle(jspark, topic, kafka=kafka_conf, engine="python")
    )
    # A re-run of d1 supersedes the first: the next query sees it, and only it.
    r3 = write_shuffle(rows_df(jspark, 400, offset=20_000), spec, kafka=kafka_conf, window="d1")
    sql = jspark.sql(
        f"SELECT _window, count(*) AS n, min(id) AS lo FROM shuffle.with_metadata.`{topic}` "
        "GROUP BY _window ORDER BY _window"
    )
    assert [tuple(r) for r in sql.collect()] == [("d1", 400, 20_000), ("d2", 700, 10_000)]
    # GROUP BY the key in SQL: no Exchange, and the counts of the Python path.
    grouped = jspark.sql(f"SELECT k, count(*) AS n FROM shuffle.`{topic}` GROUP BY k")
    assert not exchanges(grouped)
    py = read_shuffle(jspark, topic, kafka=kafka_conf, engine="python")
    assert sorted(map(tuple, grouped.collect())) == sorted(
        map(tuple, py.groupBy("k").count().collect())
    )

    # The data source's options select as read_shuffle's arguments do.
    def reader():  # a DataFrameReader keeps its options: a new one per read
        return jspark.read.format("kafka-shuffle-jvm").option("topic", topic)

    for options, kw in (
        ({"windows": '["d2"]'}, {"windows": ["d2"]}),
        ({"runs": f'["{r2.run_id}", "{r3.run_id}"]'}, {"runs": [r2.run_id, r3.run_id]}),
        (
            {"event_time_start_ms": str(int(d2.timestamp()) * 1000)},
            {"event_time_range": (d2, None)},
        ),
        ({"parallelism": "3"}, {"parallelism": 3}),
    ):
        got = reader().options(**options).load()
        assert by_id(got) == by_id(
            read_shuffle(jspark, topic, kafka=kafka_conf, engine="python", **kw)
        ), options
    assert reader().option("parallelism", "3").load().rdd.getNumPartitions() == 3
    with pytest.raises(Exception, match=r"ShuffleWindowNotFoundError.*no committed run for window"):
        reader().option("windows", '["d9"]').load().collect()
    with pytest.raises(Exception, match="option 'parallelism' must be an integer >= 1"):
        reader().option("parallelism", "0").load().collect()
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        jspark.table(f"shuffle.`{unique('jvm-none')}`")


def test_jar_refuses_a_spark_line_it_was_not_built_for(jspark):
    from py4j.protocol import Py4JJavaError

    check = jspark._jvm.io.kafkashuffle.spark.SparkVersionCheck
    check.require()  # the Spark this session runs
    with pytest.raises(Py4JJavaError) as info:
        check.require("3.5.1")
    message = str(info.value.java_exception.getMessage())
    assert message.startswith("ShuffleSessionError: kafka-shuffle-spark_2.13 ")
    assert "runs on Spark 4.0, 4.1, 4.2, 4.3; this session runs Spark 3.5.1" in message


def test_corrupt_frame_names_topic_partition_offset(jspark, kafka_conf, unique):
    topic = unique("jvm-bad")
    res = write_shuffle(rows_df(jspark, 200), spec_for(topic), kafka=kafka_conf)
    p = Producer(kafka_conf)
    p.produce(topic, value=b"not a frame at all, just bytes....................", partition=0)
    p.flush(10)
    ((_, high),) = KafkaClient(kafka_conf).end_offsets(topic, 4)[:1]
    bad = high - 1
    stretched = dict(res.commit.partitions)
    stretched[0] = replace(stretched[0], last=bad)
    write_commit(KafkaClient(kafka_conf), topic, replace(res.commit, partitions=stretched))
    with pytest.raises(Exception, match=f"topic '{topic}' partition 0 offset {bad}") as info:
        read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm").collect()
    assert "ShuffleFormatError" in str(info.value)
    assert "not a shuffle frame" in str(info.value)


def test_frame_checksums_and_version_1_frames_on_both_paths(jspark, kafka_conf, unique):
    from tests.integration.test_bad_inputs import (
        HANDMADE,
        Ctx,
        as_version_1,
        data_frame,
        flipped,
    )

    c = Ctx(jspark, kafka_conf, unique("jvm-crc"))
    c.write()
    c.handmade_run(lambda run: [as_version_1(data_frame(run))], 3, "v1")
    # The last byte of an uncompressed body: a timestamp Arrow would decode into another.
    c.handmade_run(lambda run: [flipped(data_frame(run, compression=None), -12)], 3, "flip")
    errors = []
    for engine in ("jvm", "python"):
        assert c.read(windows=["v1"], engine=engine) == HANDMADE, engine
        with pytest.raises(Exception, match="fails its checksum") as info:
            c.read(windows=["flip"], engine=engine)
        text = str(info.value)
        assert "ShuffleFormatError: DATA frame at topic" in text, text[:2000]
        errors.append(text[text.index("DATA frame at") :].split("\n")[0])
    # The same words on both paths.
    assert errors[0] == errors[1], errors


def test_a_data_topic_deleted_mid_read_is_reported_promptly(jspark, kafka_conf, unique):
    from confluent_kafka.admin import AdminClient

    topic = unique("jvm-gone")
    write_shuffle(rows_df(jspark, 100), spec_for(topic), kafka=kafka_conf)
    df = read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm")
    admin = AdminClient(kafka_conf)
    admin.delete_topics([topic], operation_timeout=30)[topic].result(60)
    began = time.monotonic()
    with pytest.raises(Exception, match="ShuffleTopicNotFoundError") as info:
        df.collect()
    # Each attempt of the task found the topic gone within seconds, not after 30 s idle.
    assert time.monotonic() - began < 30
    assert f"topic '{topic}' was deleted while reading partition " in str(info.value)


def test_a_lost_frame_is_an_error_on_both_paths(jspark, kafka_conf, unique):
    topic = unique("jvm-lost")
    res = write_shuffle(rows_df(jspark, 300), spec_for(topic), kafka=kafka_conf)
    # The commit record's range of partition 1 cut short: its last frame (an END) is outside.
    cut = dict(res.commit.partitions)
    cut[1] = replace(cut[1], last=cut[1].last - 1)
    write_commit(KafkaClient(kafka_conf), topic, replace(res.commit, partitions=cut))
    assert shuffle_log(topic, kafka=kafka_conf).commits
    message = f"topic '{topic}' partition 1, run {res.run_id} subtask"
    with pytest.raises(Exception, match="no END frame within committed offsets") as on_jvm:
        read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm").collect()
    with pytest.raises(Exception, match="no END frame within committed offsets") as on_python:
        read_shuffle(jspark, topic, kafka=kafka_conf, engine="python").collect()
    # The same words on both paths.
    for error in (on_jvm.value, on_python.value):
        assert message in str(error) and "ShuffleFormatError" in str(error)


def test_engine_python_and_plan_reuse(jspark, kafka_conf, unique):
    topic = unique("jvm-eng")
    write_shuffle(rows_df(jspark, 500), spec_for(topic), kafka=kafka_conf)
    read = plan_shuffle_read(jspark, topic, kafka=kafka_conf)
    auto = read.dataframe()  # the session has the JVM path: "auto" takes it
    assert "kafka-shuffle topic=" in scans(auto)
    assert "(Python)" in scans(read.dataframe(engine="python"))
    assert by_id(auto) == by_id(read.dataframe(engine="python"))
    with pytest.raises(Exception, match="engine must be one of"):
        read.dataframe(engine="scala")


def test_dagster_spark_resource_reads_assets_on_the_jvm(jspark, kafka_conf, unique):
    # A Dagster project of a user's own: an asset stored by the IO manager, a downstream
    # asset that groups it by key. With ShuffleSparkResource (jvm_spark_conf for the kafka
    # resource's cluster) the IO manager loads the input on the JVM, and the grouping plans
    # no Exchange.
    from dagster import AssetIn, Definitions, asset, materialize

    from orchestration import (
        KafkaResource,
        KafkaShuffleIOManager,
        ShuffleSparkResource,
        shuffle_metadata,
    )

    topic = unique("jvm-dagster")
    kafka = KafkaResource(bootstrap_servers=kafka_conf["bootstrap.servers"])
    # The session runs already (built with jvm_spark_conf): the resource uses it as it is.
    spark_res = ShuffleSparkResource(spark_config={}, kafka=kafka)
    seen = {}

    @asset(
        io_manager_key="shuffle_io",
        metadata=shuffle_metadata(key=["k"], num_partitions=4, max_parallelism=32, topic=topic),
    )
    def keyed_rows(spark: ShuffleSparkResource):
        return rows_df(spark.spark_session, n=2000)

    @asset(ins={"rows": AssetIn("keyed_rows")})
    def per_key(rows) -> int:
        counts = rows.groupBy("k").count()
        seen["plan"] = explain_text(counts)
        return counts.count()

    defs = Definitions(
        assets=[keyed_rows, per_key],
        resources={
            "spark": spark_res,
            "shuffle_io": KafkaShuffleIOManager(kafka=kafka, spark=spark_res),
        },
    )
    result = materialize([keyed_rows, per_key], resources=defs.resources)
    assert result.success
    assert result.output_for_node("per_key") == 53
    # The count runs in the keyed read itself.
    assert "kafka-shuffle topic=" in seen["plan"], seen["plan"]
    assert "aggregated=[COUNT(*)] by [k]" in seen["plan"], seen["plan"]
    assert "Exchange" not in seen["plan"], seen["plan"]


def test_catalog_reads_a_shuffle_created_again_with_another_layout(jspark, kafka_conf, unique):
    # The catalog keeps what it read of a commit log; a shuffle deleted and created again
    # (under the same name, with another layout and a longer log) is read anew.
    from confluent_kafka.admin import AdminClient

    topic = unique("jvm-again")
    write_shuffle(rows_df(jspark, 300), spec_for(topic), kafka=kafka_conf, window="d1")
    assert jspark.sql(f"SELECT count(*) FROM shuffle.`{topic}`").first()[0] == 300
    delete_topics(AdminClient(kafka_conf), [topic, f"{topic}__commits"], within=30)
    deadline = time.monotonic()
    spec = spec_for(topic, key=("id",), num_partitions=2)
    for day in ("d1", "d2", "d3"):
        while True:  # the broker may still be removing the old topics' partitions
            try:
                write_shuffle(rows_df(jspark, 50), spec, kafka=kafka_conf, window=day)
                break
            except Exception as exc:  # noqa: BLE001 - retried until the deadline, then shown
                assert time.monotonic() < deadline + 30, exc
                time.sleep(0.5)
    again = jspark.sql(f"SELECT * FROM shuffle.`{topic}`")
    assert again.count() == 150
    # One split per partition of the new layout, when small reads are not read as one.
    jspark.conf.set("spark.sql.catalog.shuffle.small_read_rows", "0")
    try:
        assert jspark.sql(f"SELECT * FROM shuffle.`{topic}`").rdd.getNumPartitions() == 2
    finally:
        jspark.conf.unset("spark.sql.catalog.shuffle.small_read_rows")


def test_per_key_work_over_a_catalog_table(jspark, kafka_conf, unique):
    """A shuffle read as a catalog table, planned on the JVM with no Python planner, has its
    key columns tagged as a read's are: apply_per_key takes it, and gives each key's rows."""
    topic = unique("jvm-cat-perkey")
    df = rows_df(jspark, 2000)
    write_shuffle(df, spec_for(topic), kafka=kafka_conf, window="d1")
    table = jspark.table(f"shuffle.`{topic}`")
    assert table.schema["k"].metadata["kafka_shuffle"]["key"] == ["k"]
    assert "kafka_shuffle" not in table.schema["id"].metadata

    def per_key(frame: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame(
            {"k": [frame["k"].iloc[0]], "n": [len(frame)], "top": [frame["id"].max()]}
        )

    got = apply_per_key(table, "k", per_key, "k string, n long, top long")
    want = df.groupBy("k").agg(F.count("*").alias("n"), F.max("id").alias("top"))
    assert sorted(map(tuple, got.collect())) == sorted(map(tuple, want.collect()))
    # Renamed, the column is not the shuffle's key any more: refused, as over any read.
    with pytest.raises(Exception, match=r"refused: the shuffle is keyed by \['k'\]"):
        apply_per_key(
            table.withColumnRenamed("k", "k2"), "k2", per_key, "k string, n long, top long"
        )
