"""What a committed run shows in Dagster: :func:`commit_metadata`, the metadata of its
materialization or of an observation of it (Dagster's standard keys and the shuffle's own),
with :func:`progress_metadata`, its event-time progress as numbers Dagster plots; and what a
consumer of a shuffle shows: :func:`consumer_lag` and :func:`lag_metadata`, how far behind
the shuffle it is, from the commit log and the consumer's own materializations
(:func:`consumptions`).

How an asset declares that it is a shuffle (its ``shuffle/*`` definition metadata) is
:mod:`orchestration.definition`.

It imports no other module of the integration, so that the checks and sensors may import
it and the integration stays shallow.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
from dagster import (
    AssetKey,
    DagsterInstance,
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
    from orchestration.shuffle.core.commitlog import Commit, Layout, ShuffleLog
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


def watermark_as_of(log: ShuffleLog, commit: Commit) -> int | None:
    """The shuffle's watermark once ``commit`` committed: the furthest watermark of the runs
    visible then (each window's latest up to it in log order, and runs without a window),
    so a range run's windows, recorded together, each show their own."""
    latest: dict[str | None, Commit] = {}
    unwindowed: list[Commit] = []
    for c in log.commits:
        if c.window is None:
            unwindowed.append(c)
        else:
            latest[c.window] = c
        if c.run_id == commit.run_id:
            break
    seen = [*latest.values(), *unwindowed]
    marks = [m for m in (c.effective_watermark for c in seen) if m is not None]
    return max(marks) if marks else None


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
        committed = committed_time(commit)
        md["shuffle/commit_delay_s"] = round((committed - as_utc(end)).total_seconds(), 3)
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
        f"window [{as_utc(start).isoformat()}, {as_utc(end).isoformat()})"
    )


def spark_ui_url(session: Any) -> str | None:
    """The address of the Spark UI of a classic ``session`` when the UI is on, for a run to
    link to; None when it is off, or for a Spark Connect session (whose server owns it)."""
    try:
        context = session.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect raises its own error for it
        return None
    url = getattr(context, "uiWebUrl", None)
    return url or None


def as_utc(when: dt.datetime) -> dt.datetime:
    """``when`` with a time zone: a naive time (as commit records may hold) is UTC."""
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


# --- consumers ---------------------------------------------------------------------------

# A consumer's materialization: the runs of the shuffle it read ({run id: window}).
RUNS_READ = "shuffle/runs_read"
# How far behind the shuffle a consumer is: windows complete but not consumed, and seconds
# from the commit of what it read to its reading.
LAG_WINDOWS = "shuffle/lag_windows"
LAG_S = "shuffle/lag_s"


def committed_time(commit: Commit) -> dt.datetime:
    """When ``commit`` committed, in UTC."""
    return as_utc(dt.datetime.fromisoformat(commit.committed_at))


def completeness(partitions_def: PartitionsDefinition | None) -> Callable[[Commit], bool]:
    """Whether a run's window is complete, for a shuffle of ``partitions_def``: a time
    window once the run declares it complete up to its end, any other once committed."""

    def complete(commit: Commit) -> bool:
        bounds = window_bounds(partitions_def, commit.window)
        return bounds is None or commit.complete_through(bounds[1])

    return complete


@dataclass(frozen=True)
class Consumption:
    """A consumer's latest materialization of a window (of the asset, when unpartitioned):
    when it was recorded (epoch seconds) and the runs it read, when it says
    (:data:`RUNS_READ`)."""

    at: float
    runs: frozenset[str] | None = None

    def covers(self, commit: Commit, partitioned: bool) -> bool:
        if self.runs is not None and commit.run_id in self.runs:
            return True
        if partitioned and self.runs is not None:
            # It says which run it read, and that was another (an older one).
            return False
        return committed_time(commit).timestamp() <= self.at


# How many of a consumer's latest materializations are read to find each window's latest.
CONSUMPTIONS_READ = 2000


def consumptions(
    instance: DagsterInstance, key: AssetKey, limit: int = CONSUMPTIONS_READ
) -> dict[str | None, Consumption]:
    """The latest materialization of each partition of the consumer ``key`` (None: of an
    unpartitioned asset), from its ``limit`` latest. A partition materialized only before
    those counts as consumed whatever came since (its latest is not looked up one by one)."""
    records = instance.fetch_materializations(key, limit=limit).records
    out: dict[str | None, Consumption] = {}
    for record in records:  # newest first
        event = record.asset_materialization
        if event is None or event.partition in out:
            continue
        raw = event.metadata.get(RUNS_READ)
        value = getattr(raw, "value", raw)
        runs = frozenset(value) if isinstance(value, Mapping) else None
        out[event.partition] = Consumption(record.timestamp, runs)
    if len(records) >= limit:
        for partition in instance.get_materialized_partitions(key) - set(out):
            out[partition] = Consumption(float("inf"))
    return out


