"""The shuffle engine on the real broker and a real SparkSession."""

import datetime as dt
import time

import pandas as pd
import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.sql import functions as F

from orchestration.shuffle import (
    KafkaClient,
    ShuffleConnectionError,
    ShuffleFormatError,
    ShuffleKeyError,
    ShuffleLayoutError,
    ShuffleOptionError,
    ShuffleSpec,
    ShuffleTopicNotFoundError,
    ShuffleWindowNotFoundError,
    ShuffleWriteError,
    aggregate_shuffle,
    apply_per_key,
    key_group_of,
    partition_of,
    read_shuffle,
    shuffle_log,
    shuffle_watermark,
    write_shuffle,
)
from orchestration.shuffle.kafka.commitlog import write_commit
from orchestration.shuffle.testing import data_frames_of_attempt, fail_write_attempts_below

pytestmark = pytest.mark.integration

DAY = dt.datetime(2013, 1, 1, tzinfo=dt.UTC)


def rows_df(spark, n=5000, keys=53, day=DAY, offset=0):
    """n rows over `keys` string keys, event times spread over one day."""
    start = int(day.timestamp())
    return spark.range(offset, offset + n).selectExpr(
        f"concat('k', cast(id % {keys} as string)) as k",
        "id",
        f"timestamp_seconds({start} + (id * 7919) % 86400) as ts",
        "cast(id as double) / 3 as x",
        "case when id % 5 = 0 then null else cast(id % 11 as int) end as maybe",
    )


def spec_for(topic, **kw):
    base = dict(topic=topic, key=("k",), num_partitions=4, max_parallelism=32, event_time="ts")
    base.update(kw)
    return ShuffleSpec(**base)


def sorted_rows(df, cols=("id",)):
    return sorted((tuple(r) for r in df.collect()), key=lambda r: r[: len(cols)])


def test_round_trip_columns_types_and_partitions(spark, kafka_conf, unique, engine):
    topic = unique("sh-rt")
    df = rows_df(spark)
    res = write_shuffle(df, spec_for(topic), kafka=kafka_conf, window="d1")
    assert res.rows == 5000 and res.frames > 0 and res.bytes > 0
    assert set(res.offsets) == {0, 1, 2, 3}
    back = read_shuffle(spark, topic, kafka=kafka_conf, engine=engine, parallelism=None)
    assert back.columns == df.columns
    assert [f.dataType for f in back.schema] == [f.dataType for f in df.schema]
    assert sorted(map(tuple, back.collect())) == sorted(map(tuple, df.collect()))
    # Spark partition i holds exactly the keys of Kafka partition i.
    assert back.rdd.getNumPartitions() == 4
    keys_by_split = back.rdd.glom().map(lambda rs: sorted({r.k for r in rs})).collect()
    for i, keys in enumerate(keys_by_split):
        assert keys, f"split {i} is empty"
        assert all(partition_of(key_group_of(k, 32), 32, 4) == i for k in keys)


def test_metadata_columns(spark, kafka_conf, unique, engine):
    topic = unique("sh-md")
    res = write_shuffle(rows_df(spark, 800), spec_for(topic), kafka=kafka_conf, window="d7")
    back = read_shuffle(spark, topic, kafka=kafka_conf, engine=engine, with_metadata=True)
    assert back.columns[-5:] == ["_partition", "_key_group", "_run_id", "_offset", "_window"]
    cols = ("k", "_partition", "_key_group", "_run_id", "_offset", "_window")
    for r in back.select(*cols).collect():
        assert r._window == "d7"
        assert r._key_group == key_group_of(r.k, 32)
        assert r._partition == partition_of(r._key_group, 32, 4)
        assert r._run_id == res.run_id
        first, last = res.offsets[r._partition]
        assert first <= r._offset <= last


