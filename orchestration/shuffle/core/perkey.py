"""Per-key work on rows of whole keys, in Arrow. Pure: pyarrow, numpy and pandas only.

:class:`KeyFunction` runs a user's function over a table that holds every row of each of
its keys (one pass of a shuffle read over a key-group range, or a run of key-sorted
batches): once per key (``per="key"``) or once for the whole table (``per="batch"``), on
pandas DataFrames or Arrow tables, and conforms what it returns to the output schema.

Grouping works on integer group ids, not on the key values: each key column is dictionary
encoded (a hash pass; nulls get an id of their own, so null keys form one group, as in
``groupBy``), the ids of several key columns are combined into one, and rows are ordered by
that id and then by ``order_by`` (ascending, nulls first, as Spark's ``sortWithinPartitions``
orders them). Sorting integers instead of strings is what makes this cheap.

A pass holds about a bound of rows (``pass_rows``), but a key group is never split, so one
key group can hold more: :class:`KeyedPass` then sets its largest keys apart (their rows go
to a spill as read), and the reader gives them to the function from there, a bundle of keys
at a time, or one key streamed through :meth:`KeyFunction.apply_key`.

Keys are compared as Spark's ``groupBy`` compares them, not as Arrow's hash kernels do:
Spark normalizes floating-point grouping keys (``-0.0`` is ``0.0``, every NaN is one NaN),
while Arrow hashes a float by its bits, so ``-0.0`` and ``0.0``, or two NaNs of different
payloads, would be two groups. :func:`spark_key` normalizes a key column first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from orchestration.shuffle.core.ordering import spark_order, unordered_reason

# Outputs gathered before they are converted and handed on: bounds what waits in memory.
EMIT_EVERY = 4096
# Rows of each batch a function of the iterator form receives (as Spark's
# ``spark.sql.execution.arrow.maxRecordsPerBatch`` by default).
ITERATOR_BATCH_ROWS = 10_000
# Rows of consecutive small keys converted to pandas at once in the iterator form.
ITERATOR_CHUNK_ROWS = 65_536
_GROUP_ID = "__group_id"


def spark_key(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A key column with its floating-point values as Spark normalizes grouping keys:
    ``-0.0`` as ``0.0`` and every NaN as the one canonical NaN. Other types are returned as
    they are (one chunk). Equal Spark keys then have equal bits.

    Example::

        spark_key(pa.array([-0.0, 0.0])).to_pylist()   # [0.0, 0.0]
    """
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_floating(arr.type) or len(arr) == 0:
        return arr
    # Adding +0.0 turns -0.0 into +0.0 (IEEE round-to-nearest) and leaves every other value.
    arr = pc.add(arr, pa.scalar(0.0, arr.type))
    if pc.any(pc.is_nan(arr)).as_py():
        arr = pc.if_else(pc.is_nan(arr), pa.scalar(float("nan"), arr.type), arr)
    return arr


