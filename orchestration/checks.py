"""Asset checks every shuffle asset needs, from one factory.

Example::

    checks = shuffle_asset_checks(events_by_user)       # blocking by default
    Definitions(assets=[events_by_user, ...], asset_checks=checks, ...)

- ``shuffle_layout``: the layout recorded in the commit log (key, partitions, key groups,
  event time) is the one the asset's metadata declares, and the data topic has its
  partition count. A shuffle whose layout changed under it would send keys to the wrong
  partitions.
- ``shuffle_rows``: the committed runs of the partitions checked are complete in Kafka: in
  each run's committed offset ranges, every committed subtask attempt's END frame is found,
  its DATA frames are all there, and the rows the END frames declare add up to the rows of
  the commit record, per Kafka partition and in total. Only the frame headers (and the END
  frames' counts) are read, and each payload's checksum checked, never an Arrow payload
  decoded; ``full_read=True`` reads every row back instead, every payload decoded (with
  ``read_batches``: no Spark, a batch per partition held at a time).
- ``shuffle_window_readable``: each partition checked has a run readers can read. A window
  that retention left with no run fails it with severity WARN, saying which run went, when
  and why; :func:`~orchestration.shuffle_expiry_job` records that result for each window it
  empties, so an expired partition shows as such while its materializations stay in the
  asset's history.
  Records of the commit log that readers skip (another application's, or cut short:
  ``ShuffleLog.bad_records``) fail it too, naming each record's key and offset: with
  severity ERROR when one may be a later run of a partition checked (reads of it are
  refused), else WARN.

- ``shuffle_event_times_in_window``: each run checked holds rows of its own window only: the
  event times its commit record gives lie in the window's time span (for time-window
  partitions and a shuffle with an event time). A producer that did not select its window's
  rows fails it, naming the window and the rows' bounds.
- ``shuffle_watermark_progress`` (of the asset as a whole, never blocking): the shuffle's
  watermark advanced within ``stall_after`` (default: a partition's length and a quarter,
  30 hours for daily partitions). It fails with severity WARN once the watermark has not
  advanced for that long, ERROR after twice that. A re-run of an old window does not
  advance the watermark, so it does not satisfy it. :func:`~orchestration.
  shuffle_watch_sensor` evaluates it on every tick, so a stall is caught while nothing is
  committed.

The checks of a partitioned asset (but ``shuffle_watermark_progress``) are partitioned as
the asset is, so they check a partition, not the asset as a whole:

- run with a materialization, they check the runs that Dagster run committed for its
  partition (or each partition of a range run);
- run on their own for a chosen partition (the UI's "Execute" on a check, or a run that
  selects only the checks), they check that partition's latest visible run.

Dagster 1.13 records a check result per partition only for a run of one partition: a range
run's result covers the range as one evaluation (``AssetCheckResult`` takes no partition),
and the UI shows the range's partitions as skipped for the check. Partitioned asset checks
are a preview feature of Dagster 1.13.

Blocking checks stop the rest of their run when they fail; the commit sensor also reports
each commit, so a broken window is visible on the asset before consumers read it.
"""

import datetime as dt
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    MetadataValue,
    PartitionsDefinition,
    PreviewWarning,
    TimeWindowPartitionsDefinition,
    asset_check,
)

from orchestration.definition import (
    DAGSTER_RUN_ATTR,
    asset_io_manager_key,
    asset_shuffle,
    declaration_differences,
    declared_metadata,
)
from orchestration.metadata import (
    Lag,
    as_utc,
    committed_time,
    completeness,
    consumer_lag,
    consumptions,
    epoch_seconds,
    outside_window,
    window_bounds,
)
from orchestration.shuffle.core.commitlog import (
    Commit,
    Expired,
    ShuffleLog,
    commit_topic,
    from_micros,
)
from orchestration.shuffle.core.frames import FrameType, decode
from orchestration.shuffle.core.queue import QueueBacklog
from orchestration.shuffle.errors import ShuffleError, ShuffleFormatError
from orchestration.shuffle.kafka.client import KafkaClient, read_range
from orchestration.shuffle.kafka.commitlog import check_partitions
from orchestration.shuffle.queue.backlog import queue_backlog
from orchestration.shuffle.read import shuffle_log
from orchestration.shuffle.table_read import read_batches


@dataclass
class FrameCount:
    """What the frame headers in a committed run's offset ranges say about it.

    ``rows`` and ``frames`` are what the END frames of its committed subtask attempts
    declare; ``problems`` is every disagreement found (a missing END frame, a DATA frame
    missing or extra, counts that differ from the commit record's), each naming the
    partition and subtask.
    """

    run_id: str
    window: str | None
    rows: int = 0
    frames: int = 0
    rows_committed: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems and self.rows == self.rows_committed


