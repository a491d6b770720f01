"""What a committed run shows in Dagster: :func:`commit_metadata`, the metadata of its
materialization or of an observation of it (Dagster's standard keys and the shuffle's own),
with :func:`progress_metadata`, its event-time progress as numbers Dagster plots.

How an asset declares that it is a shuffle (its ``shuffle/*`` definition metadata) is
:mod:`orchestration.definition`.

It imports no other module of the integration, so that the checks and sensors may import
it and the integration stays shallow.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
from dagster import (
    MetadataValue,
    PartitionsDefinition,
    TableColumn,
    TableColumnConstraints,
    TableSchema,
    TimeWindowPartitionsDefinition,
)

from orchestration.shuffle.core.commitlog import from_micros, to_micros
from orchestration.shuffle.core.evolution import type_name
from orchestration.shuffle.errors import ShuffleFormatError, ShuffleOptionError

if TYPE_CHECKING:
    from orchestration.shuffle.core.commitlog import Commit, Layout
    from orchestration.shuffle.core.evolution import LayoutVersion


class Servers(Protocol):
    """What :func:`commit_metadata` shows of a cluster: its bootstrap servers
    (:class:`~orchestration.KafkaResource` has them)."""

    @property
    def bootstrap_servers(self) -> str: ...


def commit_metadata(
    commit: Commit,
    layout: Layout | None,
    kafka: Servers | Mapping[str, Any],
    *,
    topic: str | None = None,
    write_path: str | None = None,
    shuffle_watermark: int | None = None,
    window_end: dt.datetime | None = None,
) -> dict[str, Any]:
    """The metadata of a committed run, for its materialization or an observation of it.

    Dagster's standard keys, which fill the UI's row count, columns and location:
    ``dagster/row_count`` (the run's rows), ``dagster/partition_row_count`` (the same, for a
    run of a window, i.e. a partition), ``dagster/column_schema`` (from the layout's Arrow
    schema of the layout version the run was written under; absent if ``layout`` is None) and
    ``dagster/uri`` (``kafka://<bootstrap servers>/<topic>?window=<window>``). Then the
    shuffle's own: ``shuffle/schema_version`` (that version's number, with a layout) and
    ``shuffle/schema_changes`` (what that version changed, when it is not the first),
    ``shuffle/topic``, ``shuffle/run_id``, ``shuffle/window`` ("" for a run without one),
    ``shuffle/committed_at``, ``shuffle/watermark`` (if the run declares one),
    ``shuffle/write_path`` (if given), ``rows``, ``bytes``, ``frames`` and ``offsets``
    (``{"partition": [first, last]}``); then the run's progress (:func:`progress_metadata`).

    Args:
        commit: The run's commit record.
        layout: The shuffle's layout (``ShuffleLog.layout``).
        kafka: The cluster, as a :class:`~orchestration.KafkaResource` or a librdkafka
            config dict; only its bootstrap servers are shown, never its credentials.
        topic: The shuffle's topic; default ``layout.topic``.
        write_path: How the rows reached the producer tasks (``WriteResult.path``), when
            known.
        shuffle_watermark, window_end: As for :func:`progress_metadata`.

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
        # The run's own columns: those of the layout version it was written under.
        version = _run_version(layout, commit)
        md["dagster/column_schema"] = MetadataValue.table_schema(
            column_schema(layout, version.schema)
        )
        md["shuffle/schema_version"] = version.version
        if version.changes:
            md["shuffle/schema_changes"] = MetadataValue.md(
                f"Layout version {version.version}"
                + (f", made by {version.made_by}" if version.made_by else "")
                + (f" at {version.made_at}" if version.made_at else "")
                + ":\n\n"
                + "\n".join(f"- {c}" for c in version.changes)
            )
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
    md.update(progress_metadata(commit, shuffle_watermark=shuffle_watermark, window_end=window_end))
    return md


def epoch_seconds(micros: int) -> float:
    """Epoch microseconds (a commit record's times) as epoch seconds, the unit of the
    ``*_epoch_s`` entries."""
    return round(micros / 1_000_000, 6)


# The entries of progress_metadata that are numbers: what Dagster's plots draw.
PROGRESS_SERIES = (
    "shuffle/watermark_epoch_s",
    "shuffle/shuffle_watermark_epoch_s",
    "shuffle/event_time_min_epoch_s",
    "shuffle/event_time_max_epoch_s",
    "shuffle/commit_delay_s",
)


