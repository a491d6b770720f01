"""apply_per_key inside the reader: the same answers as Spark's groupBy, on the real stack."""

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from orchestration.shuffle import (
    ShuffleKeyError,
    ShuffleSpec,
    apply_per_key,
    read_shuffle,
    write_shuffle,
)
from orchestration.shuffle.spark.perkey import shuffle_scan_options

pytestmark = pytest.mark.integration

ROWS = 8000


def skewed(spark, n=ROWS, offset=0):
    """Zipf-like keys with one hot key ("hot", ~40% of rows), two key columns, and an
    order column with nulls and ties (``id`` breaks them)."""
    return spark.range(offset, offset + n).selectExpr(
        "case when id % 5 < 2 then 'hot' "
        "else concat('k', cast(floor(pow(rand(3) + 0.001, -1.5)) % 400 as string)) end as k",
        "cast(id % 3 as int) as j",
        "id",
        "case when id % 7 = 0 then null else cast(id % 13 as int) end as t",
        "cast(id as double) / 7 as x",
        "timestamp_seconds(1356998400 + id) as ts",
    )


def write(df, topic, kafka_conf, window=None):
    spec = ShuffleSpec(topic=topic, key=("k", "j"), num_partitions=4, max_parallelism=32)
    return write_shuffle(df, spec, kafka=kafka_conf, window=window)


def in_reader(df) -> bool:
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "Exchange" not in plan
    # The reader's own tasks over one row per split, with no data source planning.
    return "MapInArrow kafka_shuffle_read" in plan and "Range" in plan and "Sort" not in plan


OUT = "k string, j int, n long, sx double, order string"


def ordered_stats(pdf: pd.DataFrame) -> pd.DataFrame:
    """One row per key; records the order the rows came in (by t, nulls first, then id)."""
    assert pdf[["k", "j"]].drop_duplicates().shape[0] == 1, "one key per call"
    t = pdf["t"].fillna(-1).to_numpy()
    ids = pdf["id"].to_numpy()
    pairs = list(zip(t.tolist(), ids.tolist(), strict=True))
    assert pairs == sorted(pairs), "rows ordered by t (nulls first), then id"
    return pd.DataFrame(
        {
            "k": [pdf["k"].iat[0]],
            "j": [int(pdf["j"].iat[0])],
            "n": [len(pdf)],
            "sx": [float(pdf["x"].sum())],
            "order": [",".join(map(str, ids[:5]))],
        }
    )


def unordered_stats(pdf: pd.DataFrame) -> pd.DataFrame:
    pdf = pdf.sort_values(["t", "id"], na_position="first")
    return ordered_stats(pdf)


def rows(df):
    return sorted((r.k, r.j, r.n, round(r.sx, 6), r.order) for r in df.collect())


def test_in_reader_equals_group_by_apply_in_pandas(spark, kafka_conf, unique):
    topic = unique("pk-reader")
    src = skewed(spark)
    write(src, topic, kafka_conf)
    want = rows(src.groupBy("k", "j").applyInPandas(unordered_stats, OUT))
    hot = [r for r in want if r[0] == "hot"]
    assert sum(r[2] for r in hot) == ROWS * 2 // 5  # the hot key's rows, whole, per (k, j)
    # One pass per partition; several passes (500 rows each); key-group ranges split over
    # 7 tasks, in passes.
    for parallelism, pass_rows in [(None, None), (None, 500), (7, 900)]:
        back = read_shuffle(spark, topic, kafka=kafka_conf, parallelism=parallelism)
        out = apply_per_key(
            back, ["k", "j"], ordered_stats, OUT, order_by=["t", "id"], pass_rows=pass_rows
        )
        assert in_reader(out)
        assert rows(out) == want, (parallelism, pass_rows)