def count_run_frames(kafka: KafkaClient, topic: str, commit: Commit) -> FrameCount:
    """Reads the frame headers of ``commit``'s offset ranges in the data topic ``topic`` and
    checks them against the commit record, decoding no Arrow payload.

    Frames of other runs and of failed attempts share these ranges and are skipped, as a
    reader skips them.

    Example::

        log = shuffle_log("events.by_user", kafka=conf)
        count = count_run_frames(KafkaClient(conf), "events.by_user", log.visible()[-1])
        assert count.passed, count.problems

    Raises:
        ShuffleError: Kafka could not be read (e.g. the offsets were deleted).
    """
    out = FrameCount(commit.run_id, commit.window, rows_committed=commit.rows)
    tasks = set(commit.tasks)
    with kafka.consumer() as c:
        for p, rng in sorted(commit.partitions.items()):
            data: dict[int, int] = {}
            ended: dict[int, tuple[int, int]] = {}
            # One message at a time: frames are up to a few MiB and only their headers count.
            for m in read_range(c, topic, p, rng.first, rng.last + 1, max_batch=1):
                where = f"topic {topic!r} partition {p} offset {m.offset()}"
                try:
                    # Only the header is parsed: the Arrow payload stays undecoded.
                    frame = decode(m.value() or b"", where)
                except ShuffleFormatError as exc:
                    out.problems.append(f"{exc}; check with full_read=True")
                    continue
                header = frame.header
                if header.run_id != commit.run_id or (header.subtask, header.attempt) not in tasks:
                    continue
                if header.type is FrameType.DATA:
                    data[header.subtask] = data.get(header.subtask, 0) + 1
                elif header.type is FrameType.END:
                    ended[header.subtask] = frame.end_counts()
            rows = frames = 0
            for subtask, attempt in commit.tasks:
                where = f"partition {p}, subtask {subtask} attempt {attempt}"
                if subtask not in ended:
                    out.problems.append(
                        f"{where}: no END frame within committed offsets [{rng.first}, "
                        f"{rng.last}]; the topic lost data or was truncated"
                    )
                    continue
                end_rows, end_frames = ended[subtask]
                if data.get(subtask, 0) != end_frames:
                    out.problems.append(
                        f"{where}: {data.get(subtask, 0)} DATA frames found, its END frame "
                        f"says {end_frames}"
                    )
                rows += end_rows
                frames += end_frames
            if (rows, frames) != (rng.rows, rng.frames):
                out.problems.append(
                    f"partition {p}: the frames hold {rows} rows in {frames} frames, the commit "
                    f"record says {rng.rows} rows in {rng.frames} frames"
                )
            out.rows += rows
            out.frames += frames
    if out.rows != commit.rows:
        out.problems.append(
            f"the frames hold {out.rows} rows, the commit record says {commit.rows}"
        )
    return out


def commits_to_check(
    log: ShuffleLog, run_id: str, partition_keys: Sequence[str] | None
) -> tuple[list[Commit], list[str]]:
    """The commits a check looks at, and the partitions that have none.

    Per partition: the run Dagster run ``run_id`` committed for it (the check ran with the
    materialization), else its latest visible run (the check ran on its own). For an
    unpartitioned asset (``partition_keys`` None), the same among runs without a window.
    """
    if partition_keys is None:
        unwindowed = [c for c in log.commits if c.window is None]
        ours = [c for c in unwindowed if c.attrs.get(DAGSTER_RUN_ATTR) == run_id]
        chosen = (ours or unwindowed)[-1:]
        return chosen, [] if chosen else ["(no window)"]
    latest = log.latest_by_window()
    mine = {c.window: c for c in log.commits if c.attrs.get(DAGSTER_RUN_ATTR) == run_id}
    commits, missing = [], []
    for key in partition_keys:
        commit = mine.get(key) or latest.get(key)
        if commit is None:
            missing.append(key)
        else:
            commits.append(commit)
    return commits, missing


# The check whose result says a partition's window is still readable; the expiry job records
# it for each window it empties.
READABLE_CHECK = "shuffle_window_readable"


def expired_metadata(marker: Expired) -> dict[str, Any]:
    """What Dagster shows of a window retention emptied: its last run, when and why it went."""
    return {
        "shuffle/expired": True,
        "shuffle/run_id": marker.run_id,
        "shuffle/expired_at": MetadataValue.timestamp(dt.datetime.fromisoformat(marker.expired_at)),
        "shuffle/expiry_reason": marker.reason,
        "rows": marker.rows,
        "bytes": marker.bytes,
    }


def gone_windows(log: ShuffleLog, partitioned: bool) -> dict[str | None, Expired]:
    """The windows retention left with no readable run, each with its last run's marker.

    For an unpartitioned asset (``partitioned`` False), whose readers read the latest run
    without a window, the one key None when every such run expired.
    """
    if partitioned:
        return {w: m for w, m in log.expired_windows().items()}
    if any(c.window is None for c in log.commits):
        return {}
    unwindowed = [e for e in log.expired.values() if e.window is None]
    return {None: unwindowed[-1]} if unwindowed else {}


