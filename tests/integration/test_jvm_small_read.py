"""Small reads on the JVM path: a read of at most ``small_read_rows`` rows (10,000 by default)
is one split instead of one per Kafka partition, and Spark still sees it as keyed.

For every key type the JVM read supports, one 1,000-row window of an 8-partition shuffle is
read as one split (``splits=1 small keyed`` in the scan), and ``groupBy(key).agg``,
``Window.partitionBy(key)`` and a join by the key with another small read give what Spark's
own operators give over the same rows, with no Exchange in the plan (a floating-point key's
window and join aside: Spark normalizes such keys before it partitions by them, on either
kind of read). Then: the threshold (the read option, the session's setting, an asked
parallelism), SQL over the catalog table, and what a join of a small read with a larger one
or with a table plans.
"""

from __future__ import annotations

import uuid

import pytest
from pyspark.sql import Window
from pyspark.sql import functions as F

from orchestration.shuffle import (
    ShuffleSpec,
    plan_shuffle_read,
    read_shuffle,
    write_shuffle,
)
from orchestration.shuffle.spark.session import explain_text
from orchestration.shuffle.spark.sources import register_data_sources
from tests.conftest import jvm_read_off, jvm_read_on

pytestmark = pytest.mark.integration

SETTING = "spark.sql.catalog.shuffle.small_read_rows"
BROADCAST = "spark.sql.autoBroadcastJoinThreshold"

# Every type a single key column of a JVM read takes, as a Spark SQL expression of `id`.
KEY_TYPES = {
    "boolean": "id % 2 = 0",
    "tinyint": "cast(id % 37 - 18 as tinyint)",
    "smallint": "cast((id % 37) * 901 - 16000 as smallint)",
    "int": "cast((id % 37) * 58000000 - 1073741824 as int)",
    "bigint": "(id % 37) * 249000000000000000 - 4611686018427387904",
    "float": "cast((id % 37) / 4 - 3 as float)",
    "double": "(id % 37) / 3 - 5",
    "decimal": "cast(id % 37 as decimal(12, 3)) / 8",
    "date": "date_add(date'1970-01-01', cast((id % 37) * 997 - 18000 as int))",
    "timestamp": "timestamp_seconds(1700000000 + (id % 37) * 3601)",
    "timestamp_ntz": "cast(timestamp_seconds(1700000000 + (id % 37) * 3601) as timestamp_ntz)",
    "string": "repeat(concat('k', cast(id % 37 as string), 'é'), cast(id % 37 % 4 as int))",
    "binary": "unhex(hex(id % 37 * 7919))",
    "array": "array(id % 37, id % 5)",
    "struct": "named_struct('a', cast(id % 37 as int), 'b', cast(id % 3 as string))",
}
FLOATING = {"float", "double"}


def rows(spark, start: int, stop: int, key: str):
    return spark.range(start, stop, numPartitions=2).selectExpr(
        f"{key} as k", "id", "id * 7 % 101 as v", "cast(id as double) / 3 as x"
    )


def exchanges(df) -> list[str]:
    return [line for line in explain_text(df).splitlines() if "Exchange" in line]


