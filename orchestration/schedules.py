"""Scheduled backfills: re-materialize the trailing partitions of a shuffle in one run.

Example::

    nightly = shuffle_backfill_schedule(
        "events_nightly", asset=events_by_user, partitions=3, cron_schedule="0 2 * * *"
    )
"""

import datetime as dt
from collections.abc import Mapping

from dagster import (
    AssetsDefinition,
    DefaultScheduleStatus,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    TimeWindowPartitionsDefinition,
    define_asset_job,
)

from orchestration.definition import RANGE_END_TAG, RANGE_START_TAG, ShuffleAsset, asset_shuffle
from orchestration.shuffle.errors import ShuffleOptionError


def trailing_partitions(
    partitions_def: TimeWindowPartitionsDefinition, count: int, now: dt.datetime
) -> list[str]:
    """The last ``count`` partitions that have ended by ``now``, oldest first (fewer near the
    partitions' start)."""
    return list(partitions_def.get_partition_keys(current_time=now))[-count:]


def shuffle_backfill_schedule(
    name: str,
    *,
    asset: AssetsDefinition,
    partitions: int,
    cron_schedule: str,
    job=None,
    execution_timezone: str | None = None,
    tags: Mapping[str, str] | None = None,
    default_status: DefaultScheduleStatus = DefaultScheduleStatus.STOPPED,
) -> ScheduleDefinition:
    """A schedule that re-materializes the last ``partitions`` partitions of a shuffle asset
    as ONE run over their range, as a single-run backfill would.

    Each tick requests a run of ``job`` (default: the schedule's own asset job
    ``<name>_job`` over ``asset``) tagged ``dagster/asset_partition_range_start`` and
    ``_end`` with the trailing partitions that have ended by the tick's scheduled time (with
    ``partitions=1``, a run of that partition). One Spark session writes them and each window
    commits as its own run, superseding the window's previous run, so late or corrected
    source data replaces what consumers read.

    What runs around it: the commit sensor launches the consumers of every re-written window
    again (each is a new commit); consumers under an automation condition see each window's
    new materialization; the shuffle's checks run once for the range (Dagster 1.13 records a
    range run's check once); a window that fails is tagged ``shuffle/failed_windows`` and
    ``failed_region_sensor`` (with ``assets=[asset]``, or ``jobs=[job]``) re-runs that
    window alone.

    Args:
        name: The schedule's name.
        asset: The shuffle asset: time-window partitioned, with ``shuffle/window_column``.
        partitions: How many trailing partitions each run re-materializes.
        cron_schedule: When, e.g. ``"0 2 * * *"``.
        job: An asset job that materializes ``asset`` over a range; default its own.
        execution_timezone: Of ``cron_schedule``; default UTC.
        tags: Added to every run.
        default_status: Whether the schedule runs when first deployed.
    """
    shuffle: ShuffleAsset = asset_shuffle(asset)
    where = f"shuffle_backfill_schedule {name!r}"
    partitions_def = asset.partitions_def
    if not isinstance(partitions_def, TimeWindowPartitionsDefinition):
        raise ShuffleOptionError(
            f"{where}: asset {asset.key.to_user_string()} has no time-window partitions, so it "
            "has no trailing partitions"
        )
    if partitions < 1:
        raise ShuffleOptionError(f"{where}: partitions must be at least 1, not {partitions}")
    if partitions > 1 and shuffle.window_column is None:
        raise ShuffleOptionError(
            f"{where}: a run over {partitions} partitions of {asset.key.to_user_string()} "
            "needs its definition metadata 'shuffle/window_column' (the column whose value is "
            "the partition key)"
        )
    target = job or define_asset_job(
        f"{name}_job",
        selection=[asset.key],
        description=f"Re-materializes the last {partitions} partitions of "
        f"{asset.key.to_user_string()} in one run.",
    )
    extra = dict(tags or {})

    def _evaluate(context: ScheduleEvaluationContext):
        now = context.scheduled_execution_time or dt.datetime.now(dt.UTC)
        keys = trailing_partitions(partitions_def, partitions, now)
        if not keys:
            return SkipReason(f"no partition of {asset.key.to_user_string()} has ended by {now}")
        if len(keys) == 1:
            return RunRequest(run_key=keys[0], partition_key=keys[0], tags=extra)
        return RunRequest(
            run_key=f"{keys[0]}...{keys[-1]}",
            tags={**extra, RANGE_START_TAG: keys[0], RANGE_END_TAG: keys[-1]},
        )

    return ScheduleDefinition(
        name=name,
        cron_schedule=cron_schedule,
        job=target,
        execution_fn=_evaluate,
        execution_timezone=execution_timezone,
        default_status=default_status,
        description=f"Re-materializes the last {partitions} partitions of "
        f"{asset.key.to_user_string()} as one range run.",
    )