@dataclass
class Readability:
    """What ``shuffle_window_readable`` says of some partitions (all of an unpartitioned
    asset: ``keys`` None): a failure is a WARN when retention emptied the windows, an ERROR
    when one never had a run."""

    passed: bool
    severity: AssetCheckSeverity
    description: str | None
    metadata: dict[str, Any]


def readability(log: ShuffleLog, keys: Sequence[str] | None) -> Readability:
    """Whether each of ``keys`` (windows; None: the asset is unpartitioned) has a run
    readers can read in ``log``. One window that expired shows its marker's metadata
    (:func:`expired_metadata`)."""
    partitioned = keys is not None
    gone = gone_windows(log, partitioned)
    wanted: list[str | None] = list(keys) if keys is not None else [None]
    visible: set[str | None] = (
        set(log.latest_by_window())
        if partitioned
        else ({None} if any(c.window is None for c in log.commits) else set())
    )
    refused: dict[str | None, str] = {}
    for w in wanted:
        try:
            log.require_readable(windows=None if w is None else [w])
        except ShuffleFormatError as exc:
            refused[w] = str(exc)
    readable = [w for w in wanted if w in visible and w not in refused]
    expired = [w for w in wanted if w not in visible and w in gone and w not in refused]
    missing = [w for w in wanted if w not in visible and w not in gone and w not in refused]
    problems = (
        list(refused.values())
        + [
            f"{'the asset' if w is None else f'window {w}'}: its last run {gone[w].run_id} "
            f"expired {gone[w].expired_at}: {gone[w].reason}"
            for w in expired
        ]
        + [f"{'the asset' if w is None else f'window {w}'}: no committed run" for w in missing]
    )
    metadata: dict[str, Any] = {"readable": len(readable)}
    if len(expired) == 1 and not missing:
        metadata.update(expired_metadata(gone[expired[0]]))
    elif expired:
        metadata["expired"] = MetadataValue.json(
            {
                str(w): {
                    "run_id": gone[w].run_id,
                    "expired_at": gone[w].expired_at,
                    "reason": gone[w].reason,
                }
                for w in expired[:50]
            }
        )
    if missing:
        metadata["missing"] = MetadataValue.json([str(w) for w in missing[:50]])
    if log.bad_records:
        problems.append(
            f"commit log {commit_topic(log.topic)} has {len(log.bad_records)} record(s) "
            "readers skip: "
            + "; ".join(
                f"{'no key' if b.key is None else repr(b.key)} at offset {b.offset}"
                for b in log.bad_records[:5]
            )
        )
        metadata["bad_records"] = MetadataValue.json(
            [{"offset": b.offset, "key": b.key, "reason": b.reason} for b in log.bad_records[:50]]
        )
    if refused:
        metadata["refused"] = MetadataValue.json(list(refused.values())[:50])
    return Readability(
        passed=not problems,
        # Retention emptying a window is what it was asked to do, and a record readers skip
        # hides no run: worth seeing, not an alarm.
        severity=AssetCheckSeverity.ERROR if missing or refused else AssetCheckSeverity.WARN,
        description="; ".join(problems[:5]) or None,
        metadata=metadata,
    )


# The check whose result says the shuffle's watermark keeps advancing; shuffle_watch_sensor
# reports it on its ticks.
PROGRESS_CHECK = "shuffle_watermark_progress"
# The check whose result says each run's rows are of its own window.
IN_WINDOW_CHECK = "shuffle_event_times_in_window"

# The cadence of a shuffle without time-window partitions, unless told.
DEFAULT_CADENCE = dt.timedelta(days=1)


def expected_cadence(partitions_def: PartitionsDefinition | None) -> dt.timedelta:
    """How often a shuffle's watermark is expected to advance: the length of a partition of
    time-window partitions (its first), else :data:`DEFAULT_CADENCE`."""
    if isinstance(partitions_def, TimeWindowPartitionsDefinition):
        first = partitions_def.get_first_partition_window()
        if first is not None:
            return first.end - first.start
    return DEFAULT_CADENCE


def default_stall_after(partitions_def: PartitionsDefinition | None) -> dt.timedelta:
    """How long a watermark may stand still before ``shuffle_watermark_progress`` fails: a
    partition and a quarter (a window's run that comes a little late is not a stall)."""
    return expected_cadence(partitions_def) * 5 / 4


