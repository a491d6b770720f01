"""A nightly expiry keeps Dagster's history: run several times on one instance, with a new
window committed between runs, it leaves every kept partition's materializations,
observations and check results as they were, and shows each window it empties as expired
(a failed ``shuffle_window_readable`` result and an observation of its partition). Asked to
wipe, it takes expired windows out of the materialized partitions at the cost of that
history. On the real broker, Spark and a Dagster instance."""

import pandas as pd
import pytest
from dagster import (
    AssetCheckKey,
    AssetCheckSeverity,
    AssetKey,
    AssetPartitionStatus,
    AssetRecordsFilter,
    DailyPartitionsDefinition,
    Definitions,
    asset,
    define_asset_job,
    instance_for_test,
)
from pyspark.sql import DataFrame, SparkSession

from orchestration import (
    KafkaResource,
    KafkaShuffleIOManager,
    shuffle_asset_checks,
    shuffle_expiry_job,
    shuffle_metadata,
)
from orchestration.definition import EXPIRED_BY, WRITTEN_BY

pytestmark = pytest.mark.integration

DAYS = ["2024-05-01", "2024-05-02", "2024-05-03"]
KEY = AssetKey("events")
CHECKS = ("shuffle_layout", "shuffle_rows", "shuffle_window_readable")
EXPIRY = "events_expiry"
REASON = "not among the 1 most recent windows"


@pytest.fixture
def project(bootstrap, spark, unique):
    topic = unique("nightly.events")
    daily = DailyPartitionsDefinition(start_date=DAYS[0], end_date="2024-05-10")

    @asset(
        name="events",
        partitions_def=daily,
        io_manager_key="shuffle_io",
        metadata=shuffle_metadata(key="user_id", num_partitions=2, topic=topic),
    )
    def events(context) -> DataFrame:
        rows = pd.DataFrame({"user_id": [f"u{i % 7}" for i in range(40)], "n": range(40)})
        return SparkSession.getActiveSession().createDataFrame(rows)

    defs = Definitions(
        assets=[events],
        asset_checks=shuffle_asset_checks(events),
        jobs=[
            define_asset_job("events_job", selection=[events]),
            shuffle_expiry_job(EXPIRY, asset=events, keep_last=1, min_age_minutes=0),
        ],
        resources={
            "shuffle_io": KafkaShuffleIOManager(kafka=KafkaResource(bootstrap_servers=bootstrap))
        },
    )
    with instance_for_test() as instance:
        yield dict(defs=defs, instance=instance, daily=daily)


def run(project, job: str, **kwargs):
    result = (
        project["defs"]
        .resolve_job_def(job)
        .execute_in_process(instance=project["instance"], **kwargs)
    )
    assert result.success
    return result


def history(instance) -> dict[str, dict[str, set[int]]]:
    """Per partition, the storage ids of what Dagster holds of the asset: materializations,
    observations, and each check's results (the check's execution records, which the UI
    shows; a check evaluation's event is not indexed by asset key)."""
    out: dict[str, dict[str, set[int]]] = {d: {} for d in DAYS}
    for day in DAYS:
        only = AssetRecordsFilter(asset_key=KEY, asset_partitions=[day])
        out[day]["materializations"] = {
            r.storage_id for r in instance.fetch_materializations(only, 1000).records
        }
        out[day]["observations"] = {
            r.storage_id for r in instance.fetch_observations(only, 1000).records
        }
        for name in CHECKS:
            out[day][name] = set()
    for name in CHECKS:
        check = AssetCheckKey(KEY, name)
        for r in instance.event_log_storage.get_asset_check_execution_history(check, limit=1000):
            out[r.partition][name].add(r.id)
    return out


def readable_result(instance, day: str):
    """The latest ``shuffle_window_readable`` result of ``day``."""
    check = AssetCheckKey(KEY, "shuffle_window_readable")
    return next(
        r
        for r in instance.event_log_storage.get_asset_check_execution_history(check, limit=1000)
        if r.partition == day
    )


def test_nightly_expiry_keeps_history_and_shows_expired_windows(project):
    instance = project["instance"]
    for day in DAYS[:2]:
        run(project, "events_job", partition_key=day)

    # Two nights, a new day committed before the second: each expires the oldest day left.
    for night, new_day in enumerate([None, DAYS[2]]):
        if new_day:
            run(project, "events_job", partition_key=new_day)
        before = history(instance)
        expiry = run(project, EXPIRY)
        after = history(instance)
        gone = DAYS[night]
        for day in DAYS:
            for kind, ids in before[day].items():
                added = after[day][kind] - ids
                assert ids <= after[day][kind], (day, kind)  # nothing lost
                # Only the day that went gains anything: its observation and check result.
                wanted = 1 if day == gone and kind in ("observations", CHECKS[2]) else 0
                assert len(added) == wanted, (night, day, kind)
        # The day that went still shows its materialization, and says it expired.
        status = instance.get_status_by_partition(KEY, [gone], project["daily"])
        assert status[gone] == AssetPartitionStatus.MATERIALIZED
        record = readable_result(instance, gone)
        assert record.status.value == "FAILED"
        evaluation = record.event.dagster_event.event_specific_data
        assert evaluation.severity == AssetCheckSeverity.WARN and not evaluation.passed
        assert REASON in evaluation.description
        assert evaluation.metadata["shuffle/expiry_reason"].value == REASON
        assert evaluation.metadata[EXPIRED_BY].value == expiry.run_id
        (seen,) = instance.fetch_observations(
            AssetRecordsFilter(asset_key=KEY, asset_partitions=[gone]), 1
        ).records
        assert seen.asset_observation.metadata["shuffle/expired"].value is True

    # A night with nothing new to expire adds nothing to any partition.
    before = history(instance)
    run(project, EXPIRY)
    assert history(instance) == before
    assert instance.get_materialized_partitions(KEY) == set(DAYS)

    # Asked to wipe, for one run: the expired days leave the materialized partitions, the
    # kept one is reported again, and its check results are gone with the rest.
    kept = DAYS[2]
    only_kept = AssetRecordsFilter(asset_key=KEY, asset_partitions=[kept])
    writer = instance.fetch_materializations(only_kept, 1).records[0].run_id
    run(
        project,
        EXPIRY,
        run_config={"ops": {f"{EXPIRY}_expire": {"config": {"reconcile_status": "wipe"}}}},
    )
    assert instance.get_materialized_partitions(KEY) == {kept}
    wiped = history(instance)
    (record,) = instance.fetch_materializations(only_kept, 10).records
    assert record.asset_materialization.metadata[WRITTEN_BY].value == writer
    assert all(not wiped[kept][name] for name in CHECKS)
    # The expired days are shown as such again.
    for day in DAYS[:2]:
        assert not wiped[day]["materializations"] and len(wiped[day]["observations"]) == 1
        assert len(wiped[day][CHECKS[2]]) == 1
        assert readable_result(instance, day).status.value == "FAILED"