def comparable_key(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """:func:`spark_key`, with a floating-point column viewed as integers of the same bits,
    so that Arrow's ``equal`` and ``not_equal`` find NaN equal to NaN, as Spark's grouping
    does."""
    arr = spark_key(column)
    if pa.types.is_floating(arr.type):
        return arr.view(pa.int64() if arr.type.bit_width == 64 else pa.int32())
    return arr


def group_ids(table: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """One int64 id per row, equal for rows with equal keys as Spark's ``groupBy`` finds
    them (null equals null; -0.0 equals 0.0; NaN equals NaN)."""
    ids: np.ndarray | None = None
    span = 1
    for k in keys:
        encoded = pc.dictionary_encode(spark_key(table.column(k)), null_encoding="encode")
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        size = max(len(encoded.dictionary), 1)
        if ids is None:
            ids, span = codes, size
            continue
        if span * size >= 2**62:
            # Compact the ids so far before they could overflow.
            compact = pc.dictionary_encode(pa.array(ids))
            ids = compact.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            span = max(len(compact.dictionary), 1)
        ids = ids * size + codes
        span *= size
    if ids is None:
        return np.zeros(table.num_rows, dtype=np.int64)
    return ids


def _key_table(rows: pa.Table | pa.RecordBatch, keys: Sequence[str]) -> pa.Table:
    """The key columns of ``rows`` alone, with no field metadata (so tables of several
    sources concatenate)."""
    return pa.table([rows.column(k) for k in keys], names=list(keys))


def largest_keys(
    table: pa.Table, keys: Sequence[str], min_rows: int
) -> tuple[pa.Table, np.ndarray]:
    """The keys of ``table`` with at least ``min_rows`` rows, largest first: their key
    columns (one row per key) and their row counts. Keys compare as in Spark's ``groupBy``.

    Example::

        largest_keys(pa.table({"k": ["a", "b", "a"]}), ["k"], 2)   # (k: ["a"], [2])
    """
    if table.num_rows == 0:
        return _key_table(table, keys).slice(0, 0), np.zeros(0, dtype=np.int64)
    ids = group_ids(table, keys)
    _, first, counts = np.unique(ids, return_index=True, return_counts=True)
    chosen = np.flatnonzero(counts >= max(int(min_rows), 1))
    chosen = chosen[np.argsort(-counts[chosen], kind="stable")]
    return _key_table(table, keys).take(first[chosen]), counts[chosen].astype(np.int64)


def key_index(rows: pa.Table | pa.RecordBatch, chosen: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """For each row of ``rows``, the index in ``chosen`` (distinct keys, as
    :func:`largest_keys` gives them) of its key, or -1; keys compare as in Spark's
    ``groupBy`` (null equals null, -0.0 equals 0.0, NaN equals NaN)."""
    n = chosen.num_rows
    if n == 0 or rows.num_rows == 0:
        return np.full(rows.num_rows, -1, dtype=np.int64)
    ids = group_ids(pa.concat_tables([_key_table(chosen, keys), _key_table(rows, keys)]), keys)
    wanted, got = ids[:n], ids[n:]
    order = np.argsort(wanted, kind="stable")
    ranked = wanted[order]
    pos = np.minimum(np.searchsorted(ranked, got), n - 1)
    return np.where(ranked[pos] == got, order[pos], -1).astype(np.int64)


# Keys set apart from a pass hold at least this share of its bound each.
HEAVY_SHARE = 8


class KeyedPass:
    """The rows of one pass as they are read, held up to about ``limit`` rows.

    A pass is a range of key groups, and a key group is never split, so a pass may hold
    more than ``limit`` rows. Whenever it does, the keys with at least ``limit /
    HEAVY_SHARE`` rows are set apart, largest first, until the rest fit in half the limit:
    their rows go to ``spill``, now and as they are read on (:attr:`apart` has those keys,
    :attr:`apart_rows` their rows seen), each key's rows in the order read. :meth:`bundles`
    groups those keys for the function. The rest is what :meth:`table` gives: every row of
    every other key. A pass of many small keys sets none apart and is held whole.

    With ``keep_largest`` (for a function that must hold a whole key anyway), the rows of
    the largest key set apart are kept instead (:meth:`kept`): holding it costs what the
    function's call will. The others still go, so what is held beyond that key stays
    bounded.

    Example::

        held = KeyedPass(("k",), 1000, spilled.append)
        for batch in batches:
            held.add(batch)
        rest, apart = held.table(schema), held.bundles()   # apart: the keys in `spilled`
    """

    def __init__(
        self,
        keys: Sequence[str],
        limit: int,
        spill: Callable[[pa.RecordBatch], None],
        *,
        keep_largest: bool = False,
    ):
        self.keys = tuple(keys)
        self.limit = max(int(limit), 1)
        self.keep_largest = keep_largest
        self.spill = spill
        self.held: list[pa.RecordBatch] = []
        self.rows = 0
        self.apart: pa.Table | None = None
        self.apart_rows = np.zeros(0, dtype=np.int64)
        self._kept: int | None = None  # index in `apart` of the key whose rows are kept
        self._kept_rows: list[pa.RecordBatch] = []
        self._check_at = self.limit

    def add(self, batch: pa.RecordBatch) -> None:
        if self.apart is not None and batch.num_rows:
            index = key_index(batch, self.apart, self.keys)
            hit = index >= 0
            if hit.any():
                self.apart_rows += np.bincount(index[hit], minlength=self.apart.num_rows)
                kept = index == self._kept if self._kept is not None else None
                if kept is not None and kept.any():
                    self._kept_rows.append(batch.filter(pa.array(kept)))
                self._spill(batch, hit if kept is None else hit & ~kept)
                batch = batch.filter(pa.array(~hit))
        if batch.num_rows:
            self.held.append(batch)
            self.rows += batch.num_rows
        if self.rows > self._check_at:
            self._set_apart()
            self._check_at = max(self.limit, 2 * self.rows)

    def _set_apart(self) -> None:
        table = pa.Table.from_batches(self.held)
        found, counts = largest_keys(table, self.keys, self.limit // HEAVY_SHARE)
        excess = self.rows - self.limit // 2
        take = int(np.searchsorted(np.cumsum(counts), excess)) + 1 if excess > 0 else 0
        found, counts = found.slice(0, take), counts[:take]
        if found.num_rows == 0:
            return
        index = key_index(table, found, self.keys)
        before = 0 if self.apart is None else self.apart.num_rows
        self.apart = found if self.apart is None else pa.concat_tables([self.apart, found])
        self.apart_rows = np.concatenate([self.apart_rows, counts])
        keep = self.keep_largest and (self._kept is None or counts[0] > self.apart_rows[self._kept])
        if keep:
            # The largest key found (found's first) outgrows the one kept: keep it instead,
            # and the one kept before goes with the others.
            for batch in self._kept_rows:
                self._spill(batch, None)
            self._kept = before
            self._kept_rows = table.filter(pa.array(index == 0)).to_batches()
        for batch in table.filter(pa.array(index > 0 if keep else index >= 0)).to_batches():
            self._spill(batch, None)
        table = table.filter(pa.array(index < 0))
        self.held = table.to_batches()
        self.rows = table.num_rows

    def _spill(self, batch: pa.RecordBatch, rows: np.ndarray | None) -> None:
        """Hands ``batch``'s ``rows`` (a mask; None: all) to ``spill``."""
        if rows is not None:
            if not rows.any():
                return
            batch = batch.filter(pa.array(rows))
        if batch.num_rows:
            self.spill(batch)

    def table(self, schema: pa.Schema) -> pa.Table:
        """The rows held (every row of each key not set apart); they are let go here."""
        held, self.held = self.held, []
        return pa.Table.from_batches(held, schema=schema)

    def kept(self) -> list[pa.RecordBatch]:
        """Every row of the key kept (``keep_largest``), or none; they are let go here."""
        kept, self._kept_rows = self._kept_rows, []
        return kept

    def bundles(self) -> list[pa.Table]:
        """The keys set apart and not kept, in bundles for the function: keys whose rows
        seen add up to at most ``limit`` go together; a key with more rows goes alone."""
        if self.apart is None:
            return []
        out: list[pa.Table] = []
        chosen: list[int] = []
        total = 0
        for i, rows in enumerate(self.apart_rows.tolist()):
            if i == self._kept:
                continue
            if chosen and total + rows > self.limit:
                out.append(self.apart.take(chosen))
                chosen, total = [], 0
            chosen.append(i)
            total += rows
        if chosen:
            out.append(self.apart.take(chosen))
        return out


def sort_by_key(
    table: pa.Table, keys: Sequence[str], order_by: Sequence[str] = ()
) -> tuple[pa.Table, np.ndarray]:
    """The rows grouped by key (ordered by ``order_by`` within a key), and where each key
    starts. Without ``order_by`` a key's rows keep their order."""
    if table.num_rows == 0:
        return table, np.zeros(0, dtype=np.int64)
    ids = group_ids(table, keys)
    if order_by:
        columns = [table.column(c) for c in order_by]
        if all(unordered_reason(c.type) is None for c in columns):
            order = spark_order(columns, first=[ids])
        else:
            sortable = pa.table(
                [pa.array(ids), *columns],
                names=[_GROUP_ID, *[f"{_GROUP_ID}{i}" for i in range(len(order_by))]],
            )
            order = sort_indices_nulls_first(sortable).to_numpy()
    else:
        order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    starts = np.concatenate(([0], np.flatnonzero(sorted_ids[1:] != sorted_ids[:-1]) + 1))
    return table.take(order), starts


def sort_indices_nulls_first(table: pa.Table) -> pa.Array:
    """The row order that sorts ``table`` by all its columns, ascending, nulls first, with
    Arrow's sort, on any pyarrow version this project takes: for columns
    :func:`~orchestration.shuffle.core.ordering.spark_order` cannot order (Arrow puts NaN
    before numbers there, where Spark puts it after them).

    Example::

        sort_indices_nulls_first(pa.table({"k": [2, None, 1]}))   # [1, 2, 0]
    """
    names = table.column_names
    if int(pa.__version__.split(".")[0]) >= 25:  # null placement per sort key since 25
        return pc.sort_indices(table, sort_keys=[(n, "ascending", "at_start") for n in names])
    return pc.sort_indices(
        table, sort_keys=[(n, "ascending") for n in names], null_placement="at_start"
    )


@dataclass(frozen=True)
class KeyFunction:
    """A user's per-key function with what it needs to run anywhere (picklable).

    Args:
        keys: The key columns.
        fn: Receives one key's rows (``per="key"``) or whole keys (``per="batch"``) as a
            pandas DataFrame (``data="pandas"``) or an Arrow table (``data="arrow"``);
            returns rows of ``schema`` in the same form, or None.
        schema: The output schema.
        per: ``"key"`` or ``"batch"``.
        data: ``"pandas"`` or ``"arrow"``.
        order_by: Columns that order a key's rows.
        columns: The input columns ``fn`` receives, in order (None: all of the table's).
        with_key: ``per="key"`` only: ``fn(key, data)``, ``key`` a tuple of the key's values
            (as ``applyInPandas`` gives them: pandas values of the key columns' first row, or
            Arrow scalars with ``data="arrow"``).
        iterator: ``per="key"`` only: ``fn`` receives an iterator of a key's rows in batches
            of ``batch_rows`` (pandas DataFrames, or Arrow record batches) and returns an
            iterator of results, as ``applyInPandas`` with ``Iterator[pd.DataFrame]`` type
            hints; a key's rows are then never converted to pandas at once.
        batch_rows: Rows of each batch of the iterator form.
    """

    keys: tuple[str, ...]
    fn: Callable[..., Any]
    schema: pa.Schema
    per: str = "key"
    data: str = "pandas"
    order_by: tuple[str, ...] = ()
    columns: tuple[str, ...] | None = None
    with_key: bool = False
    iterator: bool = False
    batch_rows: int = ITERATOR_BATCH_ROWS

    def apply(self, table: pa.Table) -> Iterator[pa.RecordBatch]:
        """Runs the function over ``table``, which must hold every row of its keys."""
        if self.columns is not None:
            table = table.select(list(self.columns))
        if table.num_rows == 0:
            return
        if self.per == "batch":
            if self.order_by:
                table, _ = sort_by_key(table, self.keys, self.order_by)
            yield from self.conform([self.fn(self._frame(table))])
            return
        table, starts = sort_by_key(table, self.keys, self.order_by)  # drops the rows as read
        yield from self.apply_sorted(table, starts)

    def apply_sorted(self, table: pa.Table, starts: np.ndarray) -> Iterator[pa.RecordBatch]:
        """Runs the function over ``table`` whose keys start at ``starts`` (sorted rows)."""
        if self.per == "batch":
            yield from self.conform([self.fn(self._frame(table))])
            return
        results = self._iterated(table, starts) if self.iterator else self._each(table, starts)
        yield from self._emitted(results)

    @property
    def streams(self) -> bool:
        """Whether a key's rows can be handed over a batch at a time, never held at once:
        the iterator form, with no order to put them in."""
        return self.per == "key" and self.iterator and not self.order_by

    def apply_key(self, parts: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Runs the function over the rows of one key, given in parts (a key set apart from
        its pass, read again on its own: :class:`KeyedPass`). The iterator form without
        ``order_by`` streams them: batches of ``batch_rows`` rows are made and converted as
        the function asks for them, so the key is never held at once. Any other form needs
        the whole key (ordered, or in one call), and gathers the parts first."""
        if not self.streams:
            tables = [pa.Table.from_batches([p]) for p in parts if p.num_rows]
            if not tables:
                return
            table = pa.concat_tables(tables)
            if self.per == "key" and not self.order_by:
                # One key, in no order: nothing to sort (a sort would copy every row).
                if self.columns is not None:
                    table = table.select(list(self.columns))
                yield from self.apply_sorted(table, np.zeros(1, dtype=np.int64))
            else:
                yield from self.apply(table)
            return
        chunks = self._rechunked(parts)
        first_rows = next(chunks, None)
        if first_rows is None:
            return
        first = self._batch(first_rows)
        key = self._key_values(first) if self.with_key else None

        def batches(first: Any = first) -> Iterator[Any]:
            yield first
            for rows in chunks:
                yield self._batch(rows)

        given = batches()
        del first
        results = self.fn(key, given) if self.with_key else self.fn(given)
        yield from self._emitted(self._results(results))

    def _rechunked(self, parts: Iterable[pa.RecordBatch]) -> Iterator[pa.Table]:
        """The rows of ``parts`` (in the function's columns) in tables of ``batch_rows``
        rows, the last one shorter."""
        step = max(int(self.batch_rows), 1)
        held: list[pa.Table] = []
        rows = 0
        for part in parts:
            if not part.num_rows:
                continue
            table = pa.Table.from_batches([part])
            if self.columns is not None:
                table = table.select(list(self.columns))
            held.append(table)
            rows += table.num_rows
            while rows >= step:
                joined = pa.concat_tables(held)
                yield joined.slice(0, step)
                rest = joined.slice(step)
                held, rows = ([rest] if rest.num_rows else []), rest.num_rows
        if rows:
            yield pa.concat_tables(held)

    def _emitted(self, results: Iterable[Any]) -> Iterator[pa.RecordBatch]:
        """The function's results as batches of the output schema, gathered up to
        :data:`EMIT_EVERY` at a time."""
        outs: list[Any] = []
        for out in results:
            if out is None:
                continue
            outs.append(out)
            if len(outs) >= EMIT_EVERY:
                yield from self.conform(outs)
                outs = []
        yield from self.conform(outs)

    def _each(self, table: pa.Table, starts: np.ndarray) -> Iterator[Any]:
        """The function's result for each key: ``fn(rows)``, or ``fn(key, rows)``."""
        frame = self._frame(table)
        bounds = np.append(starts, table.num_rows).tolist()
        fn, with_key = self.fn, self.with_key
        if self.data == "pandas":
            # pandas ships no type information and pandas-stubs is not a dependency.
            import pandas as pd  # type: ignore[import-untyped]

            for s, e in zip(bounds[:-1], bounds[1:], strict=True):
                part = frame.iloc[s:e]
                # As groupBy().applyInPandas gives it: an index from 0 for each key.
                part.index = pd.RangeIndex(e - s)
                yield fn(self._key_values(part), part) if with_key else fn(part)
        else:
            for s, e in zip(bounds[:-1], bounds[1:], strict=True):
                part = frame.slice(s, e - s)
                yield fn(self._key_values(part), part) if with_key else fn(part)

    def _key_values(self, first: Any) -> tuple[Any, ...]:
        """The key of a key's rows, from ``first`` (its first rows, in the function's form)
        as ``applyInPandas`` / ``applyInArrow`` give it: the first row's pandas values, or
        Arrow scalars."""
        if self.data == "pandas":
            return tuple(first[k].iloc[0] for k in self.keys)
        return tuple(first.column(k)[0] for k in self.keys)

    def _batch(self, piece: pa.Table) -> Any:
        if self.data == "pandas":
            return piece.to_pandas()
        return piece.combine_chunks().to_batches()[0]

    def _first_batches(self, table: pa.Table, bounds: list[int]) -> Iterator[tuple[int, Any]]:
        """Per key (by index), its first batch of up to ``batch_rows`` rows. Keys no larger
        than a batch are converted to pandas together, up to :data:`ITERATOR_CHUNK_ROWS`
        rows at a time, so that a small key costs a slice, not a conversion of its own."""
        import pandas as pd

        step = max(int(self.batch_rows), 1)
        chunk = max(ITERATOR_CHUNK_ROWS, step)
        count = len(bounds) - 1
        i = 0
        while i < count:
            s, e = bounds[i], bounds[i + 1]
            if self.data != "pandas" or e - s > step:
                yield i, self._batch(table.slice(s, min(step, e - s)))
                i += 1
                continue
            j = i + 1
            while j < count and bounds[j + 1] - bounds[j] <= step and bounds[j + 1] - s <= chunk:
                j += 1
            frame = table.slice(s, bounds[j] - s).to_pandas()
            for k in range(i, j):
                part = frame.iloc[bounds[k] - s : bounds[k + 1] - s]
                part.index = pd.RangeIndex(len(part))
                yield k, part
            del frame
            i = j

    def _iterated(self, table: pa.Table, starts: np.ndarray) -> Iterator[Any]:
        """Per key, the results of ``fn`` over an iterator of the key's rows in batches of
        ``batch_rows`` (the iterator form of ``applyInPandas``): a batch is converted when
        the function asks for it, so a key's rows are never in pandas at once."""
        bounds = np.append(starts, table.num_rows).tolist()
        step = max(int(self.batch_rows), 1)
        for i, first in self._first_batches(table, bounds):
            s, e = bounds[i], bounds[i + 1]
            key = self._key_values(first) if self.with_key else None

            def batches(first: Any = first, s: int = s, e: int = e) -> Iterator[Any]:
                yield first
                for o in range(s + step, e, step):
                    yield self._batch(table.slice(o, min(step, e - o)))

            given = batches()
            del first
            yield from self._results(self.fn(key, given) if self.with_key else self.fn(given))

    def _results(self, results: Any) -> Iterator[Any]:
        """What a function of the iterator form returned, one result at a time."""
        if results is None:
            return
        if isinstance(results, (pa.Table, pa.RecordBatch)) or hasattr(results, "columns"):
            raise TypeError(
                f"{getattr(self.fn, '__name__', 'the per-key function')} has iterator type "
                "hints, so it must return (or yield) an iterator of results, not one "
                f"{type(results).__name__}"
            )
        for out in results:
            yield pa.Table.from_batches([out]) if isinstance(out, pa.RecordBatch) else out

    def _frame(self, table: pa.Table) -> Any:
        return table.to_pandas() if self.data == "pandas" else table

    def conform(self, outs: list[Any]) -> Iterator[pa.RecordBatch]:
        """The function's results as batches of the output schema."""
        outs = [o for o in outs if o is not None]
        if not outs:
            return
        names = self.schema.names
        if self.data == "arrow":
            result = pa.concat_tables([o.select(names).cast(self.schema) for o in outs])
        else:
            import pandas as pd

            merged = pd.concat(outs, ignore_index=True) if len(outs) > 1 else outs[0]
            result = pa.Table.from_pandas(merged[names], schema=self.schema, preserve_index=False)
        yield from result.to_batches()
