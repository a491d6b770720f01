"""key_group_of (pure Python) against Spark's own pmod(hash(...)) on random keys."""

import datetime as dt
import random

import pytest
from pyspark.sql import functions as F

from orchestration.shuffle import key_group_of

pytestmark = pytest.mark.integration

N = 10_000
M = 128


def random_string(rng: random.Random) -> str:
    n = rng.choice([0, 1, 2, 3, 4, 5, 7, 8, 13, 40])
    alphabet = "abcXYZ09 -_é日本語\u00ff\u0100🎉\U0001f600"
    return "".join(rng.choice(alphabet) for _ in range(n))


def test_matches_spark_on_random_keys(spark):
    rng = random.Random(20130101)
    rows = []
    for _ in range(N):
        rows.append(
            (
                random_string(rng),
                rng.randint(-(2**63), 2**63 - 1),
                rng.randint(-(2**31), 2**31 - 1),
                rng.random() < 0.5,
                dt.date(1900, 1, 1) + dt.timedelta(days=rng.randint(0, 80_000)),
                dt.datetime(1960, 1, 1, tzinfo=dt.UTC)
                + dt.timedelta(microseconds=rng.randint(0, 3 * 10**15)),
            )
        )
    df = spark.createDataFrame(rows, "s string, l bigint, i int, b boolean, d date, t timestamp")
    cols = ["s", "l", "i", "b", "d", "t"]
    exprs = [F.pmod(F.hash(F.col(c)), F.lit(M)).alias(c) for c in cols]
    exprs.append(F.pmod(F.hash(F.col("s"), F.col("l"), F.col("d")), F.lit(M)).alias("sld"))
    exprs.append(F.pmod(F.hash(F.col("i"), F.col("s")), F.lit(M)).alias("is"))
    got = spark.createDataFrame(rows, df.schema).select(*exprs).collect()
    mismatches = []
    for row, spark_row in zip(rows, got, strict=True):
        s, lg, i, b, d, t = row
        mine = {
            "s": key_group_of(s, M),
            "l": key_group_of(lg, M),
            "i": key_group_of((i,), M, types=("int",)),
            "b": key_group_of(b, M),
            "d": key_group_of(d, M),
            "t": key_group_of(t, M),
            "sld": key_group_of((s, lg, d), M),
            "is": key_group_of((i, s), M, types=("int", "string")),
        }
        for c, v in mine.items():
            if v != spark_row[c]:
                mismatches.append((c, row, v, spark_row[c]))
    assert mismatches == []
    assert len(got) == N


def test_vectorized_hash_matches_spark_on_random_keys(spark):
    import decimal
    import math

    import pyarrow as pa

    from orchestration.shuffle.core.vhash import key_groups

    rng = random.Random(20130102)
    specials = [0.0, -0.0, math.nan, math.inf, -math.inf, 5e-324]
    rows = []
    for i in range(N):
        rows.append(
            (
                random_string(rng) if i % 10 else "x" * rng.randint(0, 40),
                rng.choice([-(2**63), 2**63 - 1, -1, 0])
                if i % 50 == 0
                else rng.randint(-(2**63), 2**63 - 1),
                rng.randint(-(2**31), 2**31 - 1),
                rng.randint(-128, 127),
                rng.randint(-(2**15), 2**15 - 1),
                rng.random() < 0.5,
                dt.date(1900, 1, 1) + dt.timedelta(days=rng.randint(0, 80_000)),
                dt.datetime(1960, 1, 1, tzinfo=dt.UTC)
                + dt.timedelta(microseconds=rng.randint(0, 3 * 10**15)),
                rng.choice(specials) if i % 20 == 0 else rng.uniform(-1e12, 1e12),
                decimal.Decimal(rng.randint(-(10**17), 10**17)).scaleb(-4),
                bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 9))),
            )
        )
    schema = (
        "s string, l bigint, i int, t8 tinyint, t16 smallint, b boolean, d date, t timestamp, "
        "x double, dec decimal(18, 4), bin binary"
    )
    df = spark.createDataFrame(rows, schema).withColumn("f", F.col("x").cast("float"))
    cols = df.columns
    composites = {
        "sld": ["s", "l", "d"],
        "is": ["i", "s"],
        "all": cols,
        "tx": ["t", "x", "b", "dec"],
    }
    exprs = [F.pmod(F.hash(F.col(c)), F.lit(M)).alias(f"g_{c}") for c in cols]
    exprs += [
        F.pmod(F.hash(*[F.col(c) for c in cs]), F.lit(M)).alias(f"g_{name}")
        for name, cs in composites.items()
    ]
    table = df.select(*cols, *exprs).toArrow()
    assert table.num_rows == N
    mismatches = {}
    for name, cs in [(c, [c]) for c in cols] + list(composites.items()):
        mine = key_groups([table.column(c) for c in cs], M)
        spark_groups = table.column(f"g_{name}").cast(pa.int32()).to_numpy()
        bad = int((mine != spark_groups).sum())
        if bad:
            mismatches[name] = bad
    assert mismatches == {}
