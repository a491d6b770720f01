"""Dagster as teams run it, for real: an instance kept in PostgreSQL, runs queued by the
QueuedRunCoordinator with one writer per shuffle pool, and two code locations, each in a
code server of its own, under ``dagster-webserver`` and ``dagster-daemon``.

The producer team's location writes the shuffle ``events`` (one committed run per day) and
retries failed days with its failed-region sensor. A consumer team's location declares the
shuffle as Dagster declares an asset defined elsewhere, ``AssetSpec("events", ...,
metadata=shuffle_metadata(...)).with_io_manager_key("shuffle_io")``, and launches its
consumer per committed day with the library's commit sensor; the consumer loads each day
through the shuffle IO manager. An asset backfill of three days is launched with the
GraphQL mutation the UI sends; the third day fails once. The backfill commits days 1-2,
the failed-region sensor re-runs day 3 alone, the consumer runs once per day from its own
location, and all six partitions are materialized.
"""

import os
import sys
import time
import uuid
from pathlib import Path

import pytest
from dagster import AssetKey, AssetRecordsFilter, DagsterInstance, DagsterRunStatus

from devstack.localpg import dagster_yaml
from orchestration import FAILED_WINDOWS_TAG
from orchestration.definition import RANGE_END_TAG, RANGE_START_TAG, RETRY_OF_TAG
from orchestration.shuffle import shuffle_log
from tests.integration.test_ui_retries import free_port, graphql, launch_backfill, start, stop

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(480)]

PRODUCER, CONSUMER = "events_team", "reports_team"
EVENTS, TOTALS = AssetKey("events"), AssetKey("user_totals")
DAYS = ["2024-04-01", "2024-04-02", "2024-04-03"]
ROWS_PER_DAY = 30
DONE = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
BACKFILL_TAG = "dagster/backfill"
PARTITION_TAG = "dagster/partition"
SENSOR_TAG = "dagster/sensor_name"
TOTALS_JOB = "user_totals_job"

COMMON_PY = """\
import os

from dagster import DailyPartitionsDefinition, EnvVar
from pyspark.sql import SparkSession

from orchestration import KafkaResource, KafkaShuffleIOManager, shuffle_metadata

daily = DailyPartitionsDefinition(start_date="2024-04-01")
TOPIC = os.environ["TEAMS_EVENTS_TOPIC"]
# What the producer team publishes for its consumers: the shuffle's layout.
LAYOUT = shuffle_metadata(
    key="user_id", num_partitions=2, max_parallelism=8, event_time="ts", topic=TOPIC,
    window_column="day",
)


def spark():
    return (
        SparkSession.builder.master("local[1]")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )


def shuffle_io():
    return KafkaShuffleIOManager(
        kafka=KafkaResource(bootstrap_servers=EnvVar("KAFKA_BOOTSTRAP_SERVERS"))
    )
"""

PRODUCER_PY = '''\
import os

import pandas as pd
from dagster import (
    AssetExecutionContext, BackfillPolicy, DefaultSensorStatus, Definitions, asset,
    define_asset_job, in_process_executor,
)
from pyspark.sql import DataFrame

from common import LAYOUT, TOPIC, daily, shuffle_io, spark
from orchestration import failed_region_sensor, shuffle_pool


@asset(
    partitions_def=daily,
    backfill_policy=BackfillPolicy.single_run(),
    io_manager_key="shuffle_io",
    metadata=LAYOUT,
    pool=shuffle_pool(TOPIC),
)
def events(context: AssetExecutionContext) -> DataFrame:
    """ROWS events a day; a day with a flag file gets a row without a key once (the shuffle
    refuses to commit that day), and the flag goes."""
    frames = []
    for day in context.partition_keys:
        users = [f"user-{i % 5}" for i in range(ROWS)]
        flag = os.path.join(os.environ["TEAMS_FLAGS"], day)
        if os.path.exists(flag):
            os.remove(flag)
            users[0] = None
        start = pd.Timestamp(day, tz="UTC")
        frames.append(pd.DataFrame({
            "user_id": users, "day": day, "clicks": list(range(ROWS)),
            "ts": [start + pd.Timedelta(minutes=i) for i in range(ROWS)],
        }))
    return spark().createDataFrame(pd.concat(frames))


events_job = define_asset_job("events_job", selection=[events])
defs = Definitions(
    assets=[events],
    jobs=[events_job],
    sensors=[
        failed_region_sensor(
            "events_failed_days", jobs=[events_job], assets=[events], max_retries=1,
            minimum_interval_seconds=5, default_status=DefaultSensorStatus.RUNNING,
        ),
    ],
    resources={"shuffle_io": shuffle_io()},
    executor=in_process_executor,
)
'''.replace("ROWS", str(ROWS_PER_DAY))

