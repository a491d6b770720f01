"""Writing a shuffle: describe it (:class:`ShuffleSpec`), write one producer run of a
DataFrame to it and commit the run (:func:`write_shuffle`), or one run per window of a
DataFrame that holds several (:func:`write_windows`)."""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from orchestration.shuffle.core import frames as fr
from orchestration.shuffle.core.commitlog import (
    Layout,
    TaskResult,
    commit_topic,
    to_micros,
)
from orchestration.shuffle.core.ordering import unordered_reason
from orchestration.shuffle.core.vhash import key_groups
from orchestration.shuffle.errors import (
    ShuffleError,
    ShuffleKeyError,
    ShuffleOptionError,
    ShuffleSchemaError,
    ShuffleWriteError,
)
from orchestration.shuffle.kafka.client import KafkaClient, KafkaConfig
from orchestration.shuffle.spark.columnar import ColumnarPlan, ColumnarUnavailable, plan_columnar
from orchestration.shuffle.spark.writer import (
    ColumnarProducerTask,
    ProducerTask,
    commit_run,
)
from orchestration.shuffle.spec import (
    COLUMNAR_PATH,
    ROWS_PATH,
    ShuffleSpec,
    WriteResult,
    bounds_us,
    check_window,
    created_layout,
    run_options,
    written_columns,
)

log = logging.getLogger(__name__)


def shuffle_schema(df: DataFrame) -> pa.Schema:
    """The Arrow schema a shuffle written from ``df`` records: ``df``'s columns and types,
    every timestamp with a time zone in UTC, every field nullable.

    Example::

        plan_columnar(df, shuffle_schema(df), ["tailnum"])
    """
    from orchestration.shuffle.spark.compat import to_arrow_schema_utc

    schema = to_arrow_schema_utc(df.schema)
    fields = []
    for f in schema:
        t = f.type
        if pa.types.is_timestamp(t) and t.tz is not None:
            # Instants are stored in UTC whatever the session's time zone.
            t = pa.timestamp(t.unit, tz="UTC")
        # Nullability is not part of a shuffle's contract: Spark infers it differently
        # from one plan to the next, and key columns are checked for nulls row by row.
        fields.append(pa.field(f.name, t, nullable=True))
    return pa.schema(fields)


def _unorderable(t: T.DataType) -> str | None:
    """Why Spark's sort, or a read's ordering, cannot be trusted on type ``t``, or None."""
    if isinstance(t, T.MapType):
        return "a map, which Spark cannot sort"
    if type(t).__name__ == "VariantType":
        return "a variant, which Spark cannot sort"
    if isinstance(t, T.StringType) and getattr(t, "collation", "UTF8_BINARY") != "UTF8_BINARY":
        # A shuffle stores plain strings: read back they compare byte by byte, whatever
        # order the collation would have sorted them in.
        return f"a string of collation {t.collation}, which a shuffle reads back as UTF8_BINARY"
    if isinstance(t, T.ArrayType):
        return _unorderable(t.elementType)
    if isinstance(t, T.StructType):
        for f in t.fields:
            why = _unorderable(f.dataType)
            if why:
                return why
    return None


def _unhashable(t: T.DataType) -> bool:
    """Whether Spark's ``hash`` refuses a column of type ``t`` (a map, at any depth)."""
    if isinstance(t, T.MapType):
        return True
    if isinstance(t, T.ArrayType):
        return _unhashable(t.elementType)
    if isinstance(t, T.StructType):
        return any(_unhashable(f.dataType) for f in t.fields)
    return False


def _check_columns(df: DataFrame, spec: ShuffleSpec) -> None:
    names = df.columns
    for c in spec.key:
        if c not in names:
            raise ShuffleSchemaError(f"shuffle {spec.topic!r}: key column {c!r} is not in {names}")
        t = df.schema[c].dataType
        if _unhashable(t):
            raise ShuffleKeyError(
                f"shuffle {spec.topic!r}: key column {c!r} has type {t.simpleString()}, which "
                "Spark cannot hash (equal maps may hash differently); key by other columns, or "
                "by the map turned into a sorted array of entries"
            )
    if fr.KEY_GROUP_COLUMN in names:
        raise ShuffleSchemaError(
            f"shuffle {spec.topic!r}: column name {fr.KEY_GROUP_COLUMN!r} is reserved"
        )
    for c in spec.sort_by:
        if c not in names:
            raise ShuffleSchemaError(
                f"shuffle {spec.topic!r}: sort_by column {c!r} is not in {names}"
            )
        why = _unorderable(df.schema[c].dataType)
        if why:
            raise ShuffleSchemaError(f"shuffle {spec.topic!r}: sort_by column {c!r} is {why}")
    if spec.event_time is not None:
        if spec.event_time not in names:
            raise ShuffleSchemaError(
                f"shuffle {spec.topic!r}: event_time column {spec.event_time!r} is not in {names}"
            )
        t = df.schema[spec.event_time].dataType
        if not isinstance(t, T.TimestampType):
            raise ShuffleSchemaError(
                f"shuffle {spec.topic!r}: event_time column {spec.event_time!r} must be a "
                f"timestamp, not {t.simpleString()}"
            )


