"""A user's project in the Dagster UI, for real: ``dagster-webserver`` and ``dagster-daemon``
on a temporary DAGSTER_HOME, a small project of the user's own (a daily-partitioned shuffle
asset written as one run per range, another written one partition per run, a consumer under
declarative automation), and the producer run every way a user runs it: an asset backfill
and a job backfill launched with the GraphQL mutation the UI sends, and the backfill
schedule's range run. Each run fails on its third day once (a flag file the asset reads: that
day's rows get a row without a key, which the shuffle refuses to commit); the failed-region
sensor re-runs that day alone; the consumer runs once per committed window, never for the
failed one before its retry, and the commit sensor, also on, does not launch it again.

One webserver and one daemon serve every case: the backfills are launched before the daemon
starts (its backfill loop runs every 30 s, its first pass at once), so all cases run side by
side and each test checks one.
"""

import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from dagster import AssetKey, AssetRecordsFilter, DagsterInstance, DagsterRunStatus, RunsFilter

from orchestration import FAILED_WINDOWS_TAG
from orchestration.definition import RANGE_END_TAG, RANGE_START_TAG, RETRY_OF_TAG, RETRY_TAG
from orchestration.shuffle import shuffle_log

# The first test waits for the daemon's start and every case's first runs (about 80 s on an
# idle 2-core machine); the per-test default of 300 s is tight on a loaded one.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(480)]

LOCATION = "clicks"
REPOSITORY = "__repository__"
EVENTS, EVENTS_DAILY, CLICKS = AssetKey("events"), AssetKey("events_daily"), AssetKey("user_clicks")
RETRY_JOB = "events_failed_days_retry"
SCHEDULE = "events_nightly"
BACKFILL_TAG = "dagster/backfill"
PARTITION_TAG = "dagster/partition"
SENSOR_TAG = "dagster/sensor_name"
SCHEDULE_TAG = "dagster/schedule_name"
DONE = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
ASSET_BACKFILL_DAYS = ["2024-03-01", "2024-03-02", "2024-03-03"]
PER_PARTITION_DAYS = ["2024-03-11", "2024-03-12", "2024-03-13"]
JOB_BACKFILL_DAYS = ["2024-03-21", "2024-03-22", "2024-03-23"]
ROWS_PER_DAY = 20

