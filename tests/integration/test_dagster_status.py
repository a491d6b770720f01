"""What Dagster's instance says of a shuffle asset's partitions follows Kafka: a range run
that fails on one day, its retry by the failed-region sensor, a successful range run, a re-run
of a day and an expiry (which keeps Dagster's history and marks the window it empties), each
checked through the instance (materialized partitions, partition status, the events' run ids
and metadata), on the real broker, Spark and a Dagster instance."""

import datetime as dt
import uuid

import pandas as pd
import pyarrow as pa
import pytest
from dagster import (
    AssetCheckKey,
    AssetCheckSeverity,
    AssetKey,
    AssetMaterialization,
    AssetPartitionStatus,
    AssetRecordsFilter,
    BackfillPolicy,
    DagsterEventType,
    DagsterInstance,
    DailyPartitionsDefinition,
    Definitions,
    TableSchema,
    asset,
    build_run_status_sensor_context,
    define_asset_job,
    instance_for_test,
)
from pyspark.sql import DataFrame, SparkSession

from orchestration import (
    FAILED_WINDOWS_TAG,
    KafkaResource,
    KafkaShuffleIOManager,
    failed_region_sensor,
    shuffle_expiry_job,
    shuffle_metadata,
)
from orchestration.definition import WRITTEN_BY
from orchestration.maintenance import forget_windows
from orchestration.shuffle import (
    Commit,
    Layout,
    ShuffleLog,
    ShuffleWindowNotFoundError,
    plan_shuffle_read,
    shuffle_log,
)
from orchestration.shuffle.core.commitlog import PartitionRange
from orchestration.shuffle.core.retention import marker

pytestmark = pytest.mark.integration

D1, D2, D3, D4, D5 = (f"2024-05-0{i}" for i in range(1, 6))
KEY = AssetKey("events")
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
ROWS = {D1: 30, D2: 40, D3: 50, D4: 60, D5: 70}
# Days whose rows have null keys: the shuffle refuses to write those (and only those).
BAD_DAYS: set[str] = set()


def rows_of(day: str, version: int = 0) -> pd.DataFrame:
    n = ROWS[day] + version
    start = pd.Timestamp(day, tz="UTC")
    return pd.DataFrame(
        {
            "user_id": [None if day in BAD_DAYS and i % 7 == 0 else f"u{i % 9}" for i in range(n)],
            "day": day,
            "ts": [start + pd.Timedelta(minutes=i) for i in range(n)],
            "clicks": [i % 4 for i in range(n)],
        }
    )


@pytest.fixture(scope="module")
def project(bootstrap, spark):
    topic = f"status.events-{uuid.uuid4().hex[:8]}"
    daily = DailyPartitionsDefinition(start_date=D1, end_date="2024-05-10")
    versions: dict[str, int] = {}

    @asset(
        name="events",
        partitions_def=daily,
        backfill_policy=BackfillPolicy.single_run(),
        io_manager_key="shuffle_io",
        metadata=shuffle_metadata(
            key="user_id", num_partitions=2, event_time="ts", topic=topic, window_column="day"
        ),
    )
    def events(context) -> DataFrame:
        frames = [rows_of(d, versions.get(d, 0)) for d in context.partition_keys]
        return SparkSession.getActiveSession().createDataFrame(pd.concat(frames))

    @asset(name="user_totals", partitions_def=daily)
    def user_totals(events: DataFrame) -> None:
        events.count()

    producer = define_asset_job("events_job", selection=[events])
    defs = Definitions(
        assets=[events, user_totals],
        jobs=[producer, define_asset_job("totals_job", selection=[user_totals])],
        sensors=[failed_region_sensor("failed_days", jobs=[producer])],
        resources={
            "shuffle_io": KafkaShuffleIOManager(kafka=KafkaResource(bootstrap_servers=bootstrap))
        },
    )
    with instance_for_test() as instance:
        yield dict(
            defs=defs,
            topic=topic,
            instance=instance,
            daily=daily,
            events=events,
            versions=versions,
            bootstrap=bootstrap,
        )


def run(project, job: str, *, partition=None, tags=None):
    return (
        project["defs"]
        .resolve_job_def(job)
        .execute_in_process(
            instance=project["instance"],
            partition_key=partition,
            tags=tags or {},
            raise_on_error=False,
        )
    )


def materialized(project) -> set[str]:
    return project["instance"].get_materialized_partitions(KEY)