@pytest.mark.parametrize("parallelism", [1, 3, 7, 32])
def test_any_parallelism_keeps_key_groups_whole(spark, kafka_conf, unique, parallelism, engine):
    topic = unique("sh-par")
    df = rows_df(spark, 3000, keys=200)
    write_shuffle(df, spec_for(topic), kafka=kafka_conf)
    back = read_shuffle(
        spark, topic, kafka=kafka_conf, engine=engine, parallelism=parallelism, with_metadata=True
    )
    assert back.rdd.getNumPartitions() == parallelism
    splits = back.rdd.glom().map(
        lambda rs: ({r._key_group for r in rs}, {r._partition for r in rs})
    )
    splits = splits.collect()
    owner = {}
    for i, (groups, partitions) in enumerate(splits):
        for g in groups:
            assert g not in owner, f"key group {g} in splits {owner.get(g)} and {i}"
            owner[g] = i
        if parallelism <= 4:
            # Smaller parallelism: whole Kafka partitions, contiguous.
            lo, hi = i * 4 // parallelism, (i + 1) * 4 // parallelism
            assert partitions <= set(range(lo, hi))
    assert back.count() == 3000


def test_auto_parallelism_reads_a_small_read_in_fewer_tasks(spark, kafka_conf, unique):
    topic = unique("sh-auto")
    write_shuffle(rows_df(spark, 3000, keys=200), spec_for(topic), kafka=kafka_conf)
    auto = read_shuffle(spark, topic, kafka=kafka_conf, parallelism="auto", with_metadata=True)
    # 3,000 rows are far under a task's worth: one task reads the four partitions.
    assert auto.rdd.getNumPartitions() == 1
    # "auto" is the functions' default; None asks for one task per partition.
    default = read_shuffle(spark, topic, kafka=kafka_conf, with_metadata=True)
    assert default.rdd.getNumPartitions() == 1
    per_partition = read_shuffle(
        spark, topic, kafka=kafka_conf, parallelism=None, with_metadata=True
    )
    assert per_partition.rdd.getNumPartitions() == 4
    assert sorted(auto.collect()) == sorted(per_partition.collect()) == sorted(default.collect())
    # By name, as a data source option (the option's default is one task per partition).
    by_name = (
        spark.read.format("kafka-shuffle")
        .options(topic=topic, parallelism="auto")
        .option("kafka.bootstrap.servers", kafka_conf["bootstrap.servers"])
        .load()
    )
    assert by_name.rdd.getNumPartitions() == 1 and by_name.count() == 3000


def test_retried_task_is_read_exactly_once(spark, kafka_conf, unique, engine):
    topic = unique("sh-retry")
    df = rows_df(spark, 4000).repartition(3)
    # Attempt 0 of every task fails after writing its first frame; Spark retries it.
    with fail_write_attempts_below(1):
        res = write_shuffle(df, spec_for(topic), kafka=kafka_conf, window="d1", frame_rows=300)
    assert {a for _, a in res.commit.tasks} == {1}
    # The failed attempts' DATA frames are in the topic...
    failed_frames = data_frames_of_attempt(kafka_conf, topic, 4, res.run_id, 0)
    assert failed_frames >= 3  # at least one per task
    # ...but a reader sees every row exactly once.
    back = read_shuffle(spark, topic, kafka=kafka_conf, engine=engine)
    ids = [r.id for r in back.select("id").collect()]
    assert len(ids) == 4000 and len(set(ids)) == 4000


def test_run_that_fails_for_good_is_invisible(spark, kafka_conf, unique, engine):
    topic = unique("sh-fail")
    write_shuffle(rows_df(spark, 500), spec_for(topic), kafka=kafka_conf, window="d1")
    before = shuffle_log(topic, kafka=kafka_conf)
    with pytest.raises(ShuffleWriteError, match="not committed"), fail_write_attempts_below(99):
        write_shuffle(
            rows_df(spark, 700, offset=10_000), spec_for(topic), kafka=kafka_conf, window="d1"
        )
    after = shuffle_log(topic, kafka=kafka_conf)
    assert [c.run_id for c in after.commits] == [c.run_id for c in before.commits]
    assert read_shuffle(spark, topic, kafka=kafka_conf, engine=engine).count() == 500


