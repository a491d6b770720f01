"""Grouping whole keys in Arrow (the in-reader per-key path), checked against pandas."""

import random

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from orchestration.shuffle.core.perkey import (
    KeyedPass,
    KeyFunction,
    comparable_key,
    group_ids,
    key_index,
    largest_keys,
    sort_by_key,
)

OUT = pa.schema([("k", pa.string()), ("j", pa.int64()), ("n", pa.int64()), ("vs", pa.string())])


def make_table(seed: int, rows: int = 3000) -> pa.Table:
    rnd = random.Random(seed)
    ks = [
        None if rnd.random() < 0.05 else f"k{int(rnd.paretovariate(1.1)) % 40}" for _ in range(rows)
    ]
    js = [None if rnd.random() < 0.05 else rnd.randint(0, 2) for _ in range(rows)]
    ts = [None if rnd.random() < 0.1 else rnd.randint(0, 50) for _ in range(rows)]
    return pa.table(
        {
            "k": pa.array(ks, pa.string()),
            "j": pa.array(js, pa.int64()),
            "t": pa.array(ts, pa.int64()),
            "v": pa.array(range(rows), pa.int64()),
        }
    )


def in_order(pdf: pd.DataFrame) -> list[str]:
    """The key's t values as Spark's ascending sort leaves them: nulls first."""
    return ["-" if pd.isna(t) else str(int(t)) for t in pdf["t"]]


def per_key(pdf: pd.DataFrame) -> pd.DataFrame:
    assert len(pdf[["k", "j"]].drop_duplicates()) == 1, "one key per call"
    assert list(pdf.index) == list(range(len(pdf))), "an index from 0, as applyInPandas gives"
    order = in_order(pdf)
    nulls = order.count("-")
    assert order[:nulls] == ["-"] * nulls
    assert [int(t) for t in order[nulls:]] == sorted(int(t) for t in order[nulls:])
    return pd.DataFrame({"k": [pdf.k.iat[0]], "j": [pdf.j.iat[0]], "n": [len(pdf)],
                         "vs": [",".join(order)]})  # fmt: skip


def expected(table: pa.Table) -> pd.DataFrame:
    df = table.to_pandas()
    df["t_sorted"] = df["t"].fillna(-1)
    df = df.sort_values(["t_sorted"], kind="stable")
    g = df.groupby(["k", "j"], dropna=False, sort=False)
    out = g.agg(n=("v", "size"), vs=("t", lambda s: ",".join(in_order(s.to_frame()))))
    return out.reset_index()


def normalized(df: pd.DataFrame) -> list[tuple]:
    rows = []
    for k, j, n, vs in df[["k", "j", "n", "vs"]].itertuples(index=False):
        rows.append((None if pd.isna(k) else k, None if pd.isna(j) else int(j), int(n), vs))
    return sorted(rows, key=repr)


@pytest.mark.parametrize("seed", range(4))
def test_per_key_with_null_keys_and_order_by_matches_pandas(seed):
    table = make_table(seed)
    kf = KeyFunction(("k", "j"), per_key, OUT, per="key", data="pandas", order_by=("t",))
    got = pa.Table.from_batches(list(kf.apply(table)), schema=OUT).to_pandas()
    assert not got.duplicated(["k", "j"]).any()  # a key split in two would show up twice
    assert normalized(got) == normalized(expected(table))
    assert got["k"].isna().any()  # null keys took part, as one group per (k, j)


def test_per_batch_gets_whole_keys_and_arrow_tables():
    table = make_table(7)
    calls = []

    def per_batch(t: pa.Table) -> pa.Table:
        calls.append(t.num_rows)
        out = t.group_by(["k", "j"]).aggregate([("v", "count")])
        n = out.num_rows
        return pa.table({"k": out["k"], "j": out["j"], "n": out["v_count"],
                         "vs": pa.array([""] * n, pa.string())})  # fmt: skip

    kf = KeyFunction(("k", "j"), per_batch, OUT, per="batch", data="arrow")
    got = pa.Table.from_batches(list(kf.apply(table)), schema=OUT).to_pandas()
    assert calls == [table.num_rows]
    want = table.to_pandas().groupby(["k", "j"], dropna=False).size()
    assert len(got) == len(want) and got["n"].sum() == table.num_rows