def _count_null_keys(df: DataFrame, key: Sequence[str]) -> int:
    cond = F.lit(False)
    for c in key:
        cond = cond | F.col(c).isNull()
    return df.filter(cond).count()


def write_shuffle(
    df: DataFrame,
    spec: ShuffleSpec,
    *,
    kafka: KafkaConfig,
    window: str | None = None,
    complete_until: dt.datetime | None = None,
    frame_rows: int | None = None,
    compression: str = "lz4",
    attrs: Mapping[str, str] | None = None,
    columnar: bool | None = None,
    schema_mode: str | None = None,
    event_time_bounds: tuple[dt.datetime, dt.datetime] | None = None,
) -> WriteResult:
    """Writes ``df`` as one producer run of the shuffle ``spec``, and commits it.

    The run becomes visible to readers only once every Spark task has finished and its
    commit record is written; a failed run leaves nothing visible. A committed run with
    the same ``window`` as earlier ones supersedes them.

    Rows reach the producer tasks one of two ways (``WriteResult.path``):

    - ``"columnar"``: ``df`` is a plain scan of Parquet files on a local file system
      (Hive-style partition directories included; optionally a selection of its columns,
      optionally filtered by comparisons, ``IS [NOT] NULL``, ``IN``, ``AND``, ``OR`` and
      ``NOT`` of a column and literals, or by any condition on partition columns alone),
      with key columns of a type hashed in Arrow (booleans, integers, dates, timestamps,
      floating point, strings, binary, decimals up to 18 digits). Each task reads its
      share of the files' row groups with pyarrow and computes key groups in numpy, so the
      rows never become JVM rows; it runs as many tasks as Spark's scan of ``df`` would.
      With ``sort_by`` (columns of those types, decimals of any precision), each task
      instead reads every row group and writes a range of partitions, sorting each one's
      rows in numpy as Spark sorts them; an input over 512 MiB per partition (uncompressed
      column bytes) takes the row path.
    - ``"rows"``: anything else. Spark adds ``_key_group`` with its own ``hash`` and hands
      the rows to the tasks (``mapInArrow``); with ``sort_by``, one task per partition
      sorts its rows with Spark's sort.

    Both give the same rows, key groups, partitions and guarantees.

    Args:
        df: The rows. Key columns must not be null.
        spec: The shuffle; created on first write, checked against its layout after.
        kafka: A :class:`~orchestration.shuffle.kafka.client.KafkaClient`, or librdkafka
            settings (``bootstrap.servers`` is required).
        window: Optional label of what this run covers (e.g. a Dagster partition key).
        complete_until: Optional: the run declares event time complete up to here.
        frame_rows: Rows per DATA frame per partition (default 65536).
        compression: Arrow IPC body compression: ``lz4`` (default, as Spark's own shuffle:
            the cheapest to write and read), ``zstd`` (about a quarter fewer bytes in Kafka
            for more CPU on both sides) or ``none``.
        attrs: Free-form strings stored in the commit record.
        columnar: None (default): the columnar path when it applies, else the row path.
            False: always the row path. True: the columnar path, or a
            :class:`ShuffleOptionError` saying why it does not apply.
        schema_mode: ``"strict"`` (None, the default): ``df``'s columns must be the
            shuffle's latest schema's. ``"merge"``: new nullable columns are added and
            columns that arrive wider (a type promotion) are widened, as a new schema
            version recorded before anything is written; columns ``df`` lacks read as null
            in this run (see the Evolution guide).
        event_time_bounds: ``(start, end)``: every row's event time must be in ``[start,
            end)`` (the window's span); a run with rows outside it is not committed, and the
            error names the window and the rows' bounds. Needs ``spec.event_time``.

    Returns:
        The committed run's :class:`WriteResult`.

    Raises:
        ShuffleKeyError: Some rows have a null key, or a key column is of a type Spark
            cannot hash (a map); nothing is written.
        ShuffleOptionError: ``columnar=True`` and the columnar path does not apply, or
            ``window`` is not a string.
        ShuffleLayoutError: The shuffle exists with another key, partition count,
            max_parallelism, or a schema ``schema_mode`` does not take (naming each column
            and rule); nothing is written.
        ShuffleConnectionError: Kafka is unreachable.
        ShuffleWriteError: The Spark job failed; nothing was committed.
    """
    if columnar not in (None, True, False):
        raise ShuffleOptionError(
            f"shuffle {spec.topic!r}: columnar must be True, False or None, got {columnar!r}"
        )
    check_window(spec, window)
    client = KafkaClient.of(kafka)
    _check_columns(df, spec)
    client.check_reachable(commit_topic(spec.topic))
    schema = shuffle_schema(df)
    plan = _columnar_plan(df, spec, schema, columnar)
    if plan is None or not plan.nulls_ruled_out:
        nulls = _count_null_keys(df, spec.key)
        if nulls:
            raise ShuffleKeyError(
                f"shuffle {spec.topic!r}: {nulls} row(s) have a null in key column(s) "
                f"{list(spec.key)}; nothing was written. Filter or fill them first."
            )
    layout = created_layout(client, spec, schema, schema_mode)
    if layout.num_partitions != spec.num_partitions:
        # A spec naming the count the shuffle had before it grew writes on the latest.
        spec = replace(spec, num_partitions=layout.num_partitions)
        if plan is not None and plan.owners:
            plan = _columnar_plan(df, spec, schema, columnar)
    names = written_columns(layout, schema)
    options = run_options(client, spec, layout, window, frame_rows, compression)
    run_id = options.run_id
    if plan is not None:
        plan = plan.in_order(names)
        task = ColumnarProducerTask(
            options,
            plan.scan,
            spec.key,
            plan.assignments,
            layout.sort_by if plan.owners else (),
            plan.owners,
        )
        # One row per task: row i stands for the row groups assigned to task i.
        tasks = df.sparkSession.range(0, plan.tasks, 1, plan.tasks)
        job = tasks.mapInArrow(task, ColumnarProducerTask.RESULT_SCHEMA)
        path = COLUMNAR_PATH
    else:
        keyed = df.select(*names).withColumn(
            fr.KEY_GROUP_COLUMN,
            F.pmod(F.hash(*[F.col(c) for c in spec.key]), F.lit(layout.max_parallelism)).cast(
                "int"
            ),
        )
        if layout.sort_by:
            keyed = _one_sorted_task_per_partition(keyed, layout)
        job = keyed.mapInArrow(ProducerTask(options), ProducerTask.RESULT_SCHEMA)
        path = ROWS_PATH
    try:
        rows = job.collect()
    except Exception as exc:  # Spark wraps task errors in its own exception types.
        raise ShuffleWriteError(
            f"run {run_id} of shuffle {spec.topic!r} (window {window!r}) failed and was not "
            f"committed: {_first_line(exc)}"
        ) from exc
    commit = commit_run(
        client,
        spec.topic,
        run_id,
        window,
        to_micros(complete_until),
        [TaskResult.from_json(r.task_result) for r in rows],
        attrs,
        sort_by=layout.sort_by,
        layout_version=layout.version,
        event_time_bounds=bounds_us(spec, event_time_bounds),
    )
    return WriteResult.of(commit, spec.topic, path)


