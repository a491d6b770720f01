"""Per-key work on a shuffle read without another shuffle (no Exchange in the plan).

A shuffle read is already keyed: every row of a key is in one Spark partition. So per-key
work only needs rows of a key to be adjacent, which a sort within each partition gives
(a local, spilling sort, not an Exchange). :func:`apply_per_key` then streams the sorted
rows and hands each key's rows (or batches of whole keys) to a function, like
``groupBy(key).applyInPandas(fn)`` gives, minus the shuffle. This is the analog of Flink's
``reinterpretAsKeyedStream``; unlike it, asking for a key other than the shuffle's is
refused instead of silently giving wrong results.

Example::

    df = read_shuffle(spark, "flights.by_tailnum", kafka, windows=["2013-01-01"])
    out = apply_per_key(df, "tailnum", per_plane, schema="tailnum string, legs long",
                        order_by=["sched_dep"])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from .errors import ShuffleKeyError, ShuffleOptionError

# Column metadata that read_shuffle sets on the key columns; per-key work checks it.
KEY_METADATA = "kafka_shuffle"


def shuffle_key_of(df: DataFrame, columns: Sequence[str]) -> tuple[str, ...] | None:
    """The shuffle key recorded on ``columns`` of a shuffle read, if they all carry it."""
    keys = set()
    for c in columns:
        if c not in df.columns:
            return None
        md = df.schema[c].metadata.get(KEY_METADATA)
        if not md:
            return None
        keys.add(tuple(md["key"]))
    return keys.pop() if len(keys) == 1 else None


def _exchanges(df: DataFrame) -> list[str]:
    plan = df._jdf.queryExecution().executedPlan().toString()
    return [
        line.strip()
        for line in plan.splitlines()
        if "Exchange" in line and "BroadcastExchange" not in line
    ]


def check_keyed(df: DataFrame, key: Sequence[str]) -> None:
    """Refuses per-key work unless ``df`` is a shuffle read keyed by exactly ``key``."""
    key = tuple(key)
    recorded = shuffle_key_of(df, key)
    if recorded is None:
        tagged = {
            c: tuple(df.schema[c].metadata[KEY_METADATA]["key"])
            for c in df.columns
            if KEY_METADATA in df.schema[c].metadata
        }
        if tagged:
            shuffle_key = next(iter(tagged.values()))
            raise ShuffleKeyError(
                f"per-key work on {list(key)} refused: this shuffle is keyed by "
                f"{list(shuffle_key)}; rows of one {list(key)} value may sit in several "
                "partitions. Use groupBy for a different key."
            )
        raise ShuffleKeyError(
            f"per-key work on {list(key)} refused: the DataFrame is not a shuffle read (its "
            "key columns carry no shuffle metadata; renaming a key column drops it)"
        )
    if recorded != key:
        raise ShuffleKeyError(
            f"per-key work on {list(key)} refused: the shuffle is keyed by {list(recorded)}. "
            "Use its exact key, or groupBy for a different key."
        )
    exchanges = _exchanges(df)
    if exchanges:
        raise ShuffleKeyError(
            f"per-key work on {list(key)} refused: the DataFrame was re-partitioned after the "
            f"shuffle read ({exchanges[0]}), so it is no longer keyed"
        )


def _to_arrow_schema(schema: T.StructType | str, df: DataFrame) -> tuple[T.StructType, pa.Schema]:
    from pyspark.sql.pandas.types import to_arrow_schema

    if isinstance(schema, str):
        parsed = df.sparkSession.createDataFrame([], schema).schema
    else:
        parsed = schema
    return parsed, to_arrow_schema(parsed, timezone="UTC")


def apply_per_key(
    df: DataFrame,
    key: str | Sequence[str],
    fn: Callable[[Any], Any],
    schema: T.StructType | str,
    *,
    order_by: Sequence[str] = (),
    per: str = "key",
    data: str = "pandas",
) -> DataFrame:
    """Applies ``fn`` to the rows of each key of a shuffle read, with no Exchange.

    Args:
        df: A shuffle read (:func:`read_shuffle`), optionally filtered or projected.
        key: The shuffle's key column(s); anything else is refused.
        fn: Receives the rows of one key (``per="key"``), or of several whole keys
            (``per="batch"``: a key is never split across calls, so vectorized group-bys
            inside ``fn`` are exact), as a pandas DataFrame (``data="pandas"``) or a pyarrow
            Table (``data="arrow"``), sorted by ``order_by`` within a key. Returns rows of
            ``schema`` in the same form (or None for no rows).
        schema: The output schema (DDL string or StructType).
        order_by: Columns that order each key's rows.
        per: ``"key"`` or ``"batch"``.
        data: ``"pandas"`` or ``"arrow"``.

    Returns:
        The output DataFrame; same result as ``df.groupBy(key).applyInPandas(fn, schema)``.
    """
    keys = (key,) if isinstance(key, str) else tuple(key)
    if per not in ("key", "batch"):
        raise ShuffleOptionError(f"apply_per_key: per must be 'key' or 'batch', got {per!r}")
    if data not in ("pandas", "arrow"):
        raise ShuffleOptionError(f"apply_per_key: data must be 'pandas' or 'arrow', got {data!r}")
    missing = [c for c in order_by if c not in df.columns]
    if missing:
        raise ShuffleOptionError(f"apply_per_key: order_by column(s) {missing} not in {df.columns}")
    check_keyed(df, keys)
    spark_schema, arrow_schema = _to_arrow_schema(schema, df)
    runner = _GroupRunner(keys, fn, arrow_schema, per, data)
    return df.sortWithinPartitions(*keys, *order_by).mapInArrow(runner, spark_schema)


class _GroupRunner:
    """Streams key-sorted Arrow batches, cutting them at key boundaries (picklable)."""

    def __init__(self, keys, fn, schema: pa.Schema, per: str, data: str):
        self.keys = keys
        self.fn = fn
        self.schema = schema
        self.per = per
        self.data = data

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # Rows of the last key seen, which may continue in the next batch. Only a batch's own
        # boundaries are computed, so a key spanning many batches costs linear time; its rows
        # are held until it ends, as a function of one whole key needs them.
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            starts = self._group_starts(batch)
            continues = bool(pending) and self._same_key(pending[-1], batch)
            if len(starts) == 1:
                if pending and not continues:
                    yield from self._emit(pa.Table.from_batches(pending), np.array([0]))
                    pending, pending_rows = [], 0
                pending.append(batch)
                pending_rows += batch.num_rows
                continue
            last = int(starts[-1])
            complete = pa.Table.from_batches([*pending, batch.slice(0, last)])
            group_starts = [0] if pending else []
            for s in starts[:-1]:
                if not (s == 0 and continues):
                    group_starts.append(pending_rows + int(s))
            yield from self._emit(complete, np.array(sorted(set(group_starts))))
            tail = batch.slice(last)
            pending, pending_rows = [tail], tail.num_rows
        if pending:
            yield from self._emit(pa.Table.from_batches(pending), np.array([0]))

    def _same_key(self, before: pa.RecordBatch, after: pa.RecordBatch) -> bool:
        n = before.num_rows - 1
        return all(before.column(k)[n].as_py() == after.column(k)[0].as_py() for k in self.keys)

    def _group_starts(self, batch: pa.RecordBatch) -> np.ndarray:
        n = batch.num_rows
        change = np.zeros(max(n - 1, 0), dtype=bool)
        for k in self.keys:
            col = batch.column(k)
            differs = pc.fill_null(pc.not_equal(col.slice(1), col.slice(0, n - 1)), True)
            change |= differs.to_numpy(zero_copy_only=False)
        return np.concatenate(([0], np.flatnonzero(change) + 1))

    def _emit(self, table: pa.Table, starts: np.ndarray) -> Iterator[pa.RecordBatch]:
        frame = table.to_pandas() if self.data == "pandas" else table
        if self.per == "batch":
            outs = [self.fn(frame)]
        else:
            bounds = list(starts) + [table.num_rows]
            outs = []
            for s, e in zip(bounds[:-1], bounds[1:], strict=True):
                part = frame.iloc[s:e] if self.data == "pandas" else frame.slice(s, e - s)
                outs.append(self.fn(part))
        outs = [o for o in outs if o is not None]
        if not outs:
            return
        if self.data == "arrow":
            result = pa.concat_tables([o.select(self.schema.names).cast(self.schema) for o in outs])
        else:
            import pandas as pd

            merged = pd.concat(outs, ignore_index=True) if len(outs) > 1 else outs[0]
            result = pa.Table.from_pandas(
                merged[self.schema.names], schema=self.schema, preserve_index=False
            )
        yield from result.to_batches()
