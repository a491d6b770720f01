"""The commit-log model: a shuffle's layout and its committed runs. No Spark, no Kafka.

Each shuffle has a compacted companion topic (``<topic>__commits``, one partition) holding:

- key ``layout``: the :class:`Layout` (key columns, key groups, partitions, Arrow schema),
  written once when the shuffle is created;
- key ``commit/<run_id>``: one :class:`Commit` per successful producer run, written by the
  Spark driver after every task of the run has finished;
- key ``expired/<run_id>``: an :class:`Expired` marker for a run that retention removed (its
  commit record is then deleted), so readers can say why a run is gone and an interrupted
  expiry knows what it was deleting.

Readers and sensors read this topic only, never the data topic, to know what exists. A
run is visible only once its commit record is written, and among the runs of one
``window`` only the latest commit (the one later in the commit log) is visible: a re-run of
a window replaces it, like a partition overwrite.

Records are JSON so that any tool can read them.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar, overload

import pyarrow as pa

from orchestration.shuffle.core.frames import VERSION as FRAME_VERSION
from orchestration.shuffle.errors import ShuffleFormatError, ShuffleLayoutError

LAYOUT_KEY = "layout"
COMMIT_PREFIX = "commit/"
EXPIRED_PREFIX = "expired/"
COMMIT_TOPIC_SUFFIX = "__commits"

# A record's JSON as Kafka hands it over (bytes) or as text. Named so that the classes below,
# whose ``bytes`` field shadows the built-in inside their bodies, can annotate it.
JsonText = str | bytes


def commit_topic(topic: str) -> str:
    """The commit-log topic of the shuffle whose data topic is ``topic``."""
    return topic + COMMIT_TOPIC_SUFFIX


@overload
def to_micros(value: dt.datetime) -> int: ...
@overload
def to_micros(value: None) -> None: ...
def to_micros(value: dt.datetime | None) -> int | None:
    """Epoch microseconds of a datetime (naive is taken as UTC)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@overload
def from_micros(value: int) -> dt.datetime: ...
@overload
def from_micros(value: None) -> None: ...
def from_micros(value: int | None) -> dt.datetime | None:
    """The UTC datetime of epoch microseconds (None stays None)."""
    if value is None:
        return None
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=value)


