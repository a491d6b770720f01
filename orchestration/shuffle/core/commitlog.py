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
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar, overload

import pyarrow as pa

from orchestration.shuffle.core.evolution import (
    CHANGE_PREFIX,
    LayoutVersion,
    Pinned,
    version_of_key,
)
from orchestration.shuffle.errors import ShuffleFormatError, ShuffleLayoutError

LAYOUT_KEY = "layout"
COMMIT_PREFIX = "commit/"
EXPIRED_PREFIX = "expired/"
COMMIT_TOPIC_SUFFIX = "__commits"
# The layout record's format_version: 1, whose shuffles hold frames of version 1 or 2, each
# frame saying which (core/frames.py). A frame version readers of 1 cannot read would make it 2.
LAYOUT_FORMAT_VERSION = 1
# The highest format_version this engine reads: a layout record of a later one is refused by
# name (as the JVM reader does), never read as if it were one of these.
READABLE_FORMAT_VERSIONS = (1,)

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


def version_to_json(v: LayoutVersion) -> str:
    """A layout version as its ``change/<n>/<id>`` record's JSON."""
    return json.dumps(
        {
            "type": "change",
            "version": v.version,
            "change_id": v.change_id,
            "made_at": v.made_at,
            "made_by": v.made_by,
            "num_partitions": v.num_partitions,
            "schema": schema_to_b64(v.schema),
            "schema_text": [f"{f.name}: {f.type}" for f in v.schema],
            "field_ids": list(v.field_ids),
            "last_field_id": v.last_field_id,
            "changes": list(v.changes),
        },
        sort_keys=True,
    )