def _partition_salts(num_partitions: int) -> list[int]:
    """For each Kafka partition p, an int whose Spark ``hash`` is p modulo
    ``num_partitions``: repartitioning by it sends partition p's rows to Spark partition p,
    one task each, where hashing p itself would leave about a third of the tasks empty."""
    salts: list[int | None] = [None] * num_partitions
    found, start, step = 0, 0, max(1024, 8 * num_partitions)
    while found < num_partitions:
        candidates = np.arange(start, start + step, dtype=np.int32)
        for v, p in zip(
            candidates.tolist(),
            key_groups([pa.array(candidates)], num_partitions).tolist(),
            strict=True,
        ):
            if salts[p] is None:
                salts[p] = v
                found += 1
        start += step
    return [int(v) for v in salts if v is not None]


def _one_sorted_task_per_partition(keyed: DataFrame, layout: Layout) -> DataFrame:
    """``keyed`` (with ``_key_group``) repartitioned so that each Kafka partition's rows
    are in one Spark task, and sorted within it by the layout's ``sort_by`` with Spark's own
    sort (so the order is Spark's, type by type: nulls first, NaN last, -0.0 equal to 0.0,
    strings by their UTF-8 bytes). The producer splits a task's rows by partition keeping
    their order, so each partition gets one sorted sequence per run, which a read of one
    run hands to Spark as it is and a read of several merges (see the JVM read path guide,
    "Sorted runs")."""
    n, m = layout.num_partitions, layout.max_parallelism
    partition = F.expr(f"cast((`{fr.KEY_GROUP_COLUMN}` * {n}) div {m} as int)")
    salts = F.array(*[F.lit(v) for v in _partition_salts(n)])
    # An explicit partition count: adaptive execution neither coalesces nor splits these.
    spread = keyed.repartition(n, F.element_at(salts, partition + F.lit(1)))
    return spread.sortWithinPartitions(*[F.col(c).asc_nulls_first() for c in layout.sort_by])


