"""Per-key work on a shuffle read without another shuffle (no Exchange in the plan).

A shuffle read is already keyed: every row of a key is in one Spark partition, and in one
Kafka partition. :func:`apply_per_key` hands each key's rows (or batches of whole keys) to
a function, like ``groupBy(key).applyInPandas(fn)`` gives, minus the shuffle, in one of two
ways:

- inside the reader, when the DataFrame is a shuffle read as it was loaded (columns may be
  selected or dropped): the reader groups each pass over a Kafka partition's key groups in
  Arrow and calls the function there (:mod:`orchestration.shuffle.core.perkey`), so only the
  function's results cross from Python to the JVM;
- otherwise (a filter, a join, anything the reader cannot reproduce) over the DataFrame:
  a sort within each partition makes a key's rows adjacent (a local, spilling sort, not an
  Exchange) and a ``mapInArrow`` cuts the sorted rows at key boundaries.

This is the analog of Flink's ``reinterpretAsKeyedStream``; unlike it, asking for a key
other than the shuffle's is refused instead of silently giving wrong results.

Example::

    df = read_shuffle(spark, "flights.by_tailnum", kafka, windows=["2013-01-01"])
    out = apply_per_key(df, "tailnum", per_plane, schema="tailnum string, legs long",
                        order_by=["sched_dep"])
"""

from __future__ import annotations

import base64
import inspect
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from orchestration.shuffle.core.commitlog import schema_to_b64
from orchestration.shuffle.core.perkey import ITERATOR_BATCH_ROWS, KeyFunction, comparable_key
from orchestration.shuffle.errors import ShuffleKeyError, ShuffleOptionError
from orchestration.shuffle.spark.session import explain_text, is_connect

log = logging.getLogger(__name__)

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
    # The physical plan as ``explain`` prints it: public, and the same on a classic and a
    # Spark Connect session (which has no JVM here to ask for the plan object).
    plan = explain_text(df, "simple")
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
    from orchestration.shuffle.spark.compat import to_arrow_schema_utc

    if isinstance(schema, str):
        parsed = df.sparkSession.createDataFrame([], schema).schema
    else:
        parsed = schema
    return parsed, to_arrow_schema_utc(parsed)


def function_form(fn: Callable[..., Any], data: str) -> tuple[bool, bool]:
    """How ``applyInPandas`` (``data="pandas"``) or ``applyInArrow`` (``"arrow"``) would call
    ``fn``: ``(with_key, iterator)``. Two positional parameters mean ``fn(key, rows)``;
    iterator type hints (``Iterator[pd.DataFrame]``, ``Iterator[pa.RecordBatch]``) mean the
    rows come as an iterator of batches and ``fn`` returns an iterator. Spark's own rules
    decide both (its argument count and its type hint inference).

    Example::

        def top(key, rows: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]: ...
        function_form(top, "pandas")   # (True, True)
    """
    from pyspark.sql.pandas import typehints
    from pyspark.util import PythonEvalType

    name = "pandas" if data == "pandas" else "arrow"
    infer = getattr(typehints, f"infer_group_{name}_eval_type_from_func", None)
    try:
        if infer is None:
            # PySpark 4.0 has no iterator form of applyInPandas / applyInArrow (4.1 added
            # it), so nothing of its own to ask: the hints are read by the same rule.
            iterator = iterator_hints(fn, data)
        else:
            iterator_type = getattr(PythonEvalType, f"SQL_GROUPED_MAP_{name.upper()}_ITER_UDF")
            iterator = infer(fn) == iterator_type
    except Exception:  # noqa: BLE001 - as Spark: hints it cannot read mean the plain form
        iterator = False
    try:
        with_key = len(inspect.getfullargspec(fn).args) == 2
    except TypeError:  # a callable without a signature: the one-argument form
        with_key = False
    return with_key, iterator


def iterator_hints(fn: Callable[..., Any], data: str) -> bool:
    """Whether ``fn``'s rows parameter (its last positional one) and its return value are
    hinted ``Iterator[pd.DataFrame]`` (``data="pandas"``) or ``Iterator[pa.RecordBatch]``,
    and a key parameter before it a tuple: the rule PySpark 4.1 and later apply to
    applyInPandas / applyInArrow."""
    import collections.abc
    import typing

    if data == "pandas":
        import pandas as pd  # type: ignore[import-untyped]

        element: type = pd.DataFrame
    else:
        element = pa.RecordBatch
    hints = typing.get_type_hints(fn)
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = [p for p in inspect.signature(fn).parameters.values() if p.kind in kinds]
    if not 1 <= len(params) <= 2 or any(p.name not in hints for p in params):
        return False
    if len(params) == 2:
        key = hints[params[0].name]
        if not (key is tuple or typing.get_origin(key) is tuple):
            return False

    def over(hint: Any) -> bool:
        origin = typing.get_origin(hint)
        iterable = origin in (collections.abc.Iterator, collections.abc.Iterable)
        return iterable and typing.get_args(hint) == (element,)

    return over(hints.get(params[-1].name)) and over(hints.get("return"))