def test_group_ids_treat_nulls_as_one_value_and_combine_columns():
    t = pa.table({"a": ["x", None, "x", None, "y"], "b": [1, 2, 1, 2, None]})
    ids = group_ids(t, ["a", "b"])
    assert ids[0] == ids[2] and ids[1] == ids[3]
    assert len(set(ids.tolist())) == 3
    sorted_t, starts = sort_by_key(t, ["a", "b"])
    assert starts.tolist() == [0, 2, 4]
    assert sorted_t.num_rows == 5
    assert sort_by_key(t.slice(0, 0), ["a"])[1].size == 0


def test_the_function_sees_only_its_columns_and_none_means_no_rows():
    table = make_table(3, rows=200)
    seen = []

    def fn(pdf):
        seen.append(tuple(pdf.columns))
        return None

    kf = KeyFunction(("k",), fn, OUT, columns=("v", "k"))
    assert list(kf.apply(table)) == []
    assert set(seen) == {("v", "k")}


def test_many_outputs_are_emitted_in_bounded_batches(monkeypatch):
    from orchestration.shuffle.core import perkey as grouping

    monkeypatch.setattr(grouping, "EMIT_EVERY", 7)
    n = 100
    table = pa.table({"k": [f"k{i}" for i in range(n)], "v": np.arange(n)})
    schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
    kf = KeyFunction(("k",), lambda t: t.select(["k", "v"]), schema, data="arrow")
    batches = list(kf.apply(table))
    assert sum(b.num_rows for b in batches) == n and max(b.num_rows for b in batches) <= 7


@pytest.mark.parametrize(
    "column",
    [
        pa.array([3, None, 1, 2, None, 1, 7, -4], pa.int64()),
        pa.array([0.5, float("nan"), None, -1.0, 2.0, float("nan"), None, 0.5], pa.float64()),
        pa.array([True, None, False, True, False, None, True, False], pa.bool_()),
        pa.array([5, 1, None, 3, 2, 2, 9, 0], pa.timestamp("us", tz="UTC")),
        pa.array([5, 1, None, 3, 2, 2, 9, 0], pa.date32()),
        pa.array(["b", None, "a", "c", "a", "b", None, "d"], pa.string()),  # Arrow's sort
    ],
)
def test_order_by_sorts_each_key_nulls_first_and_nan_last(column):
    keys = pa.array(["x", "y", "x", "y", "x", "y", "x", "y"])
    table = pa.table({"k": keys, "o": column, "v": pa.array(range(8))})
    ordered, starts = sort_by_key(table, ("k",), ("o",))
    assert list(starts) == [0, 4]  # two keys, each in one run
    all_nans = 0
    for s, e in ((0, 4), (4, 8)):
        got = ordered.slice(s, e - s)
        assert len(set(got["k"].to_pylist())) == 1
        values = got["o"].to_pylist()
        nulls = [v for v in values if v is None]
        assert values[: len(nulls)] == nulls, values  # nulls first
        rest = values[len(nulls) :]
        nans = [v for v in rest if isinstance(v, float) and np.isnan(v)]
        all_nans += len(nans)
        numbers = rest[: len(rest) - len(nans)]
        assert numbers == sorted(numbers), values  # NaN after every number, as in Spark
        # Ties keep their order as read (a stable sort).
        for a, b in zip(got.to_pylist(), got.to_pylist()[1:], strict=False):
            if a["o"] == b["o"]:
                assert a["v"] < b["v"]
    assert all_nans == (2 if pa.types.is_floating(column.type) else 0)