@dataclass(frozen=True)
class WatermarkProgress:
    """What ``shuffle_watermark_progress`` says of a shuffle's commit log at ``now``.

    ``watermark`` is the shuffle's (epoch microseconds; None: no run declares one, and then
    any new commit counts as progress), ``advanced_at`` when the commit that brought it
    there committed (None: nothing committed yet).
    """

    watermark: int | None
    advanced_at: dt.datetime | None
    now: dt.datetime
    stall_after: dt.timedelta

    @property
    def idle(self) -> dt.timedelta | None:
        return None if self.advanced_at is None else self.now - self.advanced_at

    @property
    def passed(self) -> bool:
        return self.idle is None or self.idle <= self.stall_after

    @property
    def severity(self) -> AssetCheckSeverity:
        idle = self.idle
        stalled_long = idle is not None and idle > 2 * self.stall_after
        return AssetCheckSeverity.ERROR if stalled_long else AssetCheckSeverity.WARN

    @property
    def description(self) -> str:
        if self.advanced_at is None:
            return "nothing committed yet: no progress to judge"
        what = (
            f"the watermark {from_micros(self.watermark).isoformat()}"
            if self.watermark is not None
            else "the last commit (no run declares a watermark)"
        )
        idle = _span(self.idle) if self.idle is not None else "0 s"
        state = "within" if self.passed else "stalled: past"
        return (
            f"{what} was reached at {self.advanced_at.isoformat()}, {idle} ago; "
            f"{state} the {_span(self.stall_after)} allowed"
        )

    def metadata(self) -> dict[str, Any]:
        md: dict[str, Any] = {"stall_after_s": self.stall_after.total_seconds()}
        if self.watermark is not None:
            md["watermark_epoch_s"] = epoch_seconds(self.watermark)
            md["watermark"] = MetadataValue.timestamp(from_micros(self.watermark))
        if self.advanced_at is not None and self.idle is not None:
            md["advanced_at"] = MetadataValue.timestamp(self.advanced_at)
            md["idle_s"] = round(self.idle.total_seconds(), 3)
        return md

    def result(self) -> AssetCheckResult:
        return AssetCheckResult(
            passed=self.passed,
            severity=self.severity,
            description=self.description,
            metadata=self.metadata(),
        )


def watermark_progress(
    log: ShuffleLog, now: dt.datetime, stall_after: dt.timedelta
) -> WatermarkProgress:
    """When the shuffle's watermark last advanced, read from its commit log, and whether
    that is within ``stall_after`` of ``now``. Pure.

    The watermark advanced when the first commit (in log order, superseded runs included)
    that declares it committed: a later run re-declaring it (a re-run of a window) is not
    progress. A shuffle none of whose runs declares a watermark progresses with each commit.
    """
    mark = log.watermark()
    last = log.commits[-1] if log.commits else None
    reached = last if mark is None else reached_by(log, mark)
    at = committed_time(reached) if reached is not None else None
    return WatermarkProgress(mark, at, as_utc(now), stall_after)


def reached_by(log: ShuffleLog, mark: int) -> Commit | None:
    """The first commit of ``log`` (in log order) whose watermark is at or past ``mark``."""
    marks = ((c, c.effective_watermark) for c in log.commits)
    return next((c for c, m in marks if m is not None and m >= mark), None)


def runs_outside_windows(
    commits: Iterable[Commit], partitions_def: PartitionsDefinition | None
) -> list[str]:
    """What ``shuffle_event_times_in_window`` finds wrong with ``commits``: each run whose
    rows' event times fall outside its window (:func:`~orchestration.metadata.
    outside_window`)."""
    out = []
    for commit in commits:
        bounds = window_bounds(partitions_def, commit.window)
        wrong = outside_window(commit, *bounds) if bounds is not None else None
        if wrong is not None:
            out.append(wrong)
    return out


def _partition_keys(context: AssetCheckExecutionContext, partitioned: bool) -> list[str] | None:
    if not partitioned:
        return None
    if context.has_partition_key or context.has_partition_key_range:
        return list(context.partition_keys)
    return []


