"""Reading without Spark (``read_table``, ``read_batches``, ``iter_keys``) on the real broker,
against the Spark Python source's read of the same shuffle, written by Spark: the same rows,
columns, types and errors, for windows, runs, superseded and expired windows, event-time
ranges, key groups, columns and a corrupted frame; and no pyspark loaded."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from confluent_kafka import Producer
from pyspark.sql import functions as F

from orchestration.shuffle import (
    KafkaClient,
    ShuffleFormatError,
    ShuffleOptionError,
    ShuffleSpec,
    ShuffleWindowNotFoundError,
    WriteResult,
    expire_shuffle,
    iter_keys,
    key_group_range,
    read_batches,
    read_shuffle,
    read_table,
    shuffle_log,
    write_shuffle,
)
from orchestration.shuffle.kafka.commitlog import write_commit
from orchestration.shuffle.kafka.reader import RowReader

pytestmark = pytest.mark.integration

DAY = dt.datetime(2013, 1, 1, tzinfo=dt.UTC)
PARTITIONS = 4
GROUPS = 32


def rows_df(spark, n, day=DAY, offset=0):
    """n rows over 53 string keys, with the column types a consumer meets: an instant, a
    local time (timestamp_ntz), a date, a decimal, nulls."""
    start = int(day.timestamp())
    return spark.range(offset, offset + n).selectExpr(
        "concat('k', cast(id % 53 as string)) as k",
        "id",
        f"timestamp_seconds({start} + (id * 7919) % 86400) as ts",
        f"cast(timestamp_seconds({start} + id) as timestamp_ntz) as local",
        "cast(id as double) / 3 as x",
        "case when id % 5 = 0 then null else cast(id % 11 as int) end as maybe",
        "date_add(date'2013-01-01', cast(id % 3 as int)) as d",
        "cast(id as decimal(12, 2)) / 7 as amount",
    )


@dataclass
class Written:
    topic: str
    first: WriteResult  # window d1, superseded by `second`
    second: WriteResult
    d2: WriteResult


@pytest.fixture(scope="module")
def written(spark, kafka_conf) -> Written:
    """One shuffle: window d1 written twice (the first run superseded), window d2 once."""
    import uuid

    topic = f"tread-{uuid.uuid4().hex[:10]}"
    spec = ShuffleSpec(
        topic=topic, key=("k",), num_partitions=PARTITIONS, max_parallelism=GROUPS,
        event_time="ts",
    )  # fmt: skip
    first = write_shuffle(rows_df(spark, 1500), spec, kafka=kafka_conf, window="d1")
    d2 = write_shuffle(
        rows_df(spark, 700, day=DAY + dt.timedelta(days=1), offset=20_000),
        spec, kafka=kafka_conf, window="d2",
    )  # fmt: skip
    second = write_shuffle(rows_df(spark, 900, offset=50_000), spec, kafka=kafka_conf, window="d1")
    return Written(topic, first, second, d2)


def by_id(table: pa.Table) -> pa.Table:
    return table.sort_by([("id", "ascending")])


def spark_arrow(spark, topic, kafka_conf, columns=None, **selection) -> pa.Table:
    """What the Spark Python source returns for the read, as Arrow."""
    df = read_shuffle(spark, topic, kafka=kafka_conf, engine="python", **selection)
    return (df.select(*columns) if columns else df).toArrow()


def assert_same(ours: pa.Table, theirs: pa.Table) -> None:
    assert ours.schema.equals(theirs.schema, check_metadata=False), (
        f"ours:\n{ours.schema}\nSpark's:\n{theirs.schema}"
    )
    assert ours.num_rows == theirs.num_rows
    assert by_id(ours).equals(by_id(theirs).cast(ours.schema))


def run_of(w: Written, name: str) -> list[str]:
    return [getattr(w, name).run_id]


SELECTIONS: dict[str, Any] = {
    "everything": {},
    "latest-d1": {"windows": ["d1"]},
    "both-windows": {"windows": ["d2", "d1"]},
    "superseded-run": {"runs": "first"},
    "event-time-range": {
        "event_time_range": (DAY + dt.timedelta(hours=12), DAY + dt.timedelta(days=1, hours=3))
    },
    "with-metadata": {"with_metadata": True, "windows": ["d2"]},
}


@pytest.mark.parametrize("selection", SELECTIONS.values(), ids=SELECTIONS)
def test_read_table_is_the_spark_read(spark, kafka_conf, written, selection):
    selection = dict(selection)
    if "runs" in selection:
        selection["runs"] = run_of(written, selection["runs"])
    ours = read_table(written.topic, kafka=kafka_conf, **selection)
    assert ours.num_rows > 0
    assert_same(ours, spark_arrow(spark, written.topic, kafka_conf, **selection))


def test_superseded_window_reads_its_latest_run(kafka_conf, written):
    d1 = read_table(written.topic, kafka=kafka_conf, windows=["d1"], columns=["id"])
    assert sorted(d1.column("id").to_pylist()) == list(range(50_000, 50_900))
    old = read_table(written.topic, kafka=kafka_conf, runs=[written.first.run_id])
    assert old.num_rows == 1500


def test_columns_in_the_order_asked_are_the_spark_select(spark, kafka_conf, written):
    columns = ["amount", "id", "k", "_offset"]
    ours = read_table(
        written.topic, kafka=kafka_conf, columns=columns, with_metadata=True, windows=["d1"]
    )
    assert ours.schema.names == columns
    theirs = spark_arrow(
        spark, written.topic, kafka_conf, columns=columns, with_metadata=True, windows=["d1"]
    )
    assert_same(ours, theirs)
    # An event-time range filters on a column not asked for.
    noon = DAY + dt.timedelta(hours=12)
    ours = read_table(
        written.topic, kafka=kafka_conf, columns=["id"], event_time_range=(noon, None)
    )
    assert ours.schema.names == ["id"]
    theirs = spark_arrow(
        spark, written.topic, kafka_conf, columns=["id"], event_time_range=(noon, None)
    )
    assert_same(ours, theirs)


@pytest.mark.parametrize("groups", [(0, GROUPS), (3, 11), (8, 16), (31, 32), (5, 5)])
def test_key_groups_are_exactly_those_asked_from_their_partitions(
    spark, kafka_conf, written, groups, monkeypatch
):
    fetched: list[int] = []
    read_partition = RowReader.read_partition

    def recorded(self, c, pr):
        fetched.append(pr.partition)
        return read_partition(self, c, pr)

    monkeypatch.setattr(RowReader, "read_partition", recorded)
    start, end = groups
    ours = read_table(written.topic, kafka=kafka_conf, key_groups=groups, with_metadata=True)
    everything = read_shuffle(spark, written.topic, kafka=kafka_conf, with_metadata=True)
    theirs = everything.filter((F.col("_key_group") >= start) & (F.col("_key_group") < end))
    assert_same(ours, theirs.toArrow())
    holding = {
        p
        for p in range(PARTITIONS)
        if set(key_group_range(p, GROUPS, PARTITIONS)) & set(range(start, end))
    }
    assert sorted(fetched) == sorted(holding)
    assert set(ours.column("_partition").to_pylist()) <= holding


def test_read_batches_hold_one_partition_each_and_add_up_to_the_table(kafka_conf, written):
    table = read_table(written.topic, kafka=kafka_conf, with_metadata=True)
    batches = list(read_batches(written.topic, kafka=kafka_conf, with_metadata=True))
    assert len(batches) > PARTITIONS  # frames of several runs in each partition
    assert all(b.schema == table.schema for b in batches)
    assert all(len(pc.unique(b.column("_partition"))) == 1 for b in batches)
    assert by_id(pa.Table.from_batches(batches)).equals(by_id(table))
    # Taken in part, then closed: the fetching threads stop.
    it = read_batches(written.topic, kafka=kafka_conf, threads=2)
    next(it)
    it.close()


def test_any_number_of_threads_gives_the_same_table(kafka_conf, written):
    one = read_table(written.topic, kafka=kafka_conf, threads=1)
    assert read_table(written.topic, kafka=kafka_conf, threads=8).equals(one)
    assert read_table(written.topic, kafka=kafka_conf).equals(one)


def test_iter_keys_gives_every_key_once_with_all_of_its_rows(spark, kafka_conf, written):
    keys = list(
        iter_keys(written.topic, kafka=kafka_conf, order_by=["ts", "id"], columns=["id", "ts"],
                  pass_rows=100)
    )  # fmt: skip
    names = [k for (k,), _ in keys]
    assert len(names) == len(set(names)) == 53
    read = read_shuffle(spark, written.topic, kafka=kafka_conf)
    want = {
        r.k: (r.n, r.total)
        for r in read.groupBy("k").agg(F.count("*").alias("n"), F.sum("id").alias("total"))
        .collect()
    }  # fmt: skip
    got = {}
    for (k,), rows in keys:
        assert rows.schema.names == ["id", "ts"]
        order = rows.sort_by([("ts", "ascending"), ("id", "ascending")])
        assert rows.equals(order), f"key {k}: rows not in order_by's order"
        got[k] = (rows.num_rows, pc.sum(rows.column("id")).as_py())
    assert got == want


def test_an_expired_window_is_refused_as_the_spark_read_refuses_it(spark, kafka_conf, unique):
    topic = unique("tread-exp")
    spec = ShuffleSpec(topic=topic, key="k", num_partitions=2, max_parallelism=8, event_time="ts")
    old = write_shuffle(rows_df(spark, 100), spec, kafka=kafka_conf, window="d1")
    write_shuffle(rows_df(spark, 100, offset=500), spec, kafka=kafka_conf, window="d2")
    done = expire_shuffle(topic, kafka=kafka_conf, keep_last=1, min_age=dt.timedelta(0))
    assert done.windows_expired == ["d1"]
    for selection in ({"windows": ["d1"]}, {"runs": [old.run_id]}):
        with pytest.raises(ShuffleWindowNotFoundError) as spark_error:
            read_shuffle(spark, topic, kafka=kafka_conf, engine="python", **selection)
        with pytest.raises(ShuffleWindowNotFoundError) as ours:
            read_table(topic, kafka=kafka_conf, **selection)
        assert str(ours.value) == str(spark_error.value)
        assert "expired" in str(ours.value) or "removed by retention" in str(ours.value)
    with pytest.raises(ShuffleWindowNotFoundError, match="d1"):
        read_batches(topic, kafka=kafka_conf, windows=["d1", "d2"])
    assert read_table(topic, kafka=kafka_conf).num_rows == 100


def test_a_corrupted_frame_is_refused_as_the_spark_read_refuses_it(spark, kafka_conf, unique):
    """Bytes that are no frame inside a run's committed offsets: both readers refuse them
    with the same error, naming the topic, partition and offset."""
    topic = unique("tread-bad")
    spec = ShuffleSpec(topic=topic, key="k", num_partitions=2, max_parallelism=8)
    res = write_shuffle(rows_df(spark, 200), spec, kafka=kafka_conf)
    p = Producer(kafka_conf)
    p.produce(topic, value=b"not a frame at all, just bytes....................", partition=0)
    assert p.flush(10) == 0
    (_, high) = KafkaClient(kafka_conf).end_offsets(topic, 2)[0]
    commit = res.commit
    stretched = dict(commit.partitions)
    r = stretched[0]
    stretched[0] = type(r)(r.first, high - 1, r.rows, r.frames)
    write_commit(
        KafkaClient(kafka_conf), topic, type(commit)(**{**commit.__dict__, "partitions": stretched})
    )
    with pytest.raises(ShuffleFormatError, match=f"partition 0 offset {high - 1}") as ours:
        read_table(topic, kafka=kafka_conf)
    with pytest.raises(Exception) as theirs:  # noqa: PT011 - Spark wraps it; checked below
        read_shuffle(spark, topic, kafka=kafka_conf, engine="python").collect()
    assert f"ShuffleFormatError: {ours.value}" in str(theirs.value)
    # Partition 1 alone still reads.
    assert read_table(topic, kafka=kafka_conf, key_groups=(4, 8)).num_rows > 0


def test_bad_arguments_are_refused_by_name(kafka_conf, written):
    for kwargs, match in (
        ({"columns": ["nope"]}, r"has no column\(s\) \['nope'\]"),
        (
            {"key_groups": (3, 99)},
            r"key_groups must be \(start, end\) with 0 <= start <= end <= 32",
        ),
        ({"threads": 0}, r"threads must be a positive integer or None, got 0"),
    ):
        with pytest.raises(ShuffleOptionError, match=match):
            read_table(written.topic, kafka=kafka_conf, **kwargs)
    with pytest.raises(ShuffleOptionError, match=r"order_by must name columns of"):
        iter_keys(written.topic, kafka=kafka_conf, order_by=["nope"])
    with pytest.raises(TypeError, match="parallelism"):
        read_table(written.topic, kafka=kafka_conf, parallelism=4)  # type: ignore[call-arg]


def test_an_empty_run_reads_as_an_empty_table_of_the_schema(spark, kafka_conf, unique):
    topic = unique("tread-empty")
    spec = ShuffleSpec(topic=topic, key="k", num_partitions=2, max_parallelism=8)
    write_shuffle(rows_df(spark, 10).limit(0), spec, kafka=kafka_conf, window="w")
    ours = read_table(topic, kafka=kafka_conf, windows=["w"])
    assert ours.num_rows == 0
    assert ours.schema.equals(
        spark_arrow(spark, topic, kafka_conf, windows=["w"]).schema, check_metadata=False
    )
    assert list(iter_keys(topic, kafka=kafka_conf)) == []


def test_reading_without_spark_loads_no_pyspark(kafka_conf, written):
    """A consumer of a window pays no Spark: not a JVM, not even pyspark's import."""
    code = textwrap.dedent(
        f"""
        import sys
        from orchestration.shuffle import iter_keys, read_batches, read_table
        conf = {kafka_conf!r}
        table = read_table({written.topic!r}, kafka=conf, windows=["d1"])
        rows = sum(b.num_rows for b in read_batches({written.topic!r}, kafka=conf))
        keys = sum(1 for _ in iter_keys({written.topic!r}, kafka=conf))
        loaded = sorted(m for m in sys.modules if m == "pyspark" or m.startswith("pyspark."))
        print(table.num_rows, rows, keys, loaded)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    log = shuffle_log(written.topic, kafka=kafka_conf)
    total = sum(c.rows for c in log.visible())
    assert out.stdout.split() == ["900", str(total), "53", "[]"], out.stdout + out.stderr
