"""Pieces, balancing, filters and reads of the columnar write path (pyarrow only)."""

import datetime as dt
import decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestration.shuffle.core.columnar import (
    ParquetScan,
    Piece,
    ScanColumn,
    balance,
    predicate_columns,
    read_pieces,
    to_expression,
    type_mismatch,
)

TYPES = {"a": pa.int64(), "s": pa.string(), "d": pa.date32(), "t": pa.timestamp("us", "UTC")}
TABLE = pa.table(
    {
        "a": pa.array([1, 5, None, 7], pa.int64()),
        "s": pa.array(["x", None, "y", "z"]),
        "d": pa.array([0, 10, 20, None], pa.int32()).cast(pa.date32()),
        "t": pa.array([0, 10**6, None, 3 * 10**6], pa.timestamp("us", "UTC")),
    }
)


def kept(pred) -> list[int | None]:
    return TABLE.filter(to_expression(pred, TYPES)).column("a").to_pylist()


def test_comparisons_drop_nulls_like_sql():
    assert kept(("cmp", ">", "a", 1)) == [5, 7]
    assert kept(("cmp", "=", "s", "y")) == [None]
    assert kept(("cmp", "<=", "d", 10)) == [1, 5]
    assert kept(("cmp", ">=", "t", 10**6)) == [5, 7]
    # NOT of null is null: the row with a null stays out either way.
    assert kept(("not", ("cmp", ">", "a", 1))) == [1]


def test_and_or_are_three_valued():
    # null OR true is true; null AND false is false (so NOT keeps the row); true AND null
    # is null (so NOT drops the row with a=5).
    assert kept(("or", ("cmp", ">", "a", 1), ("cmp", "=", "s", "y"))) == [5, None, 7]
    assert kept(("not", ("and", ("cmp", ">", "a", 1), ("cmp", "=", "s", "q")))) == [1, None, 7]


def test_in_follows_sql_with_nulls():
    assert kept(("in", "a", (1, 7), False)) == [1, 7]
    # A null input is null, never false: NOT IN keeps neither it nor the matches.
    assert kept(("not", ("in", "a", (1, 7), False))) == [5]
    # With a null in the list a miss is null: NOT IN keeps nothing.
    assert kept(("in", "a", (1,), True)) == [1]
    assert kept(("not", ("in", "a", (1,), True))) == []


def test_null_safe_equality_and_null_checks():
    assert kept(("eq_null_safe", "a", 5)) == [5]
    assert kept(("not", ("eq_null_safe", "a", 5))) == [1, None, 7]
    assert kept(("is_null", "s")) == [5]
    assert kept(("is_not_null", "d")) == [1, 5, None]


def test_decimal_literals():
    t = pa.table({"m": pa.array([decimal.Decimal("1.50"), decimal.Decimal("2.25")])})
    t = t.cast(pa.schema([("m", pa.decimal128(10, 2))]))
    expr = to_expression(("cmp", ">", "m", decimal.Decimal("1.5")), {"m": pa.decimal128(10, 2)})
    assert t.filter(expr).num_rows == 1


def test_predicate_columns():
    pred = ("and", ("cmp", ">", "a", 1), ("or", ("is_null", "s"), ("in", "a", (1,), False)))
    assert predicate_columns(pred) == ["a", "s"]
    assert predicate_columns(None) == []


def test_balance_spreads_weight_and_keeps_every_item_once():
    weights = [100, 1, 50, 50, 30, 20, 10, 1]
    bins = balance(weights, 3)
    assert sorted(i for b in bins for i in b) == list(range(len(weights)))
    loads = sorted(sum(weights[i] for i in b) for b in bins)
    assert loads == [81, 81, 100]
    assert balance([], 2) == [[], []]
    with pytest.raises(ValueError):
        balance([1], 0)


def test_type_mismatch():
    ts_utc = pa.timestamp("us", "UTC")
    assert type_mismatch(pa.int64(), pa.int64()) is None
    assert type_mismatch(pa.large_string(), pa.string()) is None
    assert type_mismatch(pa.timestamp("us"), ts_utc, "INT96") is None
    assert type_mismatch(pa.timestamp("ms", "UTC"), ts_utc, "INT64") is None
    assert type_mismatch(pa.timestamp("us"), pa.timestamp("us"), "INT64") is None
    assert type_mismatch(pa.timestamp("us"), ts_utc, "INT64") is not None
    assert type_mismatch(pa.timestamp("ns", "UTC"), ts_utc, "INT64") is not None
    assert type_mismatch(pa.int32(), pa.int64()) is not None
    assert type_mismatch(pa.decimal128(10, 2), pa.decimal128(12, 2)) is not None


def test_read_pieces_casts_renames_filters_and_orders(tmp_path):
    path = str(tmp_path / "f.parquet")
    t = pa.table(
        {
            "ID": pa.array(range(10), pa.int64()),
            "k": pa.array([f"k{i}" for i in range(10)]),
            "ts": pa.array([i * 10**6 for i in range(10)], pa.timestamp("us")),
        }
    )
    pq.write_table(t, path, row_group_size=4, use_deprecated_int96_timestamps=True)
    scan = ParquetScan(
        columns=(
            ScanColumn("ts", pa.timestamp("us", "UTC")),
            ScanColumn("k", pa.string()),
            ScanColumn("id", pa.int64()),
        ),
        output=(("ts", "when"), ("k", "k")),
        predicate=("cmp", ">=", "id", 2),
        file_names={path: {"id": "ID"}},
    )
    pieces = [Piece(path, 2, 2, 1), Piece(path, 0, 4, 1)]
    batches = list(read_pieces(scan, pieces, batch_rows=3))
    assert all(b.schema == scan.output_schema() for b in batches)
    out = pa.Table.from_batches(batches)
    assert out.column("k").to_pylist() == ["k2", "k3", "k8", "k9"]
    assert out.column("when").to_pylist()[0] == dt.datetime(1970, 1, 1, 0, 0, 2, tzinfo=dt.UTC)
    assert out.schema.field("when").type == pa.timestamp("us", "UTC")


def test_a_sorted_plan_gives_each_task_every_piece_and_a_range_of_partitions():
    from orchestration.shuffle.spark.columnar import ColumnarPlan

    pieces = [Piece("f", rg, 10, 100 + rg) for rg in range(5)]
    scan = ParquetScan(columns=(ScanColumn("a", pa.int64()),), output=(("a", "a"),))
    plan = ColumnarPlan(scan, (tuple(pieces[:3]), tuple(pieces[3:])), True)
    assert plan.input_bytes == 510 and plan.rows_read == 50
    owning = plan.owning(8, 3)
    assert owning.owners == ((0, 2), (2, 5), (5, 8))
    assert owning.assignments == (tuple(pieces),) * 3
    # Every piece counted once, however many tasks read it.
    assert owning.input_bytes == 510 and owning.rows_read == 50