def scans(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def same(got, want) -> bool:
    return sorted(map(tuple, got.collect()), key=repr) == sorted(
        map(tuple, want.collect()), key=repr
    )


@pytest.fixture(scope="module")
def jspark(spark, kafka_conf):
    """The tests' session with the JVM read path (its jars added, the catalog set)."""
    keys = jvm_read_on(spark, kafka_conf)
    yield spark
    jvm_read_off(spark, keys)


@pytest.fixture(autouse=True)
def no_broadcast(jspark):
    """Joins of small reads would be broadcast (the scan reports their size): with
    broadcasting off, a join's plan shows how its sides are partitioned."""
    before = jspark.conf.get(BROADCAST)
    jspark.conf.set(BROADCAST, "-1")
    yield
    jspark.conf.set(BROADCAST, before)
    jspark.conf.unset(SETTING)


@pytest.fixture(scope="module")
def written(jspark, kafka_conf):
    """Per key type, a shuffle of 8 partitions with window w0 (1,000 rows) and w1 (100)."""
    out = {}
    for name, key in KEY_TYPES.items():
        topic = f"jvm-small-{name}-{uuid.uuid4().hex[:10]}"
        spec = ShuffleSpec(topic=topic, key=("k",), num_partitions=8, max_parallelism=64)
        write_shuffle(rows(jspark, 0, 1000, key), spec, kafka=kafka_conf, window="w0")
        write_shuffle(rows(jspark, 1000, 1100, key), spec, kafka=kafka_conf, window="w1")
        out[name] = topic
    return out


@pytest.mark.parametrize("name", list(KEY_TYPES))
def test_a_small_window_is_one_keyed_split_with_spark_s_results(jspark, kafka_conf, written, name):
    topic, key = written[name], KEY_TYPES[name]
    w0, w1 = rows(jspark, 0, 1000, key), rows(jspark, 1000, 1100, key)
    read = read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm", windows=["w0"])
    other = read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm", windows=["w1"])
    assert "splits=1 small keyed" in scans(read), scans(read)
    assert read.rdd.getNumPartitions() == 1
    assert same(read, w0)

    def pushed(d):  # aggregates of columns: the read runs them itself
        return d.groupBy("k").agg(F.count("*").alias("n"), F.sum("v"), F.min("x"), F.max("x"))

    def grouped(d):  # of expressions: Spark aggregates over the keyed read
        return d.groupBy("k").agg(
            F.sum(F.col("v") * 2).alias("s"), F.array_sort(F.collect_set("v")).alias("vs")
        )

    def window(d):
        by_key = Window.partitionBy("k").orderBy("id")
        return d.select("k", "id", F.row_number().over(by_key).alias("rn"), F.lag("v").over(by_key))

    def join(d, e):
        return d.join(e, "k").select("k", d.id, e.id.alias("other"))

    cases = {
        "groupBy.agg": (pushed(read), pushed(w0)),
        "groupBy over the read": (grouped(read), grouped(w0)),
        "window": (window(read), window(w0)),
        "join": (join(read, other), join(w0, w1)),
    }
    for case, (ours, spark_s) in cases.items():
        assert same(ours, spark_s), (name, case)
        normalized = name in FLOATING and case in ("window", "join")
        # A floating-point key is normalized (-0.0, NaNs) before Spark partitions a window or
        # a join by it, on a read of one split per partition too.
        assert bool(exchanges(ours)) == normalized, (name, case, explain_text(ours))


def test_the_threshold_the_option_and_the_session_setting(jspark, kafka_conf, written):
    topic = written["string"]
    key = KEY_TYPES["string"]

    def splits(**selection) -> int:
        read = read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm", **selection)
        grouped = read.groupBy("k").agg(F.sum(F.col("v") * 2))
        assert not exchanges(grouped), explain_text(grouped)
        return read.rdd.getNumPartitions()

    # 1,100 rows in both windows: small under the default 10,000.
    assert splits() == 1
    jspark.conf.set(SETTING, "1000")
    assert splits(windows=["w0"]) == 1  # 1,000 rows: at most the threshold
    assert splits() == 8  # 1,100 rows: one split per Kafka partition, keyed
    jspark.conf.set(SETTING, "0")
    assert splits(windows=["w0"]) == 8
    jspark.conf.unset(SETTING)
    # A parallelism asked for is kept.
    assert splits(windows=["w0"], parallelism=None) == 8
    assert splits(windows=["w0"], parallelism=8) == 8

    # The source's option, over the session's setting.
    def source(**options):
        reader = jspark.read.format("kafka-shuffle-jvm").option("topic", topic)
        return reader.options(**options).load()

    jspark.conf.set(SETTING, "0")
    assert source().rdd.getNumPartitions() == 8
    assert source(small_read_rows="2000").rdd.getNumPartitions() == 1
    assert same(source(small_read_rows="2000"), rows(jspark, 0, 1100, key))
    jspark.conf.unset(SETTING)
    assert source(small_read_rows="0").rdd.getNumPartitions() == 8
    with pytest.raises(Exception, match="option 'small_read_rows' must be an integer >= 0"):
        source(small_read_rows="-1").collect()
    jspark.conf.set(SETTING, "few")
    with pytest.raises(Exception, match=f"setting '{SETTING}' must be an integer >= 0, got 'few'"):
        source().collect()
    jspark.conf.unset(SETTING)
    # The Python source takes no such option, and says whose it is.
    register_data_sources(jspark)
    with pytest.raises(Exception, match="option 'small_read_rows' is not supported"):
        jspark.read.format("kafka-shuffle").option("topic", topic).option(
            "kafka.bootstrap.servers", kafka_conf["bootstrap.servers"]
        ).option("small_read_rows", "0").load().collect()


def test_sql_over_the_catalog_table(jspark, kafka_conf, written):
    topic = written["bigint"]
    plain = rows(jspark, 0, 1100, KEY_TYPES["bigint"])
    plain.createOrReplaceTempView("small_read_rows_of_bigint")
    query = "SELECT k, count(*) AS n, sum(v * 2) AS s, max(x) AS mx FROM {} GROUP BY k"
    got = jspark.sql(query.format(f"shuffle.`{topic}`"))
    assert "splits=1 small keyed" in scans(got) and not exchanges(got), explain_text(got)
    assert same(got, jspark.sql(query.format("small_read_rows_of_bigint")))


def test_joins_with_other_reads_and_tables(jspark, kafka_conf, written, unique, tmp_path):
    """What a join by the key of a small read plans: no Exchange with another small read of a
    shuffle with the same max_parallelism, whatever its partition count; with a read of one
    split per partition, or with a table, Spark partitions both sides (broadcasting off) or
    broadcasts the smaller (on, the default): the two sides' partitionings differ."""
    topic = written["string"]
    key = KEY_TYPES["string"]
    small = read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm", windows=["w0"])
    w0 = rows(jspark, 0, 1000, key)
    four = unique("jvm-small-four")
    spec = ShuffleSpec(topic=four, key=("k",), num_partitions=4, max_parallelism=64)
    dim = rows(jspark, 5000, 5300, key)
    write_shuffle(dim, spec, kafka=kafka_conf)
    other_small = read_shuffle(jspark, four, kafka=kafka_conf, engine="jvm")
    assert "splits=1 small keyed" in scans(other_small)
    joined = small.join(other_small, "k")
    assert not exchanges(joined), explain_text(joined)
    assert same(joined, w0.join(dim, "k"))

    per_partition = read_shuffle(jspark, four, kafka=kafka_conf, engine="jvm", parallelism=None)
    assert "splits=4 keyed" in scans(per_partition)
    path = str(tmp_path / "dim.parquet")
    dim.write.parquet(path)
    table = jspark.read.parquet(path)
    for other in (per_partition, table):
        joined = small.join(other, "k")
        assert len(exchanges(joined)) == 2, explain_text(joined)
        assert same(joined, w0.join(dim, "k"))
    jspark.conf.set(BROADCAST, str(10 << 20))
    for other in (per_partition, table):
        joined = small.join(other, "k")
        shown = exchanges(joined)
        assert len(shown) == 1 and "BroadcastExchange" in shown[0], explain_text(joined)
        assert same(joined, w0.join(dim, "k"))


def test_a_planned_read_is_read_as_one_split(jspark, kafka_conf, written):
    """``plan_shuffle_read(...).dataframe()`` hands the JVM one split per Kafka partition;
    the scan reads the small window as one, with the plan's commits and rows."""
    topic = written["int"]
    read = plan_shuffle_read(jspark, topic, kafka=kafka_conf, windows=["w0"])
    assert read.rows == 1000 and read.windows == ["w0"]
    df = read.dataframe()
    assert "splits=1 small keyed" in scans(df)
    assert same(df, rows(jspark, 0, 1000, KEY_TYPES["int"]))
