"""Per-key work and in-reader aggregation group exactly as Spark's ``groupBy`` does.

A property test over generated rows: keys of every type the writer hashes, drawn from small
pools full of the values Spark treats specially when it groups (``-0.0`` and ``0.0``, NaNs
of several bit patterns, infinities, the ends of each integer range, empty and long strings,
bytes that are not UTF-8), so that every pool value repeats. Each shuffle is written (from
rows, and for floating-point keys also from Parquet through the columnar writer), then:

- ``aggregate_shuffle`` (on both read paths) is compared with ``groupBy(key).agg(...)`` over
  the same rows;
- ``apply_per_key`` (in the reader, and over a filtered read, which sorts and cuts) with
  ``groupBy(key).applyInPandas(...)``;
- Spark's own ``groupBy`` over the JVM read (which has no Exchange) with the same over the
  rows;
- the reads without Spark: ``read_table`` with the Python source's read (rows and types),
  ``iter_keys`` with ``groupBy(key).agg(...)`` (each key once, with all of its rows).

Results are compared as Spark compares keys: -0.0 as 0.0 and every NaN as one.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
from pyspark.util import PythonEvalType

from orchestration.shuffle import (
    ShuffleSpec,
    aggregate_shuffle,
    apply_per_key,
    iter_keys,
    read_shuffle,
    read_table,
    write_shuffle,
)
from tests.conftest import jvm_read_off, jvm_read_on

pytestmark = pytest.mark.integration

ROWS = 600


def _f64(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def _f32(bits: int) -> np.float32:
    return np.frombuffer(struct.pack("<I", bits), dtype=np.float32)[0]


# Pools of key values per Arrow type; Spark's type for each follows from Arrow's.
F64 = [
    0.0,
    -0.0,
    math.nan,
    _f64(0x7FF8000000000001),
    _f64(0xFFF8000000000000),
    math.inf,
    -math.inf,
    1.5,
    -1.5,
    5e-324,
    1.7976931348623157e308,
]
F32 = [
    np.float32(0.0),
    np.float32(-0.0),
    np.float32(math.nan),
    _f32(0x7FC00001),
    _f32(0xFFC00000),
    np.float32(math.inf),
    np.float32(-2.5),
]
POOLS: dict[str, tuple[pa.DataType, list]] = {
    "f64": (pa.float64(), F64),
    "f32": (pa.float32(), F32),
    "b": (pa.bool_(), [True, False]),
    "i8": (pa.int8(), [-128, 0, 127]),
    "i16": (pa.int16(), [-32768, 0, 32767]),
    "i32": (pa.int32(), [-(2**31), -1, 0, 2**31 - 1]),
    "i64": (pa.int64(), [-(2**63), 0, 2**63 - 1]),
    "d": (pa.date32(), [dt.date(1, 1, 1), dt.date(1970, 1, 1), dt.date(9999, 12, 31)]),
    "ts": (
        pa.timestamp("us", tz="UTC"),
        [dt.datetime(1900, 1, 1, tzinfo=dt.UTC), dt.datetime(2024, 2, 29, 23, 59, tzinfo=dt.UTC)],
    ),
    "s": (pa.string(), ["", "a", "é", "x" * 5000, "A"]),
    "bin": (pa.binary(), [b"", b"\xff\xfe", b"\x00", b"\xc3\x28"]),
    "dec": (
        pa.decimal128(10, 2),
        [decimal.Decimal("0.00"), decimal.Decimal("-0.01"), decimal.Decimal("99999999.99")],
    ),
}

# Key sets: each pool's special values are grouped alone or beside a few other columns.
KEYS = [("f64",), ("f32", "b", "i8"), ("s", "bin", "i64", "d"), ("i16", "i32", "dec", "ts", "f64")]


def generated(keys: tuple[str, ...], seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    columns, names = [], []
    for k in keys:
        t, pool = POOLS[k]
        picks = rng.integers(0, len(pool), ROWS)
        if pa.types.is_floating(t):
            dtype = np.float64 if t == pa.float64() else np.float32
            # Built from the values' bits so that NaN payloads survive.
            columns.append(pa.array(np.array(pool, dtype=dtype)[picks], type=t))
        else:
            columns.append(pa.array([pool[i] for i in picks], type=t))
        names.append(k)
    v = rng.integers(-1000, 1000, ROWS)
    x = rng.normal(size=ROWS)
    x[rng.random(ROWS) < 0.05] = math.nan
    start = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)
    ts = [start + dt.timedelta(seconds=int(s)) for s in rng.integers(0, 86_400, ROWS)]
    columns += [pa.array(v, pa.int64()), pa.array(x), pa.array(ts, pa.timestamp("us", tz="UTC"))]
    names += ["v", "x", "event"]
    return pa.table(columns, names=names)


def canonical(value):
    """A value as Spark's grouping compares it, made hashable and comparable."""
    if isinstance(value, float | np.floating):
        if math.isnan(value):
            return ("nan",)
        return ("num", float(value) + 0.0)
    if isinstance(value, bytes | bytearray):
        return ("bytes", bytes(value))
    if isinstance(value, pd.Timestamp):
        return ("ts", value.to_pydatetime().astimezone(dt.UTC))
    if isinstance(value, dt.datetime):
        return ("ts", value.astimezone(dt.UTC) if value.tzinfo else value)
    return ("v", value)