def test_second_run_of_a_window_replaces_the_first(spark, kafka_conf, unique, engine):
    topic = unique("sh-win")
    spec = spec_for(topic)
    first = write_shuffle(rows_df(spark, 1000), spec, kafka=kafka_conf, window="d1")
    write_shuffle(
        rows_df(spark, 300, day=DAY + dt.timedelta(days=1)), spec, kafka=kafka_conf, window="d2"
    )
    second = write_shuffle(rows_df(spark, 400, offset=50_000), spec, kafka=kafka_conf, window="d1")
    d1 = read_shuffle(spark, topic, kafka=kafka_conf, engine=engine, windows=["d1"])
    assert sorted(r.id for r in d1.select("id").collect()) == list(range(50_000, 50_400))
    assert read_shuffle(spark, topic, kafka=kafka_conf, engine=engine).count() == 700
    # The superseded run stays readable by id.
    assert (
        read_shuffle(spark, topic, kafka=kafka_conf, engine=engine, runs=[first.run_id]).count()
        == 1000
    )
    assert [c.run_id for c in shuffle_log(topic, kafka=kafka_conf).visible(["d1"])] == [
        second.run_id
    ]
    with pytest.raises(ShuffleWindowNotFoundError, match="d9"):
        read_shuffle(spark, topic, kafka=kafka_conf, engine=engine, windows=["d1", "d9"])


def test_empty_dataframe_commits_an_empty_run(spark, kafka_conf, unique, engine):
    topic = unique("sh-empty")
    empty = rows_df(spark, 10).limit(0)
    res = write_shuffle(
        empty,
        spec_for(topic),
        kafka=kafka_conf,
        window="d1",
        complete_until=DAY + dt.timedelta(days=1),
    )
    assert res.rows == 0
    assert shuffle_log(topic, kafka=kafka_conf).commit(res.run_id) is not None
    back = read_shuffle(spark, topic, kafka=kafka_conf, engine=engine, windows=["d1"])
    assert back.count() == 0 and back.columns == empty.columns
    assert shuffle_watermark(topic, kafka=kafka_conf) == DAY + dt.timedelta(days=1)


def test_null_keys_are_refused_before_writing(spark, kafka_conf, unique):
    topic = unique("sh-null")
    spec = spec_for(topic)
    write_shuffle(rows_df(spark, 100), spec, kafka=kafka_conf)
    before = KafkaClient(kafka_conf).end_offsets(topic, 4)
    bad = rows_df(spark, 100).withColumn(
        "k", F.when(F.col("id") % 10 == 0, None).otherwise(F.col("k"))
    )
    with pytest.raises(
        ShuffleKeyError, match=r"10 row\(s\) have a null in key column\(s\) \['k'\]"
    ):
        write_shuffle(bad, spec, kafka=kafka_conf)
    assert KafkaClient(kafka_conf).end_offsets(topic, 4) == before


def test_layout_mismatches_are_refused(spark, kafka_conf, unique, engine):
    topic = unique("sh-layout")
    df = rows_df(spark, 100)
    write_shuffle(df, spec_for(topic), kafka=kafka_conf)
    cases = [
        (spec_for(topic, key=("id",)), df, "key is \\['k'\\], not \\['id'\\]"),
        (spec_for(topic, num_partitions=8), df, "num_partitions is 4, not 8"),
        (spec_for(topic, max_parallelism=64), df, "max_parallelism is 32, not 64"),
        (
            spec_for(topic),
            df.withColumn("x", F.col("x").cast("string")),
            "column 'x' has type string",
        ),
        (spec_for(topic), df.drop("maybe"), "column 'maybe' is missing"),
    ]
    for spec, frame, message in cases:
        with pytest.raises(ShuffleLayoutError, match=message):
            write_shuffle(frame, spec, kafka=kafka_conf)
    # Column order does not matter.
    write_shuffle(df.select(*reversed(df.columns)), spec_for(topic), kafka=kafka_conf)
    assert read_shuffle(spark, topic, kafka=kafka_conf, engine=engine).count() == 200


