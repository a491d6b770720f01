"""Sorted runs (``ShuffleSpec(sort_by=...)``) on the real broker and a real SparkSession with
the JVM read path: the order the read reports to Spark is the order Spark's own sort gives,
over keys chosen to differ between orderings (NaN, -0.0, infinities, strings whose UTF-16
and UTF-8 orders differ, nulls in the further sort columns), for one run (read as it is) and
several (merged); Spark plans no Sort over such a read, and rows, sorts, windows and joins
equal the same queries over the same rows from a plain DataFrame."""

import math
import random
import uuid
from dataclasses import replace

import pytest
from pyspark.sql import Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from orchestration.shuffle import (
    KafkaClient,
    ShuffleOptionError,
    ShuffleSchemaError,
    ShuffleSpec,
    read_shuffle,
    shuffle_log,
    write_shuffle,
)
from orchestration.shuffle.core.commitlog import TaskResult
from orchestration.shuffle.kafka.commitlog import write_commit
from orchestration.shuffle.spark.session import explain_text
from orchestration.shuffle.spark.writer import ProducerTask, WriteOptions, commit_run
from tests.integration import test_jvm_read

pytestmark = pytest.mark.integration

# The session built as a user builds one for the JVM path (its fixture, shared).
jspark = test_jvm_read.jspark

N, M = 4, 16

# Strings whose byte order (Spark's) is not their UTF-16 order (Java's String.compareTo):
# U+FFFD and U+E000 sort below U+1F600 as UTF-8, above it as UTF-16.
WORDS = ["", "a", "a\x00", "A", "b", "e", "é", "E", "\ufffd", "\ue000", "\U0001f600", "zz", "ß"]
DOUBLES = [math.nan, -0.0, 0.0, math.inf, -math.inf, 1e308, -1e-308, 5e-324, 1.5, -2.25, 3.0]

SCHEMA = T.StructType(
    [
        T.StructField("s", T.StringType()),
        T.StructField("d", T.DoubleType()),
        T.StructField("x", T.DoubleType()),
        T.StructField("id", T.LongType()),
    ]
)


def generated(seed: int, n: int = 300, offset: int = 0) -> list[tuple]:
    """Rows of keys s (string) and d (double), never null; x a double with nulls and NaN; id
    unique, so (key, x, id) orders the rows completely."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        s = rnd.choice(WORDS) + (rnd.choice(WORDS) if rnd.random() < 0.3 else "")
        d = rnd.choice(DOUBLES) if rnd.random() < 0.7 else rnd.uniform(-5, 5)
        x = rnd.choice([None, None, math.nan, -0.0, 0.0, 1.0, -1.0, rnd.uniform(-9, 9)])
        out.append((s, d, x, offset + i))
    return out


def exact(v):
    """A value compared exactly: NaN equal to NaN, -0.0 apart from 0.0."""
    if isinstance(v, float):
        return "nan" if math.isnan(v) else repr(v)
    if isinstance(v, tuple):
        return tuple(exact(x) for x in v)
    return v


def rows_of(df) -> list[tuple]:
    return [exact(tuple(r)) for r in df.collect()]


def plan(df) -> str:
    return explain_text(df)


def sorts(df) -> list[str]:
    """The Sort nodes of the executed plan."""
    nodes = (ln.strip().lstrip("+-*:( 0123456789)") for ln in plan(df).splitlines())
    return [n for n in nodes if n.startswith("Sort ")]


def description(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def spec(topic: str, key: tuple[str, ...], sort_by: tuple[str, ...]) -> ShuffleSpec:
    return ShuffleSpec(topic, key, N, M, sort_by=sort_by)


def partitions(df) -> list[list[tuple]]:
    return [[exact(tuple(r)) for r in part] for part in df.rdd.glom().collect()]


def by_partition_of_plain(plain, key: tuple[str, ...], order: list[str]) -> list[list[tuple]]:
    """The plain rows of each Kafka partition (computed in Spark as the writer does), sorted by
    Spark's own sort."""
    kg = F.pmod(F.hash(*[F.col(c) for c in key]), F.lit(M))
    part = F.expr(f"cast((kg * {N}) div {M} as int)")
    with_p = plain.withColumn("kg", kg).withColumn("p", part)
    out: list[list[tuple]] = [[] for _ in range(N)]
    for r in with_p.orderBy("p", *order).collect():
        out[r["p"]].append(exact(tuple(r)[: len(plain.columns)]))
    return out


