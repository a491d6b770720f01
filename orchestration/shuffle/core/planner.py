"""Read planning: which offsets each Spark partition of a shuffle read fetches. Pure Python.

The plan comes from the commit log alone. For each visible commit and each partition it
touched, the reader fetches that run's offset range and keeps the frames of the run's
committed subtask attempts; everything else in the range (other runs, failed attempts) is
skipped.

Parallelism (the number of Spark partitions of the read):

- default, equal to the partition count: Spark partition *i* holds exactly Kafka
  partition *i*;
- smaller: Spark partition *i* holds the whole Kafka partitions
  ``[i * n // p, (i + 1) * n // p)``, so key groups never split;
- larger: Kafka partition *j* is read by every Spark partition *i* with
  ``i * n // p == j``; each keeps a contiguous sub-range of *j*'s key groups, so a key
  group still never splits, at the price of each of them fetching all of *j*'s frames;
- ``"auto"``: as the default, but a small read merges whole contiguous partitions (as a
  smaller parallelism does) so that each Spark task reads about ``AUTO_TASK_ROWS`` rows or
  more, by the rows the commit records give per partition. A task of a Python data source
  costs about 80 ms before it reads anything (on a 2-core machine, about as long as
  reading 400k rows), so reading one small window in one task per partition is mostly that
  cost.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypedDict, Unpack

from orchestration.shuffle.core.commitlog import Commit, Layout, ShuffleLog, to_micros
from orchestration.shuffle.core.keygroups import key_group_range, split_range
from orchestration.shuffle.core.optiondefs import check_keywords
from orchestration.shuffle.core.options import AUTO, Options, micros_to_millis_text
from orchestration.shuffle.errors import ShuffleOptionError, ShuffleWindowNotFoundError


@dataclass(frozen=True)
class Segment:
    """One run's frames in one partition: offsets ``[first, last]`` and its attempts."""

    run_id: str
    first: int
    last: int
    tasks: tuple[tuple[int, int], ...]
    window: str | None = None
    rows: int = 0  # the run's rows in this partition, from its commit record
    # The run's rows in this partition are one sequence in the layout's sort_by order,
    # written by one subtask: its commit's sort_by is the layout's (and not empty).
    sorted: bool = False
    # The layout version the run was written under (Commit.layout_version): the names and
    # types its frames have, resolved to the latest version's by the reader.
    layout_version: int = 1


@dataclass(frozen=True)
class PartitionRead:
    """What one Spark partition reads from one Kafka partition."""

    partition: int
    key_group_start: int
    key_group_end: int  # exclusive
    full: bool  # the whole key-group range of the partition: no row filtering needed
    segments: tuple[Segment, ...]


@dataclass(frozen=True)
class SplitPlan:
    index: int
    reads: tuple[PartitionRead, ...]

    def to_json(self) -> str:
        d = asdict(self)
        # "sorted" only when true, "layout_version" only past 1: the JSON of a read of
        # unsorted runs of a shuffle never changed is as it always was.
        for r in d["reads"]:
            for seg in r["segments"]:
                if not seg["sorted"]:
                    del seg["sorted"]
                if seg["layout_version"] == 1:
                    del seg["layout_version"]
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> SplitPlan:
        d = json.loads(text)
        return cls(
            d["index"],
            tuple(
                PartitionRead(
                    r["partition"],
                    r["key_group_start"],
                    r["key_group_end"],
                    r["full"],
                    tuple(
                        Segment(
                            s["run_id"],
                            s["first"],
                            s["last"],
                            tuple(tuple(t) for t in s["tasks"]),
                            s.get("window"),
                            int(s.get("rows", 0)),
                            bool(s.get("sorted", False)),
                            int(s.get("layout_version", 1)),
                        )
                        for s in r["segments"]
                    ),
                )
                for r in d["reads"]
            ),
        )


def overlaps(commit: Commit, start_us: int | None, end_us: int | None) -> bool:
    """Whether a commit may hold rows with event time in ``[start_us, end_us)``."""
    if start_us is None and end_us is None:
        return True
    if commit.event_time_min is None or commit.event_time_max is None:
        return False  # no event times recorded (no rows, or no event-time column)
    if end_us is not None and commit.event_time_min >= end_us:
        return False
    return not (start_us is not None and commit.event_time_max < start_us)