PROJECT_PY = '''\
import datetime as dt
import os

import pandas as pd
from dagster import (
    AssetExecutionContext,
    AutomationCondition,
    AutomationConditionSensorDefinition,
    BackfillPolicy,
    DailyPartitionsDefinition,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    Definitions,
    EnvVar,
    MaterializeResult,
    asset,
    define_asset_job,
    in_process_executor,
)
from pyspark.sql import DataFrame, SparkSession

from orchestration import (
    KafkaResource,
    KafkaShuffleIOManager,
    failed_region_sensor,
    shuffle_backfill_schedule,
    shuffle_commit_sensor,
    shuffle_metadata,
)
from orchestration.shuffle import shuffle_log

daily = DailyPartitionsDefinition(start_date="2024-03-01")
RUNNING = DefaultSensorStatus.RUNNING
EVENTS_TOPIC = os.environ["CLICKS_EVENTS_TOPIC"]


def events_of(name, days):
    """ROWS events a day. A day with a flag file gets a row without a key once (the shuffle
    refuses to commit such a day), and the flag goes: the failure is transient."""
    frames = []
    for day in days:
        users = [f"user-{i % 5}" for i in range(ROWS)]
        flag = os.path.join(os.environ["CLICKS_FLAGS"], f"{name}-{day}")
        if os.path.exists(flag):
            os.remove(flag)
            users[0] = None
        start = pd.Timestamp(day, tz="UTC")
        frames.append(pd.DataFrame({
            "user_id": users,
            "day": day,
            "ts": [start + pd.Timedelta(minutes=i) for i in range(ROWS)],
            "clicks": list(range(ROWS)),
        }))
    spark = (
        SparkSession.builder.master("local[1]")
        # A short-lived driver starts in about half the time without the optimizing JIT.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    return spark.createDataFrame(pd.concat(frames))


def layout(topic):
    return shuffle_metadata(
        key="user_id", num_partitions=2, max_parallelism=8, event_time="ts", topic=topic,
        window_column="day",
    )


# Backfills of it are one run over the range.
@asset(
    partitions_def=daily,
    backfill_policy=BackfillPolicy.single_run(),
    io_manager_key="shuffle_io",
    metadata=layout(EVENTS_TOPIC),
)
def events(context: AssetExecutionContext) -> DataFrame:
    return events_of("events", context.partition_keys)


# No backfill policy: a backfill runs one partition per run.
@asset(
    partitions_def=daily,
    io_manager_key="shuffle_io",
    metadata=layout(os.environ["CLICKS_DAILY_TOPIC"]),
)
def events_daily(context: AssetExecutionContext) -> DataFrame:
    return events_of("events_daily", [context.partition_key])


# Eager, over the last three days rather than the latest one only. It reads what a consumer
# of its windows would read, the visible run of each, from the commit log (no Spark: quick).
# No backfill policy: automation launches a run per partition at once (a range would go
# through the backfill daemon, which looks every 30 s).
@asset(
    partitions_def=daily,
    deps=[events],
    automation_condition=AutomationCondition.eager().replace(
        "in_latest_time_window", AutomationCondition.in_latest_time_window(dt.timedelta(days=3))
    ),
)
def user_clicks(context: AssetExecutionContext) -> MaterializeResult:
    kafka = {"bootstrap.servers": os.environ["KAFKA_BOOTSTRAP_SERVERS"]}
    visible = shuffle_log(EVENTS_TOPIC, kafka=kafka).latest_by_window()
    windows = context.partition_keys
    return MaterializeResult(metadata={
        "windows": len(windows),
        "rows": sum(visible[w].rows for w in windows),
        "complete": all(
            visible[w].complete_through(daily.time_window_for_partition_key(w).end)
            for w in windows
        ),
    })


events_job = define_asset_job("events_job", selection=[events])
clicks_job = define_asset_job("clicks_job", selection=[user_clicks])
defs = Definitions(
    assets=[events, events_daily, user_clicks],
    jobs=[events_job, clicks_job],
    schedules=[
        shuffle_backfill_schedule(
            "events_nightly", asset=events, partitions=3, cron_schedule="* * * * *",
            default_status=DefaultScheduleStatus.RUNNING,
        )
    ],
    sensors=[
        failed_region_sensor(
            "events_failed_days", jobs=[events_job], assets=[events, events_daily],
            max_retries=1, minimum_interval_seconds=5, default_status=RUNNING,
        ),
        shuffle_commit_sensor(
            "events_commits", asset=events, jobs=[clicks_job], minimum_interval_seconds=5,
            default_status=RUNNING,
        ),
        AutomationConditionSensorDefinition(
            "clicks_automation", target=[user_clicks], minimum_interval_seconds=5,
            default_status=RUNNING,
        ),
    ],
    resources={
        "shuffle_io": KafkaShuffleIOManager(
            kafka=KafkaResource(bootstrap_servers=EnvVar("KAFKA_BOOTSTRAP_SERVERS"))
        )
    },
    # One process per run: a step's own process would start Python and Spark again.
    executor=in_process_executor,
)
'''.replace("ROWS", str(ROWS_PER_DAY))

LAUNCH_BACKFILL = """
mutation LaunchPartitionBackfill($backfillParams: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $backfillParams) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message stack }
    ... on PartitionSetNotFoundError { message }
    ... on PartitionKeysNotFoundError { message }
  }
}
"""

SCHEDULE_STATE = """
query ScheduleState($selector: ScheduleSelector!) {
  scheduleOrError(scheduleSelector: $selector) {
    __typename
    ... on Schedule { scheduleState { id status } }
  }
}
"""

