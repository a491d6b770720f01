"""Sensor factories: launch consumers when a shuffle window is complete; retry failed regions.

Both are small and pure apart from what they read (the shuffle's commit log; the failed
run's tags), so a tick can be tested with ``build_sensor_context`` and
``build_run_status_sensor_context``; what a commit sensor's tick launches, and its next
cursor, is the pure :func:`commit_launches`.
"""

import datetime as dt
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dagster import (
    AssetObservation,
    AssetsDefinition,
    DefaultSensorStatus,
    RunFailureSensorContext,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    TimeWindowPartitionsDefinition,
    run_failure_sensor,
    sensor,
)

from orchestration.io_manager import FAILED_WINDOWS_TAG
from orchestration.metadata import ShuffleAsset, commit_metadata, shuffle_asset
from orchestration.shuffle import (
    Commit,
    Layout,
    ShuffleTopicNotFoundError,
    shuffle_commits_since,
    shuffle_log,
)

PARTITION_TAG = "dagster/partition"
RETRY_TAG = "shuffle/retry"
RETRY_OF_TAG = "shuffle/retry_of"
COMMIT_TAG = "shuffle/commit"
WINDOW_TAG = "shuffle/window"


def asset_shuffle(asset: AssetsDefinition) -> ShuffleAsset:
    """The shuffle an asset stored by ``KafkaShuffleIOManager`` declares in its metadata."""
    key = asset.key
    return shuffle_asset(key.to_user_string(), key.path, asset.specs_by_key[key].metadata)


def asset_io_manager_key(asset: AssetsDefinition) -> str:
    return asset.get_io_manager_key_for_asset_key(asset.key)


def _default_window_end(asset: AssetsDefinition) -> Callable[[str], dt.datetime] | None:
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


def shuffle_commit_sensor(
    name: str,
    *,
    asset: AssetsDefinition,
    jobs: Sequence,
    window_end: Callable[[str], dt.datetime] | None = None,
    minimum_interval_seconds: int = 15,
    default_status: DefaultSensorStatus = DefaultSensorStatus.STOPPED,
):
    """A sensor that launches ``jobs`` for window W of the shuffle ``asset`` once its commit
    log says W is complete, once per commit.

    Complete means the window's latest run has a watermark at or past ``window_end(W)``;
    the default for time-window partitions is the partition's end, and for other partitions
    a window is complete once committed. A newer run for W (corrected or late data)
    supersedes the old one and launches the jobs again. Each new commit is also reported as
    an observation of the asset's partition, with the metadata a materialization of it
    carries (:func:`orchestration.metadata.commit_metadata`: row count, column schema, URI,
    ``shuffle/*``) and ``shuffle/complete``.

    The cursor (JSON, :class:`CommitCursor`) holds the commit-log offset read so far and the
    latest launches, a bounded number whatever the number of windows; a tick reads only
    commit records appended since, never the data topic. ``run_key`` =
    ``<job>:<window>:<run id>``, so a repeated tick requests nothing new. Kafka comes from
    the asset's IO manager (a ``KafkaShuffleIOManager``).
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
            commits, next_offset = shuffle_commits_since(
                shuffle.topic, kafka=kafka, offset=cursor.offset
            )
            if commits and shuffle.topic not in layouts:
                layout = shuffle_log(shuffle.topic, kafka=kafka).layout
                if layout is not None:
                    layouts[shuffle.topic] = layout
        except ShuffleTopicNotFoundError:
            return SkipReason(f"shuffle {shuffle.topic!r} has no commit log yet")
        launches, new_cursor = commit_launches(cursor, commits, next_offset, complete)
        latest = {c.window: c for c in commits if c.window is not None}
        observations = []
        for window, commit in sorted(latest.items()):
            done = complete(commit)
            metadata = commit_metadata(
                commit, layouts.get(shuffle.topic), resource, topic=shuffle.topic
            )
            observations.append(
                AssetObservation(
                    asset_key=asset.key,
                    partition=window,
                    metadata={**metadata, "shuffle/complete": done},
                )
            )
            if not done:
                context.log.info(f"window {window}: run {commit.run_id} is not complete yet")
        requests = [
            RunRequest(
                run_key=f"{job.name}:{commit.window}:{commit.run_id}",
                job_name=job.name,
                partition_key=commit.window,
                tags={COMMIT_TAG: commit.run_id, WINDOW_TAG: commit.window},
            )
            for commit in launches
            for job in jobs
        ]
        return SensorResult(
            run_requests=requests, cursor=new_cursor.to_json(), asset_events=observations
        )

    return _sensor


def failed_region_sensor(
    name: str,
    *,
    jobs: Sequence,
    max_retries: int = 2,
    failed_windows_tag: str = FAILED_WINDOWS_TAG,
    default_status: DefaultSensorStatus = DefaultSensorStatus.STOPPED,
):
    """A run-failure sensor that re-requests the failed job for the failed partitions only.

    Meant for producer jobs: a run over a range of partitions that committed some windows
    and tagged the others (``failed_windows_tag``, set by ``KafkaShuffleIOManager``) is
    retried for those windows only, one run each, which Dagster's run retries cannot do
    (they re-run the whole range). For one job and one partition, prefer Dagster's own run
    retries (the ``dagster/max_retries`` tag). It never launches another job. Up to
    ``max_retries`` retries per region, each tagged ``shuffle/retry`` (the attempt number)
    and ``shuffle/retry_of`` (the failed run).
    """

    @run_failure_sensor(
        name=name,
        monitored_jobs=list(jobs),
        request_jobs=list(jobs),
        default_status=default_status,
        description="Re-runs only the job and partition that failed.",
    )
    def _sensor(context: RunFailureSensorContext):
        run = context.dagster_run
        retry = int(run.tags.get(RETRY_TAG, "0"))
        if retry >= max_retries:
            return SkipReason(f"run {run.run_id} of {run.job_name} failed after {retry} retries")
        # Read the run again: a step may have tagged it after the run record was loaded.
        fresh = context.instance.get_run_by_id(run.run_id) or run
        windows = [w for w in fresh.tags.get(failed_windows_tag, "").split(",") if w]
        if not windows and PARTITION_TAG in fresh.tags:
            windows = [fresh.tags[PARTITION_TAG]]
        if not windows:
            return SkipReason(f"run {run.run_id} of {run.job_name} has no partition to retry")
        return [
            RunRequest(
                run_key=f"retry:{run.run_id}:{w}",
                job_name=run.job_name,
                partition_key=w,
                tags={RETRY_TAG: str(retry + 1), RETRY_OF_TAG: run.run_id},
            )
            for w in windows
        ]

    return _sensor
