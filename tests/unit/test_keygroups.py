import datetime as dt

import pytest

from orchestration.shuffle import key_group_of, key_group_range, partition_of
from orchestration.shuffle.core.keygroups import (
    hash_bytes,
    spark_hash,
    split_range,
    validate_layout,
)

# hash(...) values printed by Spark 4.3 (SELECT hash(col) ...) for these literals.
SPARK_HASHES = [
    ("N14228", 1853464548),
    (5, 1607884268),  # bigint
    (True, -559580957),
    (dt.date(2013, 1, 1), -1477305664),
    (dt.datetime(2013, 1, 1, 5, 15, tzinfo=dt.UTC), -1188171685),
    ("", 142593372),
    ("é日本🎉", -1845002317),
]


@pytest.mark.parametrize(("value", "expected"), SPARK_HASHES)
def test_matches_spark_on_known_values(value, expected):
    assert spark_hash(value) == expected


def test_int_column_hashes_as_32_bits():
    # SELECT hash(cast(-7 as int)) in Spark gives -1618159745; a bigint -7 hashes otherwise.
    assert spark_hash((-7,), types=("int",)) == -1618159745
    assert spark_hash(-7) != -1618159745


def test_composite_key_chains_the_seed():
    key = ("N14228", 5, dt.date(2013, 1, 1))
    assert spark_hash(key) == 430199340
    assert spark_hash(key) != spark_hash(("N14228",))


def test_naive_datetime_is_utc():
    naive = dt.datetime(2013, 1, 1, 5, 15)
    assert spark_hash(naive) == spark_hash(naive.replace(tzinfo=dt.UTC))


def test_tail_bytes_are_sign_extended():
    # Two byte strings that differ only in a high tail byte must hash apart.
    assert hash_bytes(b"abcd\xff", 42) != hash_bytes(b"abcd\x7f", 42)


def test_key_group_is_pmod():
    for key in ["a", "b", "N14228", "", "zz"]:
        g = key_group_of(key, 128)
        assert 0 <= g < 128
        assert g == spark_hash(key) % 128


def test_partition_of_and_ranges_agree():
    m, n = 128, 8
    assert partition_of(17, m, n) == 17 * 8 // 128 == 1
    seen = []
    for p in range(n):
        r = key_group_range(p, m, n)
        assert all(partition_of(g, m, n) == p for g in r)
        seen.extend(r)
    assert seen == list(range(m))


@pytest.mark.parametrize(("m", "n"), [(7, 3), (10, 10), (128, 5), (1, 1)])
def test_ranges_are_contiguous_for_uneven_layouts(m, n):
    ranges = [key_group_range(p, m, n) for p in range(n)]
    assert [g for r in ranges for g in r] == list(range(m))
    assert all(len(r) >= 1 for r in ranges)


def test_split_range():
    parts = split_range(range(16, 32), 3)
    assert [g for r in parts for g in r] == list(range(16, 32))
    assert len(parts) == 3
    assert split_range(range(0, 2), 3)[0] == range(0, 0)


def test_invalid_layouts():
    with pytest.raises(ValueError, match="max_parallelism"):
        validate_layout(8, 4)
    with pytest.raises(ValueError, match="num_partitions"):
        validate_layout(0, 4)
    with pytest.raises(ValueError):
        partition_of(128, 128, 8)
    with pytest.raises(TypeError, match="dict"):
        spark_hash({"a": 1})