def test_order_by_two_columns_in_numpy_equals_arrows_sort():
    rnd = random.Random(5)
    n = 5000
    table = pa.table(
        {
            "k": pa.array([f"k{rnd.randint(0, 60)}" for _ in range(n)]),
            "a": pa.array([None if rnd.random() < 0.1 else rnd.randint(0, 5) for _ in range(n)]),
            "b": pa.array([rnd.random() for _ in range(n)]),
            "v": pa.array(range(n)),
        }
    )
    ordered, _ = sort_by_key(table, ("k",), ("a", "b"))
    ids = group_ids(table, ("k",))
    sortable = pa.table([pa.array(ids), table["a"], table["b"]], names=["g", "a", "b"])
    from orchestration.shuffle.core.perkey import sort_indices_nulls_first

    by_arrow = table.take(sort_indices_nulls_first(sortable))
    assert ordered["v"].to_pylist() == by_arrow["v"].to_pylist()


def _double(bits: int) -> float:
    return np.frombuffer(np.uint64(bits).tobytes(), dtype=np.float64)[0]


def test_float_keys_group_as_spark_groups_them():
    # Spark's groupBy normalizes floating-point keys: -0.0 is 0.0, and NaNs of any bits are
    # one key. Arrow's hash kernels alone would make five groups of these six rows.
    nan_other = _double(0x7FF8000000000001)
    keys = pa.array([0.0, -0.0, float("nan"), nan_other, -float("nan"), 1.0])
    ids = group_ids(pa.table({"k": keys}), ["k"])
    assert ids[0] == ids[1] and ids[2] == ids[3] == ids[4]
    assert len(set(ids.tolist())) == 3
    f32 = pa.array([0.0, -0.0, float("nan"), None], pa.float32())
    assert group_ids(pa.table({"k": f32}), ["k"]).tolist() == [0, 0, 1, 2]


def test_comparable_key_makes_nan_equal_to_nan():
    keys = comparable_key(pa.array([float("nan"), _double(0xFFF8000000000000), -0.0, 0.0]))
    equal = pc.equal(keys.slice(1), keys.slice(0, 3)).to_pylist()
    assert equal == [True, False, True]


def test_the_key_form_gets_each_key_as_a_tuple_of_its_values():
    table = make_table(5, rows=400)
    schema = pa.schema([("k", pa.string()), ("j", pa.int64()), ("n", pa.int64())])
    seen = []

    def keyed(key, pdf):
        seen.append(key)
        first = pdf.iloc[0]
        assert key[0] == first["k"] or (pd.isna(key[0]) and pd.isna(first["k"]))
        return pd.DataFrame({"k": [pdf["k"].iat[0]], "j": [pdf["j"].iat[0]], "n": [len(pdf)]})

    kf = KeyFunction(("k", "j"), keyed, schema, with_key=True)
    out = pa.Table.from_batches(list(kf.apply(table)), schema)
    keys = table.group_by(["k", "j"]).aggregate([([], "count_all")])
    assert out.num_rows == keys.num_rows == len(seen)
    assert all(isinstance(k, tuple) and len(k) == 2 for k in seen)
    assert sorted(out["n"].to_pylist()) == sorted(keys["count_all"].to_pylist())

    # On Arrow, the key's values are Arrow scalars (as applyInArrow gives them).
    arrow_keys = []

    def keyed_arrow(key, t):
        arrow_keys.append(key)
        return t.select(["k", "j"]).slice(0, 1).append_column("n", pa.array([t.num_rows]))

    kf = KeyFunction(("k", "j"), keyed_arrow, schema, data="arrow", with_key=True)
    assert sum(b.num_rows for b in kf.apply(table)) == keys.num_rows
    assert all(isinstance(v, pa.Scalar) for key in arrow_keys for v in key)