def _required_positional(fn: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in params if p.kind in kinds and p.default is inspect.Parameter.empty)


def apply_per_key(
    df: DataFrame,
    key: str | Sequence[str],
    fn: Callable[[Any], Any],
    schema: T.StructType | str,
    *,
    order_by: Sequence[str] = (),
    per: str = "key",
    data: str = "pandas",
    pass_rows: int | None = None,
) -> DataFrame:
    """Applies ``fn`` to the rows of each key of a shuffle read, with no Exchange.

    When ``df`` is a shuffle read as loaded (:func:`read_shuffle`, or a ``select`` /
    ``drop`` of its columns), ``fn`` runs inside the reader: each task reads its Kafka
    partitions in passes over contiguous key-group ranges, groups a pass's rows by key in
    Arrow and calls ``fn``, so rows never cross to the JVM and back; only ``fn``'s results
    do. Memory is bounded by the rows of one pass: about ``pass_rows`` (estimated from the
    commit records as if rows were spread evenly over the key groups), held at most twice
    at once (as read and sorted by key while sorting; then sorted, and with
    ``data="pandas"`` one pandas copy), plus up to 4096 of ``fn``'s results waiting to be
    sent. A key group is never split: a pass that holds more than ``pass_rows`` sets its
    largest keys apart, spills their rows to a file in the task's local directory as it
    reads, and gives them to ``fn`` afterwards, in bundles of up to ``pass_rows`` rows, and
    a larger key alone, streamed a batch at a time to the iterator form without
    ``order_by`` (any other form gets, and so holds, the whole key). Otherwise (a
    filtered or joined DataFrame, say) the rows are sorted within each Spark partition
    (Spark's sort, which spills) and cut at key boundaries. Either way the rows of one key
    are held at once, as a function of one whole key needs.

    Example::

        out = apply_per_key(read_shuffle(spark, "flights.by_tailnum", kafka=conf), "tailnum",
                            per_plane, "tailnum string, legs long", order_by=["sched_dep"])

    Args:
        df: A shuffle read (:func:`read_shuffle`), optionally filtered or projected.
        key: The shuffle's key column(s); anything else is refused.
        fn: Receives the rows of one key (``per="key"``), or of several whole keys
            (``per="batch"``: a key is never split across calls, so vectorized group-bys
            inside ``fn`` are exact), as a pandas DataFrame (``data="pandas"``) or a pyarrow
            Table (``data="arrow"``), sorted by ``order_by`` within a key (with
            ``per="batch"`` and no ``order_by``, rows come in no particular order).
            Returns rows of ``schema`` in the same form (or None for no rows). With
            ``per="key"``, ``fn`` may take the forms ``applyInPandas`` takes, decided by the
            same rules (:func:`function_form`): ``fn(key, rows)`` (two parameters; ``key``
            is a tuple of the key's values), and with ``Iterator`` type hints an iterator of
            the key's rows in batches of ``spark.sql.execution.arrow.maxRecordsPerBatch``
            rows, returning an iterator (a key's rows are then never in pandas at once:
            the form for a key too large to convert whole).
        schema: The output schema (DDL string or StructType).
        order_by: Columns that order each key's rows (ascending, nulls first, NaN after
            every number, as Spark sorts).
        per: ``"key"`` or ``"batch"``.
        data: ``"pandas"`` or ``"arrow"``.
        pass_rows: Rows one pass of the in-reader path holds (default 2,000,000).

    Returns:
        The output DataFrame; same result as ``df.groupBy(key).applyInPandas(fn, schema)``.
    """
    keys = (key,) if isinstance(key, str) else tuple(key)
    if per not in ("key", "batch"):
        raise ShuffleOptionError(f"apply_per_key: per must be 'key' or 'batch', got {per!r}")
    if data not in ("pandas", "arrow"):
        raise ShuffleOptionError(f"apply_per_key: data must be 'pandas' or 'arrow', got {data!r}")
    if pass_rows is not None and pass_rows <= 0:
        raise ShuffleOptionError(f"apply_per_key: pass_rows must be positive, got {pass_rows}")
    missing = [c for c in order_by if c not in df.columns]
    if missing:
        raise ShuffleOptionError(f"apply_per_key: order_by column(s) {missing} not in {df.columns}")
    with_key, iterator = function_form(fn, data)
    if per == "batch":
        if iterator or _required_positional(fn) >= 2:
            raise ShuffleOptionError(
                f"apply_per_key: per='batch' calls {getattr(fn, '__name__', 'fn')}(rows) with "
                "whole keys in one DataFrame or table; the key and iterator forms of "
                "applyInPandas (fn(key, rows), Iterator type hints) are for per='key'"
            )
        with_key = False  # whole keys in one call: fn(rows), whatever its parameters
    check_keyed(df, keys)
    spark_schema, arrow_schema = _to_arrow_schema(schema, df)
    batch_rows = _batch_rows(df.sparkSession) if iterator else ITERATOR_BATCH_ROWS
    options = shuffle_scan_options(df)
    if options is not None:
        kf = KeyFunction(
            keys, fn, arrow_schema, per, data, tuple(order_by), tuple(df.columns),
            with_key=with_key, iterator=iterator, batch_rows=batch_rows,
        )  # fmt: skip
        return in_reader(df.sparkSession, options, kf, pass_rows)
    runner = GroupRunner(
        keys, fn, arrow_schema, per, data, with_key=with_key, iterator=iterator,
        batch_rows=batch_rows,
    )  # fmt: skip
    return df.sortWithinPartitions(*keys, *order_by).mapInArrow(runner, spark_schema)


