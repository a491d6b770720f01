"""The engine on sessions it did not make: a fresh session, dagster-pyspark's, another time zone."""

import pandas as pd
import pytest
from dagster import build_init_resource_context
from dagster_pyspark import LazyPySparkResource
from pyspark.sql import functions as F

from orchestration.shuffle import (
    ShuffleSpec,
    aggregate_shuffle,
    apply_per_key,
    read_shuffle,
    register_data_sources,
    write_shuffle,
)
from tests.conftest import jvm_read_off, jvm_read_on

pytestmark = pytest.mark.integration


def rows(session, n=600):
    return session.range(n).selectExpr(
        "concat('u', cast(id % 17 as string)) as user_id",
        "id",
        "timestamp_micros(1356998400000000 + id * 3600000000 + id) as ts",
    )


def count_per_user(pdf: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"user_id": [pdf["user_id"].iloc[0]], "n": [len(pdf)]})


def exercise(session, kafka_conf, topic):
    """Write, read, aggregate and apply per key on ``session``; returns what was read."""
    spec = ShuffleSpec(topic=topic, key="user_id", num_partitions=3, max_parallelism=12)
    df = rows(session)
    res = write_shuffle(df, spec, kafka=kafka_conf, window="w1")
    assert res.rows == 600
    back = read_shuffle(session, topic, kafka=kafka_conf, windows=["w1"])
    assert back.count() == 600
    agg = aggregate_shuffle(
        session, topic, kafka=kafka_conf, aggregations={"n": ("*", "count")}, windows=["w1"]
    )
    assert {r.user_id: r.n for r in agg.collect()} == {
        r.user_id: r["count"] for r in df.groupBy("user_id").count().collect()
    }
    per = apply_per_key(back, "user_id", count_per_user, "user_id string, n long")
    assert sorted(map(tuple, per.collect())) == sorted(map(tuple, agg.collect()))
    return back


def test_a_new_session_needs_no_registration(spark, kafka_conf, unique):
    # A new session of the application: the engine registers what it needs, if it must.
    fresh = spark.newSession()
    exercise(fresh, kafka_conf, unique("any-new"))
    # And by name, once registered (idempotent).
    other = spark.newSession()
    register_data_sources(other)
    register_data_sources(other)
    topic = unique("any-byname")
    write_shuffle(
        rows(other, 50),
        ShuffleSpec(topic=topic, key="user_id", num_partitions=2, max_parallelism=8),
        kafka=kafka_conf,
    )
    by_name = (
        other.read.format("kafka-shuffle")
        .option("topic", topic)
        .option("kafka.bootstrap.servers", kafka_conf["bootstrap.servers"])
        .load()
    )
    assert by_name.count() == 50


def test_dagster_pyspark_session(spark, kafka_conf, unique):
    resource = LazyPySparkResource(spark_config={"spark.sql.session.timeZone": "UTC"})
    with build_init_resource_context() as ctx:
        resource.setup_for_execution(ctx)
        session = resource.spark_session
    exercise(session, kafka_conf, unique("any-lazy"))


def test_timestamps_round_trip_in_another_time_zone(spark, kafka_conf, unique):
    ny = spark.newSession()
    ny.conf.set("spark.sql.session.timeZone", "America/New_York")
    back = exercise(ny, kafka_conf, unique("any-ny"))
    instants = {r.id: r.us for r in back.select("id", F.unix_micros("ts").alias("us")).collect()}
    assert instants == {i: 1356998400000000 + i * 3600000000 + i for i in range(600)}
    # Read from a UTC session, the same instants.
    topic = back.schema["user_id"].metadata["kafka_shuffle"]["topic"]
    utc = read_shuffle(spark, topic, kafka=kafka_conf)
    got = {r.id: r.us for r in utc.select("id", F.unix_micros("ts").alias("us")).collect()}
    assert got == instants
    # And on the JVM read path: the frames name New York's zone, the layout UTC; the
    # instants are the same.
    settings = jvm_read_on(spark, kafka_conf)
    try:
        jvm = read_shuffle(spark, topic, kafka=kafka_conf, engine="jvm")
        got = {r.id: r.us for r in jvm.select("id", F.unix_micros("ts").alias("us")).collect()}
    finally:
        jvm_read_off(spark, settings)
    assert got == instants
    # The session really is in New York: a local midnight there is 05:00 UTC.
    local = ny.sql("select unix_micros(timestamp'2013-01-01 00:00:00') as us").first().us
    assert local == 1357016400000000


def test_spark_session_leaves_an_active_session_as_its_owner_set_it(spark):
    from pyspark.sql import SparkSession

    from orchestration.shuffle import spark_session

    # Whichever session this thread holds as active (earlier tests may have made another
    # session of the same context active).
    active = SparkSession.getActiveSession()
    assert active is not None
    keys = ("spark.sql.session.timeZone", "spark.sql.shuffle.partitions")
    before = {k: active.conf.get(k) for k in keys}
    active.conf.set("spark.sql.session.timeZone", "America/New_York")
    active.conf.set("spark.sql.shuffle.partitions", "7")
    try:
        with pytest.warns(
            UserWarning, match=r"conf \['spark\.sql\.shuffle\.partitions'\] is not applied"
        ):
            got = spark_session(conf={"spark.sql.shuffle.partitions": "3"})
        # The active session, with its owner's settings: none set, none changed.
        assert got.sparkContext is spark.sparkContext
        assert got.conf.get("spark.sql.session.timeZone") == "America/New_York"
        assert got.conf.get("spark.sql.shuffle.partitions") == "7"
        assert active.conf.get("spark.sql.shuffle.partitions") == "7"
    finally:
        for k, v in before.items():
            active.conf.set(k, v)