def shuffle_asset_checks(
    asset: AssetsDefinition | AssetSpec,
    *,
    blocking: bool = True,
    full_read: bool = False,
    stall_after: dt.timedelta | None = None,
) -> list[AssetChecksDefinition]:
    """The layout, row-count, readability, event-time and watermark-progress checks of a
    shuffle asset stored by ``KafkaShuffleIOManager`` (the module doc says what each checks).

    Args:
        asset: The shuffle asset, or the ``AssetSpec`` by which another code location
            declares it (``shuffle_metadata`` and ``with_io_manager_key``).
        blocking: Whether a failed check stops the rest of its run (downstream assets);
            ``shuffle_watermark_progress`` never does (a stall is no reason to hold back a
            window's consumers).
        full_read: ``shuffle_rows`` reads every row back, every payload decoded, without
            Spark (``read_batches``), instead of counting from the frame headers.
        stall_after: How long the watermark may stand still before
            ``shuffle_watermark_progress`` fails; default :func:`default_stall_after`.
    """
    shuffle = asset_shuffle(asset)
    io_key = asset_io_manager_key(asset)
    partitions_def = asset.partitions_def
    partitioned = partitions_def is not None
    allowed = stall_after if stall_after is not None else default_stall_after(partitions_def)

    def decorate(
        name: str, description: str, *, whole_asset: bool = False
    ) -> Callable[[Callable], AssetChecksDefinition]:
        def apply(fn: Callable) -> AssetChecksDefinition:
            # Partitioned checks are a preview in Dagster 1.13 (AssetCheckSpec warns about
            # partitions_def); they are what lets a check run for the partition chosen.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PreviewWarning)
                return asset_check(
                    # An AssetSpec (a shuffle declared by another code location) by its key.
                    asset=asset.key if isinstance(asset, AssetSpec) else asset,
                    name=name,
                    blocking=blocking and not whole_asset,
                    required_resource_keys={io_key},
                    description=description,
                    partitions_def=None if whole_asset else partitions_def,
                )(fn)

        return apply

    @decorate("shuffle_layout", "The commit log's layout is the one the asset's metadata declares.")
    def _layout(context: AssetCheckExecutionContext) -> AssetCheckResult:
        kafka = getattr(context.resources, io_key).kafka.client()
        spec = shuffle.under(getattr(context.resources, io_key).kafka).spec
        try:
            layout = shuffle_log(spec.topic, kafka=kafka).require_layout()
            check_partitions(kafka, layout)
        except ShuffleError as exc:
            return AssetCheckResult(
                passed=False, description=str(exc), metadata={"error": str(exc)}
            )
        expected = (tuple(spec.key), spec.num_partitions, spec.max_parallelism, spec.event_time)
        actual = (layout.key, layout.num_partitions, layout.max_parallelism, layout.event_time)
        differences = declaration_differences(
            shuffle.under(getattr(context.resources, io_key).kafka),
            layout,
            declared_metadata(asset),
        )
        metadata: dict[str, Any] = {
            "expected": str(expected),
            "actual": str(actual),
            "topic": spec.topic,
            "schema_version": layout.version,
        }
        if differences:
            metadata["differences"] = MetadataValue.json(differences)
        return AssetCheckResult(
            passed=not differences,
            description="; ".join(differences) or None,
            metadata=metadata,
        )

    how = "every row read back" if full_read else "counted from the frame headers"

    @decorate("shuffle_rows", f"Committed runs are complete in Kafka: rows {how} = rows committed.")
    def _rows(context: AssetCheckExecutionContext) -> AssetCheckResult:
        io_manager = getattr(context.resources, io_key)
        spec = shuffle.under(io_manager.kafka).spec
        kafka = io_manager.kafka.client()
        keys = _partition_keys(context, partitioned)
        if keys == []:
            why = "the run chose no partition of the partitioned asset"
            return AssetCheckResult(passed=False, description=why, metadata={"error": why})
        try:
            log = shuffle_log(spec.topic, kafka=kafka)
            commits, missing = commits_to_check(log, context.run.run_id, keys)
            counts = (
                [_read_back(kafka, log, c) for c in commits]
                if full_read
                else [count_run_frames(kafka, spec.topic, c) for c in commits]
            )
        except ShuffleError as exc:
            return AssetCheckResult(
                passed=False, description=str(exc), metadata={"error": str(exc)}
            )
        problems = [f"window {w}: no committed run" for w in missing] + [
            f"run {c.run_id} (window {c.window}): {p}" for c in counts for p in c.problems
        ]
        passed = not missing and all(c.passed for c in counts)
        metadata: dict[str, Any] = {
            "runs": MetadataValue.json(_per_run(counts)),
            "rows_counted": sum(c.rows for c in counts),
            "rows_committed": sum(c.rows_committed for c in counts),
            "method": "full read" if full_read else "frame headers",
        }
        if problems:
            metadata["problems"] = MetadataValue.json(problems[:50])
        return AssetCheckResult(
            passed=passed,
            description=None if passed else "; ".join(problems[:5]) or "rows differ",
            metadata=metadata,
        )

    @decorate(
        READABLE_CHECK,
        "Each partition has a run readers can read; a window retention emptied says when "
        "and why (severity WARN); commit-log records readers skip are named (WARN, or ERROR "
        "when one may hide a later run of a partition checked).",
    )
    def _readable(context: AssetCheckExecutionContext) -> AssetCheckResult:
        keys = _partition_keys(context, partitioned)
        if keys == []:
            why = "the run chose no partition of the partitioned asset"
            return AssetCheckResult(passed=False, description=why, metadata={"error": why})
        kafka = getattr(context.resources, io_key).kafka
        try:
            log = shuffle_log(shuffle.under(kafka).topic, kafka=kafka.client())
        except ShuffleError as exc:
            return AssetCheckResult(
                passed=False, description=str(exc), metadata={"error": str(exc)}
            )
        found = readability(log, keys)
        return AssetCheckResult(
            passed=found.passed,
            severity=found.severity,
            description=found.description,
            metadata=found.metadata,
        )

    @decorate(
        IN_WINDOW_CHECK,
        "Each run's rows are of its window: their event times lie in the window's time span.",
    )
    def _in_window(context: AssetCheckExecutionContext) -> AssetCheckResult:
        keys = _partition_keys(context, partitioned)
        if keys == []:
            why = "the run chose no partition of the partitioned asset"
            return AssetCheckResult(passed=False, description=why, metadata={"error": why})
        if not isinstance(partitions_def, TimeWindowPartitionsDefinition):
            return AssetCheckResult(
                passed=True,
                description="the asset has no time-window partitions: no window to hold to",
                metadata={"runs_checked": 0},
            )
        kafka = getattr(context.resources, io_key).kafka
        try:
            log = shuffle_log(shuffle.under(kafka).topic, kafka=kafka.client())
        except ShuffleError as exc:
            return AssetCheckResult(
                passed=False, description=str(exc), metadata={"error": str(exc)}
            )
        # A partition without a run is shuffle_window_readable's to report.
        commits, _ = commits_to_check(log, context.run.run_id, keys)
        problems = runs_outside_windows(commits, partitions_def)
        metadata: dict[str, Any] = {"runs_checked": len(commits), "runs_outside": len(problems)}
        if problems:
            metadata["outside"] = MetadataValue.json(problems[:50])
        return AssetCheckResult(
            passed=not problems,
            description="; ".join(problems[:5]) or None,
            metadata=metadata,
        )

    @decorate(
        PROGRESS_CHECK,
        f"The shuffle's watermark advanced in the last {_span(allowed)}: WARN past it, ERROR "
        "past twice that. A re-run of an old window does not count.",
        whole_asset=True,
    )
    def _progress(context: AssetCheckExecutionContext) -> AssetCheckResult:
        kafka = getattr(context.resources, io_key).kafka
        try:
            log = shuffle_log(shuffle.under(kafka).topic, kafka=kafka.client())
        except ShuffleError as exc:
            return AssetCheckResult(
                passed=False, description=str(exc), metadata={"error": str(exc)}
            )
        return watermark_progress(log, dt.datetime.now(dt.UTC), allowed).result()

    return [_layout, _rows, _readable, _in_window, _progress]