def rows_of(df, columns) -> list[tuple]:
    out = [tuple(canonical(r[c]) for c in columns) for r in df.select(*columns).collect()]
    return sorted(out, key=repr)


@pytest.fixture(scope="module", params=KEYS, ids=["+".join(k) for k in KEYS])
def written(request, spark, kafka_conf, tmp_path_factory):
    """Each key set's rows, written once for the module's three comparisons."""
    keys = request.param
    tmp_path = tmp_path_factory.mktemp("grouping")

    def unique(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:10]}"

    table = generated(keys, seed=len(keys) * 7919)
    # From Arrow, not pandas: pandas would turn every NaN into a null.
    source = spark.createDataFrame(table)
    topic = unique("grp")
    spec = ShuffleSpec(
        topic=topic, key=keys, num_partitions=3, max_parallelism=24, event_time="event"
    )
    res = write_shuffle(source, spec, kafka=kafka_conf, window="w")
    assert res.rows == ROWS
    topics = {"rows": topic}
    if any(pa.types.is_floating(POOLS[k][0]) for k in keys):
        path = tmp_path / "src.parquet"
        pq.write_table(table, path)
        columnar_topic = unique("grp-col")
        res = write_shuffle(
            spark.read.parquet(str(path)),
            ShuffleSpec(
                topic=columnar_topic,
                key=keys,
                num_partitions=3,
                max_parallelism=24,
                event_time="event",
            ),
            kafka=kafka_conf,
            window="w",
        )
        assert res.path == "columnar" and res.rows == ROWS
        topics["columnar"] = columnar_topic
    return keys, source, topics


AGGS = {
    "n": ("*", "count"),
    "total": ("v", "sum"),
    "lo": ("x", "min"),
    "hi": ("x", "max"),
    "avg": ("v", "mean"),
    "xs": ("x", "count"),
}


def test_aggregation_groups_as_group_by(spark, kafka_conf, written):
    keys, source, topics = written
    expected = source.groupBy(*keys).agg(
        F.count("*").alias("n"),
        F.sum("v").alias("total"),
        F.min("x").alias("lo"),
        F.max("x").alias("hi"),
        F.avg("v").alias("avg"),
        F.count("x").alias("xs"),
    )
    columns = [*keys, *AGGS]
    want = rows_of(expected, columns)
    schemas = {}
    for path, topic in topics.items():
        got = aggregate_shuffle(spark, topic, kafka=kafka_conf, aggregations=AGGS)
        assert rows_of(got, columns) == want, f"{path}: aggregate_shuffle differs from groupBy"
        schemas[path] = [(f.name, f.dataType) for f in got.schema]
    # With engine="jvm" the same call is Spark's groupBy over the keyed read: the same rows,
    # the same types. Grouped by keys without floating point (whose zeros and NaNs Spark
    # normalizes first), the read runs the aggregation itself: no Exchange, no aggregate of
    # Spark's. Otherwise Spark aggregates, with no Exchange for a one-column key (Spark takes a
    # source's partitioning only as a function of one column).
    floating = any(pa.types.is_floating(POOLS[k][0]) for k in keys)
    settings = jvm_read_on(spark, kafka_conf)
    try:
        for path, topic in topics.items():
            got = aggregate_shuffle(spark, topic, kafka=kafka_conf, aggregations=AGGS, engine="jvm")
            plan = got._jdf.queryExecution().executedPlan().toString()
            assert "BatchScan" in plan and ("aggregated=" in plan) == (not floating), plan
            assert ("Exchange" in plan) == (len(keys) > 1 and floating), plan
            types = [(f.name, f.dataType) for f in got.schema]
            assert types == schemas[path], f"{path}: the engines' column types differ"
            assert rows_of(got, columns) == want, f"{path}: on the JVM, differs from groupBy"
    finally:
        jvm_read_off(spark, settings)