def version_from_json(text: JsonText) -> LayoutVersion:
    """A layout version from its record's JSON (:func:`version_to_json`)."""
    d = json.loads(text)
    if d.get("type") != "change":
        raise ValueError(f"type is {d.get('type')!r}, not 'change'")
    return LayoutVersion(
        version=int(d["version"]),
        schema=schema_from_b64(d["schema"]),
        field_ids=tuple(int(i) for i in d["field_ids"]),
        last_field_id=int(d["last_field_id"]),
        num_partitions=int(d["num_partitions"]),
        changes=tuple(d.get("changes") or ()),
        made_at=d.get("made_at"),
        made_by=d.get("made_by"),
        change_id=d.get("change_id"),
    )


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
    format_version: int = LAYOUT_FORMAT_VERSION
    sort_by: tuple[str, ...] = ()
    # The layout's versions, oldest first, when it has more than one (schema evolution,
    # partitions grown): ``schema`` and ``num_partitions`` are then the latest's. Empty: the
    # layout record alone, version 1.
    versions: tuple[LayoutVersion, ...] = ()

    @property
    def version(self) -> int:
        """The layout's latest version (1: never changed)."""
        return self.versions[-1].version if self.versions else 1

    @property
    def pinned(self) -> Pinned:
        """The columns no change may touch: key, ``sort_by``, event time."""
        return Pinned(self.key, self.sort_by, self.event_time)

    def layout_version(self, version: int = 0) -> LayoutVersion:
        """Version ``version`` of the layout (0: the latest).

        Raises:
            ShuffleFormatError: The layout has no such version (a commit naming a version
                whose change record is missing).
        """
        if not self.versions:
            if version in (0, 1):
                return LayoutVersion.first(self.schema, self.num_partitions)
        else:
            if version == 0:
                return self.versions[-1]
            for v in self.versions:
                if v.version == version:
                    return v
        raise ShuffleFormatError(
            f"shuffle {self.topic!r}: layout version {version} is not in its commit log "
            f"{commit_topic(self.topic)!r} (versions 1 to {self.version}); a run written "
            "under it cannot be read"
        )

    def evolved(self, version: LayoutVersion) -> Layout:
        """This layout with ``version`` (the next) as its latest."""
        history = self.versions or (LayoutVersion.first(self.schema, self.num_partitions),)
        return replace(
            self,
            schema=version.schema,
            num_partitions=version.num_partitions,
            versions=(*history, version),
        )

    def to_json(self) -> str:
        # sort_by is written only when there is one, so an unsorted shuffle's layout record
        # is byte for byte what it was before sorting existed; the same for versions (only
        # a layout read from a log with change records has them: the one handed to tasks).
        extra: dict = {"sort_by": list(self.sort_by)} if self.sort_by else {}
        if self.versions:
            extra["versions"] = [json.loads(version_to_json(v)) for v in self.versions]
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
            versions=tuple(version_from_json(json.dumps(v)) for v in d.get("versions") or ()),
        )

    def differences(self, other: Layout) -> list[str]:
        """What in ``other`` (a write's intended layout) is incompatible with this one: any
        difference of key, partitions, key groups, event time, order, and of columns
        (:func:`schema_differences`)."""
        diffs = self.fixed_differences(other)
        if self.num_partitions != other.num_partitions:
            diffs.append(f"num_partitions is {self.num_partitions}, not {other.num_partitions}")
        diffs.extend(schema_differences(self.schema, other.schema))
        return diffs

    def partitions_problem(self, wanted: int) -> str | None:
        """Why a writer naming ``wanted`` partitions cannot write on this layout's (None: it
        names the latest count, or one the shuffle had before it grew, which then writes on
        the latest count)."""
        if wanted == self.num_partitions:
            return None
        earlier = sorted({v.num_partitions for v in self.versions})
        if wanted in earlier:
            return None
        grown = f" (grown from {earlier[0]})" if len(earlier) > 1 else ""
        return (
            f"num_partitions is {self.num_partitions}{grown}, not {wanted}; partitions are "
            "added only with alter_shuffle(num_partitions=...)"
        )

    def fixed_differences(self, other: Layout) -> list[str]:
        """What in ``other`` differs from this layout among what no version changes: key,
        key groups, event time, order."""
        diffs = []
        if self.key != other.key:
            diffs.append(f"key is {list(self.key)}, not {list(other.key)}")
        if self.max_parallelism != other.max_parallelism:
            diffs.append(f"max_parallelism is {self.max_parallelism}, not {other.max_parallelism}")
        if self.event_time != other.event_time:
            diffs.append(f"event_time is {self.event_time!r}, not {other.event_time!r}")
        if self.sort_by != other.sort_by:
            diffs.append(f"sort_by is {list(self.sort_by)}, not {list(other.sort_by)}")
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
    # The layout version the run was written under: its columns' names, types and field ids,
    # and its partition count (Layout.layout_version). 1 for every run written before
    # evolution existed.
    layout_version: int = 1

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
        extra: dict = {"sort_by": list(self.sort_by)} if self.sort_by else {}
        if self.layout_version != 1:
            extra["layout_version"] = self.layout_version
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
            layout_version=int(d.get("layout_version", 1)),
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
    layout_version: int = 1,
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
        layout_version=layout_version,
    )