@pytest.mark.parametrize(
    ("seed", "key", "runs"),
    [
        (1, ("s",), 1),
        (2, ("d",), 2),
        (3, ("s", "d"), 3),
    ],
)
def test_read_order_is_sparks_sort(jspark, kafka_conf, unique, seed, key, runs):
    """Per partition, the JVM read's rows under sortWithinPartitions (which Spark leaves to
    the read: no Sort node) equal Spark's own sort of the same rows, exactly (-0.0 and NaN
    included); a read of several runs is merged."""
    topic = unique("sorted-prop")
    order = [*key, "x", "id"]
    rows = generated(seed, 300 * runs)
    size = len(rows) // runs
    for r in range(runs):
        part = jspark.createDataFrame(rows[r * size : (r + 1) * size], SCHEMA)
        write_shuffle(part, spec(topic, key, tuple(order)), kafka=kafka_conf, window=f"w{r}")
    # One split per Kafka partition (parallelism=None: the read is small, see below).
    jvm = read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm", parallelism=None)
    assert "ordered=" in description(jvm)
    assert ("merged" in description(jvm)) == (runs > 1)
    assert jvm.rdd.getNumPartitions() == N
    sorted_read = jvm.sortWithinPartitions(*order)
    assert sorts(sorted_read) == [], plan(sorted_read)
    plain = jspark.createDataFrame(rows, SCHEMA)
    assert partitions(sorted_read) == by_partition_of_plain(plain, key, order)
    # The read as it is, without asking for an order, is the same sequence.
    assert partitions(jvm) == partitions(sorted_read)
    assert_small_read_is_one_sorted_sequence(jspark, kafka_conf, topic, plain, order)
    if runs > 1:
        # The Python path reads the same rows (in no order it claims).
        py = read_shuffle(jspark, topic, kafka=kafka_conf, engine="python")
        assert sorted(rows_of(py), key=repr) == sorted(rows_of(plain), key=repr)


@pytest.mark.parametrize(("seed", "key", "runs"), [(5, ("s",), 1), (6, ("d",), 2)])
def test_a_columnar_sorted_write_reads_as_sparks_sort(
    jspark, kafka_conf, unique, tmp_path, seed, key, runs
):
    """The same over Parquet files, written through the columnar path (one task per range of
    partitions, reading every file, sorting in numpy): per partition the read equals Spark's
    own sort, and so does a merge with a run written through Spark's sort."""
    topic = unique("sorted-col")
    order = [*key, "x", "id"]
    rows = generated(seed, 400 * runs)
    size = len(rows) // runs
    for r in range(runs):
        path = str(tmp_path / f"run{r}")
        # Several files and row groups, so each task reads pieces written by others.
        jspark.createDataFrame(rows[r * size : (r + 1) * size], SCHEMA).repartition(3).write.option(
            "parquet.block.size", 4096
        ).parquet(path)
        got = write_shuffle(
            jspark.read.parquet(path),
            spec(topic, key, tuple(order)),
            kafka=kafka_conf,
            window=f"w{r}",
            columnar=True,
        )
        assert got.path == "columnar" and got.rows == size
    if runs > 1:  # one more run, sorted by Spark, merged with the columnar ones
        extra = generated(seed + 50, 100, offset=100_000)
        write_shuffle(
            jspark.createDataFrame(extra, SCHEMA),
            spec(topic, key, tuple(order)),
            kafka=kafka_conf,
            window="spark",
        )
        rows = rows + extra
    jvm = read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm", parallelism=None)
    assert "ordered=" in description(jvm)
    sorted_read = jvm.sortWithinPartitions(*order)
    assert sorts(sorted_read) == [], plan(sorted_read)
    plain = jspark.createDataFrame(rows, SCHEMA)
    assert partitions(sorted_read) == by_partition_of_plain(plain, key, order)
    assert_small_read_is_one_sorted_sequence(jspark, kafka_conf, topic, plain, order)


def assert_small_read_is_one_sorted_sequence(jspark, kafka_conf, topic, plain, order) -> None:
    """A small read (the default's, under ``small_read_rows``) is one split: every partition's
    sorted runs merged into one sequence, Spark's own sort of all the rows."""
    small = read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm")
    assert "splits=1 small keyed ordered=" in description(small), description(small)
    assert "merged" in description(small)
    sorted_read = small.sortWithinPartitions(*order)
    assert sorts(sorted_read) == [], plan(sorted_read)
    assert partitions(sorted_read) == [rows_of(plain.orderBy(*order))]


