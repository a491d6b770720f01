"""Sensor factories: launch consumers when a shuffle window is complete; retry failed regions;
watch a shuffle's progress and its consumers' lag.

Each is small and pure apart from what it reads (the shuffle's commit log; the failed run's
tags; the consumers' materializations), so a tick can be tested with
``build_sensor_context`` and ``build_run_status_sensor_context``; what a commit sensor's
tick launches, and its next cursor, is the pure :func:`commit_launches`, and what the
watching sensors judge is :func:`~orchestration.checks.watermark_progress` and
:func:`~orchestration.checks.lag_verdict`.
"""

import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    AssetsDefinition,
    AssetSelection,
    AssetSpec,
    DagsterEventType,
    DefaultSensorStatus,
    FreshnessPolicy,
    MetadataValue,
    PartitionKeyRange,
    PartitionsDefinition,
    RunFailureSensorContext,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    TimeWindowPartitionsDefinition,
    define_asset_job,
    run_failure_sensor,
    sensor,
)

from orchestration.checks import (
    BACKLOG_CHECK,
    LAG_CHECK,
    PROGRESS_CHECK,
    BacklogVerdict,
    backlog_metadata,
    default_max_delay,
    default_stall_after,
    lag_verdict,
    reached_by,
    watermark_progress,
)
from orchestration.definition import (
    COMMIT_TAG,
    DAGSTER_RUN_ATTR,
    FAILED_WINDOWS_TAG,
    PARTITION_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
    RETRY_OF_TAG,
    RETRY_TAG,
    WILL_RETRY_TAG,
    WINDOW_TAG,
    ShuffleAsset,
    asset_io_manager_key,
    asset_shuffle,
)
from orchestration.metadata import commit_metadata, epoch_seconds, watermark_as_of
from orchestration.shuffle.core.commitlog import (
    BadRecord,
    Commit,
    Layout,
    ShuffleLog,
    from_micros,
)
from orchestration.shuffle.errors import ShuffleOptionError, ShuffleTopicNotFoundError
from orchestration.shuffle.kafka.commitlog import read_commits_since
from orchestration.shuffle.queue.backlog import queue_backlog
from orchestration.shuffle.read import group_offsets_behind, shuffle_log

# Tags of a failed run its retry does not carry: Dagster's own (backfill, partition, run
# key, sensor, ...) and ours.
_NOT_CARRIED = ("dagster/", ".dagster", "shuffle/")


def _default_window_end(asset: AssetsDefinition | AssetSpec) -> Callable[[str], dt.datetime] | None:
    partitions_def = asset.partitions_def
    if isinstance(partitions_def, TimeWindowPartitionsDefinition):
        return lambda window: partitions_def.time_window_for_partition_key(window).end
    return None


# How many launches the commit sensor's cursor remembers. A commit record is read once (the
# cursor's offset moves past it), so a launch need not be remembered to avoid launching it
# again; the few kept guard against the same record read twice (a retried produce of a
# keyed record can land it again just after the first), and run keys make even that a no-op
# for the daemon. So the cursor's size does not grow with the windows.
KEPT_LAUNCHES = 32


@dataclass(frozen=True)
class CommitCursor:
    """The commit sensor's cursor: the commit-log offset read so far and the latest launches
    as (window, run id), oldest first, at most :data:`KEPT_LAUNCHES` of them. JSON.

    Example::

        CommitCursor.parse(context.cursor).offset
    """

    offset: int = 0
    launched: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> "CommitCursor":
        if not text:
            return cls()
        d = json.loads(text)
        launched = d.get("launched", [])
        if isinstance(launched, dict):
            # A cursor written before launches were bounded: {window: run id}.
            launched = list(launched.items())
        pairs = tuple((str(w), str(r)) for w, r in launched)
        return cls(int(d.get("offset", 0)), pairs[-KEPT_LAUNCHES:])

    def to_json(self) -> str:
        return json.dumps(
            {"offset": self.offset, "launched": [list(p) for p in self.launched]},
            separators=(",", ":"),
        )