def _columnar_plan(
    df: DataFrame, spec: ShuffleSpec, schema: pa.Schema, columnar: bool | None
) -> ColumnarPlan | None:
    """The columnar plan of a write, None for the row path (logged with the reason)."""
    if columnar is False:
        log.info("shuffle %r: writing through the row path (columnar=False)", spec.topic)
        return None
    try:
        for c in spec.sort_by:
            why = unordered_reason(schema.field(c).type)
            if why:
                raise ColumnarUnavailable(f"sort_by column {c!r} is of {why}, sorted by Spark only")
        plan = plan_columnar(df, schema, spec.key)
        if spec.sort_by:
            plan = _sorted_plan(df, spec, plan)
    except ColumnarUnavailable as exc:
        if columnar:
            raise ShuffleOptionError(
                f"shuffle {spec.topic!r}: columnar=True, but the columnar path does not "
                f"apply: {exc}"
            ) from None
        log.info("shuffle %r: writing through the row path: %s", spec.topic, exc)
        return None
    except Exception as exc:
        # Planning reads Spark's plan through internal classes that may differ in another
        # Spark version, and the files' footers. The row path is always right, so an
        # automatic choice falls back to it (loudly); an explicit one fails.
        if columnar:
            raise ShuffleOptionError(
                f"shuffle {spec.topic!r}: columnar=True, but planning the columnar path "
                f"failed: {_first_line(exc)}"
            ) from exc
        log.warning(
            "shuffle %r: planning the columnar path failed, writing through the row path",
            spec.topic,
            exc_info=True,
        )
        return None
    if plan.owners:
        log.info(
            "shuffle %r: writing through the columnar path, sorted: %d task(s), each reading "
            "all %d row group(s) and writing its own partitions",
            spec.topic,
            plan.tasks,
            len(plan.assignments[0]),
        )
        return plan
    log.info(
        "shuffle %r: writing through the columnar path: %d task(s) read %d row group(s)",
        spec.topic,
        plan.tasks,
        sum(len(a) for a in plan.assignments),
    )
    return plan


# A task of a sorted columnar write holds the rows of its partitions to sort them: it is
# given at most this many uncompressed bytes of the input's columns (the files' figures).
SORTED_TASK_BYTES = 512 * 1024 * 1024