@pytest.mark.parametrize("chunk", [16, 65_536])
@pytest.mark.parametrize("data", ["pandas", "arrow"])
def test_the_iterator_form_streams_each_key_in_bounded_batches(data, chunk, monkeypatch):
    from orchestration.shuffle.core import perkey as grouping

    # Small keys are converted together, up to `chunk` rows: across chunks too.
    monkeypatch.setattr(grouping, "ITERATOR_CHUNK_ROWS", chunk)
    # One key of 1,000 rows and 20 keys of a few: batches of at most 64 rows.
    ks = ["big"] * 1000 + [f"k{i % 20}" for i in range(100)]
    table = pa.table({"k": ks, "v": np.arange(len(ks))})
    schema = pa.schema([("k", pa.string()), ("n", pa.int64()), ("total", pa.int64())])
    sizes = []

    def stream(batches):
        n = total = 0
        key = None
        for b in batches:
            if data == "pandas":
                assert list(b.index) == list(range(len(b))), "an index from 0 in each batch"
            rows = len(b) if data == "pandas" else b.num_rows
            sizes.append(rows)
            column = b["k"] if data == "pandas" else b.column("k").to_pylist()
            key = column[0]
            values = b["v"] if data == "pandas" else b.column("v").to_numpy()
            n, total = n + rows, total + int(values.sum())
        out = {"k": [key], "n": [n], "total": [total]}
        yield pd.DataFrame(out) if data == "pandas" else pa.RecordBatch.from_pydict(out, schema)

    kf = KeyFunction(("k",), stream, schema, data=data, iterator=True, batch_rows=64)
    out = pa.Table.from_batches(list(kf.apply(table)), schema).to_pandas().set_index("k")
    want = table.to_pandas().groupby("k")["v"].agg(["size", "sum"])
    assert len(out) == 21
    assert (out.loc[want.index, "n"].to_numpy() == want["size"].to_numpy()).all()
    assert (out.loc[want.index, "total"].to_numpy() == want["sum"].to_numpy()).all()
    assert max(sizes) == 64 and sizes.count(64) >= 1000 // 64


def test_the_iterator_form_with_a_key_and_one_returning_a_frame_is_refused():
    table = pa.table({"k": ["a", "a", "b"], "v": [1, 2, 3]})
    schema = pa.schema([("k", pa.string()), ("n", pa.int64())])

    def keyed(key, batches):
        yield pd.DataFrame({"k": [key[0]], "n": [sum(len(b) for b in batches)]})

    kf = KeyFunction(("k",), keyed, schema, with_key=True, iterator=True, batch_rows=1)
    out = pa.Table.from_batches(list(kf.apply(table)), schema).to_pydict()
    assert sorted(zip(out["k"], out["n"], strict=True)) == [("a", 2), ("b", 1)]

    def not_an_iterator(batches):
        return pd.DataFrame({"k": ["a"], "n": [1]})

    kf = KeyFunction(("k",), not_an_iterator, schema, iterator=True)
    with pytest.raises(TypeError, match="not_an_iterator has iterator type hints"):
        list(kf.apply(table))


def test_largest_keys_and_key_index_compare_keys_as_spark_groups_them():
    # -0.0 is 0.0, NaNs of any bits are one key, nulls are one key: as Spark's groupBy.
    nan_other = _double(0x7FF8000000000001)
    values = [0.0, -0.0, 0.0, float("nan"), nan_other, None, None, 1.0]
    table = pa.table({"k": pa.array(values, pa.float64()), "v": range(len(values))})
    keys, counts = largest_keys(table, ["k"], 2)
    assert counts.tolist() == [3, 2, 2]
    assert keys.column("k")[0].as_py() == 0.0
    assert keys.num_rows == 3 and keys.column_names == ["k"]
    probe = pa.table({"k": pa.array([-0.0, _double(0x7FF8000000000002), None, 1.0, 2.0])})
    index = key_index(probe, keys, ["k"])
    # Each probe row finds the index of its key in `keys`, or -1.
    found = [keys.column("k")[i].as_py() if i >= 0 else "none" for i in index.tolist()]
    assert found[0] == 0.0 and np.isnan(found[1]) and found[2] is None
    assert found[3:] == ["none", "none"]


def hot_table(hot: int, others: int, seed: int = 0) -> pa.Table:
    """`hot` rows of key "hot" scattered among `others` rows of 50 small keys."""
    rnd = random.Random(seed)
    ks = ["hot"] * hot + [f"k{rnd.randrange(50)}" for _ in range(others)]
    rnd.shuffle(ks)
    return pa.table({"k": ks, "v": np.arange(len(ks))})


