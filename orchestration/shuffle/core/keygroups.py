"""Key groups: which partition a key belongs to. Pure Python; no Spark, no Kafka.

A key's group is ``pmod(hash(k1, k2, ...), max_parallelism)`` where ``hash`` is Spark SQL's
``hash`` function (Murmur3 x86 32-bit, seed 42, chained over the key columns: each column's
hash is the seed of the next). A group's partition is
``key_group * num_partitions // max_parallelism``, so every partition holds one contiguous
range of key groups and the number of groups, fixed when a shuffle is created, lets
consumers run at any parallelism without re-partitioning.

The row path of a write computes key groups with Spark's own expression, the columnar path
with :mod:`orchestration.shuffle.core.vhash` (the same function over whole Arrow arrays); this
module is an independent, per-value implementation of it, for planning, checks and tests.

Example::

    >>> key_group_of(("N14228",), 128) == key_group_of("N14228", 128)
    True
    >>> partition_of(17, 128, 8)
    1
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from collections.abc import Sequence
from typing import Any

SPARK_HASH_SEED = 42

_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_MASK = 0xFFFFFFFF
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DATE = dt.date(1970, 1, 1)


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _mix_k1(k1: int) -> int:
    k1 = (k1 * _C1) & _MASK
    k1 = _rotl(k1, 15)
    return (k1 * _C2) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = _rotl(h1, 13)
    return (h1 * 5 + 0xE6546B64) & _MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    return h1


def hash_int(value: int, seed: int) -> int:
    """Spark's ``Murmur3_x86_32.hashInt`` (unsigned 32-bit result)."""
    return _fmix(_mix_h1(seed & _MASK, _mix_k1(value & _MASK)), 4)


def hash_long(value: int, seed: int) -> int:
    """Spark's ``Murmur3_x86_32.hashLong``: low word, then high word."""
    value &= 0xFFFFFFFFFFFFFFFF
    h1 = _mix_h1(seed & _MASK, _mix_k1(value & _MASK))
    h1 = _mix_h1(h1, _mix_k1(value >> 32))
    return _fmix(h1, 8)


def hash_bytes(data: bytes, seed: int) -> int:
    """Spark's ``Murmur3_x86_32.hashUnsafeBytes``, used for strings and binary.

    Unlike reference Murmur3, the trailing 1-3 bytes are mixed one at a time, each as a
    sign-extended int: Spark keeps this for compatibility, and so must we.
    """
    n = len(data)
    aligned = n - n % 4
    h1 = seed & _MASK
    for (word,) in struct.iter_unpack("<I", data[:aligned]):
        h1 = _mix_h1(h1, _mix_k1(word))
    for b in data[aligned:]:
        h1 = _mix_h1(h1, _mix_k1(b - 256 if b >= 128 else b))
    return _fmix(h1, n)


def _to_signed(h: int) -> int:
    return h - (1 << 32) if h >= (1 << 31) else h


def _timestamp_micros(value: dt.datetime) -> int:
    # Naive datetimes are taken as UTC: the shuffle stores instants, never wall-clock time.
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def hash_value(value: Any, seed: int) -> int:
    """Hashes one key column value as Spark's ``hash`` would, given the running seed.

    Python types map to Spark types as PySpark infers them: ``str`` -> string, ``bool`` ->
    boolean, ``int`` -> bigint, ``float`` -> double, ``bytes`` -> binary, ``datetime`` ->
    timestamp, ``date`` -> date. ``None`` leaves the hash unchanged (as in Spark).
    """
    if value is None:
        return seed
    if isinstance(value, str):
        return hash_bytes(value.encode("utf-8"), seed)
    if isinstance(value, bool):
        return hash_int(1 if value else 0, seed)
    if isinstance(value, int):
        return hash_long(value, seed)
    if isinstance(value, float):
        # Spark normalizes -0.0 to 0.0 and hashes a double by its IEEE bits.
        if value == 0.0:
            value = 0.0
        if math.isnan(value):
            value = float("nan")
        (bits,) = struct.unpack("<q", struct.pack("<d", value))
        return hash_long(bits, seed)
    if isinstance(value, bytes | bytearray | memoryview):
        return hash_bytes(bytes(value), seed)
    if isinstance(value, dt.datetime):
        return hash_long(_timestamp_micros(value), seed)
    if isinstance(value, dt.date):
        return hash_int((value - _EPOCH_DATE).days, seed)
    raise TypeError(f"cannot compute a key group for a key of type {type(value).__name__}")


# Spark types hashed as a 32-bit int rather than as the 64-bit long a Python int infers to.
_INT_TYPES = frozenset({"int", "integer", "smallint", "short", "tinyint", "byte"})


def spark_hash(key: Sequence[Any] | Any, types: Sequence[str] | None = None) -> int:
    """Spark SQL's ``hash(k1, k2, ...)``: a signed 32-bit int.

    Args:
        key: The key column values (a tuple), or one value.
        types: Optional Spark type names of the key columns, for the one case inference
            cannot see: an ``int`` (or smaller) column, hashed as 32 bits.
    """
    values = key if isinstance(key, tuple | list) else (key,)
    if types is not None and len(types) != len(values):
        raise ValueError(f"{len(types)} key types given for {len(values)} key values")
    h = SPARK_HASH_SEED
    for i, v in enumerate(values):
        if types is not None and types[i].lower() in _INT_TYPES and v is not None:
            h = hash_int(int(v), h)
        else:
            h = hash_value(v, h)
    return _to_signed(h)


def key_group_of(
    key: Sequence[Any] | Any, max_parallelism: int, types: Sequence[str] | None = None
) -> int:
    """The key group of ``key`` (a tuple of key column values, or one value).

    Equals Spark's ``pmod(hash(k1, k2, ...), max_parallelism)``; see :func:`spark_hash`.
    """
    if max_parallelism <= 0:
        raise ValueError(f"max_parallelism must be positive, got {max_parallelism}")
    return spark_hash(key, types) % max_parallelism


def partition_of(key_group: int, max_parallelism: int, num_partitions: int) -> int:
    """The partition holding ``key_group``: ``key_group * num_partitions // max_parallelism``."""
    if not 0 <= key_group < max_parallelism:
        raise ValueError(f"key group {key_group} is outside [0, {max_parallelism})")
    return key_group * num_partitions // max_parallelism


def key_group_range(partition: int, max_parallelism: int, num_partitions: int) -> range:
    """The contiguous range of key groups that ``partition`` holds (may be empty)."""
    if not 0 <= partition < num_partitions:
        raise ValueError(f"partition {partition} is outside [0, {num_partitions})")
    # Smallest g with g * n // m >= p is ceil(p * m / n).
    start = -(-partition * max_parallelism // num_partitions)
    end = -(-(partition + 1) * max_parallelism // num_partitions)
    return range(start, end)


def split_range(groups: range, pieces: int) -> list[range]:
    """Splits a range of key groups into ``pieces`` contiguous, near-equal sub-ranges."""
    n = len(groups)
    bounds = [groups.start + i * n // pieces for i in range(pieces + 1)]
    return [range(bounds[i], bounds[i + 1]) for i in range(pieces)]


def validate_layout(num_partitions: int, max_parallelism: int) -> None:
    """Refuses a layout where some partition would hold no key group."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    if max_parallelism < num_partitions:
        raise ValueError(
            f"max_parallelism ({max_parallelism}) must be at least num_partitions "
            f"({num_partitions}): each partition needs at least one key group"
        )
