"""spark_order against a plain reading of Spark's ascending sort (nulls first, NaN after
every number and equal to NaN, -0.0 equal to 0.0, strings by UTF-8 bytes), over generated
columns of every type it orders, special values included; equal rows keep their order."""

import datetime as dt
import decimal
import math
import random

import numpy as np
import pyarrow as pa
import pytest

from orchestration.shuffle.core.ordering import sort_keys, spark_order, unordered_reason

WORDS = ["", "a", "a\x00", "A", "b", "é", "E", "\ufffd", "\ue000", "\U0001f600", "zz", "ß"]
DOUBLES = [math.nan, -math.nan, -0.0, 0.0, math.inf, -math.inf, 1e308, 5e-324, 1.5, -2.25]


def spark_key(v):
    """A value's place in Spark's ascending order, nulls first, as a Python sort key."""
    if v is None:
        return (0,)
    if isinstance(v, float) and math.isnan(v):
        return (2,)
    if isinstance(v, str):
        return (1, v.encode("utf-8"))
    return (1, v)


def generated(kind: str, rnd: random.Random, n: int) -> tuple[list, pa.DataType]:
    pick = {
        "double": (lambda: rnd.choice(DOUBLES + [rnd.uniform(-3, 3)]), pa.float64()),
        "float": (lambda: rnd.choice([math.nan, -0.0, 0.0, math.inf, 1.5, -7.0]), pa.float32()),
        "long": (lambda: rnd.choice([-(2**63), 2**63 - 1, 0, rnd.randint(-9, 9)]), pa.int64()),
        "int": (lambda: rnd.randint(-5, 5), pa.int32()),
        "bool": (lambda: rnd.random() < 0.5, pa.bool_()),
        "string": (lambda: rnd.choice(WORDS) + rnd.choice(["", rnd.choice(WORDS)]), pa.string()),
        "binary": (lambda: bytes(rnd.choice([0, 1, 127, 128, 255]) for _ in range(2)), pa.binary()),
        "decimal": (
            lambda: decimal.Decimal(rnd.randint(-(10**6), 10**6)).scaleb(-3),
            pa.decimal128(18, 3),
        ),
        "date": (
            lambda: dt.date(1969, 12, 31) + dt.timedelta(days=rnd.randint(-3, 3)),
            pa.date32(),
        ),
        "timestamp": (
            lambda: (
                dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
                + dt.timedelta(microseconds=rnd.randint(-10, 10))
            ),
            pa.timestamp("us", tz="UTC"),
        ),
    }
    fn, t = pick[kind]
    return [None if rnd.random() < 0.15 else fn() for _ in range(n)], t


KINDS = ["double", "float", "long", "int", "bool", "string", "binary", "decimal", "date",
         "timestamp"]  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_one_column_is_ordered_as_spark_orders_it(kind, seed):
    rnd = random.Random(seed)
    values, t = generated(kind, rnd, 400)
    if kind == "float":  # the float32 value, as Spark would compare it
        values = [None if v is None else float(np.float32(v)) for v in values]
    got = spark_order([pa.array(values, t)]).tolist()
    want = sorted(range(len(values)), key=lambda i: spark_key(values[i]))
    assert got == want


@pytest.mark.parametrize("seed", [4, 5])
def test_several_columns_each_as_spark_with_the_first_most_significant(seed):
    rnd = random.Random(seed)
    cols = [generated(k, rnd, 600) for k in ("string", "double", "long")]
    got = spark_order([pa.array(v, t) for v, t in cols]).tolist()
    want = sorted(range(600), key=lambda i: tuple(spark_key(v[i]) for v, _ in cols))
    assert got == want


def test_first_keys_come_before_the_columns_and_chunks_are_one_column():
    group = np.array([1, 0, 1, 0])
    col = pa.chunked_array([[None, "b"], ["a", "a"]])
    assert spark_order([col], first=[group]).tolist() == [3, 1, 0, 2]


def test_nan_is_after_infinity_and_minus_zero_keeps_its_place_beside_zero():
    values = [math.nan, math.inf, 0.0, -0.0, None, -math.nan]
    assert spark_order([pa.array(values)]).tolist() == [4, 2, 3, 1, 0, 5]


def test_a_column_of_nulls_leaves_the_order_as_it_was():
    assert spark_order([pa.nulls(3)]).tolist() == [0, 1, 2]
    assert sort_keys(pa.nulls(3)) == []


def test_nested_types_are_refused_by_name():
    t = pa.list_(pa.int32())
    assert unordered_reason(t) == "type list<item: int32>"
    with pytest.raises(TypeError, match="cannot order a column of type list"):
        spark_order([pa.array([[1]], t)])
    assert unordered_reason(pa.month_day_nano_interval()) is not None
    assert unordered_reason(pa.large_string()) is None


def test_view_types_are_ordered_as_their_plain_types():
    words = ["b", None, "é", "a", "zz"]
    plain = spark_order([pa.array(words)]).tolist()
    assert spark_order([pa.array(words).cast(pa.string_view())]).tolist() == plain
    raw = [None if w is None else w.encode() for w in words]
    assert spark_order([pa.array(raw, pa.binary()).cast(pa.binary_view())]).tolist() == plain