def _span(span: dt.timedelta) -> str:
    """A duration as people read it: hours, minutes or seconds, three digits at most."""
    seconds = span.total_seconds()
    if abs(seconds) >= 3600:
        return f"{seconds / 3600:.3g} h"
    if abs(seconds) >= 60:
        return f"{seconds / 60:.3g} min"
    return f"{seconds:.3g} s"


def _per_run(counts: Iterable[FrameCount]) -> dict[str, dict[str, Any]]:
    return {
        c.run_id: {
            "window": c.window,
            "rows_counted": c.rows,
            "rows_committed": c.rows_committed,
            "passed": c.passed,
        }
        for c in counts
    }


def _read_back(kafka: KafkaClient, log: ShuffleLog, commit: Commit) -> FrameCount:
    """The rows of ``commit`` read back, every payload decoded, without Spark (a batch per
    partition held at a time); the reader itself checks every frame against the END frames
    and raises on a lost or extra one."""
    batches = read_batches(log.topic, kafka=kafka, runs=[commit.run_id], log=log)
    rows = sum(batch.num_rows for batch in batches)
    out = FrameCount(commit.run_id, commit.window, rows=rows, rows_committed=commit.rows)
    if rows != commit.rows:
        out.problems.append(f"{rows} rows read back, the commit record says {commit.rows}")
    return out


# --- consumers ---------------------------------------------------------------------------

# The check on each consumer of a shuffle that says it keeps up; shuffle_lag_sensor reports
# it on its ticks.
LAG_CHECK = "shuffle_consumer_lag"


def default_max_delay(partitions_def: PartitionsDefinition | None) -> dt.timedelta:
    """How long a complete window may wait for a consumer before ``shuffle_consumer_lag``
    fails: a quarter of a partition (6 hours for daily partitions)."""
    return expected_cadence(partitions_def) / 4


@dataclass(frozen=True)
class LagVerdict:
    """What ``shuffle_consumer_lag`` says of a consumer's :class:`~orchestration.metadata.
    Lag`: it fails (WARN) once a complete window has waited longer than ``max_delay``
    without being consumed, ERROR past twice that."""

    lag: Lag
    max_delay: dt.timedelta

    @property
    def late(self) -> list[Commit]:
        """The runs that waited too long."""
        return [c for c in self.lag.behind if self.lag.now - committed_time(c) > self.max_delay]

    @property
    def passed(self) -> bool:
        return not self.late

    @property
    def severity(self) -> AssetCheckSeverity:
        wait = self.lag.oldest_wait
        return (
            AssetCheckSeverity.ERROR
            if wait is not None and wait > 2 * self.max_delay
            else AssetCheckSeverity.WARN
        )

    def result(self, consumer: str) -> AssetCheckResult:
        late, wait = self.late, self.lag.oldest_wait
        if late:
            description = (
                f"{consumer} has not consumed {len(late)} complete window(s) committed over "
                f"{_span(self.max_delay)} ago (the oldest "
                f"{_span(wait) if wait else '0 s'} ago): "
                + ", ".join(str(c.window) for c in late[:10])
            )
        else:
            description = (
                f"{consumer} keeps up: {len(self.lag.behind)} complete window(s) not consumed "
                f"yet, none for over {_span(self.max_delay)}"
            )
        metadata: dict[str, Any] = {
            "lag_windows": len(self.lag.behind),
            "late_windows": len(late),
            "max_delay_s": self.max_delay.total_seconds(),
        }
        if wait is not None:
            metadata["oldest_wait_s"] = round(wait.total_seconds(), 3)
        if self.lag.behind:
            metadata["windows_behind"] = MetadataValue.json(
                [c.window for c in self.lag.behind[:50]]
            )
        return AssetCheckResult(
            passed=self.passed,
            severity=self.severity,
            description=description,
            metadata=metadata,
        )