def test_in_reader_matches_the_sorting_path_including_null_order_values(spark, kafka_conf, unique):
    topic = unique("pk-paths")
    write(skewed(spark), topic, kafka_conf)
    back = read_shuffle(spark, topic, kafka=kafka_conf)
    fast = apply_per_key(back, ["k", "j"], ordered_stats, OUT, order_by=["t", "id"])
    # A filter the reader cannot reproduce: Spark sorts within partitions instead.
    sorted_path = apply_per_key(
        back.filter(F.col("id") >= 0), ["k", "j"], ordered_stats, OUT, order_by=["t", "id"]
    )
    assert in_reader(fast)
    assert not in_reader(sorted_path)
    assert rows(fast) == rows(sorted_path)


def test_per_batch_never_splits_a_key_across_calls(spark, kafka_conf, unique):
    topic = unique("pk-batch")
    src = skewed(spark)
    write(src, topic, kafka_conf)
    counts = {(r.k, r.j): r["count"] for r in src.groupBy("k", "j").count().collect()}

    def whole_keys(table: pa.Table) -> pa.Table:
        got = table.group_by(["k", "j"]).aggregate([("id", "count"), ("x", "sum")])
        keys = zip(got["k"].to_pylist(), got["j"].to_pylist(), strict=True)
        for (k, j), n in zip(keys, got["id_count"].to_pylist(), strict=True):
            assert counts[(k, j)] == n, f"key {(k, j)}: {n} of its {counts[(k, j)]} rows"
        return pa.table({"k": got["k"], "j": got["j"], "n": got["id_count"], "sx": got["x_sum"]})

    schema = "k string, j int, n long, sx double"
    back = read_shuffle(spark, topic, kafka=kafka_conf)
    out = apply_per_key(back, ["k", "j"], whole_keys, schema, per="batch", data="arrow",
                        pass_rows=700)  # fmt: skip
    assert in_reader(out)
    want = src.groupBy("k", "j").agg(F.count("*").alias("n"), F.sum("x").alias("sx"))
    norm = lambda df: sorted((r.k, r.j, r.n, round(r.sx, 6)) for r in df.collect())  # noqa: E731
    assert norm(out) == norm(want)


def test_projection_metadata_and_windows(spark, kafka_conf, unique):
    topic = unique("pk-proj")
    d1, d2 = skewed(spark, 3000), skewed(spark, 2000, offset=3000)
    write(d1, topic, kafka_conf, window="d1")
    write(d2, topic, kafka_conf, window="d2")
    back = read_shuffle(spark, topic, kafka=kafka_conf, with_metadata=True)
    projected = back.select("j", "k", "id", "_window")
    assert shuffle_scan_options(projected) is not None
    assert shuffle_scan_options(back.withColumn("z", F.lit(1))) is None

    def per_key(pdf):
        assert list(pdf.columns) == ["j", "k", "id", "_window"]
        return pd.DataFrame(
            {"k": [pdf.k.iat[0]], "j": [int(pdf.j.iat[0])], "n": [len(pdf)],
             "windows": [",".join(sorted(set(pdf["_window"])))]}
        )  # fmt: skip

    out = apply_per_key(projected, ["k", "j"], per_key, "k string, j int, n long, windows string")
    assert in_reader(out)
    both = d1.unionByName(d2).groupBy("k", "j").count()
    got = {(r.k, r.j): r.n for r in out.collect()}
    assert got == {(r.k, r.j): r["count"] for r in both.collect()}
    windows = {r.windows for r in out.collect()}
    assert windows <= {"d1", "d2", "d1,d2"} and "d1,d2" in windows


def test_foreign_or_missing_key_is_refused_before_anything_runs(spark, kafka_conf, unique):
    topic = unique("pk-refuse")
    write(skewed(spark, 300), topic, kafka_conf)
    back = read_shuffle(spark, topic, kafka=kafka_conf)
    with pytest.raises(ShuffleKeyError, match="keyed by"):
        apply_per_key(back, "k", ordered_stats, OUT)  # half of the key
    with pytest.raises(ShuffleKeyError, match="keyed by"):
        apply_per_key(back, ["k", "t"], ordered_stats, OUT)
    with pytest.raises(ShuffleKeyError):
        apply_per_key(back.select("k", "id"), ["k", "j"], ordered_stats, OUT)