def _sorted_plan(df: DataFrame, spec: ShuffleSpec, plan: ColumnarPlan) -> ColumnarPlan:
    """``plan`` as a sorted write: one writer per partition, as many tasks as cores (at
    most one per partition, at least enough to keep each under ``SORTED_TASK_BYTES``).

    Raises:
        ColumnarUnavailable: the input is larger than the partitions can hold that way;
            Spark's sort, which spills to disk, sorts it instead.
    """
    n = spec.num_partitions
    needed = -(-plan.input_bytes // SORTED_TASK_BYTES)
    if needed > n:
        raise ColumnarUnavailable(
            f"sorting {plan.input_bytes / 2**20:.1f} MiB of input in {n} partition(s) would hold "
            f"over {SORTED_TASK_BYTES / 2**20:.1f} MiB in a task; Spark's sort, which spills, "
            "sorts it"
        )
    # The columnar path runs on a classic session only, which has a SparkContext.
    cores = int(df.sparkSession.sparkContext.defaultParallelism)
    return plan.owning(n, max(1, min(n, max(needed, cores))))


# The engine's own error raised in a task, as Spark's error text quotes it.
_ENGINE_ERROR = re.compile(r"\b(Shuffle[A-Za-z]*Error: .+)")


def _first_line(exc: BaseException) -> str:
    """What a failed Spark job says of why: the last engine error a task raised (the
    reason, not a wrapper's traceback), else the first line of Spark's message."""
    text = str(exc)
    found = _ENGINE_ERROR.findall(text)
    if found:
        return found[-1][:1000]
    for marker in ("Exception: ", "Error: "):
        lines = [line for line in text.splitlines() if marker in line and line.split(marker)[1]]
        if lines:
            return lines[-1].strip()[:1000]
    return text.splitlines()[0][:500] if text else type(exc).__name__


@dataclass(frozen=True)
class WindowsResult:
    """What :func:`write_windows` committed and what failed, by window.

    ``committed`` maps a window to its committed run; ``failed`` a window to the error that
    kept it from committing (nothing of it is visible). Windows are in the order given.
    """

    committed: dict[str, WriteResult]
    failed: dict[str, str]


def write_windows(
    df: DataFrame,
    spec: ShuffleSpec,
    *,
    kafka: KafkaConfig,
    windows: Sequence[str],
    window_column: str,
    complete_until: Mapping[str, dt.datetime] | None = None,
    compression: str = "lz4",
    attrs: Mapping[str, str] | None = None,
    on_window: Callable[[str, WriteResult | ShuffleError], None] | None = None,
    schema_mode: str | None = None,
    event_time_bounds: Mapping[str, tuple[dt.datetime, dt.datetime]] | None = None,
) -> WindowsResult:
    """Writes each of ``windows`` as its own run of the shuffle: the rows of ``df`` whose
    ``window_column`` (as a string) equals the window.

    A window that fails does not stop the others: windows committed stay committed, and the
    result says which failed, so that only those are written again. Rows whose window is
    not one of ``windows`` are refused before anything is written. ``df`` is cached while
    the windows are written, so its source is read once.

    Example::

        result = write_windows(df, spec, kafka=conf, window_column="day",
                               windows=["2013-01-01", "2013-01-02"])
        sorted(result.failed)   # [] when every window committed

    Args:
        windows: The windows to write, each a value of ``window_column`` as a string.
        window_column: The column whose value is a row's window.
        complete_until: Per window, the event time it is complete until (see
            :func:`write_shuffle`); a window not in it has none.
        on_window: Called after each window with its result or its error (e.g. to log it).
        event_time_bounds: Per window, the event times its rows must fall in (see
            :func:`write_shuffle`); a window not in it has none.
        Other arguments: as for :func:`write_shuffle`.

    Raises:
        ShuffleOptionError: ``window_column`` is not a column of ``df``, or rows have a
            window that is not one of ``windows`` (nothing was written).
    """
    keys = list(windows)
    if window_column not in df.columns:
        raise ShuffleOptionError(
            f"shuffle {spec.topic}: window column {window_column!r} is not a column of the "
            f"DataFrame {df.columns}"
        )
    window = F.col(window_column).cast("string")
    committed: dict[str, WriteResult] = {}
    failed: dict[str, str] = {}
    ends = complete_until or {}
    df = df.persist()
    try:
        found = {r[0]: r[1] for r in df.groupBy(window).count().collect()}
        outside = {k: n for k, n in found.items() if k not in set(keys)}
        if outside and keys:
            raise ShuffleOptionError(
                f"shuffle {spec.topic}: {sum(outside.values())} row(s) have {window_column} "
                f"values that are not windows of this write ({keys[0]} .. {keys[-1]}): "
                f"{sorted(map(str, outside))[:5]}; nothing was written"
            )
        for key in keys:
            try:
                committed[key] = write_shuffle(
                    df.filter(window == key),
                    spec,
                    kafka=kafka,
                    window=key,
                    complete_until=ends.get(key),
                    compression=compression,
                    attrs=attrs,
                    schema_mode=schema_mode,
                    event_time_bounds=(event_time_bounds or {}).get(key),
                )
            except ShuffleError as exc:
                # Any error of the engine fails this window alone (a broker refusing it, a
                # task failing); the others are still written.
                failed[key] = str(exc)
                if on_window is not None:
                    on_window(key, exc)
            else:
                if on_window is not None:
                    on_window(key, committed[key])
    finally:
        df.unpersist()
    return WindowsResult(committed, failed)