def lag_verdict(
    instance: Any,
    log: ShuffleLog,
    consumer: AssetsDefinition | AssetSpec,
    shuffle_partitions: PartitionsDefinition | None,
    max_delay: dt.timedelta,
    now: dt.datetime,
) -> LagVerdict:
    """``shuffle_consumer_lag``'s verdict on ``consumer`` of the shuffle whose commit log is
    ``log``, from its materializations in ``instance``."""
    key = consumer.key
    lag = consumer_lag(
        log,
        consumptions(instance, key),
        partitioned=consumer.partitions_def is not None,
        complete=completeness(shuffle_partitions),
        now=now,
    )
    return LagVerdict(lag, max_delay)


def shuffle_consumer_checks(
    asset: AssetsDefinition | AssetSpec,
    consumers: Sequence[AssetsDefinition | AssetSpec],
    *,
    max_delay: dt.timedelta | None = None,
) -> list[AssetChecksDefinition]:
    """A ``shuffle_consumer_lag`` check on each of ``consumers`` of the shuffle ``asset``:
    it fails (WARN) once a complete window of the shuffle has waited longer than
    ``max_delay`` (default :func:`default_max_delay`) for the consumer, ERROR past twice
    that. Never blocking.

    A window is consumed when the consumer's latest materialization of it (of the asset, for
    an unpartitioned consumer such as a stream's running totals) read its visible run
    (``shuffle/runs_read``, which the shuffle IO manager records) or, when it does not say,
    was recorded after the run committed. :func:`~orchestration.shuffle_lag_sensor`
    evaluates the checks on its ticks, so a consumer that stopped is caught while nothing
    runs; each can also be executed on its own.

    Example::

        checks = shuffle_consumer_checks(events, [sessions, totals])
        Definitions(asset_checks=checks, sensors=[shuffle_lag_sensor(
            "events_lag", asset=events, consumers=[sessions, totals])], ...)

    Args:
        asset: The shuffle asset, or the ``AssetSpec`` declaring it in this location.
        consumers: The assets (or specs) that consume it.
        max_delay: How long a complete window may wait.
    """
    shuffle = asset_shuffle(asset)
    io_key = asset_io_manager_key(asset)
    allowed = max_delay if max_delay is not None else default_max_delay(asset.partitions_def)
    out = []
    for consumer in consumers:
        out.append(_lag_check(consumer, shuffle, io_key, asset.partitions_def, allowed))
    return out


def _lag_check(
    consumer: AssetsDefinition | AssetSpec,
    shuffle: Any,
    io_key: str,
    shuffle_partitions: PartitionsDefinition | None,
    allowed: dt.timedelta,
) -> AssetChecksDefinition:
    name = consumer.key.to_user_string()

    @asset_check(
        asset=consumer.key,
        name=LAG_CHECK,
        blocking=False,
        required_resource_keys={io_key},
        description=(
            f"{name} consumes each complete window of {shuffle.topic} within "
            f"{_span(allowed)} of its commit: WARN past it, ERROR past twice that."
        ),
    )
    def _lag(context: AssetCheckExecutionContext) -> AssetCheckResult:
        kafka = getattr(context.resources, io_key).kafka
        try:
            log = shuffle_log(shuffle.under(kafka).topic, kafka=kafka.client())
        except ShuffleError as exc:
            return AssetCheckResult(
                passed=False, description=str(exc), metadata={"error": str(exc)}
            )
        verdict = lag_verdict(
            context.instance, log, consumer, shuffle_partitions, allowed, dt.datetime.now(dt.UTC)
        )
        return verdict.result(name)

    return _lag


# --- queues ------------------------------------------------------------------------------

# The check on each queue consumer of a shuffle (an asset that runs process_queue over it
# with a share group) that says its backlog does not stay high; shuffle_lag_sensor
# reports it on its ticks.
BACKLOG_CHECK = "shuffle_queue_backlog"


def backlog_metadata(backlog: QueueBacklog) -> dict[str, Any]:
    """A queue's backlog as the numbers an observation carries (``queue/*``): runs, rows and
    records not processed yet, and of those, not fed to the work topic yet."""
    return {
        "queue/share_group": backlog.group,
        "queue/backlog_records": backlog.records,
        "queue/backlog_rows": backlog.rows,
        "queue/backlog_runs": backlog.runs,
        "queue/unfed_records": backlog.unfed_records,
        "queue/unfed_rows": backlog.unfed_rows,
        "queue/unfed_runs": backlog.unfed_runs,
    }


