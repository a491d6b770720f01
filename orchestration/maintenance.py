"""Retention as a Dagster job: expire a shuffle asset's superseded and old runs.

Example::

    expiry = shuffle_expiry_job("events_expiry_job", asset=events_by_user, keep_last=90)
    nightly = ScheduleDefinition(job=expiry, cron_schedule="0 3 * * *")
    Definitions(jobs=[expiry], schedules=[nightly],
                asset_checks=shuffle_asset_checks(events_by_user), ...)

Each run reports what it removed as an observation of the asset (runs and windows expired,
records deleted and bytes freed per partition); the limits can be changed per run through
the op's config. A window left with no readable run is shown as expired once: a failed
result of the ``shuffle_window_readable`` check for its partition (severity WARN; the check
is one of :func:`~orchestration.shuffle_asset_checks`) and an observation of the partition,
both saying which run went, when and why. A window already shown (its latest observation
says so for the same run) is not reported again, so a run that failed after expiring is
made good by the next.

Why a check result: Dagster's public API (1.12 and 1.13) cannot take one partition out of
an asset's materialized partitions. ``DagsterInstance.wipe_asset_partitions`` is not public
and raises ``NotImplementedError`` on the open-source storages (SQLite, Postgres, MySQL); a
failed materialization (``AssetMaterializationFailure``) is not exported and
``report_runless_asset_event`` refuses it; an observation does not change a partition's
status; deleting a dynamic partition's key applies only to dynamically partitioned assets,
and a consumer could then no longer be launched for that window to be told why it is gone.
A check result is recorded per partition (``AssetCheckEvaluation(partition=...)``, reported
without a run), so the expired window says so and every other partition keeps its history:
materializations, observations and check results. Dagster still counts the window among
the materialized partitions (it was materialized; its data is gone).

``reconcile_status="wipe"`` takes expired windows out of the materialized partitions too, in
the only way the public API allows: when a window Dagster shows as materialized has expired,
it wipes the asset's event history (``DagsterInstance.wipe_assets``) and reports again, as a
runless materialization, each window whose run is still readable, with the metadata and
tags (data version) of its latest materialization when that was of the same run, else from
its commit record, and a link to the run that wrote it. The costs: the asset's pages lose
its older materializations, observations and asset check results (runs keep their own
logs), and automation conditions see the windows reported again as updated. Only a user
asks for it: in the factory, or for one run in the op's config.
"""

import datetime as dt
from typing import Any, Literal, get_args