def commit_launches(
    cursor: CommitCursor,
    commits: Sequence[Commit],
    next_offset: int,
    complete: Callable[[Commit], bool],
) -> tuple[list[Commit], CommitCursor]:
    """What one tick of the commit sensor launches, and its next cursor. Pure.

    ``commits`` are those the commit log holds from ``cursor.offset`` to ``next_offset``, in
    log order. Per window, only the latest of them counts (an older one is superseded); it
    launches if ``complete`` says its window is complete and the cursor has not launched
    that very run already.
    """
    latest = {c.window: c for c in commits if c.window is not None}
    launched = list(cursor.launched)
    seen = set(launched)
    out = []
    for window, commit in sorted(latest.items()):
        if complete(commit) and (window, commit.run_id) not in seen:
            out.append(commit)
            launched.append((window, commit.run_id))
    return out, CommitCursor(next_offset, tuple(launched[-KEPT_LAUNCHES:]))


def materialized(commit: Commit) -> bool:
    """Whether Dagster records a materialization of ``commit``: a run written by
    ``KafkaShuffleIOManager`` or ``run_shuffle_pipes``, which tie it to their Dagster run
    (:data:`~orchestration.definition.DAGSTER_RUN_ATTR`) and materialize its window."""
    return DAGSTER_RUN_ATTR in commit.attrs


def shuffle_commit_sensor(
    name: str,
    *,
    asset: AssetsDefinition | AssetSpec,
    jobs: Sequence,
    window_end: Callable[[str], dt.datetime] | None = None,
    minimum_interval_seconds: int = 15,
    default_status: DefaultSensorStatus = DefaultSensorStatus.STOPPED,
    observe: bool = True,
):
    """A sensor that launches ``jobs`` for window W of the shuffle ``asset`` once its commit
    log says W is complete, once per commit.

    ``asset`` is the producer's asset, or, in a consumer team's own code location, the
    ``AssetSpec`` that declares the shuffle there (``AssetSpec(key, partitions_def=...,
    metadata=shuffle_metadata(...)).with_io_manager_key("shuffle_io")``).

    Complete means the window's latest run has a watermark at or past ``window_end(W)``;
    the default for time-window partitions is the partition's end, and for other partitions
    a window is complete once committed. A newer run for W (corrected or late data)
    supersedes the old one and launches the jobs again. Each new commit that no Dagster run
    materialized (one written outside Dagster: a streaming writer, ``write_shuffle`` in a
    notebook) is also reported as an observation of the asset's partition, with the metadata
    a materialization of it would carry (:func:`orchestration.metadata.commit_metadata`: row
    count, column schema, URI, ``shuffle/*``, the watermark as numbers) and
    ``shuffle/complete``. A commit the IO manager or ``run_shuffle_pipes`` wrote is shown by
    its materialization alone, so no commit is drawn twice on the asset's plots; a second
    commit sensor of the same shuffle (other jobs, other ticks) says ``observe=False``.

    The cursor (JSON, :class:`CommitCursor`) holds the commit-log offset read so far and the
    latest launches, a bounded number whatever the number of windows; a tick reads only
    commit records appended since, never the data topic. ``run_key`` =
    ``<job>:<window>:<run id>``, so a repeated tick requests nothing new. Kafka comes from
    the asset's IO manager (a ``KafkaShuffleIOManager``).

    A consumer asset with an automation condition (``AutomationCondition.eager()``,
    ``on_cron``, ...) is left to it: a job's run is requested for its other assets only, and
    not at all if it has none (see :func:`consumer_selection`). Dagster's automation sees each
    window's materialization, which a shuffle records only for a committed window, so the
    two would run it twice.
    """
    declared = asset_shuffle(asset)
    io_key = asset_io_manager_key(asset)
    end_of = window_end or _default_window_end(asset)
    # The layout (for the column schema) never changes once the shuffle exists: read it once
    # per process, not on every tick.
    layouts: dict[str, Layout] = {}

    def complete(commit: Commit) -> bool:
        return (
            end_of is None
            or commit.window is None
            or commit.complete_through(end_of(commit.window))
        )

    @sensor(
        name=name,
        jobs=list(jobs),
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        required_resource_keys={io_key},
        description=f"Launches consumers of {asset.key.to_user_string()} for complete windows.",
    )
    def _sensor(context: SensorEvaluationContext, **_resources):
        # Direct invocation (tests, build_sensor_context) also passes the resources by name.
        resource = getattr(context.resources, io_key).kafka
        shuffle = declared.under(resource)
        kafka = resource.client()
        cursor = CommitCursor.parse(context.cursor)
        try:
            # An unreadable commit record is skipped and reported, as batch reads do: the
            # sensor goes on launching for the commits around it.
            skipped: list[BadRecord] = []
            commits, next_offset = read_commits_since(kafka, shuffle.topic, cursor.offset, skipped)
            for bad in skipped:
                context.log.warning(
                    f"shuffle {shuffle.topic!r}: skipped the unreadable record {bad.key!r} at "
                    f"partition 0 offset {bad.offset} of its commit log ({bad.reason}); no "
                    "consumer is launched for its run"
                )
            latest = {c.window: c for c in commits if c.window is not None}
            unrecorded = [c for c in latest.values() if observe and not materialized(c)]
            known = layouts.get(shuffle.topic)
            newest = max((c.layout_version for c in commits), default=1)
            # The log is read again (only what was appended since, in this process) for the
            # shuffle's watermark, and for the layout when a run was written under a version
            # the cached one lacks.
            log = None
            if unrecorded or (commits and (known is None or newest > known.version)):
                log = shuffle_log(shuffle.topic, kafka=kafka)
                if log.layout is not None:
                    layouts[shuffle.topic] = log.layout
        except ShuffleTopicNotFoundError:
            return SkipReason(f"shuffle {shuffle.topic!r} has no commit log yet")
        launches, new_cursor = commit_launches(cursor, commits, next_offset, complete)
        observations = []
        for window, commit in sorted(latest.items()):
            done = complete(commit)
            if not done:
                context.log.info(f"window {window}: run {commit.run_id} is not complete yet")
            if not observe or materialized(commit):
                # Its materialization already shows it, numbers included: an observation
                # would draw the commit twice on the asset's plots.
                continue
            metadata = commit_metadata(
                commit,
                layouts.get(shuffle.topic),
                resource,
                topic=shuffle.topic,
                shuffle_watermark=watermark_as_of(log, commit) if log is not None else None,
                window_end=end_of(window) if end_of is not None else None,
            )
            observations.append(
                AssetObservation(
                    asset_key=asset.key,
                    partition=window,
                    metadata={**metadata, "shuffle/complete": done},
                )
            )
        selections = (
            {job.name: consumer_selection(context, job.name) for job in jobs} if launches else {}
        )
        requests = [
            RunRequest(
                run_key=f"{job.name}:{commit.window}:{commit.run_id}",
                job_name=job.name,
                partition_key=commit.window,
                asset_selection=selections[job.name],
                tags={COMMIT_TAG: commit.run_id, WINDOW_TAG: commit.window},
            )
            for commit in launches
            for job in jobs
            if selections[job.name] != []
        ]
        return SensorResult(
            run_requests=requests, cursor=new_cursor.to_json(), asset_events=observations
        )

    return _sensor