def test_per_key_work_groups_as_apply_in_pandas(spark, kafka_conf, written):
    keys, source, topics = written
    schema = ", ".join(
        [f"{f.name} {f.dataType.simpleString()}" for f in source.schema if f.name in keys]
        + ["rows long", "total long"]
    )

    def summary(pdf: pd.DataFrame) -> pd.DataFrame:
        head = pdf.iloc[:1][list(keys)].reset_index(drop=True)
        return head.assign(rows=len(pdf), total=int(pdf["v"].sum()))

    expected = source.groupBy(*keys).applyInPandas(summary, schema)
    columns = [*keys, "rows", "total"]
    want = rows_of(expected, columns)
    assert len(want) < ROWS  # the pools repeat: groups hold several rows
    assert_per_key_both_ways(spark, kafka_conf, topics, keys, summary, schema, columns, want)


def assert_per_key_both_ways(spark, kafka_conf, topics, keys, fn, schema, columns, want, **options):
    """``apply_per_key(fn, **options)`` over each shuffle gives ``want``: in the reader, and
    over a filtered read (which Spark sorts, and which is cut at key boundaries instead)."""
    for path, topic in topics.items():
        read = read_shuffle(spark, topic, kafka=kafka_conf, engine="python")
        in_reader = apply_per_key(read, keys, fn, schema, **options)
        assert rows_of(in_reader, columns) == want, f"{path}, {fn.__name__}: in the reader"
        cut = apply_per_key(read.filter(F.col("v") > -10_000), keys, fn, schema, **options)
        assert rows_of(cut, columns) == want, f"{path}, {fn.__name__}: sorted and cut"