def outside_bounds(commit: Commit, start_us: int, end_us: int) -> str | None:
    """Why ``commit``'s rows are not all in the event-time range ``[start_us, end_us)``
    (a producer that did not select its window's rows), naming the window and the rows'
    bounds; None when they are, or when the run has no event times."""
    low, high = commit.event_time_min, commit.event_time_max
    if low is None or high is None or (low >= start_us and high < end_us):
        return None
    return (
        f"run {commit.run_id} of window {commit.window!r}: its rows' event times run from "
        f"{from_micros(low).isoformat()} to {from_micros(high).isoformat()}, outside "
        f"[{from_micros(start_us).isoformat()}, {from_micros(end_us).isoformat()})"
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


# Where a commit record's window is said, when the record cannot be parsed as a whole: the
# field, then a JSON string or null. The JVM planner (CommitLog.java) uses the same pattern.
_WINDOW_FIELD = re.compile(r'"window"\s*:')
_WINDOW_VALUE = re.compile(r'"window"\s*:\s*(?:"((?:[^"\\]|\\.)*)"|(null)\b)')


def recover_window(value: JsonText | None) -> tuple[bool, str | None]:
    """The window a commit record that cannot be parsed names, read from its text:
    ``(True, window)`` (a string, or None for a run without a window) when the text has the
    field exactly once with a whole value, else ``(False, None)``: the window cannot be told.
    A record with two ``"window"`` fields (one inside ``attrs``) is not guessed at."""
    if value is None:
        return False, None
    text = value.decode(errors="replace") if isinstance(value, bytes) else value
    if len(_WINDOW_FIELD.findall(text)) != 1:
        return False, None
    m = _WINDOW_VALUE.search(text)
    if m is None:
        return False, None
    if m.group(2) is not None:
        return True, None
    try:
        return True, json.loads(f'"{m.group(1)}"')
    except ValueError:
        return False, None


@dataclass(frozen=True)
class BadRecord:
    """A commit-log record that :meth:`ShuffleLog.from_records` skipped: its key is none the
    engine writes (``layout``, ``commit/<run>``, ``expired/<run>``), or its value is not a
    record of its kind (not JSON, cut short, a field missing). ``offset``: in partition 0
    of the commit log.

    For a commit record (``key`` ``commit/<run>``), ``window_known`` says whether its
    window could still be read from the record's text (:func:`recover_window`) and
    ``window`` is that window (None: a run without one).

    Example::

        for bad in shuffle_log("events", kafka=conf).bad_records:
            print(bad.offset, bad.key, bad.reason)
    """

    offset: int
    key: str | None
    reason: str
    window: str | None = None
    window_known: bool = False

    @property
    def is_commit(self) -> bool:
        """Whether the record is a commit record (by its key) that could not be read."""
        return self.key is not None and self.key.startswith(COMMIT_PREFIX)

    @property
    def run_id(self) -> str | None:
        """The run a commit record's key names (None for any other record)."""
        return self.key[len(COMMIT_PREFIX) :] if self.is_commit else None  # type: ignore[index]

    def describe(self, topic: str) -> str:
        """The record in words, naming the commit log of ``topic``, partition and offset."""
        what = "without a key" if self.key is None else repr(self.key)
        return (
            f"commit log {commit_topic(topic)!r} partition 0 offset {self.offset}: record "
            f"{what} skipped: {self.reason}"
        )


def _unreadable(kind: type, exc: BaseException) -> str:
    return f"not a readable {kind.__name__.lower()} record ({type(exc).__name__}: {exc})"


_PARSE_ERRORS = (ValueError, KeyError, TypeError, AttributeError, pa.ArrowException)


@dataclass
class ShuffleLog:
    """A shuffle's commit log, as read: its layout and its commits in log order.

    ``bad_records``: the records it skipped (:class:`BadRecord`), in log order; reads of
    what they may hide are refused (:meth:`require_readable`). ``commit_offsets``: each
    commit's record offset (its index among the records when the offsets were not given).
    """

    topic: str
    layout: Layout | None = None
    commits: list[Commit] = field(default_factory=list)
    expired: dict[str, Expired] = field(default_factory=dict)
    bad_records: tuple[BadRecord, ...] = ()
    commit_offsets: dict[str, int] = field(default_factory=dict, repr=False)
    # The layout record as written (version 1); ``layout`` is the latest version of it.
    layout_record: Layout | None = field(default=None, repr=False)
    # The commit-log key of each version's record (the first in the log of its version).
    version_keys: dict[int, str] = field(default_factory=dict, repr=False)
    # Each window's visible commit, as the log was read (None: worked out from commits).
    windows: dict[str, Commit] | None = field(default=None, repr=False)

    @classmethod
    def from_records(
        cls,
        topic: str,
        records: Iterable[tuple[bytes | str | None, bytes | None]],
        offsets: Iterable[int] | None = None,
    ) -> ShuffleLog:
        """Builds the log from (key, value) records in offset order; None values are deletes.

        ``offsets``: the records' offsets in the commit log (when not given, a record's index
        stands for it). A record without a key, with a key the engine does not write, or
        whose value is not a record of its kind is skipped and kept in :attr:`bad_records`
        (a later record of the same key replaces it, as compaction would); a commit record
        skipped also removes an earlier commit of its run. Reads it may affect are refused
        by :meth:`require_readable`.

        Raises:
            ShuffleFormatError: The layout record in effect cannot be read (nothing can be
                read without it), naming the commit log, its key and offset.
        """
        fold = LogFold(topic)
        fold.add(records, offsets)
        return fold.log()

    def require_readable(
        self, windows: Iterable[str] | None = None, runs: Iterable[str] | None = None
    ) -> None:
        """Refuses a read that a skipped commit record (:attr:`bad_records`) may change:
        never is an older run of a window shown in place of one whose commit cannot be read.

        The rules, for each commit record skipped (at offset ``o``):

        - a read by ``runs`` naming its run is refused; other reads by runs are not (a
          run named is read as it is, whatever else the log holds);
        - its window known (read from its text): that window is refused unless a commit
          of the window that could be read comes after ``o`` (that one supersedes it);
          a run without a window refuses a read of everything (it would be left out);
        - its window unknown: it may be a later run of any window, a new window or a run
          without one, so a read of everything is refused, and so is a read of a window
          with no commit after ``o``. A window whose latest commit comes after ``o`` cannot
          be changed by it, so such reads go on. This keeps every window written after the
          damage readable and never serves a window the record may have replaced; the
          cost is that windows last written before it wait until the record is repaired
          (written again, or deleted with a tombstone) or the window is written again.

        Records with a foreign key and expiry markers that cannot be read change no read
        (a marker only says why a run is gone): they are reported, not refused.

        Raises:
            ShuffleFormatError: Naming the window or run, the record's key and offset.
        """
        bad = [b for b in self.bad_records if b.is_commit]
        if not bad:
            return
        ctopic = commit_topic(self.topic)
        if runs is not None:
            wanted_runs = set(runs)
            for b in bad:
                if b.run_id in wanted_runs:
                    raise ShuffleFormatError(
                        f"shuffle {self.topic!r}: run {b.run_id!r} cannot be read: its commit "
                        f"record at partition 0 offset {b.offset} of {ctopic!r} cannot be read"
                    )
            return
        latest = {
            w: self.commit_offsets.get(c.run_id, -1) for w, c in self.latest_by_window().items()
        }
        wanted = None if windows is None else sorted(set(windows))
        for b in bad:
            record = f"record {b.key!r} at partition 0 offset {b.offset} of {ctopic!r}"
            if b.window_known and b.window is not None:
                if (wanted is None or b.window in wanted) and latest.get(b.window, -1) < b.offset:
                    raise ShuffleFormatError(
                        f"shuffle {self.topic!r}: window {b.window!r} cannot be read: {record} "
                        "is a commit of it that cannot be read, and no later commit of the "
                        "window replaces it"
                    )
                continue
            if wanted is None:
                what = "a run without a window" if b.window_known else "a window it does not tell"
                raise ShuffleFormatError(
                    f"shuffle {self.topic!r}: a read of every run is refused: {record} is a "
                    f"commit (of {what}) that cannot be read; select windows to read the others"
                )
            if b.window_known:
                continue
            for w in wanted:
                if latest.get(w, -1) < b.offset:
                    raise ShuffleFormatError(
                        f"shuffle {self.topic!r}: window {w!r} cannot be read: {record} is a "
                        "commit that cannot be read nor its window told, and no commit of the "
                        "window comes after it"
                    )

    def run_version(self, commit: Commit) -> LayoutVersion:
        """The layout version ``commit``'s run was written under."""
        return self.require_layout().layout_version(commit.layout_version)

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
        if wanted_windows is not None and wanted_runs is None and self.windows is not None:
            # A read of some windows looks up each one, whatever the log's length.
            picked = [self.windows[w] for w in wanted_windows if w in self.windows]
            return sorted(picked, key=lambda c: self.commit_offsets.get(c.run_id, -1))
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


def versions_applied(
    layout: Layout,
    changes: dict[str, tuple[int, LayoutVersion]],
    bad: dict[object, BadRecord],
) -> tuple[Layout, dict[int, str]]:
    """The layout record ``layout`` with its change records (by key: offset and version)
    applied, and each version's key. Of the records of one version, the first in the log is
    the version (a later one lost a race for it and its writer was refused); the versions
    follow one another from 2 up, and a record past a missing version is reported in
    ``bad``, not applied."""
    first: dict[int, tuple[int, str, LayoutVersion]] = {}
    for key, (offset, v) in changes.items():
        if v.version not in first or offset < first[v.version][0]:
            first[v.version] = (offset, key, v)
    keys: dict[int, str] = {}
    n = 2
    while n in first:
        offset, key, v = first[n]
        if v.version != version_of_key(key):
            bad[key] = BadRecord(offset, key, f"its key names another version than {n}")
            break
        layout = layout.evolved(v)
        keys[n] = key
        n += 1
    for version, (offset, key, _) in sorted(first.items()):
        if version >= n:
            bad[key] = BadRecord(
                offset, key, f"layout version {version} follows a missing version {n}"
            )
    return layout, keys


class LogFold:
    """A commit log read so far: its records folded in offset order, from which a
    :class:`ShuffleLog` is made at any point (:meth:`log`). More records are folded in as
    they come (:meth:`add`), so a log read again costs what is new, not its whole length.

    The rules are :meth:`ShuffleLog.from_records`'s; this is its one implementation.

    Example::

        fold = LogFold("events")
        fold.add(records, offsets)
        fold.log().visible(["2024-01-01"])
    """

    def __init__(self, topic: str):
        self.topic = topic
        self.layout: Layout | None = None
        self.layout_error: str | None = None
        # The first layout record's value seen (create_or_check settles races by it).
        self.first_layout: bytes | str | None = None
        self.commits: list[Commit | None] = []
        self.holes = 0
        self.by_run: dict[str, int] = {}
        self.commit_offsets: dict[str, int] = {}
        self.expired: dict[str, Expired] = {}
        self.bad: dict[object, BadRecord] = {}
        self.changes: dict[str, tuple[int, LayoutVersion]] = {}
        # Each window's commits (indices into commits) and its latest commit.
        self.window_runs: dict[str, list[int]] = {}
        self.latest: dict[str, Commit] = {}
        self.records = 0
        # The log last made (log()), until more records are folded in: a log read again
        # with nothing new appended is the same object, made in no time however long it is.
        self._made: ShuffleLog | None = None

    def _drop(self, run: str) -> None:
        i = self.by_run.pop(run)
        c = self.commits[i]
        self.commits[i] = None
        self.holes += 1
        self.commit_offsets.pop(run, None)
        if c is not None and c.window is not None:
            runs = self.window_runs[c.window]
            runs.remove(i)
            if runs:
                self.latest[c.window] = self.commits[runs[-1]]  # type: ignore[assignment]
            else:
                del self.window_runs[c.window]
                del self.latest[c.window]

    def add(
        self,
        records: Iterable[tuple[bytes | str | None, bytes | None]],
        offsets: Iterable[int] | None = None,
    ) -> LogFold:
        """Folds in ``records`` (key, value; None values are deletes), which follow those
        folded so far; ``offsets``: theirs (default: their position in the whole log)."""
        where = f"commit log {commit_topic(self.topic)!r}"
        positions = iter(offsets) if offsets is not None else None
        for key, value in records:
            self._made = None
            index = self.records
            self.records += 1
            offset = next(positions, index) if positions is not None else index
            k = key.decode(errors="replace") if isinstance(key, bytes) else key
            bad = self.bad
            if k is None:
                bad[("no key", offset)] = BadRecord(offset, None, "a record without a key")
                continue
            bad.pop(k, None)
            if k.startswith(COMMIT_PREFIX):
                run = k[len(COMMIT_PREFIX) :]
                if run in self.by_run:
                    self._drop(run)
                if value is not None:
                    try:
                        commit = Commit.from_json(value)
                    except _PARSE_ERRORS as exc:
                        known, window = recover_window(value)
                        bad[k] = BadRecord(offset, k, _unreadable(Commit, exc), window, known)
                        continue
                    i = len(self.commits)
                    self.by_run[run] = i
                    self.commits.append(commit)
                    self.commit_offsets[run] = offset
                    if commit.window is not None:
                        self.window_runs.setdefault(commit.window, []).append(i)
                        self.latest[commit.window] = commit
            elif k == LAYOUT_KEY:
                if value is not None:
                    if self.first_layout is None:
                        self.first_layout = value
                    try:
                        self.layout = Layout.from_json(value)
                        self.layout_error = None
                    except _PARSE_ERRORS as exc:
                        self.layout_error = (
                            f"{where}: record {k!r} at partition 0 offset {offset} is "
                            f"{_unreadable(Layout, exc)}"
                        )
            elif k.startswith(CHANGE_PREFIX) and version_of_key(k) is not None:
                self.changes.pop(k, None)
                if value is not None:
                    try:
                        self.changes[k] = (offset, version_from_json(value))
                    except _PARSE_ERRORS as exc:
                        bad[k] = BadRecord(offset, k, _unreadable(LayoutVersion, exc))
            elif k.startswith(EXPIRED_PREFIX):
                run = k[len(EXPIRED_PREFIX) :]
                if value is None:
                    self.expired.pop(run, None)
                else:
                    try:
                        self.expired[run] = Expired.from_json(value)
                    except _PARSE_ERRORS as exc:
                        self.expired.pop(run, None)
                        bad[k] = BadRecord(offset, k, _unreadable(Expired, exc))
            elif value is not None:
                bad[k] = BadRecord(offset, k, "a key the engine does not write")
        return self

    def log(self) -> ShuffleLog:
        """The log as read so far: a :class:`ShuffleLog` that later records folded in do not
        change (the same one while none are; callers never change a log).

        Raises:
            ShuffleFormatError: The layout record in effect cannot be read, or is of a
                format_version this engine does not read.
        """
        if self._made is not None:
            return self._made
        topic = self.topic
        if self.layout_error is not None:
            raise ShuffleFormatError(self.layout_error)
        log = ShuffleLog(topic)
        bad = dict(self.bad)
        if self.layout is not None:
            if self.layout.format_version not in READABLE_FORMAT_VERSIONS:
                raise ShuffleFormatError(
                    f"commit log {commit_topic(topic)!r}: the layout record has format_version "
                    f"{self.layout.format_version}; this version of kafka-shuffle reads "
                    f"{list(READABLE_FORMAT_VERSIONS)}: upgrade it to read shuffle {topic!r}"
                )
            log.layout_record = self.layout
            log.layout, log.version_keys = versions_applied(self.layout, self.changes, bad)
        if self.holes:
            log.commits = [c for c in self.commits if c is not None]
        else:
            log.commits = list(self.commits)  # type: ignore[arg-type]  # no hole: no None
        log.commit_offsets = dict(self.commit_offsets)
        log.expired = dict(self.expired)
        log.bad_records = tuple(sorted(bad.values(), key=lambda b: b.offset))
        log.windows = dict(self.latest)
        self._made = log
        return log