def test_partitions_added_behind_the_back_are_detected(spark, kafka_conf, unique, engine):
    topic = unique("sh-grow")
    write_shuffle(rows_df(spark, 100), spec_for(topic), kafka=kafka_conf)
    admin = AdminClient(kafka_conf)
    admin.create_partitions([NewPartitions(topic, 6)])[topic].result(30)
    time.sleep(1)
    with pytest.raises(
        ShuffleLayoutError, match="has 6 partitions but the shuffle was created with 4"
    ):
        read_shuffle(spark, topic, kafka=kafka_conf, engine=engine)
    if engine == "jvm":  # SQL, planned on the JVM, refuses it in the same words
        with pytest.raises(Exception, match="has 6 partitions but the shuffle was created with 4"):
            spark.sql(f"SELECT count(*) FROM shuffle.`{topic}`").collect()
    with pytest.raises(ShuffleLayoutError, match="has 6 partitions"):
        write_shuffle(rows_df(spark, 100), spec_for(topic), kafka=kafka_conf)


def test_missing_topic_and_unreachable_broker(spark, kafka_conf, unique):
    with pytest.raises(ShuffleTopicNotFoundError, match="does not exist"):
        read_shuffle(spark, unique("sh-none"), kafka=kafka_conf)
    start = time.monotonic()
    with pytest.raises(ShuffleConnectionError, match="127.0.0.1:1"):
        read_shuffle(spark, "x", kafka={"bootstrap.servers": "127.0.0.1:1"})
    with pytest.raises(ShuffleConnectionError, match="127.0.0.1:1"):
        write_shuffle(rows_df(spark, 10), spec_for("x"), kafka={"bootstrap.servers": "127.0.0.1:1"})
    assert time.monotonic() - start < 30


def test_metadata_client_is_kept_per_config_and_dropped_after_a_failure(kafka_conf):
    from orchestration.shuffle.kafka.client import kept_admin

    kafka = KafkaClient(kafka_conf)
    assert kafka.check_reachable() >= 1
    first = kept_admin(kafka)
    assert first is not None
    assert kafka.check_reachable("no-such-topic-here") >= 1
    assert kept_admin(kafka) is first  # kept: no fresh client per request
    bad = KafkaClient({"bootstrap.servers": "127.0.0.1:1"})
    with pytest.raises(ShuffleConnectionError, match="127.0.0.1:1"):
        bad.check_reachable(timeout=1)
    assert kept_admin(bad) is None  # dropped
    # Asking for a missing topic did not create it.
    assert "no-such-topic-here" not in AdminClient(kafka_conf).list_topics(timeout=10).topics


def test_corrupt_frame_names_topic_partition_offset(spark, kafka_conf, unique, engine):
    topic = unique("sh-bad")
    res = write_shuffle(rows_df(spark, 200), spec_for(topic), kafka=kafka_conf)
    p = Producer(kafka_conf)
    p.produce(topic, value=b"not a frame at all, just bytes....................", partition=0)
    p.flush(10)
    (_, high) = KafkaClient(kafka_conf).end_offsets(topic, 4)[0]
    bad_offset = high - 1
    commit = res.commit
    stretched = dict(commit.partitions)
    stretched[0] = type(stretched[0])(
        stretched[0].first, bad_offset, stretched[0].rows, stretched[0].frames
    )
    write_commit(
        KafkaClient(kafka_conf), topic, type(commit)(**{**commit.__dict__, "partitions": stretched})
    )
    with pytest.raises(Exception, match=f"partition 0 offset {bad_offset}") as info:
        read_shuffle(spark, topic, kafka=kafka_conf, engine=engine).collect()
    assert "ShuffleFormatError" in str(info.value) or isinstance(info.value, ShuffleFormatError)