def schema_to_b64(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def schema_from_b64(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


@dataclass(frozen=True)
class Layout:
    """How a shuffle is laid out; fixed when it is created.

    ``schema`` is the Arrow schema of the shuffled columns (without ``_key_group``).
    ``sort_by`` (the key columns, then optional further columns; empty: none) is the order
    each run's rows have within each partition when the run's commit says so too
    (:attr:`Commit.sort_by`). A layout record without it (every one written before it
    existed) declares no order.
    """

    topic: str
    key: tuple[str, ...]
    num_partitions: int
    max_parallelism: int
    schema: pa.Schema
    event_time: str | None = None
    max_out_of_orderness_us: int = 0
    format_version: int = FRAME_VERSION
    sort_by: tuple[str, ...] = ()

    def to_json(self) -> str:
        # sort_by is written only when there is one, so an unsorted shuffle's layout record
        # is byte for byte what it was before sorting existed.
        extra = {"sort_by": list(self.sort_by)} if self.sort_by else {}
        return json.dumps(
            {
                **extra,
                "type": "layout",
                "topic": self.topic,
                "key": list(self.key),
                "num_partitions": self.num_partitions,
                "max_parallelism": self.max_parallelism,
                "event_time": self.event_time,
                "max_out_of_orderness_us": self.max_out_of_orderness_us,
                "format_version": self.format_version,
                "schema": schema_to_b64(self.schema),
                "schema_text": [f"{f.name}: {f.type}" for f in self.schema],
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: JsonText) -> Layout:
        d = json.loads(text)
        return cls(
            topic=d["topic"],
            key=tuple(d["key"]),
            num_partitions=int(d["num_partitions"]),
            max_parallelism=int(d["max_parallelism"]),
            schema=schema_from_b64(d["schema"]),
            event_time=d.get("event_time"),
            max_out_of_orderness_us=int(d.get("max_out_of_orderness_us", 0)),
            format_version=int(d.get("format_version", 1)),
            sort_by=tuple(d.get("sort_by") or ()),
        )

    def differences(self, other: Layout) -> list[str]:
        """What in ``other`` (a write's intended layout) is incompatible with this one."""
        diffs = []
        if self.key != other.key:
            diffs.append(f"key is {list(self.key)}, not {list(other.key)}")
        if self.num_partitions != other.num_partitions:
            diffs.append(f"num_partitions is {self.num_partitions}, not {other.num_partitions}")
        if self.max_parallelism != other.max_parallelism:
            diffs.append(f"max_parallelism is {self.max_parallelism}, not {other.max_parallelism}")
        if self.event_time != other.event_time:
            diffs.append(f"event_time is {self.event_time!r}, not {other.event_time!r}")
        if self.sort_by != other.sort_by:
            diffs.append(f"sort_by is {list(self.sort_by)}, not {list(other.sort_by)}")
        diffs.extend(schema_differences(self.schema, other.schema))
        return diffs


def schema_differences(recorded: pa.Schema, incoming: pa.Schema) -> list[str]:
    """Why rows with schema ``incoming`` cannot be appended to a shuffle of ``recorded``.

    Columns are matched by name (order does not matter). Types must be equal; a column the
    shuffle records as non-nullable cannot receive a nullable one.
    """
    diffs = []
    names_in = set(incoming.names)
    names_rec = set(recorded.names)
    for name in recorded.names:
        if name not in names_in:
            diffs.append(f"column {name!r} is missing")
    for name in incoming.names:
        if name not in names_rec:
            diffs.append(f"column {name!r} is not in the shuffle's schema")
    for name in recorded.names:
        if name in names_in:
            r, i = recorded.field(name), incoming.field(name)
            if not r.type.equals(i.type):
                diffs.append(f"column {name!r} has type {i.type}, the shuffle has {r.type}")
            elif not r.nullable and i.nullable:
                diffs.append(f"column {name!r} is nullable, the shuffle's is not")
    return diffs


@dataclass(frozen=True)
class PartitionRange:
    """The offsets (inclusive) a run's frames occupy in one partition, and what they hold."""

    first: int
    last: int
    rows: int = 0
    frames: int = 0

    def merge(self, other: PartitionRange) -> PartitionRange:
        return PartitionRange(
            min(self.first, other.first),
            max(self.last, other.last),
            self.rows + other.rows,
            self.frames + other.frames,
        )


def ranges_to_json(ranges: dict[int, PartitionRange]) -> dict[str, list[int]]:
    """Per-partition ranges as JSON: ``{"partition": [first, last, rows, frames]}``."""
    return {str(p): [r.first, r.last, r.rows, r.frames] for p, r in sorted(ranges.items())}


def ranges_from_json(d: dict[str, list]) -> dict[int, PartitionRange]:
    return {int(p): PartitionRange(*map(int, v)) for p, v in d.items()}


@dataclass(frozen=True)
class Commit:
    """One committed producer run.

    ``sort_by`` (empty: none) says the run was written sorted: within each partition its
    rows are one sequence in that order, written by one producer subtask. A commit record
    without it (every one written before it existed) holds rows in no order.
    """

    run_id: str
    window: str | None
    committed_at: str
    tasks: tuple[tuple[int, int], ...]
    partitions: dict[int, PartitionRange]
    rows: int
    bytes: int
    frames: int
    event_time_min: int | None = None
    event_time_max: int | None = None
    watermark: int | None = None
    complete_until: int | None = None
    attrs: dict[str, str] = field(default_factory=dict)
    sort_by: tuple[str, ...] = ()

    @property
    def effective_watermark(self) -> int | None:
        """The event time up to which this run's window is complete."""
        marks = [w for w in (self.watermark, self.complete_until) if w is not None]
        return max(marks) if marks else None

    @property
    def watermark_time(self) -> dt.datetime | None:
        """:attr:`effective_watermark` as a UTC datetime."""
        return from_micros(self.effective_watermark)

    def complete_through(self, when: dt.datetime) -> bool:
        """Whether this run declares its window complete up to ``when`` (naive: UTC), i.e.
        its :attr:`effective_watermark` is at or past it.

        Example::

            commit.complete_through(dt.datetime(2013, 1, 2))   # the whole of 2013-01-01
        """
        mark = self.effective_watermark
        return mark is not None and mark >= to_micros(when)

    @property
    def subtasks(self) -> frozenset[int]:
        return frozenset(s for s, _ in self.tasks)

    def to_json(self) -> str:
        extra = {"sort_by": list(self.sort_by)} if self.sort_by else {}
        return json.dumps(
            {
                **extra,
                "type": "commit",
                "run_id": self.run_id,
                "window": self.window,
                "committed_at": self.committed_at,
                "tasks": [list(t) for t in self.tasks],
                "partitions": ranges_to_json(self.partitions),
                "rows": self.rows,
                "bytes": self.bytes,
                "frames": self.frames,
                "event_time_min": self.event_time_min,
                "event_time_max": self.event_time_max,
                "watermark": self.watermark,
                "complete_until": self.complete_until,
                "attrs": self.attrs,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: JsonText) -> Commit:
        d = json.loads(text)
        return cls(
            run_id=d["run_id"],
            window=d.get("window"),
            committed_at=d["committed_at"],
            tasks=tuple((int(s), int(a)) for s, a in d["tasks"]),
            partitions=ranges_from_json(d["partitions"]),
            rows=int(d["rows"]),
            bytes=int(d["bytes"]),
            frames=int(d["frames"]),
            event_time_min=d.get("event_time_min"),
            event_time_max=d.get("event_time_max"),
            watermark=d.get("watermark"),
            complete_until=d.get("complete_until"),
            attrs=dict(d.get("attrs") or {}),
            sort_by=tuple(d.get("sort_by") or ()),
        )


@dataclass(frozen=True)
class TaskResult:
    """What one producer subtask attempt wrote (the Spark writer's commit message)."""

    subtask: int
    attempt: int
    partitions: dict[int, PartitionRange]
    rows: int
    bytes: int
    frames: int
    event_time_min: int | None
    event_time_max: int | None
    watermark: int | None

    def to_json(self) -> str:
        d = dict(self.__dict__)
        d["partitions"] = ranges_to_json(self.partitions)
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: JsonText) -> TaskResult:
        d = json.loads(text)
        d["partitions"] = ranges_from_json(d["partitions"])
        return cls(**d)


def build_commit(
    run_id: str,
    window: str | None,
    results: Sequence[TaskResult],
    complete_until: int | None,
    committed_at: dt.datetime | None = None,
    attrs: dict[str, str] | None = None,
    sort_by: Sequence[str] = (),
) -> Commit:
    """Merges the results of a run's successful subtask attempts into its commit record.
    ``sort_by``: the order the run's rows were written in (see :attr:`Commit.sort_by`)."""
    from orchestration.shuffle.core.watermarks import run_watermark

    subtasks = [r.subtask for r in results]
    if len(subtasks) != len(set(subtasks)):
        raise ShuffleLayoutError(f"run {run_id}: more than one attempt of a subtask to commit")
    partitions: dict[int, PartitionRange] = {}
    for r in results:
        for p, rng in r.partitions.items():
            partitions[p] = partitions[p].merge(rng) if p in partitions else rng
    mins = [r.event_time_min for r in results if r.event_time_min is not None]
    maxs = [r.event_time_max for r in results if r.event_time_max is not None]
    return Commit(
        run_id=run_id,
        window=window,
        committed_at=(committed_at or dt.datetime.now(dt.UTC)).isoformat(),
        tasks=tuple(sorted((r.subtask, r.attempt) for r in results)),
        partitions=partitions,
        rows=sum(r.rows for r in results),
        bytes=sum(r.bytes for r in results),
        frames=sum(r.frames for r in results),
        event_time_min=min(mins) if mins else None,
        event_time_max=max(maxs) if maxs else None,
        watermark=run_watermark([r.watermark for r in results if r.rows], complete_until),
        complete_until=complete_until,
        attrs=dict(attrs or {}),
        sort_by=tuple(sort_by),
    )


@dataclass(frozen=True)
class Expired:
    """A run that retention removed: when, and which offsets its frames occupied."""

    run_id: str
    window: str | None
    expired_at: str
    reason: str
    partitions: dict[int, PartitionRange]
    rows: int = 0
    bytes: int = 0

    def to_json(self) -> str:
        return json.dumps(
            {
                "type": "expired",
                "rows": self.rows,
                "bytes": self.bytes,
                "run_id": self.run_id,
                "window": self.window,
                "expired_at": self.expired_at,
                "reason": self.reason,
                "partitions": ranges_to_json(self.partitions),
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: JsonText) -> Expired:
        d = json.loads(text)
        return cls(
            run_id=d["run_id"],
            window=d.get("window"),
            expired_at=d["expired_at"],
            reason=d.get("reason", ""),
            partitions=ranges_from_json(d["partitions"]),
            rows=int(d.get("rows", 0)),
            bytes=int(d.get("bytes", 0)),
        )


_R = TypeVar("_R", "Layout", "Commit", "Expired")


def parse_record(kind: type[_R], value: JsonText, where: str, key: str, at: str = "") -> _R:
    """``value`` read as a ``kind`` record; a :class:`ShuffleFormatError` naming ``where``
    (the commit log), the record's key and ``at`` (its offset) when it is not one (not JSON,
    cut short, a field missing or of the wrong type)."""
    try:
        return kind.from_json(value)
    except (ValueError, KeyError, TypeError, AttributeError, pa.ArrowException) as exc:
        raise ShuffleFormatError(
            f"{where}: record {key!r}{at} is not a readable {kind.__name__.lower()} record "
            f"({type(exc).__name__}: {exc})"
        ) from None


@dataclass
class ShuffleLog:
    """A shuffle's commit log, as read: its layout and its commits in log order."""

    topic: str
    layout: Layout | None = None
    commits: list[Commit] = field(default_factory=list)
    expired: dict[str, Expired] = field(default_factory=dict)

    @classmethod
    def from_records(
        cls,
        topic: str,
        records: Iterable[tuple[bytes | str | None, bytes | None]],
        offsets: Iterable[int] | None = None,
    ) -> ShuffleLog:
        """Builds the log from (key, value) records in offset order; None values are deletes.

        ``offsets`` (the records' offsets in the commit log, when known) go into the error
        that a record without a key, with a key this version does not know, or whose value
        is not a record of its kind raises.

        Raises:
            ShuffleFormatError: Naming the commit-log topic, the record's key and offset.
        """
        log = cls(topic)
        by_run: dict[str, int] = {}
        where = f"commit log {commit_topic(topic)!r}"
        positions = iter(offsets) if offsets is not None else None
        for key, value in records:
            offset = next(positions, None) if positions is not None else None
            at = "" if offset is None else f" at partition 0 offset {offset}"
            k = key.decode(errors="replace") if isinstance(key, bytes) else key
            if k is None:
                raise ShuffleFormatError(f"{where} has a record without a key{at}")
            if k == LAYOUT_KEY:
                if value is not None:
                    log.layout = parse_record(Layout, value, where, k, at)
            elif k.startswith(COMMIT_PREFIX):
                run = k[len(COMMIT_PREFIX) :]
                if run in by_run:
                    log.commits[by_run.pop(run)] = None  # type: ignore[call-overload]
                if value is not None:
                    by_run[run] = len(log.commits)
                    log.commits.append(parse_record(Commit, value, where, k, at))
            elif k.startswith(EXPIRED_PREFIX):
                run = k[len(EXPIRED_PREFIX) :]
                if value is None:
                    log.expired.pop(run, None)
                else:
                    log.expired[run] = parse_record(Expired, value, where, k, at)
            else:
                raise ShuffleFormatError(f"{where} has a record with unknown key {k!r}{at}")
        log.commits = [c for c in log.commits if c is not None]
        return log

    def require_layout(self) -> Layout:
        if self.layout is None:
            raise ShuffleLayoutError(
                f"shuffle {self.topic!r} has no layout record in {commit_topic(self.topic)!r}"
            )
        return self.layout

    def latest_by_window(self) -> dict[str | None, Commit]:
        """The visible commit of each window (runs without a window are not in here)."""
        latest: dict[str | None, Commit] = {}
        for c in self.commits:
            if c.window is not None:
                latest[c.window] = c
        return latest

    def visible(
        self, windows: Iterable[str] | None = None, runs: Iterable[str] | None = None
    ) -> list[Commit]:
        """The commits a reader sees, in log order.

        A run with a window is visible only if it is its window's latest commit; runs
        without a window are all visible. ``windows`` / ``runs`` narrow the selection; a
        run named in ``runs`` is returned even if superseded, so old runs stay readable
        while their data is retained.
        """
        wanted_windows = set(windows) if windows is not None else None
        wanted_runs = set(runs) if runs is not None else None
        latest = {c.run_id for c in self.latest_by_window().values()}
        out = []
        for c in self.commits:
            if wanted_runs is not None:
                if c.run_id not in wanted_runs:
                    continue
            elif c.window is not None and c.run_id not in latest:
                continue
            if wanted_windows is not None and c.window not in wanted_windows:
                continue
            out.append(c)
        return out

    def expired_windows(self) -> dict[str, Expired]:
        """Windows that retention left with no visible run, each with the marker of its last
        run: which run, when and why it expired."""
        visible = self.latest_by_window()
        last: dict[str, Expired] = {}
        # Markers are in log order, and a window's superseded runs are marked before (or in
        # the same pass as, earlier in the log than) its last visible run: later ones win.
        for marker in self.expired.values():
            if marker.window is not None and marker.window not in visible:
                last[marker.window] = marker
        return last

    def commit(self, run_id: str) -> Commit | None:
        return next((c for c in self.commits if c.run_id == run_id), None)

    def watermark(self) -> int | None:
        """The shuffle's event-time completeness: the furthest watermark any visible run declares.

        A run's watermark covers what that run produced (and ``complete_until`` what it
        declares complete); windows are expected to be produced in event-time order, so the
        furthest visible watermark is the topic's. Use per-window commits to track gaps.
        """
        marks = [m for m in (c.effective_watermark for c in self.visible()) if m is not None]
        return max(marks) if marks else None