def records(project, day: str):
    """Materializations of ``day``, newest first."""
    return (
        project["instance"]
        .fetch_materializations(AssetRecordsFilter(asset_key=KEY, asset_partitions=[day]), 50)
        .records
    )


def status(project, *days: str) -> dict:
    return project["instance"].get_status_by_partition(KEY, list(days), project["daily"])


def check_metadata(project, record, day: str, kafka_conf) -> None:
    """A materialization of ``day`` shows the day's visible run in Kafka, with Dagster's
    standard keys."""
    commit = shuffle_log(project["topic"], kafka=kafka_conf).latest_by_window()[day]
    md = {k: v.value for k, v in record.asset_materialization.metadata.items()}
    assert md["shuffle/run_id"] == commit.run_id
    assert md["shuffle/window"] == day
    assert md["dagster/row_count"] == md["dagster/partition_row_count"] == commit.rows
    assert md["rows"] == commit.rows and md["bytes"] == commit.bytes
    assert md["dagster/uri"] == f"kafka://{project['bootstrap']}/{project['topic']}?window={day}"
    schema = md["dagster/column_schema"]
    assert isinstance(schema, TableSchema)
    assert [(c.name, c.type) for c in schema.columns] == [
        ("user_id", "string"),
        ("day", "string"),
        ("ts", "timestamp"),
        ("clicks", "bigint"),
    ]


def test_partition_status_follows_kafka(project, spark, kafka_conf):
    instance, topic = project["instance"], project["topic"]

    # A range run that commits D1 and D2 and fails on D3.
    BAD_DAYS.add(D3)
    failed = run(project, "events_job", tags={RANGE_START: D1, RANGE_END: D3})
    assert not failed.success
    assert sorted(shuffle_log(topic, kafka=kafka_conf).latest_by_window()) == [D1, D2]
    assert materialized(project) == {D1, D2}
    assert status(project, D1, D2, D3) == {
        D1: AssetPartitionStatus.MATERIALIZED,
        D2: AssetPartitionStatus.MATERIALIZED,
        D3: AssetPartitionStatus.FAILED,
    }
    for day in (D1, D2):
        (record,) = records(project, day)
        assert record.run_id == failed.run_id
        check_metadata(project, record, day, kafka_conf)
    assert instance.get_run_by_id(failed.run_id).tags[FAILED_WINDOWS_TAG] == D3
    (failure,) = [e for e in failed.all_events if e.event_type == DagsterEventType.STEP_FAILURE]
    assert failure.step_failure_data.user_failure_data.metadata[FAILED_WINDOWS_TAG].value == D3

    # The failed-region sensor re-runs D3 alone; with good rows, every day is materialized.
    BAD_DAYS.clear()
    sensor = project["defs"].resolve_sensor_def("failed_days")
    (event,) = instance.get_records_for_run(
        failed.run_id, of_type=DagsterEventType.PIPELINE_FAILURE
    ).records
    ctx = build_run_status_sensor_context(
        sensor_name="failed_days",
        dagster_event=event.event_log_entry.dagster_event,
        dagster_instance=instance,
        dagster_run=instance.get_run_by_id(failed.run_id),
    ).for_run_failure()
    (request,) = sensor(ctx)
    assert request.partition_key == D3
    retry = run(project, request.job_name, partition=D3, tags=request.tags)
    assert retry.success
    assert materialized(project) == {D1, D2, D3}
    (record,) = records(project, D3)
    assert record.run_id == retry.run_id
    check_metadata(project, record, D3, kafka_conf)

    # A successful range run: each day once, each with its own run and metadata.
    ok = run(project, "events_job", tags={RANGE_START: D4, RANGE_END: D5})
    assert ok.success
    for day in (D4, D5):
        (record,) = records(project, day)
        assert record.run_id == ok.run_id
        check_metadata(project, record, day, kafka_conf)
    assert materialized(project) == {D1, D2, D3, D4, D5}

    # Re-materializing a day: still materialized, now showing the new run.
    project["versions"][D1] = 5
    again = run(project, "events_job", partition=D1)
    assert again.success
    newest, older = records(project, D1)
    assert newest.run_id == again.run_id
    check_metadata(project, newest, D1, kafka_conf)
    assert materialized(project) == {D1, D2, D3, D4, D5}

    # Expiry keeps the 4 most recently committed windows (D3, D4, D5, D1): D2 leaves.
    expiry = shuffle_expiry_job(
        "events_expiry", asset=project["events"], keep_last=4, min_age_minutes=0
    )
    result = expiry.execute_in_process(
        instance=instance, resources=project["defs"].resources, raise_on_error=False
    )
    assert result.success
    assert sorted(shuffle_log(topic, kafka=kafka_conf).latest_by_window()) == [D1, D3, D4, D5]
    # Dagster's history stays: D2 was materialized, and the windows still readable show the
    # same records as before.
    assert materialized(project) == {D1, D2, D3, D4, D5}
    for day, writer in ((D1, again.run_id), (D3, retry.run_id), (D4, ok.run_id)):
        record = records(project, day)[0]
        assert record.run_id == writer
        check_metadata(project, record, day, kafka_conf)
    assert len(records(project, D1)) == 2
    # D2's partition tells why it went: an observation and a failed readability check.
    (seen,) = instance.fetch_observations(
        AssetRecordsFilter(asset_key=KEY, asset_partitions=[D2]), 10
    ).records
    md = seen.asset_observation.metadata
    assert md["shuffle/expired"].value is True
    assert md["shuffle/expiry_reason"].value == "not among the 4 most recent windows"
    (check,) = instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(KEY, "shuffle_window_readable"), limit=10
    )
    evaluation = check.event.dagster_event.event_specific_data
    assert (check.partition, evaluation.passed) == (D2, False)
    assert evaluation.severity == AssetCheckSeverity.WARN
    assert "not among the 4 most recent windows" in evaluation.description

    # A read of D2, planned or through the IO manager, says it expired, when and why.
    with pytest.raises(ShuffleWindowNotFoundError, match=r"\['2024-05-02'\] expired") as err:
        plan_shuffle_read(spark, topic, kafka=kafka_conf, windows=[D2])
    assert "not among the 4 most recent windows" in str(err.value)
    consumer = run(project, "totals_job", partition=D2)
    assert not consumer.success
    text = str(consumer.get_step_failure_events()[0].step_failure_data.error)
    assert "expired" in text and "not among the 4 most recent windows" in text
    assert "no committed run" not in text