def test_watermarks_and_event_time_range(spark, kafka_conf, unique, engine):
    topic = unique("sh-wm")
    spec = spec_for(topic, max_out_of_orderness=dt.timedelta(minutes=5))
    assert rows_df(spark, 10).count() == 10
    r1 = write_shuffle(rows_df(spark, 2000), spec, kafka=kafka_conf, window="d1")
    latest = rows_df(spark, 2000).agg(F.max("ts")).first()[0].replace(tzinfo=dt.UTC)
    # The run's watermark: the smallest subtask watermark (each = its max - 5 minutes).
    assert r1.watermark <= latest - dt.timedelta(minutes=5)
    assert r1.watermark >= DAY
    r2 = write_shuffle(
        rows_df(spark, 1000, day=DAY + dt.timedelta(days=1)),
        spec,
        kafka=kafka_conf,
        window="d2",
        complete_until=DAY + dt.timedelta(days=2),
    )
    assert r2.watermark == DAY + dt.timedelta(days=2)
    assert shuffle_watermark(topic, kafka=kafka_conf) == DAY + dt.timedelta(days=2)
    noon = DAY + dt.timedelta(hours=12)
    part = read_shuffle(
        spark,
        topic,
        kafka=kafka_conf,
        engine=engine,
        event_time_range=(noon, DAY + dt.timedelta(days=1)),
    )
    expected = rows_df(spark, 2000).filter(
        (F.col("ts") >= noon) & (F.col("ts") < DAY + dt.timedelta(days=1))
    )
    assert sorted(r.id for r in part.select("id").collect()) == sorted(
        r.id for r in expected.select("id").collect()
    )


def per_key_stats(pdf: pd.DataFrame) -> pd.DataFrame:
    pdf = pdf.sort_values(["ts", "id"])
    return pd.DataFrame(
        {
            "k": [pdf["k"].iloc[0]],
            "n": [len(pdf)],
            "first_id": [int(pdf["id"].iloc[0])],
            "sx": [float(pdf["x"].sum())],
        }
    )


SCHEMA = "k string, n long, first_id long, sx double"


def test_per_key_without_exchange_equals_group_by(spark, kafka_conf, unique, engine):
    topic = unique("sh-keyed")
    df = rows_df(spark, 6000, keys=300)
    write_shuffle(df, spec_for(topic), kafka=kafka_conf)
    back = read_shuffle(spark, topic, kafka=kafka_conf, engine=engine)
    out = apply_per_key(back, "k", per_key_stats, SCHEMA, order_by=["ts", "id"])
    plan = out._jdf.queryExecution().executedPlan().toString()
    assert "Exchange" not in plan
    expected = df.groupBy("k").applyInPandas(per_key_stats, SCHEMA)
    assert "Exchange" in expected._jdf.queryExecution().executedPlan().toString()
    got = sorted(map(tuple, out.collect()))
    want = sorted(map(tuple, expected.collect()))
    assert [g[:3] for g in got] == [w[:3] for w in want]
    assert all(abs(g[3] - w[3]) < 1e-6 for g, w in zip(got, want, strict=True))
    # per="batch" hands whole keys to one vectorized call: same answer.
    batch = apply_per_key(
        back.filter(F.col("id") >= 0),
        "k",
        lambda pdf: pdf.groupby("k", as_index=False).agg(n=("id", "size")),
        "k string, n long",
        per="batch",
    )
    assert sorted(map(tuple, batch.collect())) == sorted((w[0], w[1]) for w in want)


def test_per_key_on_another_key_is_refused(spark, kafka_conf, unique):
    topic = unique("sh-wrongkey")
    df = rows_df(spark, 200)
    write_shuffle(df, spec_for(topic), kafka=kafka_conf)
    back = read_shuffle(spark, topic, kafka=kafka_conf)
    with pytest.raises(ShuffleKeyError, match="keyed by \\['k'\\]"):
        apply_per_key(back, "maybe", per_key_stats, SCHEMA)
    with pytest.raises(ShuffleKeyError, match="not a shuffle read"):
        apply_per_key(df, "k", per_key_stats, SCHEMA)
    with pytest.raises(ShuffleKeyError, match="re-partitioned"):
        apply_per_key(back.repartition(3), "k", per_key_stats, SCHEMA)


AGGS = {
    "rows": ("*", "count"),
    "maybe_n": ("maybe", "count"),
    "maybe_sum": ("maybe", "sum"),
    "x_mean": ("x", "mean"),
    "first_ts": ("ts", "min"),
    "last_id": ("id", "max"),
}


