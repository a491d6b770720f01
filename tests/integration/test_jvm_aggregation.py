"""``groupBy(...).agg(...)`` over a keyed JVM read runs inside the read (Spark's aggregate
push-down, taken whole): no Exchange, no aggregate of Spark's, and the same rows and types
as the same ``groupBy`` over the rows written. What the read cannot run whole (groups
without the key, splits that are not whole partitions, a distinct count) is left to Spark,
with the same results."""

from __future__ import annotations

import math

import pytest
from pyspark.sql import functions as F

from orchestration.shuffle import aggregate_shuffle, read_shuffle, write_shuffle
from tests.integration.test_jvm_read import jspark  # noqa: F401 - the module's session
from tests.integration.test_shuffle import spec_for

pytestmark = pytest.mark.integration


def plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def pushed(df) -> bool:
    text = plan(df)
    return "aggregated=" in text and "Aggregate" not in text.replace("aggregated=", "")


def canonical(v):
    if isinstance(v, float) and math.isnan(v):
        return ("nan",)
    if isinstance(v, float):
        return ("num", round(v + 0.0, 6))
    return ("v", v)


def rows(df) -> list[tuple]:
    return sorted((tuple(canonical(x) for x in r) for r in df.collect()), key=repr)


def source(spark, n=4000):
    """Rows with nulls, NaNs, signed zeros and the ends of the integer ranges in the
    aggregated columns, over 61 string keys and a second, integer grouping column."""
    return spark.range(n).selectExpr(
        "concat('k', cast(id % 61 as string)) as k",
        "cast(id % 3 as int) as g",
        "case when id % 7 = 0 then null else id * 1000003 % 9973 - 5000 end as v",
        "case when id % 13 = 0 then cast('NaN' as double) when id % 11 = 0 then -0.0"
        " when id % 17 = 0 then null else cast(id as double) / 7 end as x",
        "cast(id % 256 - 128 as tinyint) as b",
        "cast(case when id % 5 = 0 then 32767 else -32768 + id end as smallint) as s",
        "case when id % 9 = 0 then 2147483647 else cast(-id as int) end as i",
        "case when id % 19 = 0 then null else cast(id as float) / 3 end as f",
        "date_add(date'2024-01-01', cast(id % 400 as int)) as d",
        "timestamp_seconds(1700000000 + (id * 7919) % 86400) as ts",
        "cast(id % 100 as decimal(10, 2)) as dec",
    )


def aggs() -> list:
    """Every aggregate the read takes, over each kind of column it takes."""
    return [
        F.count("*").alias("n"),
        F.count("x").alias("xs"),
        F.sum("v").alias("sv"),
        F.avg("v").alias("av"),
        F.sum("x").alias("sx"),
        F.avg("x").alias("ax"),
        F.min("x").alias("lx"),
        F.max("x").alias("hx"),
        F.sum("b").alias("sb"),
        F.min("b").alias("lb"),
        F.max("s").alias("hs"),
        F.sum("i").alias("si"),
        F.min("i").alias("li"),
        F.sum("f").alias("sf"),
        F.max("f").alias("hf"),
        F.min("d").alias("ld"),
        F.max("ts").alias("hts"),
    ]


@pytest.fixture(scope="module")
def written(jspark, kafka_conf):  # noqa: F811
    import uuid

    topic = f"jvm-agg-{uuid.uuid4().hex[:10]}"
    df = source(jspark)
    write_shuffle(df, spec_for(topic), kafka=kafka_conf)
    return topic, df


@pytest.mark.parametrize("groups", [("k",), ("k", "g"), ("g", "k")])
def test_group_by_the_key_runs_in_the_read_and_equals_group_by(
    jspark,  # noqa: F811
    kafka_conf,
    written,
    groups,
):
    topic, df = written
    read = read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm")
    got = read.groupBy(*groups).agg(*aggs())
    want = df.groupBy(*groups).agg(*aggs())
    assert pushed(got), plan(got)
    assert "Exchange" not in plan(got)
    assert [(f.name, f.dataType) for f in got.schema] == [(f.name, f.dataType) for f in want.schema]
    assert rows(got) == rows(want)


def test_a_catalog_read_in_sql_runs_the_aggregation_in_the_read(
    jspark,  # noqa: F811
    kafka_conf,
    written,
):
    topic, df = written
    df.createOrReplaceTempView("jvm_agg_rows")
    query = "select k, count(*) n, sum(v) sv, max(x) hx from {} group by k"
    got = jspark.sql(query.format(f"shuffle.`{topic}`"))
    assert pushed(got), plan(got)
    assert rows(got) == rows(jspark.sql(query.format("jvm_agg_rows")))


