"""Sensor factories: launch consumers when a shuffle window is complete; retry failed regions.

Both are small and pure apart from what they read (the shuffle's commit log; the failed
run's tags), so a tick can be tested with ``build_sensor_context`` and
``build_run_status_sensor_context``.
"""

import datetime as dt
import json
from collections.abc import Callable, Sequence

from dagster import (
    DefaultSensorStatus,
    RunFailureSensorContext,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    run_failure_sensor,
    sensor,
)

from orchestration.resources import KafkaResource, ShuffleResource
from orchestration.shuffle import ShuffleTopicNotFoundError, shuffle_commits_since
from orchestration.shuffle.commitlog import to_micros

PARTITION_TAG = "dagster/partition"
RETRY_TAG = "shuffle/retry"
RETRY_OF_TAG = "shuffle/retry_of"
COMMIT_TAG = "shuffle/commit"
WINDOW_TAG = "shuffle/window"


def shuffle_commit_sensor(
    name: str,
    jobs: Sequence,
    window_end: Callable[[str], dt.datetime],
    minimum_interval_seconds: int = 15,
    default_status: DefaultSensorStatus = DefaultSensorStatus.STOPPED,
):
    """A sensor that launches ``jobs`` for window W once the shuffle's commit log says W is
    complete (its latest run's watermark reaches ``window_end(W)``), once per commit.

    A newer run for W (corrected or late data) supersedes the old one and launches the jobs
    again. The cursor (JSON) holds the commit-log offset read so far and, per window, the run
    already launched for; a tick reads only commit records appended since, never the data
    topic. ``run_key`` = ``<job>:<window>:<run id>``, so a repeated tick requests nothing new.
    The sensor reads the topic from the ``shuffle`` resource and Kafka from ``kafka``.
    """

    @sensor(
        name=name,
        jobs=list(jobs),
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description="Launches consumer jobs for shuffle windows that are complete.",
    )
    def _sensor(context: SensorEvaluationContext, kafka: KafkaResource, shuffle: ShuffleResource):
        cursor = json.loads(context.cursor) if context.cursor else {}
        offset = int(cursor.get("offset", 0))
        launched: dict[str, str] = dict(cursor.get("launched", {}))
        try:
            commits, next_offset = shuffle_commits_since(shuffle.topic, kafka.config(), offset)
        except ShuffleTopicNotFoundError:
            return SkipReason(f"shuffle {shuffle.topic!r} has no commit log yet")
        latest = {c.window: c for c in commits if c.window is not None}
        requests = []
        for window, commit in sorted(latest.items()):
            mark = commit.effective_watermark
            if mark is None or mark < to_micros(window_end(window)):
                context.log.info(f"window {window}: run {commit.run_id} is not complete yet")
                continue
            if launched.get(window) == commit.run_id:
                continue
            launched[window] = commit.run_id
            for job in jobs:
                requests.append(
                    RunRequest(
                        run_key=f"{job.name}:{window}:{commit.run_id}",
                        job_name=job.name,
                        partition_key=window,
                        tags={COMMIT_TAG: commit.run_id, WINDOW_TAG: window},
                    )
                )
        new_cursor = json.dumps({"offset": next_offset, "launched": launched}, sort_keys=True)
        return SensorResult(run_requests=requests, cursor=new_cursor)

    return _sensor


def failed_region_sensor(
    name: str,
    jobs: Sequence,
    max_retries: int = 2,
    failed_windows_tag: str = "shuffle/failed_windows",
    default_status: DefaultSensorStatus = DefaultSensorStatus.STOPPED,
):
    """A run-failure sensor that re-requests the failed job for the failed partition only.

    It never launches another job: a failed consumer never re-runs the producer. A run of
    a partition range that tagged its failed windows (``failed_windows_tag``) is retried
    for those windows, one run each. Up to ``max_retries`` retries per region, each tagged
    ``shuffle/retry`` (the attempt number) and ``shuffle/retry_of`` (the failed run).
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