CONSUMER_PY = """\
from dagster import (
    AssetExecutionContext, AssetSpec, DefaultSensorStatus, Definitions, MaterializeResult,
    asset, define_asset_job, in_process_executor,
)
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from common import LAYOUT, daily, shuffle_io, spark
from orchestration import shuffle_commit_sensor

# The producer team's shuffle, declared as an asset defined in another location.
events = AssetSpec("events", partitions_def=daily, metadata=LAYOUT).with_io_manager_key(
    "shuffle_io"
)


@asset(partitions_def=daily)
def user_totals(context: AssetExecutionContext, events: DataFrame) -> MaterializeResult:
    spark()
    totals = events.groupBy("user_id").agg(F.sum("clicks").alias("clicks")).collect()
    return MaterializeResult(metadata={
        "users": len(totals), "clicks": sum(r["clicks"] for r in totals),
    })


totals_job = define_asset_job("user_totals_job", selection=[user_totals])
defs = Definitions(
    assets=[events, user_totals],
    jobs=[totals_job],
    sensors=[
        shuffle_commit_sensor(
            "events_commits", asset=events, jobs=[totals_job], minimum_interval_seconds=5,
            default_status=DefaultSensorStatus.RUNNING,
        ),
    ],
    resources={"shuffle_io": shuffle_io()},
    executor=in_process_executor,
)
"""

LOCATIONS = """
query Locations {
  workspaceOrError {
    __typename
    ... on Workspace {
      locationEntries {
        name
        locationOrLoadError { __typename ... on PythonError { message } }
      }
    }
  }
}
"""


def location_of(run) -> str:
    return run.remote_job_origin.repository_origin.code_location_origin.location_name


@pytest.fixture(scope="module")
def teams(bootstrap, kafka_conf, postgres, tmp_path_factory):
    base = tmp_path_factory.mktemp("teams_ui")
    home, project, flags = base / "home", base / "project", base / "flags"
    for folder in (home, project, flags):
        folder.mkdir()
    (home / "dagster.yaml").write_text(dagster_yaml(max_concurrent_runs=4))
    (project / "common.py").write_text(COMMON_PY)
    (project / "producer.py").write_text(PRODUCER_PY)
    (project / "consumer.py").write_text(CONSUMER_PY)
    (flags / DAYS[2]).touch()
    topic = f"teams.events-{uuid.uuid4().hex[:8]}"
    pg_url = postgres(f"teams_{uuid.uuid4().hex[:8]}")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "SHUFFLE_DAGSTER_PG_URL": pg_url,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "TEAMS_FLAGS": str(flags),
        "TEAMS_EVENTS_TOPIC": topic,
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join([str(project), os.environ.get("PYTHONPATH", "")]),
    }
    ports = {PRODUCER: free_port(), CONSUMER: free_port()}
    (project / "workspace.yaml").write_text(
        "load_from:\n"
        + "".join(
            f"  - grpc_server: {{host: 127.0.0.1, port: {port}, location_name: {name}}}\n"
            for name, port in ports.items()
        )
    )
    # This process reads the same instance (its dagster.yaml names the URL's variable).
    saved = os.environ.get("SHUFFLE_DAGSTER_PG_URL")
    os.environ["SHUFFLE_DAGSTER_PG_URL"] = pg_url
    # The schema is made once, before three processes would make it at the same time.
    instance = DagsterInstance.from_config(str(home))
    instance.get_run_ids(limit=1)
    bin_dir = Path(sys.executable).parent
    procs = [
        start(
            [
                str(bin_dir / "dagster"),
                "code-server",
                "start",
                "-f",
                f"{file}.py",
                "--location-name",
                name,
                "-h",
                "127.0.0.1",
                "-p",
                str(ports[name]),
            ],
            project,
            env,
            base / f"{file}.log",
        )  # fmt: skip
        for name, file in ((PRODUCER, "producer"), (CONSUMER, "consumer"))
    ]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    procs.append(
        start(
            [
                str(bin_dir / "dagster-webserver"),
                "-w",
                "workspace.yaml",
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
            ],
            project,
            env,
            base / "webserver.log",
        )  # fmt: skip
    )
    started = time.monotonic()
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                entries = graphql(url, LOCATIONS, {})["workspaceOrError"]["locationEntries"]
                loaded = {
                    e["name"]: (e["locationOrLoadError"] or {}).get("__typename") for e in entries
                }
                # A PythonError while the code servers start (unreachable) is not final.
                if set(loaded.values()) == {"RepositoryLocation"} and len(loaded) == 2:
                    break
            except OSError:
                pass
            assert all(p.poll() is None for p in procs) and time.monotonic() < deadline, "\n".join(
                (base / log).read_text()[-3000:]
                for log in ("producer.log", "consumer.log", "webserver.log")
            )
            time.sleep(1)
        # The UI's "Materialize" of three partitions of the producer's asset: an asset
        # backfill, one range run (BackfillPolicy.single_run).
        backfill = launch_backfill(
            url, {"assetSelection": [{"path": ["events"]}], "partitionNames": DAYS}
        )
        procs.append(
            start(
                [str(bin_dir / "dagster-daemon"), "run", "-w", "workspace.yaml"],
                project,
                env,
                base / "daemon.log",
            )  # fmt: skip
        )
        daemon = procs[-1]

        def settled() -> bool:
            assert daemon.poll() is None, (base / "daemon.log").read_text()[-3000:]
            totals = [r for r in instance.get_runs() if r.job_name == TOTALS_JOB]
            return len(totals) >= 3 and all(r.status in DONE for r in instance.get_runs())

        deadline = time.monotonic() + 360
        while not settled():
            assert time.monotonic() < deadline, "not settled; runs: " + str(
                [(r.job_name, r.status.value, dict(r.tags)) for r in instance.get_runs()]
            )
            time.sleep(2)
        # One more sensor interval: nothing else may be launched.
        time.sleep(8)
        yield dict(instance=instance, backfill=backfill, topic=topic, kafka=kafka_conf)
    finally:
        for proc in reversed(procs):
            stop(proc)
        if saved is None:
            os.environ.pop("SHUFFLE_DAGSTER_PG_URL", None)
        else:
            os.environ["SHUFFLE_DAGSTER_PG_URL"] = saved
        print(f"the two teams' stack was up for {time.monotonic() - started:.0f} s; logs in {base}")


