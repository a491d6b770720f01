"""What a committed run shows in Dagster: :func:`commit_metadata`, the metadata of its
materialization or of an observation of it (Dagster's standard keys and the shuffle's own).

How an asset declares that it is a shuffle (its ``shuffle/*`` definition metadata) is
:mod:`orchestration.definition`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from dagster import MetadataValue, TableColumn, TableColumnConstraints, TableSchema

from orchestration.shuffle.errors import ShuffleOptionError

if TYPE_CHECKING:
    from orchestration.resources import KafkaResource
    from orchestration.shuffle.core.commitlog import Commit, Layout


def commit_metadata(
    commit: Commit,
    layout: Layout | None,
    kafka: KafkaResource | Mapping[str, Any],
    *,
    topic: str | None = None,
    write_path: str | None = None,
) -> dict[str, Any]:
    """The metadata of a committed run, for its materialization or an observation of it.

    Dagster's standard keys, which fill the UI's row count, columns and location:
    ``dagster/row_count`` (the run's rows), ``dagster/partition_row_count`` (the same, for a
    run of a window, i.e. a partition), ``dagster/column_schema`` (from the layout's Arrow
    schema; absent if ``layout`` is None) and ``dagster/uri``
    (``kafka://<bootstrap servers>/<topic>?window=<window>``). Then the shuffle's own:
    ``shuffle/topic``, ``shuffle/run_id``, ``shuffle/window`` ("" for a run without one),
    ``shuffle/committed_at``, ``shuffle/watermark`` (if the run declares one),
    ``shuffle/write_path`` (if given), ``rows``, ``bytes``, ``frames`` and ``offsets``
    (``{"partition": [first, last]}``).

    Args:
        commit: The run's commit record.
        layout: The shuffle's layout (``ShuffleLog.layout``).
        kafka: The cluster, as a :class:`~orchestration.KafkaResource` or a librdkafka
            config dict; only its bootstrap servers are shown, never its credentials.
        topic: The shuffle's topic; default ``layout.topic``.
        write_path: How the rows reached the producer tasks (``WriteResult.path``), when
            known.

    Example::

        log = shuffle_log("events.by_user", kafka=conf)
        commit = log.latest_by_window()["2024-01-01"]
        AssetObservation(asset_key=key, partition=commit.window,
                         metadata=commit_metadata(commit, log.layout, conf))
    """
    name = topic or (layout.topic if layout is not None else None)
    if not name:
        raise ShuffleOptionError(f"run {commit.run_id}: commit_metadata needs a topic or a layout")
    md: dict[str, Any] = {"dagster/row_count": commit.rows}
    if commit.window is not None:
        md["dagster/partition_row_count"] = commit.rows
    if layout is not None:
        md["dagster/column_schema"] = MetadataValue.table_schema(column_schema(layout))
    # A path value: the UI shows it as text to copy, where a link to kafka:// would lead nowhere.
    md["dagster/uri"] = MetadataValue.path(shuffle_uri(kafka, name, commit.window))
    md.update(
        {
            "shuffle/topic": name,
            "shuffle/run_id": commit.run_id,
            "shuffle/window": commit.window or "",
            "shuffle/committed_at": MetadataValue.timestamp(
                dt.datetime.fromisoformat(commit.committed_at)
            ),
        }
    )
    mark = commit.watermark_time
    if mark is not None:
        md["shuffle/watermark"] = MetadataValue.timestamp(mark)
    if write_path is not None:
        # "columnar" (the tasks read the Parquet files) or "rows" (handed over by Spark).
        md["shuffle/write_path"] = write_path
    md.update(
        {
            "rows": commit.rows,
            "bytes": commit.bytes,
            "frames": commit.frames,
            "offsets": MetadataValue.json(
                {str(p): [r.first, r.last] for p, r in sorted(commit.partitions.items())}
            ),
        }
    )
    return md


def shuffle_uri(kafka: KafkaResource | Mapping[str, Any], topic: str, window: str | None) -> str:
    """``kafka://<bootstrap servers>/<topic>[?window=<window>]``: where a shuffle's run lives.

    Only host:port pairs go in; a listener prefix (``SASL_SSL://``) is dropped, and
    credentials, which librdkafka keeps in settings of their own, never appear.
    """
    servers = (
        kafka.get("bootstrap.servers", "")
        if isinstance(kafka, Mapping)
        else kafka.bootstrap_servers
    )
    hosts = [s.strip().rpartition("://")[2].rpartition("@")[2] for s in str(servers).split(",")]
    uri = f"kafka://{','.join(h for h in hosts if h)}/{topic}"
    return uri if window is None else f"{uri}?window={window}"


def column_schema(layout: Layout) -> TableSchema:
    """The layout's Arrow schema as Dagster's table schema, with Spark SQL type names (the
    names a user of the DataFrame sees); key and event-time columns say so."""
    roles = {name: "shuffle key" for name in layout.key}
    if layout.event_time is not None:
        roles[layout.event_time] = "event time" + (
            " (and shuffle key)" if layout.event_time in layout.key else ""
        )
    return TableSchema(
        columns=[
            TableColumn(
                name=f.name,
                type=type_name(f.type),
                description=roles.get(f.name),
                constraints=TableColumnConstraints(nullable=f.nullable),
            )
            for f in layout.schema
        ]
    )


_SIMPLE_TYPES = {
    pa.bool_(): "boolean",
    pa.int8(): "tinyint",
    pa.int16(): "smallint",
    pa.int32(): "int",
    pa.int64(): "bigint",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.string(): "string",
    pa.large_string(): "string",
    pa.binary(): "binary",
    pa.large_binary(): "binary",
    pa.date32(): "date",
    pa.date64(): "date",
    pa.null(): "void",
}


def type_name(t: pa.DataType) -> str:
    """A readable name of an Arrow type: Spark SQL's where Spark has one
    (``bigint``, ``timestamp``, ``decimal(10,2)``, ``array<string>``), else Arrow's."""
    if t in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[t]
    if pa.types.is_timestamp(t):
        # Spark's two kinds: an instant (with a zone) or a wall-clock time (without).
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_map(t):
        return f"map<{type_name(t.key_type)},{type_name(t.item_type)}>"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return f"array<{type_name(t.value_type)}>"
    if pa.types.is_struct(t):
        fields = ",".join(
            f"{t.field(i).name}:{type_name(t.field(i).type)}" for i in range(t.num_fields)
        )
        return f"struct<{fields}>"
    if pa.types.is_dictionary(t):
        return type_name(t.value_type)
    return str(t)