def consumer_selection(context: SensorEvaluationContext, job_name: str) -> list | None:
    """The assets of ``job_name`` the commit sensor may launch: None for the whole job, else
    those without an automation condition (an empty list: none).

    An asset with an automation condition is launched by Dagster's automation once the
    window's materialization is recorded; launching it for the commit too would run it twice.
    """
    repo = context.repository_def
    if repo is None:
        return None
    keys = repo.get_job(job_name).asset_layer.selected_asset_keys
    automated = {k for k in keys if repo.asset_graph.get(k).automation_condition is not None}
    if not automated:
        return None
    context.log.info(
        f"{job_name}: {sorted(k.to_user_string() for k in automated)} have an automation "
        "condition, which launches them; this sensor does not"
    )
    return sorted(keys - automated, key=lambda k: k.to_user_string())


def failed_region_sensor(
    name: str,
    *,
    jobs: Sequence = (),
    assets: Sequence[AssetsDefinition] = (),
    max_retries: int = 2,
    failed_windows_tag: str = FAILED_WINDOWS_TAG,
    minimum_interval_seconds: int = 30,
    default_status: DefaultSensorStatus = DefaultSensorStatus.STOPPED,
):
    """A run-failure sensor that re-runs only the windows of a shuffle that failed.

    A run over a range of partitions that committed some windows and tagged the others
    (``failed_windows_tag``, set by ``KafkaShuffleIOManager``) is retried for those windows
    only, which Dagster's run retries cannot do (they re-run the whole range); a run that
    failed as a whole is retried for its partition or range, less the windows of the shuffle
    it did commit (an unpartitioned run, as a whole). Consecutive windows of a range run are
    retried as one range run (``dagster/asset_partition_range_start`` / ``_end``), a lone
    window as a partition run.

    Which runs it watches:

    - ``jobs``: runs of these jobs, retried as runs of the same job.
    - ``assets`` (the shuffle assets, of one partitions definition): every run of the code
      location that targeted one of them, by job or by asset selection: a job run, a job
      or asset backfill launched from the UI (Dagster's implicit ``__ASSET_JOB``, range
      runs and per-partition runs), a schedule's run, a run launched by declarative
      automation. A run of a job not in ``jobs`` is retried by the sensor's own asset job
      ``<name>_retry`` over ``assets``, for the shuffle assets the run targeted: upstream
      assets are not run again (a run whose only failed steps are not the shuffle's is not
      retried: re-running the shuffle alone would not help), and downstream ones are for
      the commit sensor or their automation conditions.

    Each failure is retried once (``run_key`` = ``retry:<run id>:<window or range>``), up to
    ``max_retries`` times per region, each retry tagged ``shuffle/retry`` (the attempt
    number) and ``shuffle/retry_of`` (the failed run) and carrying the failed run's own
    tags (not Dagster's). A run Dagster's run retries will re-run (``dagster/will_retry``)
    is left to them. It launches nothing else. Dagster hands a run-failure sensor's ticks
    one failed run that requests runs at a time, so several failures take several ticks
    (``minimum_interval_seconds`` apart).

    Example::

        failed_region_sensor("events_failed_days", jobs=[events_job], assets=[events])
    """
    if not jobs and not assets:
        raise ShuffleOptionError(
            f"failed_region_sensor {name!r}: give the producer jobs (jobs=), the shuffle "
            "assets (assets=), or both"
        )
    keys = frozenset(a.key for a in assets)
    partitions_defs = {a.partitions_def for a in assets}
    if len(partitions_defs) > 1:
        raise ShuffleOptionError(
            f"failed_region_sensor {name!r}: the assets {sorted(k.to_user_string() for k in keys)} "
            "have different partitions definitions, which one retry job cannot run; make "
            "one sensor per partitions definition"
        )
    partitions_def = next(iter(partitions_defs), None)
    job_names = {j.name for j in jobs}
    # Dagster's implicit asset job cannot be named as a sensor's target, so runs of it (and
    # of jobs not given) are retried by a job of the shuffle assets alone.
    retry_job = (
        define_asset_job(
            f"{name}_retry",
            selection=AssetSelection.assets(*assets),
            description=f"Re-runs failed windows of {sorted(k.to_user_string() for k in keys)}.",
        )
        if assets
        else None
    )
    shuffle_steps = {a.node_def.name for a in assets}

    @run_failure_sensor(
        name=name,
        # Without monitored jobs a run-failure sensor sees every run of its code location,
        # the implicit asset job's included.
        monitored_jobs=None if assets else list(jobs),
        request_jobs=[*jobs, *([retry_job] if retry_job is not None else [])],
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description="Re-runs only the windows of a shuffle that failed.",
    )
    def _sensor(context: RunFailureSensorContext):
        # Read the run again: a step may have tagged it after the run record was loaded.
        run = context.instance.get_run_by_id(context.dagster_run.run_id) or context.dagster_run
        instance = context.instance
        if run.job_name in job_names:
            job_name, selection = run.job_name, None
            targeted = _targeted(instance, run, keys) if keys else frozenset()
        else:
            targeted = _targeted(instance, run, keys)
            if not targeted or retry_job is None:
                return None  # not a run of this shuffle: the next failed run, if any
            job_name, selection = retry_job.name, sorted(targeted, key=lambda k: k.path)
        what = f"run {run.run_id} of {run.job_name}"
        retry = int(run.tags.get(RETRY_TAG, "0"))
        if run.tags.get(WILL_RETRY_TAG) == "true":
            return SkipReason(f"{what}: Dagster's run retries re-run it")
        if retry >= max_retries:
            return SkipReason(f"{what} failed after {retry} retries")
        order = _run_windows(
            run, partitions_def if partitions_def is not None else _job_partitions_def(context, run)
        )
        windows: list[str | None] = [
            w for w in run.tags.get(failed_windows_tag, "").split(",") if w
        ]
        if not windows:
            if order is None:
                return SkipReason(f"{what}: its partition range is unknown to this sensor")
            done = _committed(instance, run, targeted) if targeted else set()
            # An unpartitioned run's region is the run itself (window None).
            region: list[str | None] = [*order] if order else [None]
            windows = [w for w in region if w not in done]
            if windows and selection is not None:
                failed_steps = _failed_steps(instance, run)
                if failed_steps and not any(
                    s == n or s.startswith(f"{n}.") for s in failed_steps for n in shuffle_steps
                ):
                    return SkipReason(
                        f"{what}: steps {sorted(failed_steps)} failed, not the shuffle's; "
                        "re-running the shuffle alone would not help"
                    )
        if not windows:
            return SkipReason(f"{what} has no window of the shuffle to retry: all committed")
        tags = {
            **{k: v for k, v in run.tags.items() if not k.startswith(_NOT_CARRIED)},
            RETRY_TAG: str(retry + 1),
            RETRY_OF_TAG: run.run_id,
        }
        # Neighbouring windows of a range run are retried as one range run, as it ran.
        if RANGE_START_TAG in run.tags:
            groups = consecutive_windows(windows, order or [])
        else:
            groups = [[w] for w in windows]
        requests = []
        for group in groups:
            first, last = group[0], group[-1]
            if len(group) == 1:
                label, partition, extra = f":{first}" if first else "", first, {}
            else:
                label, partition = f":{first}...{last}", None
                extra = {RANGE_START_TAG: str(first), RANGE_END_TAG: str(last)}
            requests.append(
                RunRequest(
                    run_key=f"retry:{run.run_id}{label}",
                    job_name=job_name,
                    partition_key=partition,
                    asset_selection=selection,
                    tags={**tags, **extra},
                )
            )
        return requests

    return _sensor


