"""Grouping whole keys in Arrow (the in-reader per-key path), checked against pandas."""

import random

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from orchestration.shuffle.grouping import KeyFunction, group_ids, sort_by_key

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
    from orchestration.shuffle import grouping

    monkeypatch.setattr(grouping, "EMIT_EVERY", 7)
    n = 100
    table = pa.table({"k": [f"k{i}" for i in range(n)], "v": np.arange(n)})
    schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
    kf = KeyFunction(("k",), lambda t: t.select(["k", "v"]), schema, data="arrow")
    batches = list(kf.apply(table))
    assert sum(b.num_rows for b in batches) == n and max(b.num_rows for b in batches) <= 7
