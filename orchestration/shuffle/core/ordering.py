"""Spark's ascending sort order (nulls first), computed over Arrow columns with numpy.

Spark orders values of a sort column as follows, and so does :func:`spark_order`:

- nulls first;
- numbers by value, with every NaN equal to every other and after all numbers (``inf``
  included), and ``-0.0`` equal to ``0.0``;
- booleans false before true; dates and timestamps by their instant;
- strings and binaries by their bytes, unsigned (a string's UTF-8 bytes: not its UTF-16
  code units); decimals by value.

Arrow's own sort differs in one of these (with nulls first, it puts NaN first too), so each
column becomes numpy sort keys instead: numbers as they are, strings, binaries and decimals
as the rank of their value among the column's distinct values (which Arrow's sort of those
distinct values gives, in the order above), and a null flag before any column that has
nulls. ``numpy.lexsort`` of those keys is stable: rows that compare equal keep their order.

Example::

    spark_order([pa.array(["b", None, "a"])]).tolist()     # [1, 2, 0]
    spark_order([pa.array([float("nan"), 1.0])]).tolist()  # [1, 0]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from orchestration.shuffle.core.vhash import is_bytes


def _by_rank(t: pa.DataType) -> bool:
    return is_bytes(t) or pa.types.is_decimal(t)


def unordered_reason(t: pa.DataType) -> str | None:
    """Why :func:`spark_order` cannot order a column of Arrow type ``t``, or None if it can."""
    if pa.types.is_temporal(t):
        return None if t.bit_width in (32, 64) else f"type {t}"
    if (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_boolean(t)
        or pa.types.is_null(t)
        or _by_rank(t)
    ):
        return None
    return f"type {t}"


def sort_keys(column: pa.Array | pa.ChunkedArray) -> list[np.ndarray]:
    """``column``'s numpy sort keys, most significant first (none for a column of nulls only):
    sorting rows by them in that order sorts them as Spark's ascending sort does.

    Raises:
        TypeError: A column :func:`unordered_reason` refuses.
    """
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    t = arr.type
    why = unordered_reason(t)
    if why:
        raise TypeError(f"cannot order a column of {why}")
    if pa.types.is_null(t):
        return []
    keys: list[np.ndarray] = []
    if arr.null_count:
        keys.append(arr.is_valid().to_numpy(zero_copy_only=False))  # null (False) first
    if _by_rank(t):
        if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
            # Arrow sorts no view type: the same bytes as a plain array.
            arr = arr.cast(pa.large_string() if pa.types.is_string_view(t) else pa.large_binary())
        encoded = pc.dictionary_encode(arr)
        values = encoded.dictionary
        rank = np.empty(len(values), dtype=np.int64)
        rank[pc.sort_indices(values).to_numpy()] = np.arange(len(values), dtype=np.int64)
        # A null's index is null: any rank will do, its flag sorts it first already.
        indices = pc.fill_null(encoded.indices, 0).to_numpy(zero_copy_only=False)
        keys.append(rank[indices] if len(values) else np.zeros(len(arr), dtype=np.int64))
        return keys
    if pa.types.is_temporal(t):
        arr = arr.view(pa.int64() if t.bit_width == 64 else pa.int32())
    if arr.null_count:
        arr = pc.fill_null(arr, pa.scalar(False if pa.types.is_boolean(t) else 0, arr.type))
    # numpy sorts every NaN after every number and compares -0.0 equal to 0.0, as Spark.
    keys.append(arr.to_numpy(zero_copy_only=False))
    return keys


def spark_order(
    columns: Sequence[pa.Array | pa.ChunkedArray], first: Sequence[np.ndarray] = ()
) -> np.ndarray:
    """The row order (indices) that sorts rows by ``columns`` as Spark's ascending sort,
    nulls first; rows that compare equal keep their order. ``first``: numpy keys that
    order the rows before the columns do (e.g. a group id).

    Raises:
        TypeError: A column :func:`unordered_reason` refuses.
    """
    keys: list[np.ndarray] = list(first)
    for column in columns:
        keys.extend(sort_keys(column))
    if not keys:
        n = len(columns[0]) if columns else 0
        return np.arange(n, dtype=np.int64)
    return np.lexsort(keys[::-1])