def _targeted(instance, run, keys: frozenset) -> frozenset:
    """The assets of ``keys`` that ``run`` set out to materialize."""
    if run.asset_selection:
        return keys & run.asset_selection
    # A whole job's run records no asset selection (None, or empty when executed in
    # process); the materializations it planned, logged when the run was created, say what
    # it targeted.
    planned = instance.get_records_for_run(
        run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION_PLANNED
    ).records
    return keys & {r.event_log_entry.dagster_event.asset_key for r in planned}


def _committed(instance, run, targeted: frozenset) -> set[str | None]:
    """Windows that ``run`` materialized for every one of the ``targeted`` assets (None: an
    unpartitioned materialization)."""
    records = instance.get_records_for_run(
        run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION
    ).records
    by_key: dict = {k: set() for k in targeted}
    for r in records:
        event = r.event_log_entry.dagster_event
        if event.asset_key in by_key:
            by_key[event.asset_key].add(event.partition)
    return set.intersection(*by_key.values()) if by_key else set()


def _failed_steps(instance, run) -> set[str]:
    records = instance.get_records_for_run(run.run_id, of_type=DagsterEventType.STEP_FAILURE)
    return {r.event_log_entry.step_key for r in records.records if r.event_log_entry.step_key}


def _job_partitions_def(context: RunFailureSensorContext, run) -> PartitionsDefinition | None:
    repo = context.repository_def
    if repo is None or not repo.has_job(run.job_name):
        return None
    return repo.get_job(run.job_name).partitions_def


