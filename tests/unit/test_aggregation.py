"""Per-key aggregation in the reader (pure pyarrow), checked against pandas."""

import datetime as dt
import random

import pandas as pd
import pyarrow as pa
import pytest

from orchestration.shuffle import ShuffleOptionError
from orchestration.shuffle.core import aggregation as agg

SCHEMA = pa.schema(
    [
        ("k", pa.string()),
        ("g", pa.int64()),
        ("x", pa.float64()),
        ("n", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)
AGGS = {
    "rows": ("*", "count"),
    "x_n": ("x", "count"),
    "x_sum": ("x", "sum"),
    "x_mean": ("x", "mean"),
    "n_sum": ("n", "sum"),
    "n_mean": ("n", "mean"),
    "n_min": ("n", "min"),
    "ts_max": ("ts", "max"),
}


def _rows(count: int, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    t0 = dt.datetime(2013, 1, 1, tzinfo=dt.UTC)
    return [
        {
            "k": f"key-{int(rnd.paretovariate(1.2)) % 300}",
            "g": rnd.randint(0, 2),
            "x": None if rnd.random() < 0.1 else rnd.uniform(-5, 5),
            "n": None if rnd.random() < 0.1 else rnd.randint(-1000, 1000),
            "ts": t0 + dt.timedelta(seconds=rnd.randint(0, 86400)),
        }
        for _ in range(count)
    ]


def _aggregate(
    rows: list[dict], key: list[str], batch_rows: int, merge_at: int, chunk: int = 10**9
) -> pd.DataFrame:
    aggs = agg.parse(AGGS, SCHEMA, key)
    partial = agg.PartialAggregator(key, aggs, SCHEMA)
    schema = partial.output_schema()
    old = agg.MERGE_AT_ROWS, agg.CHUNK_ROWS
    agg.MERGE_AT_ROWS, agg.CHUNK_ROWS = merge_at, chunk
    try:
        for i in range(0, len(rows), batch_rows):
            partial.add(pa.RecordBatch.from_pylist(rows[i : i + batch_rows], schema=SCHEMA))
        out = partial.finish()
    finally:
        agg.MERGE_AT_ROWS, agg.CHUNK_ROWS = old
    assert out.schema == schema
    return out.to_pandas().sort_values(key).reset_index(drop=True)


def _expected(rows: list[dict], key: list[str]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    df["n"] = df["n"].astype("Int64")
    g = df.groupby(key, as_index=False)
    out = g.agg(
        rows=("x", "size"),
        x_n=("x", "count"),
        x_sum=("x", lambda s: s.sum(min_count=1)),
        x_mean=("x", "mean"),
        n_sum=("n", lambda s: s.sum(min_count=1)),
        n_mean=("n", "mean"),
        n_min=("n", "min"),
        ts_max=("ts", "max"),
    )
    return out.sort_values(key).reset_index(drop=True)


@pytest.mark.parametrize(
    "batch_rows,merge_at,chunk",
    [(50, 10**9, 10**9), (50, 1, 1), (997, 64, 1000), (5000, 10**9, 10**9), (50, 64, 120)],
)
def test_matches_pandas_however_batches_chunks_and_merges_fall(batch_rows, merge_at, chunk):
    rows = _rows(5000, seed=batch_rows)
    got = _aggregate(rows, ["k"], batch_rows, merge_at, chunk)
    want = _expected(rows, ["k"])
    assert list(got["k"]) == list(want["k"])
    for col in ("rows", "x_n"):
        assert list(got[col]) == list(want[col])
    for col in ("x_sum", "x_mean", "n_mean"):
        pd.testing.assert_series_equal(got[col], want[col].astype(float), check_names=False)
    assert [None if pd.isna(v) else int(v) for v in got["n_sum"]] == [
        None if pd.isna(v) else int(v) for v in want["n_sum"]
    ]
    assert [None if pd.isna(v) else int(v) for v in got["n_min"]] == [
        None if pd.isna(v) else int(v) for v in want["n_min"]
    ]
    assert list(got["ts_max"]) == list(want["ts_max"])


def test_composite_key():
    rows = _rows(3000, seed=7)
    got = _aggregate(rows, ["k", "g"], 256, 100)
    want = _expected(rows, ["k", "g"])
    assert got[["k", "g", "rows"]].values.tolist() == want[["k", "g", "rows"]].values.tolist()


def test_a_key_with_only_nulls_gives_null_sum_and_mean_and_zero_count():
    rows = [{"k": "a", "g": 0, "x": None, "n": None, "ts": None}] * 3
    got = _aggregate(rows, ["k"], 2, 1)
    assert got.loc[0, "rows"] == 3 and got.loc[0, "x_n"] == 0
    assert pd.isna(got.loc[0, "x_sum"]) and pd.isna(got.loc[0, "x_mean"])


def test_no_rows_give_no_groups_with_the_output_types():
    aggs = agg.parse(AGGS, SCHEMA, ["k"])
    schema = agg.PartialAggregator(["k"], aggs, SCHEMA).output_schema()
    out = agg.PartialAggregator(["k"], aggs, SCHEMA).finish()
    assert out.num_rows == 0 and out.schema == schema
    assert schema.field("rows").type == pa.int64()
    assert schema.field("x_mean").type == pa.float64()
    assert schema.field("ts_max").type == SCHEMA.field("ts").type


def test_json_round_trip():
    aggs = agg.parse(AGGS, SCHEMA, ["k"])
    assert agg.from_json(agg.to_json(aggs), SCHEMA, ["k"]) == aggs


@pytest.mark.parametrize(
    "aggs,fragment",
    [
        ({}, "at least one"),
        ({"s": ("x", "median")}, "unknown function 'median'"),
        ({"s": ("nope", "sum")}, "no column 'nope'"),
        ({"s": ("*", "sum")}, "only works with count"),
        ({"k": ("x", "sum")}, "is a key column"),
        ({"s": ("k", "sum")}, "sum is not defined for column 'k' of type string"),
        ({"s": "x"}, "expected (column, function)"),
    ],
)
def test_bad_aggregations_are_named(aggs, fragment):
    with pytest.raises(ShuffleOptionError) as err:
        agg.parse(aggs, SCHEMA, ["k"])
    assert fragment in str(err.value)


def test_output_names_never_meet_key_names():
    # A key named like Arrow's own output name for an aggregate ("<column>_<function>").
    schema = pa.schema([("x_sum", pa.string()), ("x", pa.int64())])
    aggs = agg.parse({"total": ("x", "sum")}, schema, ["x_sum"])
    partial = agg.PartialAggregator(["x_sum"], aggs, schema)
    out_schema = partial.output_schema()
    partial.add(
        pa.RecordBatch.from_pylist([{"x_sum": "a", "x": 2}, {"x_sum": "a", "x": 3}], schema)
    )
    assert partial.finish().to_pylist() == [{"x_sum": "a", "total": 5}]
    assert out_schema.names == ["x_sum", "total"]


def test_reserved_prefix_is_refused():
    schema = pa.schema([("k", pa.string()), ("__agg_x", pa.int64())])
    with pytest.raises(ShuffleOptionError, match="reserved prefix"):
        agg.parse({"s": ("__agg_x", "sum")}, schema, ["k"])


def test_reads_only_the_columns_it_aggregates():
    aggs = agg.parse({"x_mean": ("x", "mean"), "rows": ("*", "count")}, SCHEMA, ["k", "g"])
    assert agg.PartialAggregator(["k", "g"], aggs, SCHEMA).columns() == ["k", "g", "x"]


def test_float_keys_and_max_follow_spark():
    # As Spark's groupBy: -0.0 and 0.0 are one key shown as 0.0, NaNs are one key, and a
    # max over a NaN is NaN (Spark orders NaN above every number); min skips it.
    schema = pa.schema([("k", pa.float64()), ("x", pa.float64())])
    nan_bits = pa.array([0x7FF8000000000001], pa.uint64()).view(pa.float64())[0].as_py()
    table = pa.table(
        {"k": [-0.0, 0.0, float("nan"), nan_bits, 2.0], "x": [1.0, float("nan"), 3.0, 4.0, 5.0]},
        schema=schema,
    )
    aggs = agg.parse({"n": ("*", "count"), "hi": ("x", "max"), "lo": ("x", "min")}, schema, ["k"])
    partial = agg.PartialAggregator(["k"], aggs, schema)
    for batch in table.to_batches(max_chunksize=2):
        partial.add(batch)
    rows = sorted(partial.finish().to_pylist(), key=lambda r: (r["k"] != r["k"], r["k"]))
    assert [r["n"] for r in rows] == [2, 1, 2]
    assert str(rows[0]["k"]) == "0.0" and rows[1]["k"] == 2.0 and rows[2]["k"] != rows[2]["k"]
    assert rows[0]["hi"] != rows[0]["hi"] and rows[0]["lo"] == 1.0
    assert rows[2]["hi"] == 4.0 and rows[2]["lo"] == 3.0
