"""Dagster runs that race, for real: a ``dagster-daemon`` on an instance kept in PostgreSQL
with the QueuedRunCoordinator and one run at a time per pool (``devstack.localpg``'s
``dagster.yaml``).

- Two runs writing the same window of a shuffle are queued at the same moment (a retry and
  a user's re-run of one day, say), for a shuffle whose asset has the library's pool
  (``shuffle_pool``) and for one without. With the pool the queue runs them one after the
  other; without it they run at once. Either way both commit, the run whose commit record
  comes last in the commit log supersedes the other, and readers see exactly that run's
  rows, never a mix. With the pool, Dagster's latest materialization of the day is that
  same run; without it, it is the run whose materialization reached the event log last,
  which nothing ties to the commit log's order, so the two can disagree.
- The daemon is killed (SIGKILL) as soon as the commit sensor has requested its consumer
  runs and started again: the sensor's next tick repeats the request (its cursor may not
  have been stored), and Dagster's run keys (``<job>:<window>:<run id>``) keep the consumer
  to one run per commit.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from dagster import AssetKey, AssetRecordsFilter, DagsterInstance, DagsterRunStatus

from devstack.localpg import dagster_yaml
from orchestration import shuffle_pool
from orchestration.shuffle import read_shuffle, shuffle_log
from tests.integration.test_ui_retries import start, stop

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(480)]

DAY = "2024-05-02"
ROWS = 40
POOLED, FREE, READS = AssetKey("pooled_events"), AssetKey("free_events"), AssetKey("reads")
DONE = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
LOCATION = "races"

PROJECT_PY = '''\
import os

import pandas as pd
from dagster import (
    AssetExecutionContext, DailyPartitionsDefinition, DefaultSensorStatus, Definitions, EnvVar,
    MaterializeResult, asset, define_asset_job, in_process_executor,
)
from pyspark.sql import DataFrame, SparkSession

from orchestration import (
    KafkaResource, KafkaShuffleIOManager, shuffle_commit_sensor, shuffle_metadata, shuffle_pool,
)
from orchestration.shuffle import shuffle_log

daily = DailyPartitionsDefinition(start_date="2024-05-01")
POOLED_TOPIC, FREE_TOPIC = os.environ["RACES_POOLED_TOPIC"], os.environ["RACES_FREE_TOPIC"]


def rows(context):
    """ROWS rows, each naming the Dagster run that wrote it."""
    start = pd.Timestamp(context.partition_key, tz="UTC")
    frame = pd.DataFrame({
        "user_id": [f"u{i % 7}" for i in range(ROWS)],
        "ts": [start + pd.Timedelta(minutes=i) for i in range(ROWS)],
        "writer": context.run.run_id,
    })
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    return spark.createDataFrame(frame)


def layout(topic):
    return shuffle_metadata(key="user_id", num_partitions=3, event_time="ts", topic=topic)


@asset(
    partitions_def=daily, io_manager_key="shuffle_io", metadata=layout(POOLED_TOPIC),
    pool=shuffle_pool(POOLED_TOPIC),
)
def pooled_events(context: AssetExecutionContext) -> DataFrame:
    return rows(context)


# The same without the library's pool: nothing keeps two writers apart.
@asset(partitions_def=daily, io_manager_key="shuffle_io", metadata=layout(FREE_TOPIC))
def free_events(context: AssetExecutionContext) -> DataFrame:
    return rows(context)


# A consumer of pooled_events' commits (no Spark: it reads the commit log).
@asset(partitions_def=daily, deps=[pooled_events])
def reads(context: AssetExecutionContext) -> MaterializeResult:
    kafka = {"bootstrap.servers": os.environ["KAFKA_BOOTSTRAP_SERVERS"]}
    commit = shuffle_log(POOLED_TOPIC, kafka=kafka).latest_by_window()[context.partition_key]
    return MaterializeResult(metadata={"run": commit.run_id, "rows": commit.rows})


reads_job = define_asset_job("reads_job", selection=[reads])
defs = Definitions(
    assets=[pooled_events, free_events, reads],
    jobs=[
        define_asset_job("pooled_job", selection=[pooled_events]),
        define_asset_job("free_job", selection=[free_events]),
        reads_job,
    ],
    sensors=[
        shuffle_commit_sensor(
            "pooled_commits", asset=pooled_events, jobs=[reads_job], minimum_interval_seconds=2,
            default_status=DefaultSensorStatus.RUNNING,
        ),
    ],
    resources={
        "shuffle_io": KafkaShuffleIOManager(
            kafka=KafkaResource(bootstrap_servers=EnvVar("KAFKA_BOOTSTRAP_SERVERS"))
        )
    },
    executor=in_process_executor,
)
'''.replace("ROWS", str(ROWS))


def _launch(env: dict, project: Path, job: str) -> None:
    exe = Path(sys.executable).with_name("dagster")
    proc = subprocess.run(
        [str(exe), "job", "launch", "-f", "project.py", "-j", job,
         "--tags", f'{{"dagster/partition": "{DAY}"}}'],
        cwd=project, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"


@pytest.fixture(scope="module")
def raced(bootstrap, kafka_conf, postgres, tmp_path_factory):
    base = tmp_path_factory.mktemp("races")
    home, project = base / "home", base / "project"
    home.mkdir()
    project.mkdir()
    (home / "dagster.yaml").write_text(dagster_yaml(max_concurrent_runs=4))
    (project / "project.py").write_text(PROJECT_PY)
    suffix = uuid.uuid4().hex[:8]
    topics = {POOLED: f"races.pooled-{suffix}", FREE: f"races.free-{suffix}"}
    pg_url = postgres(f"races_{suffix}")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "SHUFFLE_DAGSTER_PG_URL": pg_url,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "RACES_POOLED_TOPIC": topics[POOLED],
        "RACES_FREE_TOPIC": topics[FREE],
        "PYSPARK_PYTHON": sys.executable,
    }
    saved = os.environ.get("SHUFFLE_DAGSTER_PG_URL")
    os.environ["SHUFFLE_DAGSTER_PG_URL"] = pg_url
    instance = DagsterInstance.from_config(str(home))
    instance.get_run_ids(limit=1)
    # The pool's limit set ahead, as docs/guides/code-locations.md says: Dagster makes a pool's
    # default limit the first time its queue sees the pool, and does not apply it in that pass.
    exe = Path(sys.executable).with_name("dagster")
    subprocess.run(
        [str(exe), "instance", "concurrency", "set", shuffle_pool(topics[POOLED]), "1"],
        env=env, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    # Both writers of each shuffle queued before the daemon starts: it dequeues them at once.
    for job in ("pooled_job", "pooled_job", "free_job", "free_job"):
        _launch(env, project, job)
    daemon_cmd = [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-f", "project.py"]
    daemon = start(daemon_cmd, project, env, base / "daemon.log")
    restarted = None
    try:
        # Killed as soon as the commit sensor has requested a consumer run, then started again.
        deadline = time.monotonic() + 300
        while not [r for r in instance.get_runs() if r.job_name == "reads_job"]:
            assert daemon.poll() is None, (base / "daemon.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the commit sensor requested no consumer run"
            time.sleep(0.2)
        # The daemon's process alone: the runs it launched go on, as they would on a host
        # whose daemon crashed.
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait()
        restarted = start(daemon_cmd, project, env, base / "daemon2.log")

        def settled() -> bool:
            assert restarted.poll() is None, (base / "daemon2.log").read_text()[-3000:]
            runs = instance.get_runs()
            writers = [r for r in runs if r.job_name in ("pooled_job", "free_job")]
            return len(writers) == 4 and all(r.status in DONE for r in runs)

        while not settled():
            assert time.monotonic() < deadline, "not settled: " + str(
                [(r.job_name, r.status.value) for r in instance.get_runs()]
            )
            time.sleep(1)
        # Several more sensor ticks (2 s apart) after both commits: nothing more launches.
        time.sleep(10)
        yield dict(instance=instance, topics=topics, kafka=kafka_conf)
    finally:
        for proc in (restarted, daemon):
            if proc is not None:
                stop(proc)
        # What the killed daemon left behind in its process group (its code server).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(daemon.pid, signal.SIGTERM)
        if saved is None:
            os.environ.pop("SHUFFLE_DAGSTER_PG_URL", None)
        else:
            os.environ["SHUFFLE_DAGSTER_PG_URL"] = saved


def _outcome(raced, spark, key: AssetKey, job: str) -> dict:
    """Who won in Kafka, what readers read, and what Dagster shows, for one shuffle."""
    instance = raced["instance"]
    runs = [
        instance.get_run_record_by_id(r.run_id) for r in instance.get_runs() if r.job_name == job
    ]
    assert len(runs) == 2 and all(r.dagster_run.status == DagsterRunStatus.SUCCESS for r in runs)
    log = shuffle_log(raced["topics"][key], kafka=raced["kafka"])
    commits = [c for c in log.commits if c.window == DAY]
    # Both committed; the later commit record supersedes the earlier.
    assert sorted(c.attrs["dagster_run_id"] for c in commits) == sorted(
        r.dagster_run.run_id for r in runs
    )
    visible = log.latest_by_window()[DAY]
    assert visible.run_id == commits[-1].run_id
    winner = visible.attrs["dagster_run_id"]
    rows = read_shuffle(spark, raced["topics"][key], kafka=raced["kafka"], windows=[DAY])
    writers = {r["writer"] for r in rows.select("writer").collect()}
    # Exactly one run's rows, whole: never a mix.
    assert writers == {winner} and rows.count() == ROWS
    (latest,) = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=key, asset_partitions=[DAY]), 1
    ).records
    # Each materialization names its own run's commit.
    for record in instance.fetch_materializations(
        AssetRecordsFilter(asset_key=key, asset_partitions=[DAY]), 10
    ).records:
        md = record.asset_materialization.metadata
        (own,) = [c for c in commits if c.attrs["dagster_run_id"] == record.run_id]
        assert md["shuffle/run_id"].value == own.run_id
    first, second = sorted(runs, key=lambda r: r.start_time)
    return dict(
        winner=winner,
        latest=latest.run_id,
        overlapped=second.start_time < first.end_time,
        second_started=second.dagster_run.run_id,
    )


def test_pooled_writers_of_one_window_run_one_after_the_other_and_agree(raced, spark):
    out = _outcome(raced, spark, POOLED, "pooled_job")
    print(f"pooled: {out}")
    assert not out["overlapped"]
    # The run the queue let go second committed last: readers and Dagster both see it.
    assert out["winner"] == out["second_started"] == out["latest"]


def test_unpooled_writers_of_one_window_overlap_and_readers_see_one_run(raced, spark):
    out = _outcome(raced, spark, FREE, "free_job")
    print(f"without the pool: {out}; Dagster agrees with Kafka: {out['latest'] == out['winner']}")
    assert out["overlapped"]


def test_a_repeated_commit_sensor_tick_after_a_daemon_kill_launches_nothing_twice(raced):
    instance = raced["instance"]
    consumers = [r for r in instance.get_runs() if r.job_name == "reads_job"]
    keys = [r.tags["dagster/run_key"] for r in consumers]
    # One run per commit of the pooled shuffle's window (two writers: up to two commits
    # launched, one per run key), never two runs of one key.
    assert len(keys) == len(set(keys)) >= 1, keys
    commits = {
        c.run_id
        for c in shuffle_log(raced["topics"][POOLED], kafka=raced["kafka"]).commits
        if c.window == DAY
    }
    assert {r.tags["shuffle/commit"] for r in consumers} <= commits
    assert all(r.status == DagsterRunStatus.SUCCESS for r in consumers)
