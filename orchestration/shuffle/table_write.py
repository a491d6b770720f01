"""Writing a shuffle without Spark: a ``pyarrow.Table`` or a pandas frame written as one
producer run (:func:`write_table`), for small producers and tests.

The rows take the path a Spark task's rows take (the same producer, frames, watermarks
and commit record), keyed by the same hash: :func:`~orchestration.shuffle.core.vhash.
key_groups`, which equals Spark's ``pmod(hash(key), max_parallelism)`` row by row. A run
written here is read by every path, and a run of the same rows written by Spark has the
same rows in the same partitions. Nothing here imports pyspark or starts a JVM.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from orchestration.shuffle.core import frames as fr
from orchestration.shuffle.core.commitlog import commit_topic, to_micros
from orchestration.shuffle.core.ordering import spark_order, unordered_reason
from orchestration.shuffle.core.vhash import key_groups, unsupported_reason
from orchestration.shuffle.errors import (
    ShuffleKeyError,
    ShuffleOptionError,
    ShuffleSchemaError,
    ShuffleWriteError,
)
from orchestration.shuffle.kafka.client import KafkaClient, KafkaConfig
from orchestration.shuffle.spark.writer import (
    ProducerSubtask,
    commit_run,
)
from orchestration.shuffle.spec import (
    TABLE_PATH,
    ShuffleSpec,
    WriteResult,
    bounds_us,
    check_window,
    created_layout,
    run_options,
    written_columns,
)

# Arrow types Spark has no type for, turned into the narrowest Spark type that holds them.
_WIDER = {pa.uint8(): pa.int16(), pa.uint16(): pa.int32(), pa.uint32(): pa.int64()}


def _spark_type(t: pa.DataType, where: str) -> pa.DataType:
    """The Arrow type Spark gives a column of Arrow type ``t`` (what :func:`~orchestration.
    shuffle.write.shuffle_schema` records for the same column of a DataFrame)."""
    if pa.types.is_dictionary(t):
        return _spark_type(t.value_type, where)
    if t in _WIDER:
        return _WIDER[t]
    if pa.types.is_float16(t):
        return pa.float32()
    if (
        pa.types.is_boolean(t)
        or pa.types.is_null(t)
        or (pa.types.is_integer(t) and pa.types.is_signed_integer(t))
        or pa.types.is_float32(t)
        or pa.types.is_float64(t)
        or pa.types.is_date32(t)
    ):
        return t
    if pa.types.is_date64(t):
        return pa.date32()
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        return pa.binary()
    if pa.types.is_timestamp(t):
        # Spark keeps microseconds; an instant is stored in UTC, a local time without zone.
        return pa.timestamp("us", tz="UTC" if t.tz is not None else None)
    if pa.types.is_duration(t):
        return pa.duration("us")
    if pa.types.is_decimal128(t):
        return t
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return pa.list_(_spark_type(t.value_type, f"{where} (its elements)"))
    if pa.types.is_struct(t):
        return pa.struct(
            [pa.field(f.name, _spark_type(f.type, f"{where}.{f.name}"), nullable=True) for f in t]
        )
    if pa.types.is_map(t):
        return pa.map_(
            _spark_type(t.key_type, f"{where} (its keys)"),
            _spark_type(t.item_type, f"{where} (its values)"),
        )
    raise ShuffleSchemaError(
        f"{where} has Arrow type {t}, which Spark has no type for; cast it first (e.g. an "
        "unsigned 64-bit integer to a decimal or a string)"
    )


def is_table(rows: Any) -> bool:
    """Whether :func:`write_table` takes ``rows``: a pyarrow ``Table`` or ``RecordBatch``, a
    pandas or a Polars ``DataFrame``."""
    if isinstance(rows, (pa.Table, pa.RecordBatch)):
        return True
    module = type(rows).__module__.split(".")[0]
    return module in ("pandas", "polars") and type(rows).__name__ == "DataFrame"


def as_table(rows: Any) -> pa.Table:
    """``rows`` (see :func:`is_table`) as a pyarrow table."""
    if isinstance(rows, pa.Table):
        return rows
    if isinstance(rows, pa.RecordBatch):
        return pa.Table.from_batches([rows])
    module = type(rows).__module__.split(".")[0]
    if module == "pandas":
        return pa.Table.from_pandas(rows, preserve_index=False)
    if module == "polars":
        return rows.to_arrow()
    raise ShuffleOptionError(
        f"write_table takes a pyarrow Table or RecordBatch, a pandas or a Polars DataFrame, "
        f"not {type(rows).__name__}; for a Spark DataFrame use write_shuffle"
    )


def table_schema(table: pa.Table, topic: str) -> pa.Schema:
    """The schema a shuffle written from ``table`` records: Spark's types for its columns
    (see :func:`_spark_type`), every field nullable, as a Spark write of the same rows."""
    return pa.schema(
        [
            pa.field(f.name, _spark_type(f.type, f"shuffle {topic!r}: column {f.name!r}"))
            for f in table.schema
        ]
    )


def _cast(table: pa.Table, schema: pa.Schema) -> pa.Table:
    columns = []
    for name, target in zip(schema.names, schema.types, strict=True):
        column = table.column(name)
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        if column.type != target:
            # Timestamps lose what is under a microsecond, as Spark's conversion does.
            column = column.cast(target, safe=not pa.types.is_timestamp(target))
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def _check(table: pa.Table, spec: ShuffleSpec) -> None:
    names = table.column_names
    topic = spec.topic
    if len(set(names)) != len(names):
        raise ShuffleSchemaError(f"shuffle {topic!r}: column names repeat in {names}")
    if fr.KEY_GROUP_COLUMN in names:
        raise ShuffleSchemaError(
            f"shuffle {topic!r}: column name {fr.KEY_GROUP_COLUMN!r} is reserved"
        )
    for c in spec.key:
        if c not in names:
            raise ShuffleSchemaError(f"shuffle {topic!r}: key column {c!r} is not in {names}")
        why = unsupported_reason(table.schema.field(c).type)
        if why:
            raise ShuffleKeyError(
                f"shuffle {topic!r}: key column {c!r}: {why} without Spark; write it with "
                "write_shuffle (Spark's own hash), or key by another column"
            )
    for c in spec.sort_by:
        if c not in names:
            raise ShuffleSchemaError(f"shuffle {topic!r}: sort_by column {c!r} is not in {names}")
        why = unordered_reason(table.schema.field(c).type)
        if why:
            raise ShuffleSchemaError(
                f"shuffle {topic!r}: sort_by column {c!r} is of {why}, which a write without "
                "Spark cannot sort as Spark does; write it with write_shuffle"
            )
    if spec.event_time is not None:
        if spec.event_time not in names:
            raise ShuffleSchemaError(
                f"shuffle {topic!r}: event_time column {spec.event_time!r} is not in {names}"
            )
        t = table.schema.field(spec.event_time).type
        if not (pa.types.is_timestamp(t) and t.tz is not None):
            raise ShuffleSchemaError(
                f"shuffle {topic!r}: event_time column {spec.event_time!r} must be a timestamp "
                f"with a time zone (an instant), not {t}"
            )
    nulls = {c: table.column(c).null_count for c in spec.key}
    if any(nulls.values()):
        counts = ", ".join(f"{c}: {n}" for c, n in nulls.items() if n)
        raise ShuffleKeyError(
            f"shuffle {topic!r}: rows with a null key ({counts}); nothing was written. Filter "
            "or fill them first."
        )


@dataclass(frozen=True)
class WriteProgress:
    """How far :func:`write_table` has got: what it hands its ``progress`` callback after
    each frame's rows are produced, and once more when all are delivered and the run is
    about to commit, in the caller's thread.

    Attributes:
        topic: the shuffle written.
        window: the run's window.
        rows_total: the rows of the run.
        partitions_total: the shuffle's Kafka partitions.
        rows: the rows produced so far.
        partitions: the partitions written to so far.
        frames: the frames produced so far.
        bytes: their size.
        committing: all frames are delivered; the commit record is next.

    Example::

        write_table(frame, spec, kafka=conf, window="2024-03-01",
                    progress=lambda p: print(f"{p.rows}/{p.rows_total} rows"))
    """

    topic: str
    window: str | None
    rows_total: int
    partitions_total: int
    rows: int = 0
    partitions: int = 0
    frames: int = 0
    bytes: int = 0
    committing: bool = False


def write_table(
    rows: Any,
    spec: ShuffleSpec,
    *,
    kafka: KafkaConfig,
    window: str | None = None,
    complete_until: dt.datetime | None = None,
    frame_rows: int | None = None,
    compression: str = "lz4",
    attrs: Mapping[str, str] | None = None,
    schema_mode: str | None = None,
    event_time_bounds: tuple[dt.datetime, dt.datetime] | None = None,
    progress: Callable[[WriteProgress], None] | None = None,
) -> WriteResult:
    """Writes ``rows`` (a ``pyarrow.Table`` or ``RecordBatch``, a pandas or a Polars
    DataFrame) as one producer run of the shuffle ``spec``, and commits it, in this
    process: no Spark.

    The same run as :func:`~orchestration.shuffle.write.write_shuffle` would write from a
    Spark DataFrame of the same rows: each row in the key group Spark's ``hash`` gives it,
    the same frames, watermarks (from ``spec.event_time``) and commit record, visible to
    readers once committed, superseding earlier runs of ``window``. Columns take Spark's
    types (unsigned integers the next wider signed type, large strings strings, timestamps
    microseconds, instants in UTC), so the shuffle's schema is the one a Spark write of the
    same frame records.

    Example::

        frame = pd.DataFrame({"user_id": ["a", "b"], "clicks": [3, 5]})
        write_table(frame, ShuffleSpec("clicks", key="user_id", num_partitions=4),
                    kafka={"bootstrap.servers": "localhost:9092"}, window="2024-03-01")

    Args:
        rows: The rows. Key columns must not be null, and of a type hashed here (booleans,
            integers, floating point, dates, timestamps, strings, binary, decimals up to 18
            digits); for other key types use ``write_shuffle``.
        spec: As for ``write_shuffle``; so are ``kafka``, ``window``, ``complete_until``,
            ``frame_rows``, ``compression``, ``attrs``, ``schema_mode`` and
            ``event_time_bounds``.
        progress: Called with a :class:`WriteProgress` after each frame's rows are
            produced and before the commit, in this thread (to log how far a long write
            has got).

    Returns:
        The committed run's :class:`~orchestration.shuffle.spec.WriteResult` (``path``
        ``"table"``).

    Raises:
        ShuffleKeyError: A key column is null in some rows, or of a type not hashed here;
            nothing is written.
        ShuffleSchemaError: A column is missing, reserved, or of a type Spark has none for.
        ShuffleLayoutError: The shuffle exists with another key, layout or schema.
        ShuffleConnectionError: Kafka is unreachable.
        ShuffleWriteError: Producing failed; nothing was committed.
    """
    check_window(spec, window)
    table = as_table(rows)
    _check(table, spec)
    schema = table_schema(table, spec.topic)
    table = _cast(table, schema)
    client = KafkaClient.of(kafka)
    client.check_reachable(commit_topic(spec.topic))
    layout = created_layout(client, spec, schema, schema_mode)
    table = table.select(written_columns(layout, schema))
    if layout.sort_by:
        # One producer writes every partition, so rows sorted as a whole are sorted within
        # each partition (routing keeps their order).
        table = table.take(pa.array(spark_order([table.column(c) for c in layout.sort_by])))
    groups = key_groups([table.column(c) for c in layout.key], layout.max_parallelism)
    table = table.append_column(fr.KEY_GROUP_COLUMN, pa.array(groups, pa.int32()))
    options = run_options(client, spec, layout, window, frame_rows, compression)
    run_id = options.run_id
    task = ProducerSubtask(options, 0, 0)
    state = WriteProgress(spec.topic, window, table.num_rows, layout.num_partitions)

    def told(**changes: Any) -> None:
        nonlocal state
        if progress is not None:
            state = replace(
                state,
                partitions=sum(1 for r in task.rows_by_partition if r),
                frames=sum(task.frames_by_partition),
                bytes=task.bytes,
                **changes,
            )
            progress(state)

    try:
        done = 0
        for batch in table.to_batches(max_chunksize=options.frame_rows):
            task.add(batch)
            done += batch.num_rows
            told(rows=done)
        result = task.finish()
        told(committing=True)
    except ShuffleWriteError as exc:
        raise ShuffleWriteError(
            f"run {run_id} of shuffle {spec.topic!r} (window {window!r}) failed and was not "
            f"committed: {exc}"
        ) from exc
    finally:
        task.close()
    commit = commit_run(
        client,
        spec.topic,
        run_id,
        window,
        to_micros(complete_until),
        [result],
        attrs,
        sort_by=layout.sort_by,
        layout_version=layout.version,
        event_time_bounds=bounds_us(spec, event_time_bounds),
    )
    return WriteResult.of(commit, spec.topic, TABLE_PATH)


__all__ = ["as_table", "is_table", "table_schema", "write_table"]