def test_a_ui_backfill_across_two_locations_on_postgres_heals_and_consumes_each_day_once(teams):
    instance = teams["instance"]
    all_runs = instance.get_runs()
    (first,) = [r for r in all_runs if r.tags.get(BACKFILL_TAG) == teams["backfill"]]
    assert location_of(first) == PRODUCER and first.asset_selection == {EVENTS}
    assert (first.tags[RANGE_START_TAG], first.tags[RANGE_END_TAG]) == (DAYS[0], DAYS[2])
    assert first.status == DagsterRunStatus.FAILURE
    assert first.tags[FAILED_WINDOWS_TAG] == DAYS[2]
    (retry,) = [r for r in all_runs if r.tags.get(RETRY_OF_TAG) == first.run_id]
    assert retry.status == DagsterRunStatus.SUCCESS and location_of(retry) == PRODUCER
    assert retry.tags[PARTITION_TAG] == DAYS[2] and RANGE_START_TAG not in retry.tags

    # Days 1-2 written by the backfill's run, day 3 by the retry: in Kafka and in Dagster.
    writers = {DAYS[0]: first.run_id, DAYS[1]: first.run_id, DAYS[2]: retry.run_id}
    log = shuffle_log(teams["topic"], kafka=teams["kafka"]).latest_by_window()
    for day, writer in writers.items():
        assert log[day].attrs["dagster_run_id"] == writer, day
        assert log[day].rows == ROWS_PER_DAY
        (record,) = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=EVENTS, asset_partitions=[day]), 1
        ).records
        assert record.run_id == writer, day

    # The consumer: once per day, from its own location, by its commit sensor, each run
    # reading its day's committed rows through the shuffle IO manager.
    consumers = [r for r in all_runs if r.job_name == TOTALS_JOB]
    assert sorted(r.tags[PARTITION_TAG] for r in consumers) == DAYS, consumers
    for run in consumers:
        assert run.status == DagsterRunStatus.SUCCESS
        assert location_of(run) == CONSUMER and run.tags[SENSOR_TAG] == "events_commits"
        (record,) = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=TOTALS, asset_partitions=[run.tags[PARTITION_TAG]]), 1
        ).records
        md = record.asset_materialization.metadata
        assert md["users"].value == 5
        assert md["clicks"].value == sum(range(ROWS_PER_DAY))
    (day_three,) = [r for r in consumers if r.tags[PARTITION_TAG] == DAYS[2]]
    retry_end = instance.get_run_record_by_id(retry.run_id).end_time
    assert instance.get_run_record_by_id(day_three.run_id).create_timestamp.timestamp() > retry_end

    # All six partitions materialized; nothing else was launched.
    assert set(DAYS) <= instance.get_materialized_partitions(EVENTS)
    assert set(DAYS) <= instance.get_materialized_partitions(TOTALS)
    assert len(all_runs) == 1 + 1 + 3, [(r.job_name, dict(r.tags)) for r in all_runs]
