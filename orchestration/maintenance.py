"""Retention as a Dagster job: expire a shuffle asset's superseded and old runs.

Example::

    expiry = shuffle_expiry_job("events_expiry_job", asset=events_by_user, keep_last=90)
    nightly = ScheduleDefinition(job=expiry, cron_schedule="0 3 * * *")
    Definitions(jobs=[expiry], schedules=[nightly], ...)

Each run reports what it removed as an observation of the asset (runs and windows expired,
records deleted and bytes freed per partition), and one observation per window that has no
readable run left (which run, when, why); the limits can be changed per run through the op's
config.

A window with no readable run left must not stay "materialized" in Dagster. Dagster 1.13
offers no public way to un-materialize one partition: ``DagsterInstance.wipe_asset_partitions``
is not public and raises ``NotImplementedError`` on the open-source storages (SQLite,
Postgres, MySQL); a failed-materialization event cannot be reported (``AssetMaterialization
Failure`` is not exported, ``report_runless_asset_event`` refuses it); an observation does not
change a partition's status. So the job (``reconcile_status=True``, the default) does what
the public API allows: it wipes the asset's event history (``DagsterInstance.wipe_assets``)
and reports again, as a runless materialization, each window whose run is still readable,
with the metadata and tags (data version) of its latest materialization when that was of
the same run, else from its commit record, and a link to the run that wrote it. The costs:
the asset's pages lose its older materializations, observations and asset check results
(runs keep their own logs), and automation conditions see the windows reported again as
updated. It happens only when a window that Dagster shows as materialized has expired.
``reconcile_status=False`` leaves Dagster's history alone.
"""

import datetime as dt

from dagster import (
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    AssetRecordsFilter,
    AssetsDefinition,
    Config,
    DagsterInstance,
    EventLogRecord,
    MetadataValue,
    OpExecutionContext,
    job,
    op,
)

from orchestration.io_manager import DAGSTER_RUN_ATTR
from orchestration.metadata import commit_metadata
from orchestration.resources import KafkaResource
from orchestration.sensors import asset_io_manager_key, asset_shuffle
from orchestration.shuffle import ShuffleLog, expire_shuffle, shuffle_log

# Metadata of a re-reported materialization: the run that wrote the window.
WRITTEN_BY = "shuffle/written_by_run"


def shuffle_expiry_job(
    name: str,
    *,
    asset: AssetsDefinition,
    keep_last: int | None = None,
    older_than: dt.timedelta | None = None,
    min_age: dt.timedelta = dt.timedelta(hours=1),
    reconcile_status: bool = True,
):
    """A job that runs :func:`~orchestration.shuffle.expire_shuffle` on ``asset``'s shuffle.

    With ``reconcile_status`` (default), windows left with no readable run stop being
    materialized in Dagster, at the cost the module doc states.
    """
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
        kafka: KafkaResource = getattr(context.resources, io_key).kafka
        shuffle = asset_shuffle(asset).under(kafka)
        client = kafka.client()
        result = expire_shuffle(
            shuffle.topic,
            kafka=client,
            keep_last=config.keep_last,
            older_than=(
                None
                if config.older_than_hours is None
                else dt.timedelta(hours=config.older_than_hours)
            ),
            min_age=dt.timedelta(minutes=config.min_age_minutes),
        )
        log = shuffle_log(shuffle.topic, kafka=client)
        gone = sorted(log.expired_windows())
        forgotten: list[str] = []
        if reconcile_status:
            forgotten = forget_windows(context.instance, asset, log, kafka, gone)
        context.log.info(
            f"{shuffle.topic}: expired {len(result.runs_expired)} run(s), deleted "
            f"{sum(result.records_deleted.values())} record(s); window(s) no longer "
            f"materialized in Dagster: {forgotten or 'none'}"
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
                    "windows_forgotten": MetadataValue.json(forgotten),
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
        if asset.partitions_def is not None:
            # What the partition of a window that went now shows: its last run, when, why.
            markers = log.expired_windows()
            for window in sorted(set(markers).intersection(result.windows_expired)):
                marker = markers[window]
                context.log_event(
                    AssetObservation(
                        asset_key=asset.key,
                        partition=window,
                        metadata={
                            "shuffle/expired": True,
                            "shuffle/run_id": marker.run_id,
                            "shuffle/expired_at": MetadataValue.timestamp(
                                dt.datetime.fromisoformat(marker.expired_at)
                            ),
                            "shuffle/expiry_reason": marker.reason,
                            "rows": marker.rows,
                            "bytes": marker.bytes,
                        },
                    )
                )

    @job(
        name=name, description=f"Expires superseded and old runs of the shuffle {shuffle.topic!r}."
    )
    def _job():
        expire()

    return _job


def _latest(instance: DagsterInstance, key: AssetKey, window: str) -> EventLogRecord | None:
    records = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=key, asset_partitions=[window]), limit=1
    ).records
    return records[0] if records else None


def forget_windows(
    instance: DagsterInstance,
    asset: AssetsDefinition,
    log: ShuffleLog,
    kafka: KafkaResource,
    gone: list[str],
) -> list[str]:
    """Makes Dagster's materialized partitions of ``asset`` the windows readable in ``log``
    again, if a window retention left with no readable run (in ``gone``) is still
    materialized there; returns those windows. See the module doc for how and at what
    cost."""
    key = asset.key
    if asset.partitions_def is None:
        # Readers of an unpartitioned shuffle read its latest run without a window.
        unwindowed_gone = not any(c.window is None for c in log.commits) and any(
            e.window is None for e in log.expired.values()
        )
        if unwindowed_gone and instance.get_latest_materialization_event(key) is not None:
            instance.wipe_assets([key])
        return []
    stale = sorted(w for w in gone if _latest(instance, key, w) is not None)
    if not stale:
        return []
    visible = {w: c for w, c in log.latest_by_window().items() if w is not None}
    kept = {w: _latest(instance, key, w) for w in visible}
    instance.wipe_assets([key])
    for window, commit in sorted(visible.items()):
        record = kept[window]
        event = record.asset_materialization if record is not None else None
        shown = event.metadata.get("shuffle/run_id") if event is not None else None
        if event is not None and getattr(shown, "value", shown) == commit.run_id:
            # The same run as Dagster showed: its metadata and data version carry over.
            metadata = dict(event.metadata)
            if WRITTEN_BY not in metadata and record is not None and record.run_id:
                metadata[WRITTEN_BY] = MetadataValue.dagster_run(record.run_id)
            tags = event.tags
        elif DAGSTER_RUN_ATTR in commit.attrs:
            # Committed through Dagster but not (or not last) recorded there, e.g. a run
            # that ended before it could report: Kafka says the window is readable.
            metadata = commit_metadata(commit, log.layout, kafka)
            metadata[WRITTEN_BY] = MetadataValue.dagster_run(commit.attrs[DAGSTER_RUN_ATTR])
            tags = {}
        else:
            continue
        instance.report_runless_asset_event(
            AssetMaterialization(
                asset_key=key,
                partition=window,
                description=(
                    f"Run {commit.run_id} of {log.topic!r}, reported again when expired "
                    f"window(s) {stale} left Dagster's status."
                ),
                metadata=metadata,
                tags=tags,
            )
        )
    return stale