def _run_windows(run, partitions_def: PartitionsDefinition | None) -> list[str] | None:
    """The partitions a run was for, in order: its partition, the keys of its range, none
    for an unpartitioned run; None when its range cannot be read without a definition."""
    if PARTITION_TAG in run.tags:
        return [run.tags[PARTITION_TAG]]
    if RANGE_START_TAG in run.tags and RANGE_END_TAG in run.tags:
        if partitions_def is None:
            return None
        keys = PartitionKeyRange(run.tags[RANGE_START_TAG], run.tags[RANGE_END_TAG])
        return list(partitions_def.get_partition_keys_in_range(keys))
    return []


def consecutive_windows(
    windows: Sequence[str | None], order: Sequence[str]
) -> list[list[str | None]]:
    """``windows`` in groups of neighbours in ``order`` (a run's partitions, in order), each
    group sorted; a window not in ``order`` stands alone. Pure.

    Example::

        consecutive_windows(["03", "01", "02", "05"], ["01", "02", "03", "04", "05"])
        # [["01", "02", "03"], ["05"]]
    """
    position: dict[str | None, int] = {w: i for i, w in enumerate(order)}
    groups: list[list[str | None]] = []
    for w in sorted(windows, key=lambda w: (position.get(w, len(order)), w or "")):
        i = position.get(w)
        last = groups[-1][-1] if groups else None
        if i is not None and last is not None and position.get(last) == i - 1:
            groups[-1].append(w)
        else:
            groups.append([w])
    return groups