def test_an_input_too_large_for_the_tasks_is_sorted_by_spark(
    jspark, kafka_conf, unique, tmp_path, monkeypatch
):
    """Over the bytes a sorted columnar task may hold in all its partitions together, the
    write takes Spark's sort (which spills), and columnar=True says how much was too much;
    under it, each of the tasks (one per core here) writes its own partitions."""
    import orchestration.shuffle.write as write_module

    rows = generated(8, 300)
    path = str(tmp_path / "big")
    jspark.createDataFrame(rows, SCHEMA).repartition(2).write.parquet(path)
    topic = unique("sorted-big")
    sorted_spec = spec(topic, ("s",), ("s", "x", "id"))
    monkeypatch.setattr(write_module, "SORTED_TASK_BYTES", 16)
    with pytest.raises(
        ShuffleOptionError, match=r"of input in 4 partition\(s\) would hold over 0.0 MiB in a task"
    ):
        write_shuffle(jspark.read.parquet(path), sorted_spec, kafka=kafka_conf, columnar=True)
    got = write_shuffle(jspark.read.parquet(path), sorted_spec, kafka=kafka_conf, window="a")
    assert got.path == "rows"
    monkeypatch.undo()
    got = write_shuffle(jspark.read.parquet(path), sorted_spec, kafka=kafka_conf, window="b")
    assert got.path == "columnar"
    # Two tasks (the session's two cores); a partition with frames of both would fail the read.
    assert len(got.commit.tasks) == 2
    jvm = read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm", parallelism=None)
    sorted_read = jvm.sortWithinPartitions("s", "x", "id")
    assert sorts(sorted_read) == []
    plain = jspark.createDataFrame(rows + rows, SCHEMA)
    assert partitions(sorted_read) == by_partition_of_plain(plain, ("s",), ["s", "x", "id"])


def test_a_sort_column_numpy_cannot_order_is_sorted_by_spark(jspark, kafka_conf, unique, tmp_path):
    """A sort_by column of a nested type leaves the write to Spark's sort (the row path), and
    columnar=True says why, naming the column."""
    rows = generated(7, 60)
    df = jspark.createDataFrame(rows, SCHEMA).withColumn("arr", F.array("id"))
    path = str(tmp_path / "nested")
    df.write.parquet(path)
    sorted_spec = spec(unique("sorted-nested"), ("s",), ("s", "arr"))
    with pytest.raises(ShuffleOptionError, match="sort_by column 'arr' is of type list"):
        write_shuffle(jspark.read.parquet(path), sorted_spec, kafka=kafka_conf, columnar=True)
    got = write_shuffle(jspark.read.parquet(path), sorted_spec, kafka=kafka_conf)
    assert got.path == "rows" and got.rows == 60
    jvm = read_shuffle(jspark, sorted_spec.topic, kafka=kafka_conf, engine="jvm")
    sorted_read = jvm.sortWithinPartitions("s", "arr")
    assert sorts(sorted_read) == []
    assert sorted(rows_of(jvm.drop("arr")), key=repr) == sorted(rows_of(df.drop("arr")), key=repr)


def windowed(df, key: tuple[str, ...]):
    w = Window.partitionBy(*key).orderBy("x", "id")
    return (
        df.withColumn("prev", F.lag("id").over(w))
        .withColumn("n", F.row_number().over(w))
        .filter(F.col("n") <= 3)
    )


@pytest.mark.parametrize(("seed", "key", "runs"), [(11, ("s",), 2), (12, ("d",), 1)])
def test_windows_and_joins_equal_a_plain_dataframe(jspark, kafka_conf, unique, seed, key, runs):
    """lag and the top 3 rows per key, and a join of two sorted shuffles (no broadcast): the
    same rows as over plain DataFrames. With string keys Spark plans neither an Exchange nor
    a Sort over the reads; a double key is normalized (-0.0 as 0.0) before Spark compares it,
    so Spark sorts the normalized key itself, and the results still agree."""
    left_t, right_t = unique("sorted-l"), unique("sorted-r")
    order = (*key, "x", "id")
    left = generated(seed, 200 * runs)
    right = generated(seed + 100, 200 * runs, offset=10_000)
    for topic, rows in ((left_t, left), (right_t, right)):
        for r in range(runs):
            part = jspark.createDataFrame(rows[r * 200 : (r + 1) * 200], SCHEMA)
            write_shuffle(part, spec(topic, key, order), kafka=kafka_conf, window=f"w{r}")
    a = read_shuffle(jspark, left_t, kafka=kafka_conf, engine="jvm")
    b = read_shuffle(jspark, right_t, kafka=kafka_conf, engine="jvm")
    pa_, pb = jspark.createDataFrame(left, SCHEMA), jspark.createDataFrame(right, SCHEMA)

    got = windowed(a, key)
    assert sorted(rows_of(got), key=repr) == sorted(rows_of(windowed(pa_, key)), key=repr)

    def joined(x, y):
        return x.join(y.withColumnRenamed("x", "y").withColumnRenamed("id", "id2"), list(key))

    old = jspark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    jspark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        j = joined(a, b)
        text = plan(j)
        assert "SortMergeJoin" in text
        assert sorted(rows_of(j), key=repr) == sorted(rows_of(joined(pa_, pb)), key=repr)
    finally:
        jspark.conf.set("spark.sql.autoBroadcastJoinThreshold", old)
    if key == ("s",):
        assert sorts(got) == [] and "Exchange" not in plan(got), plan(got)
        assert sorts(j) == [] and "Exchange" not in text, text


