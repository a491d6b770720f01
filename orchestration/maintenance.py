"""Retention as a Dagster job: expire a shuffle asset's superseded and old runs.

Example::

    expiry = shuffle_expiry_job("events_expiry_job", asset=events_by_user, keep_last=90)
    nightly = ScheduleDefinition(job=expiry, cron_schedule="0 3 * * *")
    Definitions(jobs=[expiry], schedules=[nightly], ...)

Each run reports what it removed as an observation of the asset (runs and windows expired,
records deleted and bytes freed per partition); the limits can be changed per run through
the op's config.
"""

import datetime as dt

from dagster import (
    AssetObservation,
    AssetsDefinition,
    Config,
    MetadataValue,
    OpExecutionContext,
    job,
    op,
)

from orchestration.sensors import asset_io_manager_key, asset_shuffle
from orchestration.shuffle import expire_shuffle


def shuffle_expiry_job(
    name: str,
    *,
    asset: AssetsDefinition,
    keep_last: int | None = None,
    older_than: dt.timedelta | None = None,
    min_age: dt.timedelta = dt.timedelta(hours=1),
):
    """A job that runs :func:`~orchestration.shuffle.expire_shuffle` on ``asset``'s shuffle."""
    shuffle = asset_shuffle(asset)
    io_key = asset_io_manager_key(asset)

    default_keep_last = keep_last
    default_older_than = None if older_than is None else older_than.total_seconds() / 3600
    default_min_age = min_age.total_seconds() / 60

    class ExpiryConfig(Config):
        keep_last: int | None = default_keep_last
        older_than_hours: float | None = default_older_than
        min_age_minutes: float = default_min_age

    @op(name=f"{name}_expire", required_resource_keys={io_key})
    def expire(context: OpExecutionContext, config: ExpiryConfig) -> None:
        kafka = getattr(context.resources, io_key).kafka.config()
        result = expire_shuffle(
            shuffle.topic,
            kafka=kafka,
            keep_last=config.keep_last,
            older_than=(
                None
                if config.older_than_hours is None
                else dt.timedelta(hours=config.older_than_hours)
            ),
            min_age=dt.timedelta(minutes=config.min_age_minutes),
        )
        context.log.info(
            f"{shuffle.topic}: expired {len(result.runs_expired)} run(s), deleted "
            f"{sum(result.records_deleted.values())} record(s)"
        )
        context.log_event(
            AssetObservation(
                asset_key=asset.key,
                metadata={
                    "shuffle/topic": shuffle.topic,
                    "runs_expired": len(result.runs_expired),
                    "expired": MetadataValue.json(
                        {r: result.reasons[r] for r in result.runs_expired}
                    ),
                    "windows_expired": MetadataValue.json(result.windows_expired),
                    "records_deleted": MetadataValue.json(
                        {str(p): n for p, n in sorted(result.records_deleted.items())}
                    ),
                    "bytes_freed": MetadataValue.json(
                        {str(p): n for p, n in sorted(result.bytes_freed.items())}
                    ),
                    "bytes_freed_total": sum(result.bytes_freed.values()),
                },
            )
        )

    @job(
        name=name, description=f"Expires superseded and old runs of the shuffle {shuffle.topic!r}."
    )
    def _job():
        expire()

    return _job
