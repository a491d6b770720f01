"""A shuffle's producer as its own Spark application, launched through Dagster Pipes
(``run_shuffle_pipes`` with ``PipesSubprocessClient`` running ``spark-submit`` against the
local standalone cluster), on the real broker, Spark cluster and a Dagster instance.

A range run of three days whose third day fails on its first attempt: days 1-2 are
materialized from what the application committed, with the metadata an IO manager's
materialization carries; day 3 alone is re-run by the failed-region sensor; then all three
are materialized and committed, and the commit sensor launches the consumer for each."""

import sys
import uuid
from pathlib import Path

import pandas as pd
import pyspark
import pytest
from dagster import (
    AssetKey,
    AssetRecordsFilter,
    BackfillPolicy,
    DagsterEventType,
    DailyPartitionsDefinition,
    Definitions,
    PipesSubprocessClient,
    asset,
    build_run_status_sensor_context,
    build_sensor_context,
    define_asset_job,
    instance_for_test,
)
from pyspark.sql import DataFrame

from orchestration import (
    FAILED_WINDOWS_TAG,
    KafkaResource,
    KafkaShuffleIOManager,
    failed_region_sensor,
    run_shuffle_pipes,
    shuffle_commit_sensor,
    shuffle_metadata,
)
from orchestration.definition import DAGSTER_RUN_ATTR, RETRY_TAG
from orchestration.metadata import commit_metadata, watermark_as_of
from orchestration.shuffle import read_table, shuffle_log

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
APP = Path(__file__).with_name("apps") / "pipes_producer.py"
D1, D2, D3, D4 = "2024-05-01", "2024-05-02", "2024-05-03", "2024-05-04"
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
KEY = AssetKey("events")


@pytest.fixture(scope="module")
def cluster():
    from devstack import localcluster

    return localcluster.start()


def write_day(path: Path, day: str, n: int, **extra: list) -> None:
    """A day of rows, a Parquet folder (``day=<day>``), with ``extra`` columns."""
    start = pd.Timestamp(day, tz="UTC")
    frame = pd.DataFrame(
        {
            "user_id": [f"u{i % 17}" for i in range(n)],
            "ts": [start + pd.Timedelta(minutes=i) for i in range(n)],
            "clicks": [i % 5 for i in range(n)],
            **extra,
        }
    )
    (path / f"day={day}").mkdir(parents=True)
    frame.to_parquet(path / f"day={day}" / "part-0.parquet", coerce_timestamps="us")


def write_source(path: Path) -> dict[str, int]:
    """Three days of rows, a Parquet folder per day: the rows per day."""
    counts = {D1: 300, D2: 400, D3: 500}
    for day, n in counts.items():
        write_day(path, day, n)
    return counts


def submit_command(master: str) -> list[str]:
    python = sys.executable
    return [
        str(Path(pyspark.__file__).parent / "bin" / "spark-submit"),
        "--master", master,
        # Spark refuses cluster deploy mode for Python applications on a standalone cluster;
        # the driver runs in the process the Pipes client started, the executors on the
        # cluster's workers.
        "--deploy-mode", "client",
        "--conf", f"spark.pyspark.python={python}",
        "--conf", f"spark.pyspark.driver.python={python}",
        "--conf", f"spark.executorEnv.PYTHONPATH={ROOT}",
        "--conf", "spark.sql.session.timeZone=UTC",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.executor.memory=1g",
        str(APP),
    ]  # fmt: skip


