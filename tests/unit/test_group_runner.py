"""The per-key runner cuts key-sorted batches at key boundaries, however keys span batches."""

import random

import pandas as pd
import pyarrow as pa
import pytest

from orchestration.shuffle.spark.perkey import GroupRunner

OUT = pa.schema([("k", pa.string()), ("j", pa.int64()), ("n", pa.int64()), ("first", pa.int64())])


def per_key(pdf: pd.DataFrame) -> pd.DataFrame:
    # Exactly one key per call, with all of its rows, in order.
    assert pdf[["k", "j"]].drop_duplicates().shape[0] == 1
    return pd.DataFrame({"k": [pdf.k.iloc[0]], "j": [int(pdf.j.iloc[0])], "n": [len(pdf)],
                         "first": [int(pdf.v.iloc[0])]})  # fmt: skip


def per_batch(table: pa.Table) -> pa.Table:
    out = table.group_by(["k", "j"]).aggregate([("v", "count"), ("v", "min")])
    return pa.table({"k": out["k"], "j": out["j"], "n": out["v_count"], "first": out["v_min"]})


def batches_of(rows: list[tuple[str, int, int]], rng: random.Random) -> list[pa.RecordBatch]:
    table = pa.table({"k": [r[0] for r in rows], "j": [r[1] for r in rows],
                      "v": [r[2] for r in rows]})  # fmt: skip
    out, i = [], 0
    while i < len(rows):
        size = rng.choice([0, 1, 2, 3, 7, 50, 400])
        out.append(table.slice(i, size).combine_chunks().to_batches(max_chunksize=10**6))
        i += size
    return [b for bs in out for b in bs]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    ("per", "data", "fn"), [("key", "pandas", per_key), ("batch", "arrow", per_batch)]
)
def test_every_key_exactly_once_whole(seed, per, data, fn):
    rng = random.Random(seed)
    keys = [(f"k{rng.randint(0, 30):02d}", rng.randint(0, 2)) for _ in range(rng.randint(1, 60))]
    # A skewed key that spans many batches.
    rows = [(k, j, rng.randint(0, 1000)) for k, j in keys for _ in range(rng.choice([1, 2, 900]))]
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    runner = GroupRunner(("k", "j"), fn, OUT, per, data)
    got = pa.Table.from_batches(list(runner(iter(batches_of(rows, rng)))), schema=OUT).to_pandas()
    want = (pd.DataFrame(rows, columns=["k", "j", "v"]).groupby(["k", "j"], as_index=False)
            .agg(n=("v", "size"), first=("v", "min")))  # fmt: skip
    # Each key once: a key split across two calls would show up twice.
    assert not got.duplicated(["k", "j"]).any()
    assert (
        got.sort_values(["k", "j"])
        .reset_index(drop=True)
        .equals(want.sort_values(["k", "j"]).reset_index(drop=True))
    )