# --- watching a shuffle ----------------------------------------------------------------


def shuffle_watermark_asset(
    asset: AssetsDefinition | AssetSpec,
    *,
    stall_after: dt.timedelta | None = None,
    key: AssetKey | None = None,
) -> AssetSpec:
    """The shuffle's watermark as an asset of its own (``<asset>_watermark``), materialized by
    :func:`shuffle_progress_sensor` each time the watermark advances, with a freshness
    policy: WARN once it has not advanced for ``stall_after`` (default:
    :func:`~orchestration.checks.default_stall_after`, a partition and a quarter), FAIL after
    twice that.

    Dagster's freshness policies look at an asset's latest materialization, which a re-run
    of an old window of the shuffle renews; this asset's are renewed by progress alone.

    Example::

        watermark = shuffle_watermark_asset(events_by_user)
        Definitions(assets=[events_by_user, watermark], sensors=[shuffle_progress_sensor(
            "events_progress", asset=events_by_user, watermark_asset=watermark)], ...)
    """
    allowed = stall_after if stall_after is not None else default_stall_after(asset.partitions_def)
    path = asset.key.path
    group = (
        asset.group_name
        if isinstance(asset, AssetSpec)
        else asset.specs_by_key[asset.key].group_name
    )
    return AssetSpec(
        key or AssetKey([*path[:-1], f"{path[-1]}_watermark"]),
        deps=[asset.key],
        group_name=group,
        kinds={"kafka"},
        freshness_policy=FreshnessPolicy.time_window(fail_window=2 * allowed, warn_window=allowed),
        description=(
            f"The watermark of the shuffle {asset.key.to_user_string()}: materialized each "
            "time it advances (a re-run of an old window does not), so its freshness says "
            "whether the shuffle keeps up."
        ),
    )


def _watched(
    context: SensorEvaluationContext, io_key: str, declared: ShuffleAsset
) -> tuple[str, dict, ShuffleLog | None]:
    """What a watching sensor's tick starts from: the shuffle's topic on the IO manager's
    cluster, the sensor's cursor, and the shuffle's log (None: no commit log yet)."""
    resource = getattr(context.resources, io_key).kafka
    topic = declared.under(resource).topic
    cursor = json.loads(context.cursor) if context.cursor else {}
    try:
        return topic, cursor, shuffle_log(topic, kafka=resource.client())
    except ShuffleTopicNotFoundError:
        return topic, cursor, None