def fed(
    table: pa.Table, limit: int, chunk: int, *, keep_largest: bool = False, spill=None
) -> KeyedPass:
    """A pass of bound ``limit`` that has read ``table`` in batches of ``chunk`` rows (the
    rows set apart go to ``spill``, a list's ``append``, or nowhere)."""
    held = KeyedPass(("k",), limit, spill or (lambda batch: None), keep_largest=keep_largest)
    for batch in table.to_batches(max_chunksize=chunk):
        held.add(batch)
    return held


def test_a_pass_sets_its_largest_key_apart_and_keeps_every_row_of_the_others():
    table = hot_table(hot=5000, others=2000)
    held = fed(table, 1000, 300)
    rest = held.table(table.schema)
    assert held.apart is not None and held.apart.column("k").to_pylist() == ["hot"]
    assert held.apart_rows.tolist() == [5000], "rows of a key set apart are still counted"
    assert "hot" not in set(rest.column("k").to_pylist())
    assert rest.num_rows == 2000, "every row of the other keys"
    assert held.bundles()[0].column("k").to_pylist() == ["hot"]


def test_a_pass_of_many_small_keys_is_held_whole():
    table = hot_table(hot=0, others=5000)
    held = fed(table, 1000, 300)
    # Each key has ~100 rows, under limit / 8: none is worth a read of its own.
    assert held.apart is None and held.bundles() == []
    assert held.table(table.schema).num_rows == 5000


def test_keys_set_apart_are_bundled_up_to_the_limit():
    ks = ["a"] * 3000 + ["b", "c", "d", "e"] * 300 + [f"s{i}" for i in range(100)]
    table = pa.table({"k": ks, "v": np.arange(len(ks))})
    held = fed(table, 1000, 250)
    # "a" fills the pass first; then b-e and the small keys hold 1,300 rows: the largest go
    # until what is held fits in half the limit.
    bundles = [b.column("k").to_pylist() for b in held.bundles()]
    assert bundles == [["a"], ["b", "c", "d"]], "a key of more than the limit goes alone"
    assert held.apart_rows.tolist() == [3000, 300, 300, 300]
    assert held.table(table.schema).num_rows == 400


@pytest.mark.parametrize("data", ["pandas", "arrow"])
def test_apply_key_streams_one_key_in_batches_for_the_iterator_form(data):
    schema = pa.schema([("k", pa.string()), ("n", pa.int64()), ("total", pa.int64())])
    sizes = []

    def stream(key, batches):
        n = total = 0
        for b in batches:
            rows = len(b) if data == "pandas" else b.num_rows
            sizes.append(rows)
            values = b["v"] if data == "pandas" else b.column("v").to_numpy()
            n, total = n + rows, total + int(values.sum())
        k = key[0] if data == "pandas" else key[0].as_py()
        out = {"k": [k], "n": [n], "total": [total]}
        yield pd.DataFrame(out) if data == "pandas" else pa.RecordBatch.from_pydict(out, schema)

    table = pa.table({"k": ["hot"] * 1000, "v": np.arange(1000), "x": np.zeros(1000)})
    parts = iter(table.to_batches(max_chunksize=37))
    kf = KeyFunction(
        ("k",), stream, schema, data=data, columns=("k", "v"), with_key=True, iterator=True,
        batch_rows=64,
    )  # fmt: skip
    out = pa.Table.from_batches(list(kf.apply_key(parts)), schema).to_pylist()
    assert out == [{"k": "hot", "n": 1000, "total": sum(range(1000))}]
    assert sizes == [64] * 15 + [40], "batches of batch_rows rows, across the parts"