STOP_SCHEDULE = """
mutation StopSchedule($id: String!) {
  stopRunningSchedule(id: $id) {
    __typename
    ... on ScheduleStateResult { scheduleState { status } }
    ... on PythonError { message }
  }
}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graphql(url: str, query: str, variables: dict) -> dict:
    """What the UI's client sends: one POST to /graphql."""
    body = json.dumps({"query": query, "variables": variables}).encode()
    request = urllib.request.Request(
        f"{url}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        out = json.load(response)
    assert not out.get("errors"), out["errors"]
    return out["data"]


def launch_backfill(url: str, params: dict) -> str:
    result = graphql(url, LAUNCH_BACKFILL, {"backfillParams": {"fromFailure": False, **params}})
    launched = result["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    return launched["backfillId"]


def start(cmd: list[str], cwd: Path, env: dict, log: Path) -> subprocess.Popen:
    out = open(log, "w")  # noqa: SIM115 - the process holds it; closed by the OS at its end
    return subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def last_days(count: int, now: dt.datetime) -> list[str]:
    """The schedule's trailing range at ``now``: the ``count`` days before today (UTC)."""
    today = now.date()
    return [(today - dt.timedelta(days=i)).isoformat() for i in range(count, 0, -1)]


@pytest.fixture(scope="module", params=os.environ.get("SHUFFLE_UI_STORAGES", "postgres").split(","))
def ui(bootstrap, kafka_conf, tmp_path_factory, request):
    """Every case on the storage a team runs a daemon and a webserver on: PostgreSQL (the
    local server, a fresh database). ``SHUFFLE_UI_STORAGES=sqlite,postgres`` runs each case
    on SQLite (Dagster's default) too; the other UI tests (test_ui.py, test_daemon.py) run on
    SQLite."""
    base = tmp_path_factory.mktemp(f"clicks_ui_{request.param}")
    home, project, flags = base / "home", base / "project", base / "flags"
    for folder in (home, project, flags):
        folder.mkdir()
    storage = ""
    if request.param == "postgres":
        url = request.getfixturevalue("postgres")(f"ui_retries_{uuid.uuid4().hex[:8]}")
        storage = f"storage:\n  postgres:\n    postgres_url: {json.dumps(url)}\n"
    (home / "dagster.yaml").write_text(
        storage
        + textwrap.dedent(
            """
            run_coordinator:
              module: dagster.core.run_coordinator
              class: QueuedRunCoordinator
              config:
                max_concurrent_runs: 6
                dequeue_interval_seconds: 1
            sensors:
              use_threads: true
              num_workers: 4
            nux:
              enabled: false
            telemetry:
              enabled: false
            """
        )
    )
    (project / "project.py").write_text(PROJECT_PY)
    # As `dagster dev` does: one code server that the webserver and the daemon share (and
    # that starts the runs), instead of one each.
    grpc_port = free_port()
    (project / "workspace.yaml").write_text(
        "load_from:\n"
        f"  - grpc_server: {{host: 127.0.0.1, port: {grpc_port}, location_name: {LOCATION}}}\n"
    )
    suffix = uuid.uuid4().hex[:8]
    topics = {EVENTS: f"clicks.events-{suffix}", EVENTS_DAILY: f"clicks.daily-{suffix}"}
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "CLICKS_FLAGS": str(flags),
        "CLICKS_EVENTS_TOPIC": topics[EVENTS],
        "CLICKS_DAILY_TOPIC": topics[EVENTS_DAILY],
        "PYSPARK_PYTHON": sys.executable,
    }
    # The schedule ticks at the next minute: its range must not change day before then.
    now = dt.datetime.now(dt.UTC)
    to_midnight = (dt.datetime.combine(now.date(), dt.time(), dt.UTC) + dt.timedelta(days=1)) - now
    if to_midnight < dt.timedelta(minutes=3):
        time.sleep(to_midnight.total_seconds() + 5)
    scheduled_days = last_days(3, dt.datetime.now(dt.UTC))
    for name, day in (
        ("events", ASSET_BACKFILL_DAYS[-1]),
        ("events_daily", PER_PARTITION_DAYS[-1]),
        ("events", JOB_BACKFILL_DAYS[-1]),
        ("events", scheduled_days[-1]),
    ):
        (flags / f"{name}-{day}").touch()

    # The instance's storage is made here, once: the code server and the webserver start at
    # the same time, and each would otherwise create the same SQLite tables.
    with DagsterInstance.from_config(str(home)) as fresh:
        fresh.get_run_ids(limit=1)
        fresh.all_instigator_state()
    bin_dir = Path(sys.executable).parent
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    code_server = start(
        [str(bin_dir / "dagster"), "code-server", "start", "-f", "project.py",
         "--location-name", LOCATION, "-h", "127.0.0.1", "-p", str(grpc_port)],
        project, env, base / "code_server.log",
    )  # fmt: skip
    webserver = start(
        [str(bin_dir / "dagster-webserver"), "-w", "workspace.yaml", "-h", "127.0.0.1",
         "-p", str(port)],
        project, env, base / "webserver.log",
    )  # fmt: skip
    daemon = None
    started = time.monotonic()
    try:
        # Up, and the code location loaded (a backfill needs its partitions).
        deadline = time.monotonic() + 120
        while True:
            try:
                state = graphql(
                    url,
                    SCHEDULE_STATE,
                    {
                        "selector": {
                            "repositoryLocationName": LOCATION,
                            "repositoryName": REPOSITORY,
                            "scheduleName": SCHEDULE,
                        }
                    },
                )["scheduleOrError"]
                if state["__typename"] == "Schedule":
                    break
            except OSError:
                pass
            alive = webserver.poll() is None and code_server.poll() is None
            assert alive and time.monotonic() < deadline, "\n".join(
                (base / log).read_text()[-3000:] for log in ("code_server.log", "webserver.log")
            )
            time.sleep(1)
        repository = {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY}
        backfills = {
            # The UI's "Materialize" of partitions of an asset: an asset backfill, run by
            # Dagster's implicit asset job; one range run (BackfillPolicy.single_run).
            "asset": launch_backfill(
                url,
                {"assetSelection": [{"path": ["events"]}], "partitionNames": ASSET_BACKFILL_DAYS},
            ),
            # The same for an asset without a backfill policy: one run per partition.
            "per_partition": launch_backfill(
                url,
                {
                    "assetSelection": [{"path": ["events_daily"]}],
                    "partitionNames": PER_PARTITION_DAYS,
                },
            ),
            # A job's "Launch backfill": a job backfill, one range run of events_job.
            "job": launch_backfill(
                url,
                {
                    "selector": {
                        "partitionSetName": "events_job_partition_set",
                        "repositorySelector": repository,
                    },
                    "partitionNames": JOB_BACKFILL_DAYS,
                },
            ),
        }
        daemon = start(
            [str(bin_dir / "dagster-daemon"), "run", "-w", "workspace.yaml"],
            project, env, base / "daemon.log",
        )  # fmt: skip
        instance = DagsterInstance.from_config(str(home))

        def check_daemon():
            assert daemon.poll() is None, (base / "daemon.log").read_text()[-3000:]

        # Once the schedule has launched its run, it should launch no other (it ticks every
        # minute); the UI's "Stop schedule".
        deadline = time.monotonic() + 150
        while not instance.get_run_ids(RunsFilter(tags={SCHEDULE_TAG: SCHEDULE}), limit=1):
            check_daemon()
            assert time.monotonic() < deadline, "the schedule launched no run"
            time.sleep(1)
        stopped = graphql(url, STOP_SCHEDULE, {"id": state["scheduleState"]["id"]})
        assert stopped["stopRunningSchedule"]["__typename"] == "ScheduleStateResult", stopped
        yield dict(
            instance=instance,
            backfills=backfills,
            scheduled_days=scheduled_days,
            topics=topics,
            kafka=kafka_conf,
            check_daemon=check_daemon,
            started=started,
            base=base,
        )
    finally:
        if daemon is not None:
            stop(daemon)
        stop(webserver)
        stop(code_server)
        print(f"webserver and daemon up for {time.monotonic() - started:.0f} s; logs in {base}")


def runs(ui, **tags) -> list:
    return list(ui["instance"].get_runs(RunsFilter(tags=tags)))


def wait_for(ui, what: str, done, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        ui["check_daemon"]()
        assert time.monotonic() < deadline, f"{what}; runs: " + str(
            [(r.job_name, r.status.value, dict(r.tags)) for r in ui["instance"].get_runs()]
        )
        time.sleep(2)


def retries_of(ui, run_id: str) -> list:
    return runs(ui, **{RETRY_OF_TAG: run_id})


def latest_record(ui, key: AssetKey, day: str):
    (record,) = (
        ui["instance"]
        .fetch_materializations(AssetRecordsFilter(asset_key=key, asset_partitions=[day]), 1)
        .records
    )
    return record


def check_retried_day_three(ui, key: AssetKey, days: list[str], first: dict, retry) -> None:
    """Days 1-2 committed by their first run, day 3 by the retry alone; all three are
    materialized in Dagster, by those runs, and committed in Kafka, by those runs."""
    assert retry.status == DagsterRunStatus.SUCCESS
    assert retry.tags[PARTITION_TAG] == days[2] and RANGE_START_TAG not in retry.tags
    assert retry.tags[RETRY_TAG] == "1"
    writers = {days[0]: first[days[0]], days[1]: first[days[1]], days[2]: retry.run_id}
    assert set(days) <= ui["instance"].get_materialized_partitions(key)
    log = shuffle_log(ui["topics"][key], kafka=ui["kafka"]).latest_by_window()
    for day, writer in writers.items():
        assert latest_record(ui, key, day).run_id == writer, day
        assert log[day].attrs["dagster_run_id"] == writer, day
        assert log[day].rows == ROWS_PER_DAY


def settled_retry(ui, failed_run_id: str):
    def done():
        return any(r.status in DONE for r in retries_of(ui, failed_run_id))

    wait_for(ui, f"no retry of {failed_run_id} ended", done)
    (retry,) = retries_of(ui, failed_run_id)
    return retry


def test_an_asset_backfill_range_run_is_retried_for_its_failed_day(ui):
    days = ASSET_BACKFILL_DAYS

    def first_runs():
        return runs(ui, **{BACKFILL_TAG: ui["backfills"]["asset"]})

    wait_for(
        ui, "the backfill's run did not end", lambda: any(r.status in DONE for r in first_runs())
    )
    (first,) = first_runs()
    assert first.job_name == "__ASSET_JOB" and first.asset_selection == {EVENTS}
    assert (first.tags[RANGE_START_TAG], first.tags[RANGE_END_TAG]) == (days[0], days[2])
    assert first.status == DagsterRunStatus.FAILURE
    assert first.tags[FAILED_WINDOWS_TAG] == days[2]
    retry = settled_retry(ui, first.run_id)
    # __ASSET_JOB cannot be a sensor's target: the sensor's own job of the shuffle assets.
    assert retry.job_name == RETRY_JOB and retry.asset_selection == {EVENTS}
    check_retried_day_three(ui, EVENTS, days, {d: first.run_id for d in days}, retry)


def test_a_per_partition_asset_backfill_is_retried_for_its_failed_day(ui):
    days = PER_PARTITION_DAYS

    def first_runs():
        return runs(ui, **{BACKFILL_TAG: ui["backfills"]["per_partition"]})

    wait_for(
        ui,
        "the backfill's runs did not end",
        lambda: len(first_runs()) == 3 and all(r.status in DONE for r in first_runs()),
    )
    by_day = {r.tags[PARTITION_TAG]: r for r in first_runs()}
    assert {d: r.status for d, r in by_day.items()} == {
        days[0]: DagsterRunStatus.SUCCESS,
        days[1]: DagsterRunStatus.SUCCESS,
        days[2]: DagsterRunStatus.FAILURE,
    }
    retry = settled_retry(ui, by_day[days[2]].run_id)
    assert retry.job_name == RETRY_JOB and retry.asset_selection == {EVENTS_DAILY}
    check_retried_day_three(ui, EVENTS_DAILY, days, {d: r.run_id for d, r in by_day.items()}, retry)
    for day in days[:2]:
        assert not retries_of(ui, by_day[day].run_id)


def test_a_job_backfill_range_run_is_retried_by_its_job(ui):
    days = JOB_BACKFILL_DAYS

    def first_runs():
        return runs(ui, **{BACKFILL_TAG: ui["backfills"]["job"]})

    wait_for(
        ui, "the backfill's run did not end", lambda: any(r.status in DONE for r in first_runs())
    )
    (first,) = first_runs()
    assert first.job_name == "events_job"
    assert (first.tags[RANGE_START_TAG], first.tags[RANGE_END_TAG]) == (days[0], days[2])
    assert first.status == DagsterRunStatus.FAILURE
    retry = settled_retry(ui, first.run_id)
    assert retry.job_name == "events_job"
    check_retried_day_three(ui, EVENTS, days, {d: first.run_id for d in days}, retry)


def test_the_scheduled_range_run_is_retried_and_automation_consumes_each_window_once(ui):
    days = ui["scheduled_days"]
    (first,) = runs(ui, **{SCHEDULE_TAG: SCHEDULE})
    assert (first.tags[RANGE_START_TAG], first.tags[RANGE_END_TAG]) == (days[0], days[2])
    wait_for(
        ui,
        "the scheduled run did not end",
        lambda: runs(ui, **{SCHEDULE_TAG: SCHEDULE})[0].status in DONE,
    )
    first = ui["instance"].get_run_by_id(first.run_id)
    assert first.job_name == f"{SCHEDULE}_job" and first.status == DagsterRunStatus.FAILURE
    retry = settled_retry(ui, first.run_id)
    # A job the sensor was not given: its run is retried by the sensor's own job.
    assert retry.job_name == RETRY_JOB and retry.asset_selection == {EVENTS}
    check_retried_day_three(ui, EVENTS, days, {d: first.run_id for d in days}, retry)

    # The consumer, under an eager automation condition, read each committed day once.
    instance = ui["instance"]
    wait_for(
        ui,
        "the consumer did not materialize the scheduled days",
        lambda: set(days) <= instance.get_materialized_partitions(CLICKS),
    )
    consumer_runs = [r for r in instance.get_runs() if r.asset_selection == {CLICKS}]
    wait_for(ui, "a consumer run did not end", lambda: all(
        instance.get_run_by_id(r.run_id).status in DONE for r in consumer_runs
    ))  # fmt: skip
    consumed: dict[str, list] = {}
    for run in consumer_runs:
        assert run.tags[SENSOR_TAG] == "clicks_automation"
        if PARTITION_TAG in run.tags:
            run_days = [run.tags[PARTITION_TAG]]
        else:
            run_days = [
                d for d in days if run.tags[RANGE_START_TAG] <= d <= run.tags[RANGE_END_TAG]
            ]
        for day in run_days:
            consumed.setdefault(day, []).append(run)
    assert sorted(consumed) == days and all(len(v) == 1 for v in consumed.values()), consumed
    # Never for the failed day before its retry committed it.
    (day_three,) = consumed[days[2]]
    retry_end = instance.get_run_record_by_id(retry.run_id).end_time
    assert instance.get_run_record_by_id(day_three.run_id).create_timestamp.timestamp() > retry_end
    # Each run read committed, complete windows of the scheduled run or its retry.
    for day in days:
        md = latest_record(ui, CLICKS, day).asset_materialization.metadata
        assert md["rows"].value == ROWS_PER_DAY * md["windows"].value
        assert md["complete"].value is True
    # The commit sensor, also on, left the automated consumer to its condition.
    assert not runs(ui, **{SENSOR_TAG: "events_commits"})


def test_nothing_else_was_launched(ui):
    instance = ui["instance"]
    # The last failure (the scheduled run's) ended well over a sensor interval (5 s) ago,
    # before its retry and the consumer's last run; one more interval, for a tick in flight.
    time.sleep(5)
    wait_for(ui, "runs still going", lambda: all(r.status in DONE for r in instance.get_runs()))
    all_runs = instance.get_runs()
    retries = [r for r in all_runs if RETRY_OF_TAG in r.tags]
    assert len(retries) == 4, [(r.job_name, dict(r.tags)) for r in retries]
    # 1 range run (asset backfill) + 3 (per-partition backfill) + 1 (job backfill) + 1
    # (schedule), the 4 retries and the consumer's runs: nothing else.
    consumer = [r for r in all_runs if r.asset_selection == {CLICKS}]
    backfill = [r for r in all_runs if BACKFILL_TAG in r.tags and r not in consumer]
    schedule = [r for r in all_runs if SCHEDULE_TAG in r.tags]
    assert len(backfill) == 5 and len(schedule) == 1
    assert len(all_runs) == 5 + 1 + 4 + len(consumer)
    print(f"the module's cases settled {time.monotonic() - ui['started']:.0f} s after start")