def shuffle_progress_sensor(
    name: str,
    *,
    asset: AssetsDefinition | AssetSpec,
    stall_after: dt.timedelta | None = None,
    watermark_asset: AssetSpec | None = None,
    minimum_interval_seconds: int = 300,
    default_status: DefaultSensorStatus = DefaultSensorStatus.STOPPED,
):
    """A sensor that watches the shuffle ``asset``'s watermark on every tick, committed or not.

    Each tick reads the commit log (only what was appended since, in this process) and
    judges ``shuffle_watermark_progress`` (:func:`~orchestration.checks.watermark_progress`,
    ``stall_after`` as for :func:`~orchestration.shuffle_asset_checks`); it reports the
    check's result without a run whenever the verdict changes (passed, severity, or a new
    advance), so a stall shows on the asset within a tick of passing its limit. With
    ``watermark_asset`` (:func:`shuffle_watermark_asset`) it also materializes that asset,
    without a run, each time the watermark advances, with the watermark as a number
    (``shuffle/watermark_epoch_s``) and the run that brought it.

    The cursor (JSON) holds the last verdict and the last watermark reported.
    """
    declared = asset_shuffle(asset)
    io_key = asset_io_manager_key(asset)
    allowed = stall_after if stall_after is not None else default_stall_after(asset.partitions_def)

    @sensor(
        name=name,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        required_resource_keys={io_key},
        description=f"Watches the watermark of {asset.key.to_user_string()}: a stall fails "
        f"{PROGRESS_CHECK}.",
    )
    def _sensor(context: SensorEvaluationContext, **_resources):
        topic, cursor, log = _watched(context, io_key, declared)
        if log is None:
            return SkipReason(f"shuffle {topic!r} has no commit log yet")
        progress = watermark_progress(log, dt.datetime.now(dt.UTC), allowed)
        verdict = [
            progress.passed,
            progress.severity.value,
            None if progress.advanced_at is None else progress.advanced_at.isoformat(),
        ]
        events: list = []
        if cursor.get("verdict") != verdict:
            result = progress.result()
            events.append(_evaluation(asset.key, PROGRESS_CHECK, result))
            if not progress.passed:
                context.log.warning(f"shuffle {topic!r}: {progress.description}")
        mark, reported = progress.watermark, cursor.get("watermark")
        if (
            watermark_asset is not None
            and mark is not None
            and (reported is None or mark > reported)
        ):
            events.append(_watermark_event(watermark_asset.key, log, mark))
            reported = mark
        return SensorResult(
            asset_events=events,
            cursor=json.dumps({"verdict": verdict, "watermark": reported}, separators=(",", ":")),
        )

    return _sensor


def _evaluation(key: AssetKey, check: str, result: AssetCheckResult) -> AssetCheckEvaluation:
    """``result`` of the check ``check`` on ``key``, as a sensor reports it."""
    return AssetCheckEvaluation(
        asset_key=key,
        check_name=check,
        passed=result.passed,
        severity=result.severity,
        description=result.description,
        metadata=result.metadata,
    )


def _watermark_event(key: AssetKey, log: ShuffleLog, mark: int) -> AssetMaterialization:
    """The watermark asset's materialization for the watermark ``mark`` of ``log``: the
    number, and the run that first declared it."""
    first = reached_by(log, mark)
    metadata: dict[str, Any] = {
        "shuffle/watermark_epoch_s": epoch_seconds(mark),
        "shuffle/watermark": MetadataValue.timestamp(from_micros(mark)),
    }
    if first is not None:
        metadata["shuffle/run_id"] = first.run_id
        metadata["shuffle/window"] = first.window or ""
    return AssetMaterialization(asset_key=key, metadata=metadata)