from dagster import (
    AssetCheckEvaluation,
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
from pydantic import Field

from orchestration.checks import READABLE_CHECK, expired_metadata, gone_windows, readability
from orchestration.definition import (
    DAGSTER_RUN_ATTR,
    EXPIRED_BY,
    WRITTEN_BY,
    asset_io_manager_key,
    asset_shuffle,
)
from orchestration.metadata import commit_metadata
from orchestration.resources import KafkaResource
from orchestration.shuffle.core.commitlog import Expired, ShuffleLog
from orchestration.shuffle.errors import ShuffleOptionError
from orchestration.shuffle.kafka.retention import expire_shuffle
from orchestration.shuffle.read import shuffle_log

ReconcileStatus = Literal["check", "wipe"]


class ExpiryConfig(Config):
    """What a run of an expiry job expires: the op's run config, which the launchpad shows
    with the job's defaults. The factory (:func:`shuffle_expiry_job`) and the
    ``KafkaShuffle`` component's ``expiry`` take the same fields, by the same names and in
    the same units: Dagster's config has no duration type, so an age is a number in the unit
    its name says, and becomes a ``timedelta`` only where the engine takes it
    (:meth:`ages`)."""

    keep_last: int | None = Field(
        default=None, description="Keep the runs of this many most recent windows only."
    )
    older_than_hours: float | None = Field(
        default=None, description="Expire runs committed longer ago than this many hours."
    )
    min_age_minutes: float = Field(
        default=60, description="Never delete records younger than this many minutes."
    )
    reconcile_status: ReconcileStatus = Field(
        default="check",
        description="'check': an expired window shows as a failed check result; 'wipe': "
        "also wipe the asset's history to take it out of the materialized partitions.",
    )

    def ages(self) -> tuple[dt.timedelta | None, dt.timedelta]:
        """``older_than`` and ``min_age``, as :func:`~orchestration.shuffle.expire_shuffle`
        takes them."""
        hours = self.older_than_hours
        return (
            None if hours is None else dt.timedelta(hours=hours),
            dt.timedelta(minutes=self.min_age_minutes),
        )


def shuffle_expiry_job(
    name: str,
    *,
    asset: AssetsDefinition,
    keep_last: int | None = None,
    older_than_hours: float | None = None,
    min_age_minutes: float = 60,
    reconcile_status: ReconcileStatus = "check",
):
    """A job that runs :func:`~orchestration.shuffle.expire_shuffle` on ``asset``'s shuffle.

    The arguments after ``asset`` are the defaults of the job's run config
    (:class:`ExpiryConfig`, the same names and units), which a run may change.

    Args:
        name: The job's name (its op is ``<name>_expire``).
        asset: The shuffle asset, stored by ``KafkaShuffleIOManager``.
        keep_last: Keep the runs of this many most recently committed windows only.
        older_than_hours: Expire runs committed longer ago than this many hours.
        min_age_minutes: Never delete records younger than this many minutes.
        reconcile_status: ``"check"`` (default): an expired window shows as a failed
            ``shuffle_window_readable`` result of its partition, and Dagster's history stays.
            ``"wipe"``: also take it out of the materialized partitions by wiping the asset's
            history, at the cost the module doc states. The op's config can set it per run.

    Raises:
        ShuffleOptionError: ``reconcile_status`` is neither (``True`` and ``False`` were
            taken before 0.2.0).
    """
    if reconcile_status not in get_args(ReconcileStatus):
        raise ShuffleOptionError(
            f"shuffle_expiry_job {name!r}: reconcile_status={reconcile_status!r}: use 'check' "
            "(the default, was False: expired windows shown by a check result, history kept) or "
            "'wipe' (was True: the asset's history wiped to take them out of the materialized "
            "partitions)"
        )
    shuffle = asset_shuffle(asset)
    io_key = asset_io_manager_key(asset)
    op_name = f"{name}_expire"
    defaults = ExpiryConfig(
        keep_last=keep_last,
        older_than_hours=older_than_hours,
        min_age_minutes=min_age_minutes,
        reconcile_status=reconcile_status,
    )

    def described(name: str) -> str | None:
        return ExpiryConfig.model_fields[name].description

    class JobExpiryConfig(ExpiryConfig):
        # ExpiryConfig with this job's defaults, which a run's config changes field by field.
        keep_last: int | None = Field(defaults.keep_last, description=described("keep_last"))
        older_than_hours: float | None = Field(
            defaults.older_than_hours, description=described("older_than_hours")
        )
        min_age_minutes: float = Field(
            defaults.min_age_minutes, description=described("min_age_minutes")
        )
        reconcile_status: ReconcileStatus = Field(
            defaults.reconcile_status, description=described("reconcile_status")
        )

    @op(name=op_name, required_resource_keys={io_key})
    def expire(context: OpExecutionContext, config: JobExpiryConfig) -> None:
        kafka: KafkaResource = getattr(context.resources, io_key).kafka
        shuffle = asset_shuffle(asset).under(kafka)
        client = kafka.client()
        older, young = config.ages()
        result = expire_shuffle(
            shuffle.topic,
            kafka=client,
            keep_last=config.keep_last,
            older_than=older,
            min_age=young,
        )
        log = shuffle_log(shuffle.topic, kafka=client)
        forgotten: list[str] = []
        if config.reconcile_status == "wipe":
            forgotten = forget_windows(
                context.instance, asset, log, kafka, sorted(log.expired_windows())
            )
        gone = gone_windows(log, asset.partitions_def is not None)
        shown = show_expired(context, asset, log, gone)
        context.log.info(
            f"{shuffle.topic}: expired {len(result.runs_expired)} run(s), deleted "
            f"{sum(result.records_deleted.values())} record(s); window(s) shown as expired: "
            f"{shown or 'none'}; no longer materialized in Dagster: {forgotten or 'none'}"
        )
        metadata: dict[str, Any] = {
            "shuffle/topic": shuffle.topic,
            "runs_expired": len(result.runs_expired),
            "expired": MetadataValue.json({r: result.reasons[r] for r in result.runs_expired}),
            "windows_expired": MetadataValue.json(result.windows_expired),
            "windows_shown_expired": MetadataValue.json(shown),
            "windows_forgotten": MetadataValue.json(forgotten),
            "records_deleted": MetadataValue.json(
                {str(p): n for p, n in sorted(result.records_deleted.items())}
            ),
            "bytes_freed": MetadataValue.json(
                {str(p): n for p, n in sorted(result.bytes_freed.items())}
            ),
            "bytes_freed_total": sum(result.bytes_freed.values()),
        }
        if None in gone:
            # An unpartitioned asset has no partition to observe: its own observation says
            # its last run went, every run, so that the next run sees it shown.
            metadata.update(expired_metadata(gone[None]))
        context.log_event(AssetObservation(asset_key=asset.key, metadata=metadata))

    @job(
        name=name,
        description=f"Expires superseded and old runs of the shuffle {shuffle.topic!r}.",
    )
    def _job():
        expire()

    return _job


def _shown(instance: DagsterInstance, key: AssetKey, window: str | None, marker: Expired) -> bool:
    """Whether the latest observation of ``window`` (of the asset, for None) says it expired
    with ``marker``'s run. Nothing observes a window once its last run is gone: a new commit
    would make it readable again."""
    records = instance.fetch_observations(
        AssetRecordsFilter(asset_key=key, asset_partitions=None if window is None else [window]),
        limit=1,
    ).records
    event = records[0].asset_observation if records else None
    if event is None:
        return False
    md = {k: getattr(v, "value", v) for k, v in event.metadata.items()}
    return md.get("shuffle/expired") is True and md.get("shuffle/run_id") == marker.run_id


def show_expired(
    context: OpExecutionContext,
    asset: AssetsDefinition,
    log: ShuffleLog,
    gone: dict[str | None, Expired],
) -> list[str]:
    """Shows each window of ``gone`` that Dagster does not show as expired yet: a failed
    ``shuffle_window_readable`` result of its partition, reported without a run (an op
    cannot report a check its job does not run), and an observation of the partition (an
    unpartitioned asset's is the expiry's own observation). Returns those windows ("" for
    an unpartitioned asset's)."""
    shown: list[str] = []
    for window, marker in sorted(gone.items(), key=lambda item: item[0] or ""):
        if _shown(context.instance, asset.key, window, marker):
            continue
        found = readability(log, None if window is None else [window])
        context.instance.report_runless_asset_event(
            AssetCheckEvaluation(
                asset_key=asset.key,
                check_name=READABLE_CHECK,
                passed=found.passed,
                severity=found.severity,
                description=found.description,
                metadata={**found.metadata, EXPIRED_BY: MetadataValue.dagster_run(context.run_id)},
                partition=window,
            )
        )
        if window is not None:
            context.log_event(
                AssetObservation(
                    asset_key=asset.key, partition=window, metadata=expired_metadata(marker)
                )
            )
        shown.append(window or "")
    return shown


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