def segments_by_partition(
    commits: Sequence[Commit], num_partitions: int, sort_by: Sequence[str] = ()
) -> list[list[Segment]]:
    """Each partition's segments, in commit order; a segment is ``sorted`` when its run was
    written in the order ``sort_by`` (the layout's) declares."""
    out: list[list[Segment]] = [[] for _ in range(num_partitions)]
    for c in commits:
        ordered = bool(sort_by) and tuple(c.sort_by) == tuple(sort_by)
        for p, rng in c.partitions.items():
            if not 0 <= p < num_partitions:
                raise ShuffleOptionError(
                    f"commit of run {c.run_id} names partition {p}, outside [0, {num_partitions})"
                )
            out[p].append(
                Segment(
                    c.run_id,
                    rng.first,
                    rng.last,
                    c.tasks,
                    c.window,
                    rng.rows,
                    ordered,
                    c.layout_version,
                )
            )
    return out


# Rows a task of an "auto" read is given at least (when the read has that many).
AUTO_TASK_ROWS = 500_000


def auto_parallelism(segments: Sequence[Sequence[Segment]]) -> int:
    """Spark partitions of an ``"auto"`` read: one per Kafka partition, fewer when the read
    holds under ``AUTO_TASK_ROWS`` rows per partition; as many as partitions when the
    commit records give no row counts."""
    n = len(segments)
    rows = sum(s.rows for segs in segments for s in segs)
    if rows == 0 and any(segments):
        return n
    return max(1, min(n, -(-rows // AUTO_TASK_ROWS)))


def check_parallelism(parallelism: int | str | None) -> None:
    if parallelism is None or parallelism == AUTO:
        return
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism <= 0:
        raise ShuffleOptionError(
            f"parallelism must be a positive integer or 'auto', got {parallelism!r}"
        )


def plan_splits(
    layout: Layout, commits: Sequence[Commit], parallelism: int | str | None = None
) -> list[SplitPlan]:
    """Splits a read of ``commits`` into ``parallelism`` Spark partitions (see module doc).

    Runs written before the shuffle's partitions grew (their layout version has fewer) are
    read with the others, keyed: a Spark partition keeps the same key groups of them, read
    from their own Kafka partitions with those key groups kept (:func:`earlier_reads`). Such
    a read has, by default, as many splits as the smallest partition count it reads."""
    check_parallelism(parallelism)
    n = layout.num_partitions
    m = layout.max_parallelism
    by_count: dict[int, list[Commit]] = {}
    for c in commits:
        count = layout.layout_version(c.layout_version).num_partitions
        by_count.setdefault(count, []).append(c)
    segs = segments_by_partition(by_count.pop(n, []), n, layout.sort_by)
    earlier = {
        count: segments_by_partition(cs, count, layout.sort_by)
        for count, cs in sorted(by_count.items())
    }
    if parallelism == AUTO:
        p = auto_parallelism(segs)
    elif parallelism is None and earlier:
        # Runs of several partition counts: by default as many splits as the smallest
        # count, each holding whole partitions of every count, so that no Kafka partition
        # is fetched twice (a split of the latest count would fetch an older partition once
        # for each of its sub-ranges); ask for more with ``parallelism``.
        p = min(earlier)
    else:
        p = n if parallelism is None else int(parallelism)

    def read(j: int, groups: range | None = None) -> PartitionRead:
        full = key_group_range(j, m, n)
        g = full if groups is None else groups
        return PartitionRead(j, g.start, g.stop, g == full, tuple(segs[j]))

    if p <= n:
        plans = []
        for i in range(p):
            own = range(i * n // p, (i + 1) * n // p)
            reads = [read(j) for j in own]
            if earlier and own:
                groups = range(
                    key_group_range(own[0], m, n).start, key_group_range(own[-1], m, n).stop
                )
                reads += earlier_reads(earlier, m, groups)
            plans.append(SplitPlan(i, tuple(reads)))
        return plans
    owners: dict[int, list[int]] = {}
    for i in range(p):
        owners.setdefault(i * n // p, []).append(i)
    plans = []
    for j in range(n):
        pieces = split_range(key_group_range(j, m, n), len(owners[j]))
        for i, g in zip(owners[j], pieces, strict=True):
            plans.append(SplitPlan(i, (read(j, g), *earlier_reads(earlier, m, g))))
    return sorted(plans, key=lambda s: s.index)


def earlier_reads(
    earlier: dict[int, list[list[Segment]]], max_parallelism: int, groups: range
) -> list[PartitionRead]:
    """The reads of runs written under an earlier partition count that hold key groups
    ``groups``: per count (``earlier[count]``: each partition's segments), each of its
    partitions whose key groups meet ``groups``, keeping only those in both. Growing a
    shuffle keeps its key groups, so a run of ``n`` partitions and one of ``2n`` nest: each
    new partition's key groups lie in one old partition (any other count is served too, a
    new partition's key groups then lying in one or two old ones)."""
    out = []
    for count, by_partition in earlier.items():
        for q, seg in enumerate(by_partition):
            if not seg:
                continue
            full = key_group_range(q, max_parallelism, count)
            lo, hi = max(full.start, groups.start), min(full.stop, groups.stop)
            if lo < hi:
                whole = (lo, hi) == (full.start, full.stop)
                out.append(PartitionRead(q, lo, hi, whole, tuple(seg)))
    return out


def split_passes(
    read: PartitionRead, max_parallelism: int, num_partitions: int, max_rows: int
) -> list[PartitionRead]:
    """``read`` cut into contiguous key-group ranges of about ``max_rows`` rows each.

    Per-key work holds every row of the keys it is working on; reading a partition in
    passes over parts of its key-group range (each pass fetches the partition's frames and
    keeps its own key groups) bounds what one pass holds. Rows per key group are estimated
    from the commit records' row counts, as if spread evenly over the partition's key
    groups; a key group is never split, so one larger than ``max_rows`` is a pass of its own.
    """
    if max_rows <= 0:
        raise ShuffleOptionError(f"rows per pass must be a positive integer, got {max_rows}")
    groups = range(read.key_group_start, read.key_group_end)
    full = key_group_range(read.partition, max_parallelism, num_partitions)
    rows = sum(s.rows for s in read.segments) * len(groups) / max(len(full), 1)
    passes = min(len(groups), max(1, -(-int(rows) // max_rows)))
    if passes <= 1:
        return [read]
    # A piece is whole only when the read was and the piece is all of it: a read of a run
    # written before the partitions grew holds another partition's range than ``full``.
    return [
        PartitionRead(read.partition, g.start, g.stop, read.full and g == groups, read.segments)
        for g in split_range(groups, passes)
    ]


def check_key_groups(topic: str, key_groups: Any, max_parallelism: int) -> tuple[int, int]:
    """``key_groups`` as ``(start, end)``: the key groups ``start <= g < end`` of a shuffle of
    ``max_parallelism`` key groups (``start == end`` selects none).

    Raises:
        ShuffleOptionError: Not two integers with ``0 <= start <= end <= max_parallelism``.
    """
    pair = tuple(key_groups) if isinstance(key_groups, tuple | list) else ()
    integers = all(isinstance(g, int) and not isinstance(g, bool) for g in pair)
    if len(pair) != 2 or not integers or not 0 <= pair[0] <= pair[1] <= max_parallelism:
        raise ShuffleOptionError(
            f"shuffle {topic!r}: key_groups must be (start, end) with 0 <= start <= end <= "
            f"{max_parallelism} (its max_parallelism), got {key_groups!r}"
        )
    return int(pair[0]), int(pair[1])


def narrow_reads(reads: Iterable[PartitionRead], start: int, end: int) -> list[PartitionRead]:
    """``reads`` narrowed to the key groups ``[start, end)``: a read whose key groups hold
    none of them is dropped (its partition is not fetched), the others keep the part of
    their range inside (and are ``full`` only if that is still their partition's whole
    range)."""
    out = []
    for r in reads:
        lo, hi = max(r.key_group_start, start), min(r.key_group_end, end)
        if lo >= hi:
            continue
        whole = r.full and (lo, hi) == (r.key_group_start, r.key_group_end)
        out.append(PartitionRead(r.partition, lo, hi, whole, r.segments))
    return out


def estimated_rows(read: PartitionRead, max_parallelism: int, num_partitions: int) -> float:
    """Rows ``read`` holds, from the commit records (as if spread evenly over key groups)."""
    full = key_group_range(read.partition, max_parallelism, num_partitions)
    share = (read.key_group_end - read.key_group_start) / max(len(full), 1)
    return sum(s.rows for s in read.segments) * share


def balance_splits(
    splits: Sequence[SplitPlan], tasks: int, max_parallelism: int, num_partitions: int
) -> list[SplitPlan]:
    """The reads of ``splits`` regrouped into at most ``tasks`` splits of near-equal rows.

    For work whose output is not keyed rows (in-reader aggregation and per-key functions):
    each Spark task has a fixed cost (about 80 ms per task of a Python data source on a
    2-core machine, more than reading 400k rows), so one task per core, each reading several
    whole Kafka partitions, beats one task per partition. Reads are placed largest first on
    the least loaded task, so a partition made large by a hot key does not leave one task
    working alone. Nothing changes when there are no more reads than ``tasks``.
    """
    reads = [r for s in splits for r in s.reads]
    if tasks <= 0 or len(splits) <= tasks:
        return list(splits)
    sized = sorted(
        reads, key=lambda r: (-estimated_rows(r, max_parallelism, num_partitions), r.partition)
    )
    loads = [0.0] * tasks
    bins: list[list[PartitionRead]] = [[] for _ in range(tasks)]
    for r in sized:
        i = min(range(tasks), key=lambda t: (loads[t], t))
        bins[i].append(r)
        loads[i] += estimated_rows(r, max_parallelism, num_partitions)
    out = [
        SplitPlan(i, tuple(sorted(b, key=lambda r: (r.partition, r.key_group_start))))
        for i, b in enumerate(x for x in bins if x)
    ]
    return out


def merged_intervals(segments: Sequence[Segment]) -> list[tuple[int, int]]:
    """The union of segments' inclusive offset ranges, so that each offset is fetched once."""
    out: list[list[int]] = []
    for s in sorted(segments, key=lambda s: s.first):
        if out and s.first <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], s.last)
        else:
            out.append([s.first, s.last])
    return [(a, b) for a, b in out]


class ReadSelection(TypedDict, total=False):
    """The keyword arguments that choose what a read sees and how Spark splits it, as
    :func:`~orchestration.shuffle.plan_shuffle_read`, :func:`~orchestration.shuffle.read_shuffle`
    and :func:`~orchestration.shuffle.aggregate_shuffle` take them. Each is the
    :class:`ReadOptions` field of the same name (documented there), but for
    ``event_time_range``: ``(start, end)`` datetimes (naive is taken as UTC; either may be
    None) that become ``event_time_start_us`` / ``event_time_end_us`` (options
    ``event_time_start_ms`` / ``event_time_end_ms``).
    """

    windows: Iterable[str] | None
    runs: Iterable[str] | None
    event_time_range: tuple[dt.datetime | None, dt.datetime | None] | None
    parallelism: int | str | None  # not given: "auto"; None: one per Kafka partition


@dataclass(frozen=True)
class ReadOptions:
    """The options of a shuffle read, defined once for the Python API and the data source.

    :func:`~orchestration.shuffle.plan_shuffle_read`, :func:`~orchestration.shuffle.read_shuffle`
    and :func:`~orchestration.shuffle.aggregate_shuffle` build one from their keyword arguments
    (:class:`ReadSelection`, :meth:`select`), :func:`~orchestration.shuffle.read_shuffle_stream`
    from its ``parallelism`` and ``with_metadata``; the ``kafka-shuffle`` data source takes the
    same fields as string options of the same names (:meth:`parse`, :meth:`to_options`).

    A new read option is a field here and its lines in :meth:`parse` and :meth:`to_options`;
    if the Python functions take it, a key of :class:`ReadSelection` and its line in
    :meth:`select`; if the reader applies it to rows, a line in :meth:`row_options`.

    Example::

        options = ReadOptions.select(windows=["2013-01-01"], parallelism="auto")
        options.to_options()  # {"windows": '["2013-01-01"]', "parallelism": "auto"}

    Attributes:
        windows: Only these windows (the latest committed run of each). Every window named
            must have a committed run. Option: a JSON list.
        runs: Only these runs (even superseded ones); each must exist. Option: a JSON list.
        event_time_start_us: Only rows with an event time at or after this, in epoch
            microseconds (the unit of event times in frames and commit records). Option
            ``event_time_start_ms``: epoch milliseconds, as every time a Spark user sets (up
            to three decimals, so a datetime's microseconds go along exactly).
        event_time_end_us: Only rows with an event time before this (epoch microseconds).
            Option ``event_time_end_ms``.
        parallelism: Spark partitions; None: one per Kafka partition. ``"auto"``: the same,
            but a small read merges whole contiguous partitions so that each task reads
            about 500k rows or more (each task has a fixed cost). See
            :mod:`orchestration.shuffle.core.planner` for smaller and larger values. The
            Python functions (:meth:`select`) default to ``"auto"``; the data source's
            option, when not given, is None.
        with_metadata: Add the columns ``_partition``, ``_key_group``, ``_run_id``,
            ``_offset`` and ``_window``. Option: ``true`` or ``false``.
    """

    windows: tuple[str, ...] | None = None
    runs: tuple[str, ...] | None = None
    event_time_start_us: int | None = None
    event_time_end_us: int | None = None
    parallelism: int | str | None = None
    with_metadata: bool = False

    @classmethod
    def select(cls, **selection: Unpack[ReadSelection]) -> ReadOptions:
        """The options that the public functions' keyword arguments give; ``parallelism``
        not given is ``"auto"`` (a small read in few tasks), None one task per partition.
        Keywords that :class:`ReadSelection` does not declare are refused."""
        check_keywords("ReadOptions.select", selection, ReadSelection.__annotations__)
        windows = selection.get("windows")
        runs = selection.get("runs")
        start, end = selection.get("event_time_range") or (None, None)
        return cls(
            windows=None if windows is None else tuple(windows),
            runs=None if runs is None else tuple(runs),
            event_time_start_us=to_micros(start),
            event_time_end_us=to_micros(end),
            parallelism=selection.get("parallelism", AUTO),
        )

    @classmethod
    def parse(cls, opts: Options) -> ReadOptions:
        """The options of a data source's string options (errors name the option)."""
        windows = opts.json_list("windows")
        runs = opts.json_list("runs")
        return cls(
            windows=None if windows is None else tuple(windows),
            runs=None if runs is None else tuple(runs),
            event_time_start_us=opts.millis_as_micros("event_time_start_ms"),
            event_time_end_us=opts.millis_as_micros("event_time_end_ms"),
            parallelism=opts.int_or_auto("parallelism"),
            with_metadata=opts.flag("with_metadata"),
        )

    def to_options(self) -> dict[str, str]:
        """The string options that :meth:`parse` reads back (unset ones are left out)."""
        out: dict[str, str] = {}
        if self.windows is not None:
            out["windows"] = json.dumps(list(self.windows))
        if self.runs is not None:
            out["runs"] = json.dumps(list(self.runs))
        if self.event_time_start_us is not None:
            out["event_time_start_ms"] = micros_to_millis_text(self.event_time_start_us)
        if self.event_time_end_us is not None:
            out["event_time_end_ms"] = micros_to_millis_text(self.event_time_end_us)
        if self.parallelism is not None:
            out["parallelism"] = str(self.parallelism)
        if self.with_metadata:
            out["with_metadata"] = "true"
        return out

    def row_options(self) -> ReadOptions:
        """What still applies once a plan has fixed the runs and the splits: the reader
        filters rows by event time and adds the metadata columns."""
        return ReadOptions(
            event_time_start_us=self.event_time_start_us,
            event_time_end_us=self.event_time_end_us,
            with_metadata=self.with_metadata,
        )

    def plan(self, log: ShuffleLog) -> ReadPlan:
        """The read of ``log`` that these options select (see :func:`plan_read`)."""
        return plan_read(
            log,
            windows=self.windows,
            runs=self.runs,
            event_time_start_us=self.event_time_start_us,
            event_time_end_us=self.event_time_end_us,
            parallelism=self.parallelism,
        )


@dataclass(frozen=True)
class ReadPlan:
    """A planned read: the layout, the commits it reads and one split per Spark partition."""

    layout: Layout
    commits: tuple[Commit, ...]
    splits: tuple[SplitPlan, ...]
    event_time_start_us: int | None = None
    event_time_end_us: int | None = None

    @property
    def rows(self) -> int:
        """Rows the commits hold (before any event-time filter)."""
        return sum(c.rows for c in self.commits)


def missing_windows_message(log: ShuffleLog, windows: Sequence[str]) -> str:
    """Why ``windows`` have no visible run: expired by retention (when, why, which run), or
    never committed.

    Example::

        shuffle 'events': window(s) ['2024-03-01'] expired: window '2024-03-01' (run r1,
        expired 2024-04-01T03:00:00+00:00: not among the 30 most recent windows)
    """
    last = log.expired_windows()
    expired = [w for w in windows if w in last]
    never = [w for w in windows if w not in last]
    parts = []
    if expired:
        why = "; ".join(
            f"window {w!r} (run {last[w].run_id}, expired {last[w].expired_at}: {last[w].reason})"
            for w in expired
        )
        parts.append(f"window(s) {expired} expired: {why}")
    if never:
        parts.append(f"no committed run for window(s) {never}")
    return f"shuffle {log.topic!r}: " + "; ".join(parts)


def plan_read(
    log: ShuffleLog,
    *,
    windows: Sequence[str] | None = None,
    runs: Sequence[str] | None = None,
    event_time_start_us: int | None = None,
    event_time_end_us: int | None = None,
    parallelism: int | str | None = None,
) -> ReadPlan:
    """The one read planner: which commits a read sees and which offsets each split fetches.

    The arguments are the :class:`ReadOptions` fields of the same names (usually given as
    one, :meth:`ReadOptions.plan`). Only commits whose event times may fall in
    ``[event_time_start_us, event_time_end_us)`` are planned; the reader filters their rows.

    Raises:
        ShuffleWindowNotFoundError: A window or run named has no committed run (the
            message says so of one that retention expired, with when and why).
        ShuffleOptionError: An event-time range on a shuffle without an event-time column,
            or a parallelism that is not positive.
        ShuffleFormatError: A commit record the log skipped may be a later run of a window
            read (:meth:`ShuffleLog.require_readable`), naming its offset.
    """
    layout = log.require_layout()
    topic = log.topic
    log.require_readable(windows, runs)
    commits = log.visible(windows, runs)
    if windows is not None:
        missing = sorted(set(windows) - {c.window for c in commits})
        if missing:
            raise ShuffleWindowNotFoundError(missing_windows_message(log, missing))
    if runs is not None:
        missing = sorted(set(runs) - {c.run_id for c in commits})
        expired = [
            f"{r} (window {log.expired[r].window!r}, expired {log.expired[r].expired_at}: "
            f"{log.expired[r].reason})"
            for r in missing
            if r in log.expired
        ]
        if expired:
            raise ShuffleWindowNotFoundError(
                f"shuffle {topic!r}: run(s) {expired} were removed by retention"
            )
        if missing:
            raise ShuffleWindowNotFoundError(f"shuffle {topic!r} has no committed run(s) {missing}")
    if event_time_start_us is not None or event_time_end_us is not None:
        if layout.event_time is None:
            raise ShuffleOptionError(
                f"shuffle {topic!r} has no event_time column; an event-time range cannot apply"
            )
        commits = [c for c in commits if overlaps(c, event_time_start_us, event_time_end_us)]
    return ReadPlan(
        layout,
        tuple(commits),
        tuple(plan_splits(layout, commits, parallelism)),
        event_time_start_us,
        event_time_end_us,
    )