def shuffle_lag_sensor(
    name: str,
    *,
    asset: AssetsDefinition | AssetSpec,
    consumers: Sequence[AssetsDefinition | AssetSpec],
    max_delay: dt.timedelta | None = None,
    groups: Mapping[AssetKey, str] | None = None,
    share_groups: Mapping[AssetKey, str] | None = None,
    max_backlog: int | None = None,
    backlog_for: dt.timedelta | None = None,
    minimum_interval_seconds: int = 300,
    default_status: DefaultSensorStatus = DefaultSensorStatus.STOPPED,
):
    """A sensor that watches how far each of ``consumers`` of the shuffle ``asset`` is behind,
    on every tick, whether or not anything runs.

    For each consumer it judges ``shuffle_consumer_lag`` (:func:`~orchestration.checks.
    lag_verdict`: complete windows of the shuffle it has not consumed, late past
    ``max_delay``) and reports the check's result without a run whenever the verdict changes
    (passed, severity, or the number of windows behind); the checks themselves are
    :func:`~orchestration.checks.shuffle_consumer_checks`. A consumer that reads through a
    Kafka consumer group (``groups``: its asset key to the group, which reads the shuffle's
    data topic) is also observed with the group's lag, from the offsets it committed
    (``kafka/offsets_behind_max``, ``kafka/offsets_behind_total``), whenever it changes.

    A queue consumer (``share_groups``: the key of an asset that runs ``process_queue`` over
    the shuffle, to its share group; it need not be among ``consumers``) is observed with
    its share group's backlog (:func:`~orchestration.shuffle.queue_backlog`:
    ``queue/backlog_records``, ``_rows``, ``_runs``, and of those not fed yet,
    ``queue/unfed_*``) whenever it changes; with ``max_backlog``, the sensor also judges
    its ``shuffle_queue_backlog`` check (:func:`~orchestration.checks.
    shuffle_queue_checks`): failed once the backlog has stayed above ``max_backlog`` records
    for ``backlog_for`` (default: as ``max_delay``), reported when the verdict changes.
    Kafka's own share-group lag is out of reach of Python clients (see
    :mod:`orchestration.shuffle.queue.backlog`), so the backlog is the queue's bookkeeping.

    The cursor (JSON) holds each consumer's last verdict and group lag, and each queue's
    backlog, verdict and since when it is above the limit.
    """
    declared = asset_shuffle(asset)
    io_key = asset_io_manager_key(asset)
    allowed = max_delay if max_delay is not None else default_max_delay(asset.partitions_def)
    by_group = dict(groups or {})
    by_share_group = dict(share_groups or {})
    allowed_backlog = backlog_for if backlog_for is not None else allowed
    if max_backlog is not None and not by_share_group:
        raise ShuffleOptionError(
            f"shuffle_lag_sensor {name!r}: max_backlog needs share_groups (the queue "
            "consumers whose backlog it limits)"
        )

    @sensor(
        name=name,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        required_resource_keys={io_key},
        description=f"Watches how far the consumers of {asset.key.to_user_string()} are "
        f"behind: {LAG_CHECK} on each.",
    )
    def _sensor(context: SensorEvaluationContext, **_resources):
        topic, cursor, log = _watched(context, io_key, declared)
        if log is None:
            return SkipReason(f"shuffle {topic!r} has no commit log yet")
        now = dt.datetime.now(dt.UTC)
        verdicts: dict = dict(cursor.get("verdicts", {}))
        lags: dict = dict(cursor.get("groups", {}))
        events: list = []
        for consumer in consumers:
            name_ = consumer.key.to_user_string()
            found = lag_verdict(context.instance, log, consumer, asset.partitions_def, allowed, now)
            state = [found.passed, found.severity.value, len(found.lag.behind)]
            if verdicts.get(name_) != state:
                result = found.result(name_)
                events.append(_evaluation(consumer.key, LAG_CHECK, result))
                verdicts[name_] = state
            group = by_group.get(consumer.key)
            if group is not None:
                kafka = getattr(context.resources, io_key).kafka.client()
                behind = group_offsets_behind(kafka, group, [topic])
                numbers: dict[str, Any] = {
                    "kafka/consumer_group": group,
                    "kafka/offsets_behind_max": int(behind.get("max_offsets_behind_latest", 0)),
                    "kafka/offsets_behind_total": int(sum(behind["partitions"].values())),
                }
                if lags.get(name_) != numbers["kafka/offsets_behind_total"]:
                    events.append(AssetObservation(asset_key=consumer.key, metadata=numbers))
                    lags[name_] = numbers["kafka/offsets_behind_total"]
        queues: dict = dict(cursor.get("queues", {}))
        for key, share_group in by_share_group.items():
            name_ = key.to_user_string()
            kafka = getattr(context.resources, io_key).kafka.client()
            backlog = queue_backlog(topic, share_group, kafka=kafka, log=log)
            seen = dict(queues.get(name_, {}))
            numbers = backlog_metadata(backlog)
            counts = [backlog.records, backlog.rows, backlog.runs, backlog.unfed_records]
            if seen.get("backlog") != counts:
                events.append(AssetObservation(asset_key=key, metadata=numbers))
                seen["backlog"] = counts
            if max_backlog is not None:
                above = backlog.records > max_backlog
                since = seen.get("above_since") if above else None
                since = since or (now.isoformat() if above else None)
                seen["above_since"] = since
                judged = BacklogVerdict(
                    backlog,
                    max_backlog,
                    allowed_backlog,
                    None if since is None else dt.datetime.fromisoformat(since),
                    now,
                )
                state = [judged.passed, judged.severity.value]
                if seen.get("verdict") != state:
                    result = judged.result(name_)
                    events.append(_evaluation(key, BACKLOG_CHECK, result))
                    if not judged.passed:
                        context.log.warning(f"shuffle {topic!r}: {result.description}")
                    seen["verdict"] = state
            queues[name_] = seen
        return SensorResult(
            asset_events=events,
            cursor=json.dumps(
                {"verdicts": verdicts, "groups": lags, "queues": queues}, separators=(",", ":")
            ),
        )

    return _sensor