def test_per_key_function_forms_as_apply_in_pandas(spark, kafka_conf, written):
    """The key form ``fn(key, pdf)`` and the iterator forms (``Iterator[pd.DataFrame]``
    hints, with and without a key) give what ``applyInPandas`` gives with the same function,
    with batches of 3 rows on both sides, so that a key's rows span several batches."""
    keys, source, topics = written
    schema = ", ".join(
        [f"{f.name} {f.dataType.simpleString()}" for f in source.schema if f.name in keys]
        + ["rows long", "total long", "batches long"]
    )
    columns = [*keys, "rows", "total", "batches"]

    def from_key(key, pdf):
        head = pd.DataFrame([list(key)], columns=list(keys))
        # The key's values as Spark hands them: built back into rows, they must equal the
        # key columns' values (compared below, through the output).
        return head.assign(rows=len(pdf), total=int(pdf["v"].sum()), batches=1)

    def streamed(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        head, rows, total, count = None, 0, 0, 0
        for b in batches:
            head = b.iloc[:1][list(keys)].reset_index(drop=True) if head is None else head
            rows, total, count = rows + len(b), total + int(b["v"].sum()), count + 1
        yield head.assign(rows=rows, total=total, batches=count)

    def keyed_streamed(key: tuple, batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        rows = total = count = 0
        for b in batches:
            rows, total, count = rows + len(b), total + int(b["v"].sum()), count + 1
        yield pd.DataFrame([list(key)], columns=list(keys)).assign(
            rows=rows, total=total, batches=count
        )

    def chunks(pdf: pd.DataFrame) -> Iterator[pd.DataFrame]:
        # What Spark 4.1 and later hand an iterator function: the group in batches of 3.
        return (pdf.iloc[i : i + 3] for i in range(0, len(pdf), 3))

    # Spark 4.0's applyInPandas has no iterator form: there the same function is given the
    # group in the batches Spark 4.1 would give it, by a plain function around it.
    whole = {
        streamed: lambda pdf: pd.concat(list(streamed(chunks(pdf)))),
        keyed_streamed: lambda key, pdf: pd.concat(list(keyed_streamed(key, chunks(pdf)))),
    }
    iterator_forms = hasattr(PythonEvalType, "SQL_GROUPED_MAP_PANDAS_ITER_UDF")

    size = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(size)
    spark.conf.set(size, "3")
    try:
        for fn in (from_key, streamed, keyed_streamed):
            baseline = fn if iterator_forms else whole.get(fn, fn)
            expected = source.groupBy(*keys).applyInPandas(baseline, schema)
            want = rows_of(expected, columns)
            if fn is not from_key:
                most = expected.agg(F.max("batches")).first()[0]
                assert most > 1, "a key spans several batches"
            assert_per_key_both_ways(spark, kafka_conf, topics, keys, fn, schema, columns, want)
    finally:
        spark.conf.set(size, before)


def test_group_by_over_the_jvm_read_as_over_the_rows(spark, kafka_conf, written):
    keys, source, topics = written
    want = rows_of(source.groupBy(*keys).agg(F.count("*").alias("n")), [*keys, "n"])
    settings = jvm_read_on(spark, kafka_conf)
    try:
        for path, topic in topics.items():
            read = read_shuffle(spark, topic, kafka=kafka_conf, engine="jvm")
            counted = read.groupBy(*keys).agg(F.count("*").alias("n"))
            assert rows_of(counted, [*keys, "n"]) == want, f"{path}: groupBy over the JVM read"
    finally:
        jvm_read_off(spark, settings)


def arrow_rows(table: pa.Table) -> list[tuple]:
    """The rows of an Arrow table as Spark's grouping compares values, in a fixed order."""
    columns = [table.column(c).to_pylist() for c in table.column_names]
    return sorted((tuple(map(canonical, r)) for r in zip(*columns, strict=True)), key=repr)


def test_reads_without_spark_are_the_spark_read_and_group_as_group_by(spark, kafka_conf, written):
    """``read_table`` returns what the Python source returns (its types, and its rows, special
    values included); ``iter_keys`` gives each key once with all of its rows, keys grouped as
    ``groupBy`` groups them, also when a partition is read in many passes."""
    keys, source, topics = written
    counted = source.groupBy(*keys).agg(F.count("*").alias("n"), F.sum("v").alias("total"))
    # From Arrow on both sides, so that values (timestamps above all) convert alike.
    want = arrow_rows(counted.toArrow())
    assert len(want) < ROWS
    for path, topic in topics.items():
        ours = read_table(topic, kafka=kafka_conf)
        theirs = read_shuffle(spark, topic, kafka=kafka_conf, engine="python").toArrow()
        assert ours.schema.equals(theirs.schema, check_metadata=False), f"{path}: schema"
        assert arrow_rows(ours) == arrow_rows(theirs), f"{path}: read_table's rows"
        for pass_rows in (None, 40):
            got = [
                (
                    *map(canonical, key),
                    canonical(rows.num_rows),
                    canonical(sum(rows["v"].to_pylist())),
                )
                for key, rows in iter_keys(topic, kafka=kafka_conf, pass_rows=pass_rows)
            ]
            assert sorted(got, key=repr) == want, f"{path}, pass_rows={pass_rows}: iter_keys"


def test_keys_larger_than_a_pass_as_apply_in_pandas(spark, kafka_conf, written):
    """With passes of fewer rows than the largest key, passes hold more than their bound:
    their largest keys are set apart, spilled and given to the function from the spill,
    several at a time or (a key of more rows than a pass) alone and streamed. Every form,
    and an order within keys, still gives what ``applyInPandas`` gives, and no spill file
    is left behind."""
    keys, source, topics = written
    most = source.groupBy(*keys).count().agg(F.max("count")).first()[0]
    pass_rows = most - 1  # the largest key is read alone
    assert pass_rows >= 2
    schema = ", ".join(
        [f"{f.name} {f.dataType.simpleString()}" for f in source.schema if f.name in keys]
        + ["rows long", "total long", "first timestamp"]
    )
    columns = [*keys, "rows", "total", "first"]

    def summary(pdf):
        head = pdf.iloc[:1][list(keys)].reset_index(drop=True)
        return head.assign(rows=len(pdf), total=int(pdf["v"].sum()), first=pdf["event"].min())

    def ordered(pdf):
        # Given sorted by event: the first row's event is the least.
        head = pdf.iloc[:1][list(keys)].reset_index(drop=True)
        return head.assign(rows=len(pdf), total=int(pdf["v"].sum()), first=pdf["event"].iat[0])

    def streamed(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        head, rows, total, first = None, 0, 0, None
        for b in batches:
            head = b.iloc[:1][list(keys)].reset_index(drop=True) if head is None else head
            rows, total = rows + len(b), total + int(b["v"].sum())
            least = b["event"].min()
            first = least if first is None else min(first, least)
        yield head.assign(rows=rows, total=total, first=first)

    def keyed(key, pdf):
        head = pd.DataFrame([list(key)], columns=list(keys))
        return head.assign(rows=len(pdf), total=int(pdf["v"].sum()), first=pdf["event"].min())

    want = rows_of(source.groupBy(*keys).applyInPandas(summary, schema), columns)
    for fn, options in (
        (summary, {}),
        (ordered, {"order_by": ["event"]}),
        (streamed, {}),
        (keyed, {}),
    ):
        assert_per_key_both_ways(
            spark, kafka_conf, topics, keys, fn, schema, columns, want,
            pass_rows=pass_rows, **options,
        )  # fmt: skip

    # The tasks' local directories, where passes spill: as a Python worker sees them.
    def local_dirs(batches):
        import os

        for _ in batches:
            pass
        yield pa.record_batch({"d": os.environ["SPARK_LOCAL_DIRS"].split(",")})

    found = spark.range(1).mapInArrow(local_dirs, "d string").collect()
    dirs = {Path(r.d) for r in found}
    assert dirs and all(d.is_dir() for d in dirs)
    assert [f for d in dirs for f in d.glob("shuffle-spill-*")] == []
