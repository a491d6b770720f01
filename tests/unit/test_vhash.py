"""The vectorized hash against the pure, per-value one (itself checked against Spark)."""

import datetime as dt
import decimal
import math
import random
import struct

import numpy as np
import pyarrow as pa
import pytest

from orchestration.shuffle.core.keygroups import SPARK_HASH_SEED, hash_int, hash_long, spark_hash
from orchestration.shuffle.core.vhash import key_groups, spark_hash_arrays, unsupported_reason

N = 3000
ALPHABET = "abcXYZ09 -_é日本語\u00ff\u0100🎉\U0001f600\x80"


def random_strings(rng: random.Random, n: int = N) -> list[str]:
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 40))) for _ in range(n)]


def signed(h: int) -> int:
    return h - (1 << 32) if h >= (1 << 31) else h


def expected(values: list, types: tuple[str, ...] | None = None) -> list[int]:
    return [spark_hash(v if isinstance(v, tuple) else (v,), types) for v in values]


def test_known_spark_values():
    # hash(...) values printed by Spark 4.3 (see test_keygroups.py).
    cases = [
        (pa.array(["N14228", "", "é日本🎉"]), [1853464548, 142593372, -1845002317]),
        (pa.array([5], pa.int64()), [1607884268]),
        (pa.array([True]), [-559580957]),
        (pa.array([dt.date(2013, 1, 1)]), [-1477305664]),
        (pa.array([dt.datetime(2013, 1, 1, 5, 15)], pa.timestamp("us", "UTC")), [-1188171685]),
        (pa.array([-7], pa.int32()), [-1618159745]),
    ]
    for arr, want in cases:
        assert spark_hash_arrays([arr]).tolist() == want


def test_strings_of_every_length_and_alphabet():
    rng = random.Random(1)
    values = random_strings(rng) + ["", "a", "ab", "abc", "abcd", "abcde", "\x80\xff"]
    arr = pa.array(values, pa.string())
    want = expected(values)
    assert spark_hash_arrays([arr]).tolist() == want
    for t in (pa.large_string(), pa.string_view()):
        assert spark_hash_arrays([arr.cast(t)]).tolist() == want


def test_strings_of_one_length_and_of_very_different_lengths():
    same = ["abcdefgh"[: 1 + i % 8] * 2 for i in range(100)]
    assert spark_hash_arrays([pa.array(same)]).tolist() == expected(same)
    mixed = ["x" * 1000, "", "y" * 3, "z" * 17] * 10
    assert spark_hash_arrays([pa.array(mixed)]).tolist() == expected(mixed)


def test_binary_tail_bytes_are_sign_extended():
    values = [b"abcd\xff", b"abcd\x7f", b"\xfe", b"\x80\x81\x82", bytes(range(256))]
    arr = pa.array(values, pa.binary())
    assert spark_hash_arrays([arr]).tolist() == expected(values)
    assert spark_hash_arrays([arr.cast(pa.large_binary())]).tolist() == expected(values)


def test_longs_ints_and_small_ints():
    rng = random.Random(2)
    longs = [rng.randint(-(2**63), 2**63 - 1) for _ in range(N)] + [0, -1, 2**63 - 1, -(2**63)]
    assert spark_hash_arrays([pa.array(longs, pa.int64())]).tolist() == expected(longs)
    ints = [rng.randint(-(2**31), 2**31 - 1) for _ in range(N)] + [0, -1, 2**31 - 1, -(2**31)]
    assert spark_hash_arrays([pa.array(ints, pa.int32())]).tolist() == expected(ints, ("int",))
    for t, bits in ((pa.int8(), 8), (pa.int16(), 16)):
        small = [rng.randint(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) for _ in range(500)]
        got = spark_hash_arrays([pa.array(small, t)]).tolist()
        assert got == expected(small, ("tinyint" if bits == 8 else "smallint",))


def test_booleans_dates_timestamps():
    rng = random.Random(3)
    bools = [rng.random() < 0.5 for _ in range(100)]
    assert spark_hash_arrays([pa.array(bools)]).tolist() == expected(bools)
    days = [dt.date(1900, 1, 1) + dt.timedelta(days=rng.randint(0, 80_000)) for _ in range(N)]
    assert spark_hash_arrays([pa.array(days, pa.date32())]).tolist() == expected(days)
    start = dt.datetime(1960, 1, 1, tzinfo=dt.UTC)
    stamps = [start + dt.timedelta(microseconds=rng.randint(0, 3 * 10**15)) for _ in range(N)]
    want = expected(stamps)
    arr = pa.array(stamps, pa.timestamp("us", "UTC"))
    for t in (pa.timestamp("us", "UTC"), pa.timestamp("us"), pa.timestamp("ns", "UTC")):
        assert spark_hash_arrays([arr.cast(t)]).tolist() == want


