"""Streaming reads of a shuffle: offsets and admission control. Pure Python.

A streaming query's offset is a position in the shuffle's commit log, ``{"log": N,
"snapshot": S}``: the micro-batch ``(start, end]`` reads the runs whose commit records sit at
commit-log offsets ``[start.log, end.log)``. Frames of runs that never committed are never
planned, and a run is read in the micro-batch that admits its commit record, so a query
restarted from its checkpoint reads each run once.

``snapshot`` is where the query's history ends: commit records before it are read only if
their run was still visible there (``startingOffsets=earliest`` reads every visible run, not
the runs that were superseded before the query started); every commit at or after it is
new data, including a run that supersedes an earlier run of its window.

Admission control: ``max_runs`` and ``max_rows`` bound a micro-batch in whole runs, and a
micro-batch always admits at least one run, so a run larger than ``max_rows`` still goes
through.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from orchestration.shuffle.core.commitlog import (
    COMMIT_PREFIX,
    BadRecord,
    Commit,
    Layout,
    ShuffleLog,
    commit_topic,
    parse_record,
    recover_window,
)
from orchestration.shuffle.core.options import Options
from orchestration.shuffle.errors import ShuffleFormatError, ShuffleLayoutError, ShuffleOptionError

EARLIEST = "earliest"
LATEST = "latest"


@dataclass(frozen=True)
class StreamOptions:
    """Where a streaming read of a shuffle starts and how much one micro-batch admits.

    :func:`~orchestration.shuffle.read_shuffle_stream` builds one from its keyword arguments;
    the ``kafka-shuffle`` data source takes the same as string options named as Spark's Kafka
    source names its own (:meth:`parse`, :meth:`to_options`). What a streaming read shares
    with a batch read (``parallelism``, ``with_metadata``) is in
    :class:`~orchestration.shuffle.core.planner.ReadOptions`.

    Example::

        StreamOptions(max_runs_per_trigger=1).to_options()  # {"maxRunsPerTrigger": "1"}

    Attributes:
        starting_offsets: ``earliest`` (every visible committed run) or ``latest`` (runs
            committed after the query starts). A query restarted from its checkpoint goes
            on from there instead. Option ``startingOffsets``.
        starting_timestamp_ms: Runs committed at or after this instant, in epoch
            milliseconds (wins over ``starting_offsets``). Option ``startingTimestamp``.
        max_runs_per_trigger: Whole runs per micro-batch, at least one. Option
            ``maxRunsPerTrigger``.
        max_rows_per_trigger: Rows per micro-batch, in whole runs, at least one run.
            Option ``maxRowsPerTrigger``.
    """

    starting_offsets: str = EARLIEST
    starting_timestamp_ms: int | None = None
    max_runs_per_trigger: int | None = None
    max_rows_per_trigger: int | None = None

    @classmethod
    def parse(cls, opts: Options) -> StreamOptions:
        """The options of a data source's string options (errors name the option)."""
        return cls(
            starting_offsets=opts.choice("startingOffsets"),
            starting_timestamp_ms=opts.integer("startingTimestamp"),
            max_runs_per_trigger=opts.integer("maxRunsPerTrigger"),
            max_rows_per_trigger=opts.integer("maxRowsPerTrigger"),
        )

    def to_options(self) -> dict[str, str]:
        """The string options that :meth:`parse` reads back (unset ones are left out)."""
        out = {"startingOffsets": self.starting_offsets}
        for name, value in (
            ("startingTimestamp", self.starting_timestamp_ms),
            ("maxRunsPerTrigger", self.max_runs_per_trigger),
            ("maxRowsPerTrigger", self.max_rows_per_trigger),
        ):
            if value is not None:
                out[name] = str(value)
        return out


@dataclass(frozen=True)
class LogRecord:
    """One record of a commit log, with its offset."""

    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class StreamOffset:
    log: int
    snapshot: int

    def to_dict(self) -> dict:
        return {"log": self.log, "snapshot": self.snapshot}

    @classmethod
    def from_dict(cls, d: dict) -> StreamOffset:
        try:
            return cls(int(d["log"]), int(d["snapshot"]))
        except (KeyError, TypeError, ValueError):
            raise ShuffleOptionError(
                f"kafka-shuffle: {d!r} is not a shuffle stream offset; was the checkpoint "
                "written by another source?"
            ) from None


def _commit_of(r: LogRecord, topic: str | None = None) -> Commit | None:
    """The commit a record holds; None for a layout record, an expiry marker or a tombstone.
    A commit record that cannot be read raises, naming ``topic``'s commit log and its offset."""
    key = (r.key or b"").decode(errors="replace")
    if r.value is None or not key.startswith(COMMIT_PREFIX):
        return None
    where = "commit log" if topic is None else f"commit log {commit_topic(topic)!r}"
    return parse_record(Commit, r.value, where, key, f" at partition 0 offset {r.offset}")