@pytest.mark.parametrize("parallelism", [None, 3, 32])
def test_aggregate_in_the_reader_equals_group_by(spark, kafka_conf, unique, parallelism):
    topic = unique("sh-agg")
    d1 = rows_df(spark, 6000, keys=300)
    d2 = rows_df(spark, 3000, keys=300, day=DAY + dt.timedelta(days=1), offset=6000)
    write_shuffle(d1, spec_for(topic), kafka=kafka_conf, window="d1")
    write_shuffle(d2, spec_for(topic), kafka=kafka_conf, window="d2")
    out = aggregate_shuffle(
        spark, topic, kafka=kafka_conf, aggregations=AGGS, windows=["d2"], parallelism=parallelism
    )
    assert "Exchange" not in out._jdf.queryExecution().executedPlan().toString()
    assert out.columns == ["k", *AGGS]
    want = d2.groupBy("k").agg(
        F.count("*").alias("rows"),
        F.count("maybe").alias("maybe_n"),
        F.sum("maybe").alias("maybe_sum"),
        F.avg("x").alias("x_mean"),
        F.min("ts").alias("first_ts"),
        F.max("id").alias("last_id"),
    )
    got = sorted(map(tuple, out.collect()))
    exp = sorted(map(tuple, want.collect()))
    assert len(got) == len(exp) == 300  # each key once, though splits may share a partition
    for g, w in zip(got, exp, strict=True):
        assert g[:4] == w[:4] and g[5:] == w[5:]
        assert abs(g[4] - w[4]) < 1e-6
    # Both windows: a key's rows from two runs meet in one partition and add up.
    both = aggregate_shuffle(spark, topic, kafka=kafka_conf, aggregations={"rows": ("*", "count")})
    union = d1.unionByName(d2).groupBy("k").count()
    assert sorted(map(tuple, both.collect())) == sorted(map(tuple, union.collect()))


def test_aggregate_refuses_bad_aggregations_before_reading(spark, kafka_conf, unique):
    topic = unique("sh-aggbad")
    write_shuffle(rows_df(spark, 100), spec_for(topic), kafka=kafka_conf)
    with pytest.raises(ShuffleOptionError, match="no column 'nope'"):
        aggregate_shuffle(spark, topic, kafka=kafka_conf, aggregations={"s": ("nope", "sum")})
    with pytest.raises(ShuffleOptionError, match="sum is not defined for column 'k'"):
        aggregate_shuffle(spark, topic, kafka=kafka_conf, aggregations={"s": ("k", "sum")})


def test_end_offsets_are_those_a_committed_reader_sees(kafka_conf, unique):
    """end_offsets gives the ends a read_committed consumer sees: below an open transaction's
    records, and the same as the per-partition answer of such a consumer."""
    topic = unique("sh-ends")
    client = KafkaClient(kafka_conf)
    client.ensure_topic(topic, 3)
    plain = Producer({**kafka_conf, "linger.ms": 0})
    for i in range(5):
        plain.produce(topic, value=b"x", partition=i % 3)
    plain.flush(30)
    ends = client.end_offsets(topic, 3)
    assert ends == [(0, 2), (0, 2), (0, 1)]
    txn = Producer({**kafka_conf, "transactional.id": f"{topic}-txn"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, value=b"open", partition=0)
    txn.flush(30)
    try:
        # The open transaction's record lies past the last stable offset: not readable yet.
        assert client.end_offsets(topic, 3) == ends
        with client.consumer() as c:
            one_by_one = [
                c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
                for p in range(3)
            ]
        assert client.end_offsets(topic, 3) == [tuple(x) for x in one_by_one]
    finally:
        txn.abort_transaction(30)
    # The abort marker takes an offset: once the broker has written it (after the abort
    # returns), the partition ends past the aborted record.
    deadline = time.monotonic() + 10
    while client.end_offsets(topic, 3)[0] != (0, 4) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.end_offsets(topic, 3) == [(0, 4), (0, 2), (0, 1)]