def test_doubles_and_floats_normalize_zero_and_nan():
    rng = random.Random(4)
    doubles = [rng.uniform(-1e300, 1e300) for _ in range(N)]
    doubles += [0.0, -0.0, math.nan, -math.nan, math.inf, -math.inf, 5e-324]
    arr = pa.array(doubles, pa.float64())
    assert spark_hash_arrays([arr]).tolist() == expected(doubles)
    # A NaN with another payload hashes as the canonical one.
    odd_nan = np.array([0x7FF0000000000001], np.uint64).view(np.float64)
    assert spark_hash_arrays([pa.array(odd_nan)]).tolist() == expected([math.nan])
    floats = [0.0, -0.0, math.nan, 1.5, -2.25, 3.4e38, math.inf]
    want = []
    for f in floats:
        f = 0.0 if f == 0.0 else f
        bits = 0x7FC00000 if math.isnan(f) else struct.unpack("<I", struct.pack("<f", f))[0]
        want.append(signed(hash_int(bits, SPARK_HASH_SEED)))
    assert spark_hash_arrays([pa.array(floats, pa.float32())]).tolist() == want


def test_decimals_hash_their_unscaled_long():
    values = [decimal.Decimal("123.45"), decimal.Decimal("-0.01"), decimal.Decimal("0")]
    values.append(decimal.Decimal("-999999999999999.999"))
    arr = pa.array(values, pa.decimal128(18, 3))
    want = [signed(hash_long(int(v.scaleb(3)), SPARK_HASH_SEED)) for v in values]
    assert spark_hash_arrays([arr]).tolist() == want
    assert unsupported_reason(pa.decimal128(19, 0)) is not None


def test_composite_keys_chain_and_nulls_leave_the_hash():
    rng = random.Random(5)
    strings = random_strings(rng, 500)
    longs = [rng.randint(-(2**63), 2**63 - 1) for _ in range(500)]
    ints = [None if i % 7 == 0 else rng.randint(-100, 100) for i in range(500)]
    strings_n = [None if i % 5 == 0 else s for i, s in enumerate(strings)]
    got = spark_hash_arrays(
        [pa.array(strings_n), pa.array(longs, pa.int64()), pa.array(ints, pa.int32())]
    )
    want = expected(list(zip(strings_n, longs, ints, strict=True)), ("string", "bigint", "int"))
    assert got.tolist() == want


def test_sliced_and_chunked_arrays():
    rng = random.Random(6)
    strings = random_strings(rng, 400)
    longs = [rng.randint(-(2**40), 2**40) for _ in range(400)]
    s_arr, l_arr = pa.array(strings), pa.array(longs, pa.int64())
    want = expected(list(zip(strings, longs, strict=True)))
    assert (
        spark_hash_arrays([s_arr.slice(100, 50), l_arr.slice(100, 50)]).tolist() == (want[100:150])
    )
    chunked = pa.chunked_array([s_arr.slice(0, 123), s_arr.slice(123)])
    assert spark_hash_arrays([chunked, l_arr]).tolist() == want


@pytest.mark.parametrize("m", [1, 7, 128, 1000, 2**20])
def test_key_groups_are_pmod(m):
    rng = random.Random(m)
    strings = random_strings(rng, 1000)
    got = key_groups([pa.array(strings)], m)
    assert got.dtype == np.int32
    assert got.tolist() == [h % m for h in expected(strings)]


def test_empty_and_unsupported():
    assert spark_hash_arrays([pa.array([], pa.string())]).tolist() == []
    assert spark_hash_arrays([pa.array(["", ""])]).tolist() == expected(["", ""])
    assert unsupported_reason(pa.list_(pa.int32())) is not None
    assert unsupported_reason(pa.uint32()) is not None
    with pytest.raises(TypeError, match="uint32"):
        spark_hash_arrays([pa.array([1], pa.uint32())])
    with pytest.raises(ValueError, match="at least one"):
        spark_hash_arrays([])