def visible_runs(topic: str, records: Sequence[LogRecord], before: int) -> set[str]:
    """Run ids visible in the commit log as it was up to offset ``before`` (exclusive)."""
    log = ShuffleLog.from_records(
        topic,
        [
            (r.key or b"", r.value)
            for r in records
            if r.offset < before and (r.key or b"").decode().startswith(COMMIT_PREFIX)
        ],
    )
    return {c.run_id for c in log.visible()}


def stream_commits(
    topic: str,
    records: Sequence[LogRecord],
    start: StreamOffset,
    end: int | None = None,
    skipped: list[BadRecord] | None = None,
) -> list[tuple[int, Commit]]:
    """The commits a stream reads from ``start`` up to offset ``end`` (exclusive), in log
    order, with their commit-log offsets. ``records`` must hold every record from offset 0
    when ``start.log < start.snapshot`` (visibility is computed from them).

    A commit record that cannot be read raises a :class:`ShuffleFormatError`, unless
    ``skipped`` is given: it is then left out and added there (as a batch read's
    :attr:`ShuffleLog.bad_records`), for the caller to report."""
    visible = visible_runs(topic, records, start.snapshot) if start.log < start.snapshot else set()
    out = []
    for r in records:
        if r.offset < start.log or (end is not None and r.offset >= end):
            continue
        try:
            commit = _commit_of(r, topic)
        except ShuffleFormatError as exc:
            if skipped is None:
                raise
            known, window = recover_window(r.value)
            key = (r.key or b"").decode(errors="replace")
            skipped.append(BadRecord(r.offset, key, str(exc), window, known))
            continue
        if commit is None:
            continue
        if r.offset < start.snapshot and commit.run_id not in visible:
            continue  # superseded before the query's history ended
        out.append((r.offset, commit))
    return out


def check_versions(layout: Layout, commits: Sequence[Commit]) -> None:
    """Refuses a micro-batch holding a run written under a later layout version than the
    stream started with: a streaming query's schema is fixed when it starts, so it stops,
    saying what changed and to start it again (it then reads every run as the new version,
    from its checkpoint on).

    Raises:
        ShuffleLayoutError: Naming the run, both versions and the changes.
    """
    for c in commits:
        if c.layout_version > layout.version:
            raise ShuffleLayoutError(
                f"shuffle {layout.topic!r}: run {c.run_id} (window {c.window!r}) was written "
                f"under layout version {c.layout_version}, after this stream started with "
                f"version {layout.version}; a streaming query keeps the schema it started "
                "with: restart it (from its checkpoint) to read this run and those after it "
                "as the new version"
            )


def admit(
    commits: Sequence[tuple[int, Commit]],
    start: StreamOffset,
    high: int,
    *,
    max_runs: int | None = None,
    max_rows: int | None = None,
) -> StreamOffset:
    """The end offset of the next micro-batch: every commit up to ``high`` (the log's end),
    or fewer whole runs under ``max_runs`` / ``max_rows`` (at least one run)."""
    if max_runs is None and max_rows is None:
        return StreamOffset(max(high, start.log), start.snapshot)
    runs = rows = 0
    end = start.log
    for offset, commit in commits:
        if runs and (
            (max_runs is not None and runs + 1 > max_runs)
            or (max_rows is not None and rows + commit.rows > max_rows)
        ):
            return StreamOffset(end, start.snapshot)
        runs += 1
        rows += commit.rows
        end = offset + 1
    # Everything pending fits: skip past records that are not commits (layout, deletes) too.
    return StreamOffset(max(high, start.log), start.snapshot)


def starting_offset(
    records: Sequence[LogRecord], high: int, starting: str, starting_timestamp_ms: int | None
) -> StreamOffset:
    """Where a new query starts: ``earliest`` (every visible run), ``latest`` (runs committed
    after it starts) or the first commit at or after ``starting_timestamp_ms``."""
    if starting_timestamp_ms is not None:
        import datetime as dt

        for r in records:
            try:
                commit = _commit_of(r)
            except ShuffleFormatError:
                continue  # unreadable: no start; latestOffset reports it with its batch
            if commit is not None:
                committed = dt.datetime.fromisoformat(commit.committed_at)
                if committed.timestamp() * 1000 >= starting_timestamp_ms:
                    return StreamOffset(r.offset, r.offset)
        return StreamOffset(high, high)
    if starting == LATEST:
        return StreamOffset(high, high)
    return StreamOffset(0, high)