def test_a_pipes_producer_commits_reports_and_is_retried_for_its_failed_window(
    cluster, bootstrap, kafka_conf, tmp_path
):
    topic = f"pipes.events-{uuid.uuid4().hex[:8]}"
    source = tmp_path / "events"
    counts = write_source(source)
    daily = DailyPartitionsDefinition(start_date=D1, end_date="2024-05-10")
    kafka = KafkaResource(bootstrap_servers=bootstrap)
    attempts: list[dict] = []

    @asset(
        name="events",
        partitions_def=daily,
        backfill_policy=BackfillPolicy.single_run(),
        # Stores nothing itself (the application writes): downstream assets and the commit
        # sensor read the shuffle through it.
        io_manager_key="shuffle_io",
        metadata=shuffle_metadata(
            key="user_id",
            num_partitions=3,
            event_time="ts",
            topic=topic,
            window_column="day",
            schema_mode="merge",
        ),
    )
    def events(context):
        first = RETRY_TAG not in context.run.tags
        extras = {"source": str(source), **({"fail_window": D3} if first else {})}
        attempts.append(extras)
        return run_shuffle_pipes(
            context,
            PipesSubprocessClient(env={"PYTHONPATH": str(ROOT)}),
            kafka=kafka,
            extras=extras,
            command=submit_command(cluster),
        )

    @asset(name="user_totals", partitions_def=daily)
    def user_totals(events: DataFrame) -> None:
        events.count()

    producer = define_asset_job("events_job", selection=[events])
    consumer = define_asset_job("totals_job", selection=[user_totals])
    defs = Definitions(
        assets=[events, user_totals],
        jobs=[producer, consumer],
        sensors=[
            failed_region_sensor("failed_days", jobs=[producer]),
            shuffle_commit_sensor("events_commits", asset=events, jobs=[consumer]),
        ],
        resources={"shuffle_io": KafkaShuffleIOManager(kafka=kafka)},
    )
    with instance_for_test() as instance:

        def run(partition=None, tags=None):
            job = defs.resolve_job_def("events_job")
            return job.execute_in_process(
                instance=instance, partition_key=partition, tags=tags or {}, raise_on_error=False
            )

        def records(day):
            found = instance.fetch_materializations(
                AssetRecordsFilter(asset_key=KEY, asset_partitions=[day]), 10
            )
            return found.records

        def same_as_io_manager(record, day):
            # What KafkaShuffleIOManager records for a run it wrote: the same function of the
            # day's commit, so the same keys and values (the write path as the app reported).
            log = shuffle_log(topic, kafka=kafka_conf)
            commit = log.latest_by_window()[day]
            got = {k: v.value for k, v in record.asset_materialization.metadata.items()}
            want = commit_metadata(
                commit,
                log.layout,
                kafka,
                topic=topic,
                write_path=got.get("shuffle/write_path"),
                shuffle_watermark=watermark_as_of(log, commit),
            )
            assert got == {k: getattr(v, "value", v) for k, v in want.items()}
            assert got["dagster/row_count"] == counts[day]
            assert got["shuffle/write_path"] in ("columnar", "rows")
            assert commit.attrs[DAGSTER_RUN_ATTR] == record.run_id

        # The range run: D1 and D2 commit, D3 fails in the application.
        failed = run(tags={RANGE_START: D1, RANGE_END: D3})
        assert not failed.success
        assert sorted(shuffle_log(topic, kafka=kafka_conf).latest_by_window()) == [D1, D2]
        assert instance.get_materialized_partitions(KEY) == {D1, D2}
        for day in (D1, D2):
            (record,) = records(day)
            assert record.run_id == failed.run_id
            same_as_io_manager(record, day)
        assert instance.get_run_by_id(failed.run_id).tags[FAILED_WINDOWS_TAG] == D3
        (failure,) = [e for e in failed.all_events if e.event_type == DagsterEventType.STEP_FAILURE]
        metadata = failure.step_failure_data.user_failure_data.metadata
        assert metadata[FAILED_WINDOWS_TAG].value == D3
        # The application's error for the window, as it reported it.
        assert "not committed" in metadata["shuffle/errors"].value[D3]
        # The application's own log lines reached the run's log through Pipes.
        messages = [
            r.event_log_entry.user_message
            for r in instance.get_records_for_run(failed.run_id).records
        ]
        assert any(f"window '{D3}' failed" in m for m in messages), messages

        # The failed-region sensor re-runs D3 alone, which commits this time.
        sensor = defs.resolve_sensor_def("failed_days")
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
        retry = run(partition=D3, tags=request.tags)
        assert retry.success
        assert [a.get("fail_window") for a in attempts] == [D3, None]
        assert instance.get_materialized_partitions(KEY) == {D1, D2, D3}
        (record,) = records(D3)
        assert record.run_id == retry.run_id
        same_as_io_manager(record, D3)
        log = shuffle_log(topic, kafka=kafka_conf)
        assert {d: c.rows for d, c in log.latest_by_window().items()} == counts

        # The commit sensor launches the consumer once per committed day.
        with build_sensor_context(
            instance=instance, resources=defs.resources, definitions=defs
        ) as sctx:
            result = defs.resolve_sensor_def("events_commits")(sctx)
        assert sorted(r.partition_key for r in result.run_requests) == [D1, D2, D3]
        assert {r.job_name for r in result.run_requests} == {"totals_job"}

        # A day with a new column: the application writes it under the asset's
        # schema_mode="merge", as layout version 2; the earlier days read it as nulls.
        counts[D4] = 200
        write_day(source, D4, counts[D4], country=[f"c{i % 3}" for i in range(counts[D4])])
        assert run(partition=D4).success
        log = shuffle_log(topic, kafka=kafka_conf)
        assert log.layout.version == 2 and log.layout.schema.names[-1] == "country"
        assert {d: c.layout_version for d, c in log.latest_by_window().items()} == {
            D1: 1,
            D2: 1,
            D3: 1,
            D4: 2,
        }
        (record,) = records(D4)
        same_as_io_manager(record, D4)
        both = read_table(topic, kafka=kafka_conf, windows=[D1, D4])
        countries = both.column("country").to_pylist()
        assert countries.count(None) == counts[D1] and len(set(countries)) == 4
