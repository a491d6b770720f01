"""Spark SQL's ``hash`` over whole Arrow arrays, in numpy. No Spark, no Kafka.

The same function as :mod:`orchestration.shuffle.core.keygroups` (Murmur3 x86 32-bit, seed 42,
chained over the key columns: each column's hash is the next column's seed; a null leaves
the running hash unchanged), computed for every row of a batch at once, so a writer that
reads its rows with pyarrow can key them without handing them to the JVM.

Per Arrow type, as Spark's ``Murmur3Hash`` hashes the matching Spark type:

- ``bool`` -> ``hashInt(1 or 0)``; ``int8``/``int16``/``int32``/``date32`` -> ``hashInt``;
- ``int64``, ``timestamp[us]`` (with or without a time zone) -> ``hashLong`` (low word,
  then high word); timestamps of another unit are cast to microseconds first;
- ``float32`` -> ``hashInt(floatToIntBits)``, ``float64`` -> ``hashLong(doubleToLongBits)``,
  both with -0.0 hashed as 0.0 and every NaN as the canonical NaN;
- ``string``/``binary`` (and their large and view forms) -> ``hashUnsafeBytes`` over the
  bytes, whose trailing 1-3 bytes are mixed one at a time as sign-extended ints;
- ``decimal128`` of precision <= 18 -> ``hashLong`` of the unscaled value. Spark hashes a
  wider decimal by the bytes of its ``BigInteger``; that is not implemented here.

Everything is uint32 arithmetic on numpy arrays (products wrap around modulo 2**32, as
Java's ints do). Strings are hashed word by word over Arrow's offsets and data buffers:
word *i* is mixed into every string at least ``4 * (i + 1)`` bytes long, with the strings
ordered by length so that those always form a prefix.

Example::

    >>> import pyarrow as pa
    >>> key_groups([pa.array(["N14228"])], 128).tolist() == [1853464548 % 128]
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SPARK_HASH_SEED = 42

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_H_ADD = np.uint32(0xE6546B64)
_F1 = np.uint32(0x85EBCA6B)
_F2 = np.uint32(0xC2B2AE35)
_FIVE = np.uint32(5)

# Spark's floatToIntBits / doubleToLongBits map every NaN to these.
_FLOAT_NAN_BITS = np.uint32(0x7FC00000)
_DOUBLE_NAN_BITS = np.uint64(0x7FF8000000000000)

# Decimals up to this precision fit a long; Spark hashes them as one.
MAX_LONG_DIGITS = 18

# A key column as Arrow hands it over: one array, or a table's chunked column.
ArrayLike: TypeAlias = pa.Array | pa.ChunkedArray

_FIXED = frozenset(
    {
        pa.bool_(),
        pa.int8(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.date32(),
        pa.float32(),
        pa.float64(),
    }
)


def unsupported_reason(t: pa.DataType) -> str | None:
    """Why a key column of Arrow type ``t`` cannot be hashed here, or None if it can."""
    if t in _FIXED or pa.types.is_timestamp(t) or is_bytes(t):
        return None
    if pa.types.is_decimal128(t):
        if t.precision <= MAX_LONG_DIGITS:
            return None
        return f"decimal of precision {t.precision} (> {MAX_LONG_DIGITS}) is not supported"
    return f"type {t} is not supported"


def is_bytes(t: pa.DataType) -> bool:
    """Whether ``t`` holds strings or binaries (of any offset width, or views)."""
    return (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_string_view(t)
        or pa.types.is_binary_view(t)
    )


# --- Murmur3 x86 32-bit, in place on uint32 arrays -------------------------------------


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    t = x >> np.uint32(32 - r)
    x <<= np.uint32(r)
    x |= t
    return x


def _mix_k1(k: np.ndarray) -> np.ndarray:
    k *= _C1
    _rotl(k, 15)
    k *= _C2
    return k


def _mix_h1(h: np.ndarray, k: np.ndarray) -> np.ndarray:
    h ^= k
    _rotl(h, 13)
    h *= _FIVE
    h += _H_ADD
    return h


def _fmix(h: np.ndarray, length: np.ndarray | np.uint32) -> np.ndarray:
    h ^= length
    h ^= h >> np.uint32(16)
    h *= _F1
    h ^= h >> np.uint32(13)
    h *= _F2
    h ^= h >> np.uint32(16)
    return h


def _hash_int(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """``hashInt`` of uint32 ``values`` (consumed) with per-row ``seed`` (not modified)."""
    h = seed.copy()
    _mix_h1(h, _mix_k1(values))
    return _fmix(h, np.uint32(4))


def _hash_long(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """``hashLong`` of 64-bit ``values`` (any 8-byte integer dtype) with per-row ``seed``."""
    words = np.ascontiguousarray(values).view(np.uint32).reshape(-1, 2)
    if np.little_endian:
        low, high = words[:, 0], words[:, 1]
    else:  # pragma: no cover - numpy's native order on the platforms Spark runs on
        low, high = words[:, 1], words[:, 0]
    h = seed.copy()
    _mix_h1(h, _mix_k1(low.copy()))
    _mix_h1(h, _mix_k1(high.copy()))
    return _fmix(h, np.uint32(8))


# Rows hashed at a time (see spark_hash_arrays).
_BLOCK_ROWS = 64 * 1024

# Words of a string gathered at once (see _hash_bytes).
_WIDE = 8


def _at_any_byte(data: np.ndarray, width: int) -> np.ndarray:
    """A view whose item j is the ``width`` bytes of ``data`` from byte j on."""
    return np.ndarray(
        shape=(len(data) - width + 1,), dtype=f"V{width}", buffer=data, offset=0, strides=(1,)
    )


def _hash_bytes(offsets: np.ndarray, data: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """``hashUnsafeBytes`` of every value given by Arrow ``offsets`` (n + 1) into ``data``."""
    starts = offsets[:-1].astype(np.int64)
    lengths = np.diff(offsets).astype(np.int64)
    h = seed.copy()
    n = len(h)
    if n == 0:
        return h
    words = lengths >> 2
    wmin, wmax = int(words.min()), int(words.max())
    if wmax:
        padded = np.concatenate((data, np.zeros(3, np.uint8))) if len(data) < 4 else data
        # Words every string has, mixed into all rows at once. numpy gathers a run of
        # bytes at any offset fastest as one opaque item, so up to _WIDE words are
        # gathered together and split into words afterwards.
        for first in range(0, wmin, _WIDE):
            count = min(_WIDE, wmin - first)
            block = _at_any_byte(padded, 4 * count)[starts + 4 * first]
            block = np.ascontiguousarray(block.view("<u4").reshape(n, count).T)
            for word in block:
                _mix_h1(h, _mix_k1(word))
        if wmax > wmin:
            # The rest: only the strings that long, longest first, so that the strings
            # having word i are always a prefix of this order.
            at_byte = _at_any_byte(padded, 4)
            rest = np.flatnonzero(words > wmin)
            descending = wmax - words[rest]
            if wmax - wmin <= np.iinfo(np.uint16).max:
                # A stable sort of 16-bit integers is a radix sort in numpy: linear.
                descending = descending.astype(np.uint16)
            order = rest[np.argsort(descending, kind="stable")]
            sorted_words = words[order]
            sorted_starts = starts[order]
            hs = h[order]
            # counts[i - wmin]: how many strings have word i (sorted_words is descending).
            counts = np.searchsorted(-sorted_words, -np.arange(wmin, wmax), side="left")
            for i in range(wmin, wmax):
                c = int(counts[i - wmin])
                word = at_byte[sorted_starts[:c] + 4 * i].view("<u4")
                _mix_h1(hs[:c], _mix_k1(word))
            h[order] = hs
    tails = lengths & 3
    tails_max = int(tails.max())
    if tails_max:
        tails_min = int(tails.min())
        signed = data.view(np.int8)
        tail_starts = starts + (words << 2)
        for j in range(tails_max):
            # Spark's quirk: each trailing byte is mixed alone, sign-extended to an int.
            if j < tails_min:
                k = signed[tail_starts + j].astype(np.int32).view(np.uint32)
                _mix_h1(h, _mix_k1(k))
            else:
                rows = np.flatnonzero(tails > j)
                k = signed[tail_starts[rows] + j].astype(np.int32).view(np.uint32)
                h[rows] = _mix_h1(h[rows], _mix_k1(k))
    return _fmix(h, lengths.astype(np.uint32))


# --- Arrow arrays to numpy -------------------------------------------------------------


def _values(arr: pa.Array, dtype: type | np.dtype) -> np.ndarray:
    """The values buffer of a fixed-width array as numpy (nulls hold arbitrary values)."""
    buf = arr.buffers()[1]
    width = np.dtype(dtype).itemsize
    return np.frombuffer(buf, dtype=dtype, count=len(arr), offset=arr.offset * width)


def _column_hash(arr: pa.Array, seed: np.ndarray) -> np.ndarray:
    t = arr.type
    if pa.types.is_boolean(t):
        bits = pc.fill_null(arr, False).to_numpy(zero_copy_only=False)
        return _hash_int(bits.astype(np.uint32), seed)
    if t in (pa.int8(), pa.int16()):
        v = _values(arr, np.int8 if t == pa.int8() else np.int16)
        return _hash_int(v.astype(np.int32).view(np.uint32), seed)
    if t in (pa.int32(), pa.date32()):
        return _hash_int(_values(arr, np.uint32).copy(), seed)
    if t == pa.int64():
        return _hash_long(_values(arr, np.int64), seed)
    if pa.types.is_timestamp(t):
        if t.unit != "us":
            arr = arr.cast(pa.timestamp("us", t.tz))
        return _hash_long(_values(arr, np.int64), seed)
    if t == pa.float32():
        v = _values(arr, np.float32)
        bits = np.where(v == 0.0, np.float32(0.0), v).view(np.uint32)
        return _hash_int(np.where(np.isnan(v), _FLOAT_NAN_BITS, bits), seed)
    if t == pa.float64():
        v = _values(arr, np.float64)
        bits = np.where(v == 0.0, 0.0, v).view(np.uint64)
        return _hash_long(np.where(np.isnan(v), _DOUBLE_NAN_BITS, bits), seed)
    if pa.types.is_decimal128(t) and t.precision <= MAX_LONG_DIGITS:
        # 16-byte little-endian two's complement; the value fits the low 8 bytes.
        words = np.frombuffer(
            arr.buffers()[1], dtype=np.int64, count=2 * len(arr), offset=arr.offset * 16
        )
        return _hash_long(words[0::2] if np.little_endian else words[1::2], seed)
    if is_bytes(t):
        if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
            arr = arr.cast(pa.large_binary())
        large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
        _, offsets_buf, data_buf = arr.buffers()
        offsets = np.frombuffer(
            offsets_buf,
            dtype=np.int64 if large else np.int32,
            count=len(arr) + 1,
            offset=arr.offset * (8 if large else 4),
        )
        data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.empty(0, np.uint8)
        return _hash_bytes(offsets, data, seed)
    raise TypeError(f"cannot hash a key column of Arrow type {t}: {unsupported_reason(t)}")


def _combine(column: ArrayLike) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def spark_hash_arrays(columns: Sequence[ArrayLike], seed: int = SPARK_HASH_SEED) -> np.ndarray:
    """Spark's ``hash(c1, c2, ...)`` of every row: a signed int32 numpy array.

    Args:
        columns: The key columns, equally long Arrow arrays (or chunked arrays).
        seed: The first column's seed (Spark's ``hash`` uses 42).

    Raises:
        TypeError: A column's type is not supported (see :func:`unsupported_reason`).
        ValueError: No columns, or columns of different lengths.
    """
    if not columns:
        raise ValueError("hashing needs at least one key column")
    arrays = [_combine(c) for c in columns]
    n = len(arrays[0])
    if any(len(a) != n for a in arrays):
        raise ValueError(f"key columns differ in length: {[len(a) for a in arrays]}")
    out = np.empty(n, dtype=np.uint32)
    # Blocks of rows whose temporaries stay in the CPU's caches: string words are
    # gathered from random places, several times faster from cached data.
    for start in range(0, n, _BLOCK_ROWS):
        stop = min(n, start + _BLOCK_ROWS)
        h = np.full(stop - start, seed & 0xFFFFFFFF, dtype=np.uint32)
        for arr in arrays:
            block = arr.slice(start, stop - start) if stop - start < n else arr
            hashed = _column_hash(block, h)
            if block.null_count:
                # A null leaves the running hash as it was.
                valid = block.is_valid().to_numpy(zero_copy_only=False)
                hashed = np.where(valid, hashed, h)
            h = hashed
        out[start:stop] = h
    return out.view(np.int32)


def key_groups(
    columns: Sequence[ArrayLike], max_parallelism: int, seed: int = SPARK_HASH_SEED
) -> np.ndarray:
    """``pmod(hash(c1, c2, ...), max_parallelism)`` of every row, as int32.

    Equals :func:`orchestration.shuffle.core.keygroups.key_group_of` row by row, and Spark's own
    expression.
    """
    if max_parallelism <= 0:
        raise ValueError(f"max_parallelism must be positive, got {max_parallelism}")
    h = spark_hash_arrays(columns, seed)
    if max_parallelism & (max_parallelism - 1) == 0:
        # pmod by a power of two keeps the low bits of the two's complement.
        return (h.view(np.uint32) & np.uint32(max_parallelism - 1)).view(np.int32)
    return np.remainder(h.astype(np.int64), max_parallelism).astype(np.int32)