def test_no_order_claimed_unless_every_run_was_written_sorted(jspark, kafka_conf, unique):
    """A run whose commit does not record the sort (as one written before sorting existed)
    makes the read unordered: Spark sorts again. So does a read that is not one split per
    Kafka partition."""
    topic = unique("sorted-old")
    rows = generated(21, 200)
    df = jspark.createDataFrame(rows, SCHEMA)
    write_shuffle(df, spec(topic, ("s",), ("s", "id")), kafka=kafka_conf, window="w0")
    jvm = read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm")
    assert sorts(jvm.sortWithinPartitions("s")) == []
    split = read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm", parallelism=8)
    assert "ordered" not in description(split)
    assert len(sorts(split.sortWithinPartitions("s"))) == 1

    client = KafkaClient.of(kafka_conf)
    (commit,) = shuffle_log(topic, kafka=kafka_conf).commits
    write_commit(client, topic, replace(commit, sort_by=()))
    old = read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm")
    assert "ordered" not in description(old)
    assert len(sorts(old.sortWithinPartitions("s"))) == 1
    assert sorted(rows_of(old), key=repr) == sorted(rows_of(df), key=repr)


def test_sort_by_is_checked(jspark, kafka_conf, unique):
    df = jspark.createDataFrame(generated(31, 10), SCHEMA)
    with pytest.raises(ShuffleSchemaError, match="sort_by column 'nope'"):
        write_shuffle(df, spec(unique("sorted-bad"), ("s",), ("s", "nope")), kafka=kafka_conf)
    with pytest.raises(ShuffleOptionError, match="columnar=True.*does not apply"):
        write_shuffle(
            df, spec(unique("sorted-bad"), ("s",), ("s",)), kafka=kafka_conf, columnar=True
        )
    lcase = df.withColumn("c", F.col("s").cast("string collate UTF8_LCASE"))
    with pytest.raises(ShuffleSchemaError, match="sort_by column 'c' is a string of collation"):
        write_shuffle(lcase, spec(unique("sorted-bad"), ("s",), ("s", "c")), kafka=kafka_conf)


def test_a_sorted_run_written_by_two_tasks_in_a_partition_fails_the_read(
    jspark, kafka_conf, unique
):
    """A commit that claims a sort its frames do not have (here: each task sorted, but two
    tasks wrote to every partition) fails the read, naming both subtasks, rather than
    handing Spark rows out of the order it was told."""
    topic = unique("sorted-two")
    df = jspark.createDataFrame(generated(41, 200), SCHEMA)
    write_shuffle(df, spec(topic, ("s",), ("s", "id")), kafka=kafka_conf, window="w0")
    client = KafkaClient.of(kafka_conf)
    run = str(uuid.uuid4())
    options = WriteOptions(topic=topic, run_id=run, kafka=client, num_partitions=N,
                           max_parallelism=M)  # fmt: skip
    keyed = (
        df.repartition(2)
        .sortWithinPartitions("s", "id")
        .withColumn("_key_group", F.pmod(F.hash("s"), F.lit(M)).cast("int"))
    )
    results = keyed.mapInArrow(ProducerTask(options), ProducerTask.RESULT_SCHEMA).collect()
    tasks = [TaskResult.from_json(r.task_result) for r in results]
    commit_run(client, topic, run, "w1", None, tasks, sort_by=("s", "id"))
    jvm = read_shuffle(jspark, topic, kafka=kafka_conf, engine="jvm", windows=["w1"])
    assert "ordered=" in description(jvm)
    with pytest.raises(Exception, match="committed as sorted, one subtask per partition"):
        jvm.collect()