def progress_metadata(
    commit: Commit,
    *,
    shuffle_watermark: int | None = None,
    window_end: dt.datetime | None = None,
) -> dict[str, Any]:
    """A run's event-time progress: numbers Dagster's plots draw (Dagster plots int and
    float entries only, not timestamps), and timestamps for people to read.

    - ``shuffle/watermark_epoch_s``: the run's watermark (its ``effective_watermark``).
    - ``shuffle/shuffle_watermark_epoch_s`` and ``shuffle/shuffle_watermark`` (a
      timestamp): the shuffle-wide watermark once the run committed
      (``ShuffleLog.watermark()``), when given.
    - ``shuffle/event_time_min_epoch_s``, ``shuffle/event_time_max_epoch_s`` and the
      timestamps ``shuffle/event_time_min``, ``shuffle/event_time_max``: the event times of
      the run's rows, when the shuffle has an event time.
    - ``shuffle/commit_delay_s``: seconds from the window's end (``window_end``, default
      the run's ``complete_until``) to the commit; negative when it committed before the
      window ended.

    Args:
        commit: The run's commit record.
        shuffle_watermark: The shuffle's watermark, epoch microseconds.
        window_end: When the run's window ends.
    """
    md: dict[str, Any] = {}
    mark = commit.effective_watermark
    if mark is not None:
        md["shuffle/watermark_epoch_s"] = epoch_seconds(mark)
    if shuffle_watermark is not None:
        md["shuffle/shuffle_watermark"] = MetadataValue.timestamp(from_micros(shuffle_watermark))
        md["shuffle/shuffle_watermark_epoch_s"] = epoch_seconds(shuffle_watermark)
    for name, value in (
        ("event_time_min", commit.event_time_min),
        ("event_time_max", commit.event_time_max),
    ):
        if value is not None:
            md[f"shuffle/{name}"] = MetadataValue.timestamp(from_micros(value))
            md[f"shuffle/{name}_epoch_s"] = epoch_seconds(value)
    end = window_end if window_end is not None else from_micros(commit.complete_until)
    if commit.window is not None and end is not None:
        committed = _utc(dt.datetime.fromisoformat(commit.committed_at))
        md["shuffle/commit_delay_s"] = round((committed - _utc(end)).total_seconds(), 3)
    return md


def window_bounds(
    partitions_def: PartitionsDefinition | None, window: str | None
) -> tuple[dt.datetime, dt.datetime] | None:
    """Where a time-window partition starts and ends, in UTC; None for a run without a
    window or a partitions definition that is not of time windows."""
    if window is None or not isinstance(partitions_def, TimeWindowPartitionsDefinition):
        return None
    span = partitions_def.time_window_for_partition_key(window)
    return span.start.astimezone(dt.UTC), span.end.astimezone(dt.UTC)


def outside_window(commit: Commit, start: dt.datetime, end: dt.datetime) -> str | None:
    """What is wrong with a run whose rows' event times fall outside its window ``[start,
    end)`` (a producer that did not select its window's rows), naming the window and the
    rows' bounds; None when they are inside, or when the run has no event times.

    Example::

        outside_window(commit, *window_bounds(daily, commit.window))
    """
    low, high = commit.event_time_min, commit.event_time_max
    if low is None or high is None or (low >= to_micros(start) and high < to_micros(end)):
        return None
    return (
        f"run {commit.run_id} of window {commit.window}: its rows' event times run from "
        f"{from_micros(low).isoformat()} to {from_micros(high).isoformat()}, outside the "
        f"window [{_utc(start).isoformat()}, {_utc(end).isoformat()})"
    )


def _utc(when: dt.datetime) -> dt.datetime:
    # Commit records' naive times are UTC.
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def shuffle_uri(kafka: Servers | Mapping[str, Any], topic: str, window: str | None) -> str:
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


def _run_version(layout: Layout, commit: Commit) -> LayoutVersion:
    """The layout version ``commit`` was written under (the latest, if the layout given is
    older than the run: a caller that read the log before the run committed)."""
    try:
        return layout.layout_version(commit.layout_version)
    except ShuffleFormatError:
        return layout.layout_version()


def column_schema(layout: Layout, schema: pa.Schema | None = None) -> TableSchema:
    """The layout's Arrow schema (or ``schema``, one of its versions') as Dagster's table
    schema, with Spark SQL type names (the names a user of the DataFrame sees); key and
    event-time columns say so."""
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
            for f in (layout.schema if schema is None else schema)
        ]
    )