@dataclass(frozen=True)
class Lag:
    """How far a consumer is behind its shuffle at ``now``: ``behind`` are the visible runs
    of complete windows it has not consumed, oldest commit first."""

    behind: tuple[Commit, ...]
    now: dt.datetime

    @property
    def oldest_wait(self) -> dt.timedelta | None:
        """How long the oldest of them has waited since it committed."""
        return self.now - committed_time(self.behind[0]) if self.behind else None


def consumer_lag(
    log: ShuffleLog,
    consumed: Mapping[str | None, Consumption],
    *,
    partitioned: bool,
    complete: Callable[[Commit], bool],
    now: dt.datetime,
    reading: Sequence[Commit] = (),
) -> Lag:
    """The windows of ``log`` complete but not yet consumed by a consumer whose latest
    materializations are ``consumed`` (:func:`consumptions`). Pure.

    A window's visible run is consumed when the consumer's latest materialization of the
    window (of the asset, for an unpartitioned consumer: a stream, a running total) says it
    read that run, or, when it does not say, was recorded after the run committed. The runs
    being read now (``reading``) count as consumed. A shuffle's runs without a window count
    by their latest.
    """
    reading_ids = {c.run_id for c in reading}
    latest: dict[str | None, Commit] = dict(log.latest_by_window())
    unwindowed = [c for c in log.commits if c.window is None]
    if unwindowed:
        latest[None] = unwindowed[-1]
    behind = []
    for window, commit in latest.items():
        if commit.run_id in reading_ids or not complete(commit):
            continue
        got = consumed.get(window if partitioned else None)
        if got is None or not got.covers(commit, partitioned):
            behind.append(commit)
    behind.sort(key=committed_time)
    return Lag(tuple(behind), as_utc(now))


def lag_metadata(lag: Lag, read: Sequence[Commit]) -> dict[str, Any]:
    """What a consumer's materialization records of its lag (numbers Dagster plots):
    :data:`LAG_WINDOWS`, the windows complete but not yet consumed (those named in
    ``shuffle/windows_behind``), and :data:`LAG_S`, seconds from the commit of the
    runs it read (the oldest of them) to its reading; and :data:`RUNS_READ`."""
    md: dict[str, Any] = {
        RUNS_READ: MetadataValue.json({c.run_id: c.window for c in read}),
        LAG_WINDOWS: len(lag.behind),
    }
    if read:
        oldest = min(committed_time(c) for c in read)
        md[LAG_S] = round((lag.now - oldest).total_seconds(), 3)
    if lag.behind:
        md["shuffle/windows_behind"] = MetadataValue.json([c.window for c in lag.behind[:50]])
    return md


def consumer_metadata(
    instance: DagsterInstance,
    key: AssetKey,
    log: ShuffleLog,
    read: Sequence[Commit],
    *,
    partitioned: bool,
    shuffle_partitions: PartitionsDefinition | None,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """What the consumer ``key`` that read the runs ``read`` of the shuffle whose commit log
    is ``log`` records on its materialization (:func:`lag_metadata`), its lag judged from
    its materializations in ``instance``. The shuffle IO manager records it for the assets
    whose inputs it loads; a consumer that reads otherwise (a stream, a queue) records it
    itself.

    Example::

        log = shuffle_log(topic, kafka=conf)
        commit = log.latest_by_window()[context.partition_key]
        ...   # read and process the run
        return MaterializeResult(metadata=consumer_metadata(
            context.instance, context.asset_key, log, [commit],
            partitioned=True, shuffle_partitions=daily))

    Args:
        instance: The Dagster instance the consumer's materializations are in.
        key: The consumer's asset key.
        log: The shuffle's commit log.
        read: The runs the consumer read.
        partitioned: Whether the consumer is partitioned (by the shuffle's windows).
        shuffle_partitions: The shuffle's partitions definition (when windows are complete).
        now: When it read them; default now.
    """
    lag = consumer_lag(
        log,
        consumptions(instance, key),
        partitioned=partitioned,
        complete=completeness(shuffle_partitions),
        now=now if now is not None else dt.datetime.now(dt.UTC),
        reading=read,
    )
    return lag_metadata(lag, read)