@pytest.mark.parametrize(
    "case",
    [
        "groups without the key",
        "a distinct count",
        "splits that are not whole partitions",
        "an expression of a column",
    ],
)
def test_what_the_read_cannot_run_whole_is_left_to_spark(
    jspark,  # noqa: F811
    kafka_conf,
    written,
    case,
):
    topic, df = written
    kw = {"parallelism": 8} if case == "splits that are not whole partitions" else {}
    read = read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm", **kw)

    def query(d):
        if case == "groups without the key":
            return d.groupBy("g").agg(F.count("*").alias("n"), F.sum("v").alias("sv"))
        if case == "a distinct count":
            return d.groupBy("k").agg(F.countDistinct("g").alias("n"))
        if case == "an expression of a column":
            return d.groupBy("k").agg(F.sum(F.col("v") * 2).alias("sv"))
        return d.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("sv"))

    got = query(read)
    assert not pushed(got), plan(got)
    assert rows(got) == rows(query(df))


def test_aggregate_shuffle_on_the_jvm_runs_in_the_read(
    jspark,  # noqa: F811
    kafka_conf,
    written,
):
    topic, df = written
    aggs = {"n": ("*", "count"), "sv": ("v", "sum"), "hx": ("x", "max"), "av": ("v", "mean")}
    got = aggregate_shuffle(jspark, topic, kafka=kafka_conf, aggregations=aggs, engine="jvm")
    assert pushed(got), plan(got)
    want = df.groupBy("k").agg(
        F.count("*").alias("n"),
        F.sum("v").alias("sv"),
        F.max("x").alias("hx"),
        F.avg("v").alias("av"),
    )
    assert rows(got) == rows(want)


@pytest.mark.parametrize("ansi", [True, False])
def test_an_integer_sum_that_overflows_fails_or_wraps_as_spark_does(
    jspark,  # noqa: F811
    kafka_conf,
    unique,
    ansi,
):
    topic = unique("jvm-agg-overflow")
    df = jspark.range(40).selectExpr(
        "concat('k', cast(id % 2 as string)) as k",
        "9223372036854775807 - id as v",
        "timestamp_seconds(1700000000) as ts",
    )
    write_shuffle(df, spec_for(topic), kafka=kafka_conf)
    before = jspark.conf.get("spark.sql.ansi.enabled")
    jspark.conf.set("spark.sql.ansi.enabled", str(ansi).lower())
    try:
        got = (
            read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm")
            .groupBy("k")
            .agg(F.sum("v").alias("sv"))
        )
        assert pushed(got), plan(got)
        if ansi:
            with pytest.raises(Exception, match="overflow") as caught:
                got.collect()
            with pytest.raises(Exception, match="overflow"):
                df.groupBy("k").agg(F.sum("v").alias("sv")).collect()
            # Raised by the read's own sum (Spark's aggregate would say so without the read).
            assert "long overflow in" in str(caught.value), caught.value
            assert "of a read of a shuffle" in str(caught.value), caught.value
        else:
            assert rows(got) == rows(df.groupBy("k").agg(F.sum("v").alias("sv")))
    finally:
        jspark.conf.set("spark.sql.ansi.enabled", before)


def test_fewer_splits_than_partitions_still_run_in_the_read(
    jspark,  # noqa: F811
    kafka_conf,
    written,
):
    topic, df = written
    read = read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm", parallelism=2)
    got = read.groupBy("k").agg(F.count("*").alias("n"), F.max("x").alias("hx"))
    assert pushed(got), plan(got)
    assert rows(got) == rows(df.groupBy("k").agg(F.count("*").alias("n"), F.max("x").alias("hx")))


def test_aggregate_shuffle_stays_in_the_python_reader_by_default(
    jspark,  # noqa: F811
    kafka_conf,
    written,
):
    # On a session with the JVM path too: Arrow's aggregation is at full speed from the
    # first read, where the JVM's is compiled as it runs.
    topic, df = written
    aggs = {"n": ("*", "count"), "sv": ("v", "sum"), "lx": ("x", "min")}
    want = rows(
        df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("sv"), F.min("x").alias("lx"))
    )
    for kw in ({}, {"engine": "python"}):
        got = aggregate_shuffle(jspark, topic, kafka=kafka_conf, aggregations=aggs, **kw)
        assert "aggregated=" not in plan(got) and "BatchScan" not in plan(got), plan(got)
        assert rows(got) == want