def test_expiry_status_without_a_dagster_record_or_a_window():
    """What no run can report: a window committed through Dagster whose run ended before
    reporting it is reported from its commit record when the expiry rebuilds Dagster's
    history; an unpartitioned shuffle whose runs all expired stops being materialized."""
    now = dt.datetime(2024, 6, 1, tzinfo=dt.UTC)
    layout = Layout("t", ("k",), 1, 4, pa.schema([pa.field("k", pa.string())]))
    kafka = KafkaResource(bootstrap_servers="b:9092")

    def commit(run_id: str, window: str | None, **attrs: str) -> Commit:
        parts = {0: PartitionRange(0, 1, 3, 1)}
        return Commit(run_id, window, now.isoformat(), ((0, 0),), parts, 3, 10, 1, attrs=attrs)

    def log_of(*records) -> ShuffleLog:
        return ShuffleLog.from_records("t", [("layout", layout.to_json()), *records])

    @asset(name="p", partitions_def=DailyPartitionsDefinition(start_date=D1))
    def partitioned() -> None: ...

    @asset(name="u")
    def unpartitioned() -> None: ...

    instance = DagsterInstance.ephemeral()
    old, crashed = commit("r1", D1), commit("r2", D2, dagster_run_id="run-2")
    instance.report_runless_asset_event(AssetMaterialization("p", partition=D1))
    log = log_of(
        ("commit/r2", crashed.to_json()), ("expired/r1", marker(old, "old", now).to_json())
    )
    assert forget_windows(instance, partitioned, log, kafka, sorted(log.expired_windows())) == [D1]
    assert instance.get_materialized_partitions(AssetKey("p")) == {D2}
    (record,) = instance.fetch_materializations(AssetKey("p"), 10).records
    md = record.asset_materialization.metadata
    assert md["shuffle/run_id"].value == "r2" and md["dagster/partition_row_count"].value == 3
    assert md[WRITTEN_BY].value == "run-2"

    instance.report_runless_asset_event(AssetMaterialization("u"))
    alive = log_of(("commit/r3", commit("r3", None).to_json()))
    assert forget_windows(instance, unpartitioned, alive, kafka, []) == []
    assert instance.get_latest_materialization_event(AssetKey("u")) is not None
    expired = log_of(("expired/r3", marker(commit("r3", None), "old", now).to_json()))
    forget_windows(instance, unpartitioned, expired, kafka, [])
    assert instance.get_latest_materialization_event(AssetKey("u")) is None