@dataclass(frozen=True)
class BacklogVerdict:
    """What ``shuffle_queue_backlog`` says of a queue's backlog: it fails (WARN) once the
    backlog has stayed above ``max_backlog`` records for longer than ``allowed``, ERROR past
    twice that.

    ``above_since`` is when it went above the limit (None: it is not above). A check run on
    its own has no history (``history=False``): it fails (WARN) whenever the backlog is
    above the limit.
    """

    backlog: QueueBacklog
    max_backlog: int
    allowed: dt.timedelta
    above_since: dt.datetime | None
    now: dt.datetime
    history: bool = True

    @property
    def above_for(self) -> dt.timedelta | None:
        """How long the backlog has been above the limit; None when it is not."""
        return None if self.above_since is None else self.now - self.above_since

    @property
    def passed(self) -> bool:
        over = self.above_for
        return over is None or (self.history and over < self.allowed)

    @property
    def severity(self) -> AssetCheckSeverity:
        over = self.above_for
        return (
            AssetCheckSeverity.ERROR
            if over is not None and over > 2 * self.allowed
            else AssetCheckSeverity.WARN
        )

    def result(self, consumer: str) -> AssetCheckResult:
        b, over = self.backlog, self.above_for
        what = (
            f"share group {b.group!r} of {consumer} has {b.records} records to process "
            f"({b.runs} runs, {b.rows} rows; {b.unfed_records} records not fed yet)"
        )
        if over is None:
            description = f"{what}: at most {self.max_backlog}"
        elif not self.history:
            description = f"{what}: above {self.max_backlog}"
        elif self.passed:
            description = (
                f"{what}: above {self.max_backlog} for {_span(over)}, within {_span(self.allowed)}"
            )
        else:
            description = f"{what}: above {self.max_backlog} for {_span(over)}"
        metadata: dict[str, Any] = {
            **backlog_metadata(b),
            "max_backlog": self.max_backlog,
            "backlog_for_s": self.allowed.total_seconds(),
        }
        if over is not None and self.history:
            metadata["above_for_s"] = round(over.total_seconds(), 3)
        return AssetCheckResult(
            passed=self.passed, severity=self.severity, description=description, metadata=metadata
        )


def shuffle_queue_checks(
    asset: AssetsDefinition | AssetSpec,
    share_groups: Mapping[AssetKey, str],
    *,
    max_backlog: int,
    backlog_for: dt.timedelta | None = None,
) -> list[AssetChecksDefinition]:
    """A ``shuffle_queue_backlog`` check on each queue consumer of the shuffle ``asset``
    (``share_groups``: the key of an asset that runs ``process_queue`` over the shuffle, to
    its share group): it fails (WARN) once the group's backlog
    (:func:`~orchestration.shuffle.queue_backlog`: records committed to the shuffle and
    not processed yet) has stayed above ``max_backlog`` records for ``backlog_for``
    (default :func:`default_max_delay`), ERROR past twice that. Never blocking.

    :func:`~orchestration.shuffle_lag_sensor` (given the same ``share_groups``,
    ``max_backlog`` and ``backlog_for``) evaluates the checks on its ticks and remembers
    since when the backlog is above the limit; executed on its own, a check judges the
    backlog as it is, failing at once when it is above.

    Example::

        checks = shuffle_queue_checks(events, {scores.key: "scorers"}, max_backlog=10_000)
    """
    shuffle = asset_shuffle(asset)
    io_key = asset_io_manager_key(asset)
    allowed = backlog_for if backlog_for is not None else default_max_delay(asset.partitions_def)
    return [
        _backlog_check(key, group, shuffle, io_key, max_backlog, allowed)
        for key, group in share_groups.items()
    ]


def _backlog_check(
    key: AssetKey, group: str, shuffle: Any, io_key: str, max_backlog: int, allowed: dt.timedelta
) -> AssetChecksDefinition:
    name = key.to_user_string()

    @asset_check(
        asset=key,
        name=BACKLOG_CHECK,
        blocking=False,
        required_resource_keys={io_key},
        description=(
            f"The backlog of share group {group!r} over {shuffle.topic} stays above "
            f"{max_backlog} records for at most {_span(allowed)}: WARN past it, ERROR past "
            "twice that."
        ),
    )
    def _backlog(context: AssetCheckExecutionContext) -> AssetCheckResult:
        kafka = getattr(context.resources, io_key).kafka
        try:
            backlog = queue_backlog(shuffle.under(kafka).topic, group, kafka=kafka.client())
        except ShuffleError as exc:
            return AssetCheckResult(
                passed=False, description=str(exc), metadata={"error": str(exc)}
            )
        now = dt.datetime.now(dt.UTC)
        above = now if backlog.records > max_backlog else None
        verdict = BacklogVerdict(backlog, max_backlog, allowed, above, now, history=False)
        return verdict.result(name)

    return _backlog