def _batch_rows(spark: Any) -> int:
    """Rows per batch of the iterator form: the session's Arrow batch size, as Spark's."""
    try:
        value = int(spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch", "10000"))
    except (TypeError, ValueError):
        return ITERATOR_BATCH_ROWS
    return value if value > 0 else ITERATOR_BATCH_ROWS


def in_reader(
    spark: Any, options: dict[str, str], kf: KeyFunction, pass_rows: int | None = None
) -> DataFrame:
    """A shuffle read with ``options`` that returns ``kf``'s results instead of rows.

    A read with a plan runs as Spark tasks of ours (:func:`~orchestration.shuffle.spark.
    reader.read_in_tasks`), so that no data source planning runs in Python on the driver;
    one without (a read by name) goes through the ``kafka-shuffle`` data source."""
    from pyspark import cloudpickle

    from orchestration.shuffle.spark.reader import read_in_tasks
    from orchestration.shuffle.spark.sources import register_data_sources

    options = _balanced(spark, options)
    extra = {
        "per_key": base64.b64encode(cloudpickle.dumps(kf)).decode("ascii"),
        "per_key_schema": schema_to_b64(kf.schema),
    }
    if pass_rows is not None:
        extra["pass_rows"] = str(pass_rows)
    if "plan" in {k.lower() for k in options}:
        return read_in_tasks(spark, {**options, **extra})
    register_data_sources(spark)
    return spark.read.format("kafka-shuffle").options(**options, **extra).load()


def _balanced(spark: Any, options: dict[str, str]) -> dict[str, str]:
    """``options`` with a read planned in whole Kafka partitions (parallelism not given,
    None or ``"auto"``) regrouped into one task per core (see
    :func:`~orchestration.shuffle.core.planner.balance_splits`): per-key results are not keyed
    rows, so nothing needs a task per partition."""
    from orchestration.shuffle.core.commitlog import Layout
    from orchestration.shuffle.core.planner import AUTO, SplitPlan, balance_splits
    from orchestration.shuffle.spark.session import task_slots

    names = {k.lower(): k for k in options}
    slots = task_slots(spark)
    asked = options.get(names.get("parallelism", ""), "").strip().lower()
    if not slots or "plan" not in names or "layout" not in names or asked not in ("", AUTO):
        return options
    layout = Layout.from_json(options[names["layout"]])
    splits = [SplitPlan.from_json(p) for p in json.loads(options[names["plan"]])]
    whole = [r.partition for s in splits for r in s.reads if r.full]
    if sorted(whole) != list(range(layout.num_partitions)) or len(splits) <= slots:
        return options
    balanced = balance_splits(splits, slots, layout.max_parallelism, layout.num_partitions)
    return {**options, names["plan"]: json.dumps([s.to_json() for s in balanced])}


# The table class of a read on the JVM path (jvm/: io.kafkashuffle.spark.ShuffleTable).
JVM_TABLE_CLASS = "io.kafkashuffle.spark.ShuffleTable"

# Options of a plain shuffle read that change what it returns: such a read is no row scan.
_RESULT_OPTIONS = ("aggregate", "per_key", "per_key_schema", "pass_rows")


def shuffle_scan_options(df: DataFrame) -> dict[str, str] | None:
    """The options of the ``kafka-shuffle`` (or ``kafka-shuffle-jvm``) batch read that ``df``
    is, if ``df`` is such a
    read as it was loaded, its columns possibly selected or dropped (never renamed, filtered
    or computed); None for anything else.

    On Spark Connect always None (so :func:`apply_per_key` sorts and cuts, which is right,
    only slower): the read's options live in the server's plan, and no public Connect API
    shows them (``explain`` prints neither the source's options nor its projection)."""
    if is_connect(df.sparkSession):
        log.info(
            "apply_per_key: on Spark Connect the function runs after a sort within partitions; "
            "running it inside the reader needs the read's options, which only a classic "
            "session's plan shows"
        )
        return None
    try:
        node = df._jdf.queryExecution().optimizedPlan()
        while _simple_name(node) == "Project":
            exprs = node.projectList()
            for i in range(exprs.size()):
                e = exprs.apply(i)
                kind = _simple_name(e)
                if kind == "Alias":  # withMetadata: the same column, renamed to itself
                    child = e.child()
                    if _simple_name(child) != "AttributeReference" or child.name() != e.name():
                        return None
                elif kind != "AttributeReference":
                    return None
            node = node.child()
        if _simple_name(node) == "DataSourceV2ScanRelation":
            node = node.relation()
        if _simple_name(node) != "DataSourceV2Relation":
            return None
        table = node.table()
        python_read = _simple_name(table) == "PythonTable" and table.name() == "kafka-shuffle"
        # A read on the JVM path (orchestration.shuffle.spark.jvm) has the same options: the
        # per-key work then runs in the Python reader over the same plan.
        jvm_read = str(table.getClass().getName()) == JVM_TABLE_CLASS
        if not (python_read or jvm_read):
            return None
        jmap = node.options().asCaseSensitiveMap()
        options = {str(k): str(jmap.get(k)) for k in jmap.keySet().toArray()}
    except Exception:  # noqa: BLE001 - an internal API: anything unexpected means "no"
        return None
    lowered = {k.lower() for k in options}
    if "topic" not in lowered or any(o.lower() in lowered for o in _RESULT_OPTIONS):
        return None
    # The catalog a JVM read went through: the Python source reads the same plan without one
    # (and refuses an option it does not take).
    return {k: v for k, v in options.items() if k.lower() != "catalog"}


def _simple_name(obj: Any) -> str:
    return str(obj.getClass().getSimpleName())


class GroupRunner:
    """A ``mapInArrow`` function that applies a per-key function to rows sorted by key.

    The path of :func:`apply_per_key` when the reader cannot do the work (a filtered or
    joined DataFrame): Spark sorts each partition by the key, and this cuts the sorted batches
    at key boundaries, whole keys however they span batches, and hands them to the function
    (see :class:`~orchestration.shuffle.core.perkey.KeyFunction` for ``per`` and ``data``).
    Picklable: Spark ships it to the tasks.

    Example::

        runner = GroupRunner(("tailnum",), per_plane, out_schema, per="key", data="pandas")
        out = df.sortWithinPartitions("tailnum").mapInArrow(runner, spark_schema)

    Args:
        keys: The key columns; the batches must be sorted by them.
        fn: The per-key function.
        schema: The function's output schema.
        per: ``"key"`` or ``"batch"``.
        data: ``"pandas"`` or ``"arrow"``.
        with_key: ``fn(key, rows)`` (see :func:`function_form`).
        iterator: ``fn`` takes and returns iterators of batches.
        batch_rows: Rows per batch of the iterator form.
    """

    def __init__(
        self,
        keys: Sequence[str],
        fn: Callable[..., Any],
        schema: pa.Schema,
        per: str,
        data: str,
        *,
        with_key: bool = False,
        iterator: bool = False,
        batch_rows: int = ITERATOR_BATCH_ROWS,
    ):
        self.keys = tuple(keys)
        self.fn = KeyFunction(
            self.keys, fn, schema, per, data, with_key=with_key, iterator=iterator,
            batch_rows=batch_rows,
        )  # fmt: skip

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
        edge = pa.Table.from_batches(
            [before.slice(before.num_rows - 1), after.slice(0, 1)]
        ).combine_chunks()
        return len(self._group_starts(edge)) == 1

    def _group_starts(self, batch: pa.RecordBatch | pa.Table) -> np.ndarray:
        n = batch.num_rows
        change = np.zeros(max(n - 1, 0), dtype=bool)
        for k in self.keys:
            # Compared as groupBy compares keys: -0.0 equals 0.0 and NaN equals NaN.
            column = comparable_key(batch.column(k))
            after, before = column.slice(1), column.slice(0, n - 1)
            # Null equals null here, as in groupBy: nulls form one group.
            one_null = pc.xor(pc.is_null(after), pc.is_null(before))
            differs = pc.fill_null(pc.not_equal(after, before), one_null)
            change |= differs.to_numpy(zero_copy_only=False)
        return np.concatenate(([0], np.flatnonzero(change) + 1))

    def _emit(self, table: pa.Table, starts: np.ndarray) -> Iterator[pa.RecordBatch]:
        return self.fn.apply_sorted(table, starts)