def test_apply_key_gives_the_whole_key_to_the_other_forms():
    schema = pa.schema([("k", pa.string()), ("n", pa.int64()), ("first", pa.int64())])
    table = pa.table({"k": ["hot"] * 500, "t": np.arange(500)[::-1].copy()})

    def whole(pdf):
        return pd.DataFrame({"k": [pdf.k.iat[0]], "n": [len(pdf)], "first": [pdf.t.iat[0]]})

    for per in ("key", "batch"):
        kf = KeyFunction(("k",), whole, schema, per=per, order_by=("t",))
        out = pa.Table.from_batches(list(kf.apply_key(table.to_batches(50))), schema)
        assert out.to_pylist() == [{"k": "hot", "n": 500, "first": 0}], per
    streamed = KeyFunction(("k",), lambda b: b, schema, iterator=True, order_by=("t",))
    assert list(streamed.apply_key(iter([]))) == []


def test_a_pass_for_a_whole_key_function_keeps_its_largest_key():
    # A function that holds a whole key anyway: the hot key's rows are kept, not read again.
    table = hot_table(hot=5000, others=2000)
    held = fed(table, 1000, 300, keep_largest=True)
    assert held.table(table.schema).num_rows == 2000
    kept = pa.Table.from_batches(held.kept())
    assert kept.num_rows == 5000 and set(kept.column("k").to_pylist()) == {"hot"}
    assert held.bundles() == [], "nothing to read again"

    # A key that outgrows the one kept is kept instead; the first is read again.
    rnd = random.Random(1)
    first = ["a"] * 300 + [f"s{i % 10}" for i in range(800)]
    rnd.shuffle(first)
    table = pa.table({"k": first + ["b"] * 2000, "v": np.arange(3100)})
    held = fed(table, 1000, 100, keep_largest=True)
    assert held.table(table.schema).num_rows == 800
    kept = pa.Table.from_batches(held.kept())
    assert kept.num_rows == 2000 and set(kept.column("k").to_pylist()) == {"b"}
    assert [b.column("k").to_pylist() for b in held.bundles()] == [["a"]]


def test_rows_of_keys_set_apart_are_spilled_once_each_in_the_order_read():
    table = hot_table(hot=5000, others=2000)
    spilled = []
    held = fed(table, 1000, 300, spill=spilled.append)
    rest = held.table(table.schema)
    out = pa.Table.from_batches(spilled)
    # Every row of the key set apart, the ones held before it was set apart and the ones
    # read after, each once and in the order read; none of the others.
    hot = table.filter(pc.equal(table.column("k"), "hot"))
    assert out.column("v").to_pylist() == hot.column("v").to_pylist()
    assert set(out.column("k").to_pylist()) == {"hot"}
    assert rest.num_rows == 2000
    assert [b.column("k").to_pylist() for b in held.bundles()] == [["hot"]]

    # A key kept for a whole-key function is not spilled, until a larger one replaces it.
    rnd = random.Random(1)
    first = ["a"] * 300 + [f"s{i % 10}" for i in range(800)]
    rnd.shuffle(first)
    table = pa.table({"k": first + ["b"] * 2000, "v": np.arange(3100)})
    spilled = []
    held = fed(table, 1000, 100, keep_largest=True, spill=spilled.append)
    out = pa.Table.from_batches(spilled)
    a = table.filter(pc.equal(table.column("k"), "a"))
    assert out.column("v").to_pylist() == a.column("v").to_pylist()
    assert pa.Table.from_batches(held.kept()).num_rows == 2000
    assert held.table(table.schema).num_rows == 800


def test_order_by_a_string_then_a_double_puts_nan_after_numbers_as_spark():
    # A string among the order_by columns once sent the whole order to Arrow's sort, which
    # with nulls first puts NaN first too.
    table = pa.table(
        {
            "k": ["a"] * 6,
            "s": ["x", "x", "x", "x", None, "é"],
            "d": [float("nan"), 2.0, None, -1.0, 5.0, float("nan")],
        }
    )
    ordered, _ = sort_by_key(table, ("k",), ("s", "d"))
    got = [(r["s"], r["d"]) for r in ordered.to_pylist()]
    assert got[:4] == [(None, 5.0), ("x", None), ("x", -1.0), ("x", 2.0)]
    assert got[4][0] == "x" and np.isnan(got[4][1])
    assert got[5][0] == "é" and np.isnan(got[5][1])  # "é" is after "x" by its UTF-8 bytes
