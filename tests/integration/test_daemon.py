"""The deployed path: a real ``dagster-daemon`` runs the queue and the sensors, on an instance
kept in PostgreSQL with the QueuedRunCoordinator, as teams run Dagster.

Everything goes through Dagster's own command line on ``workspace.yaml``, as a user would
run it: two code locations, the producer team's and the consumer team's (which declares the
shuffle as an ``AssetSpec`` of the producer's asset). The producer run is launched onto the
queue from its location, the sensors are started in theirs, and the daemon launches each run
in its own process. One consumer is made to fail for the day (``SHUFFLE_INJECT_FAILURES``):
the other two succeed, Dagster's run retries re-run only that job and day, and the producer
is never run again.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from devstack.localpg import dagster_yaml
from jobs.definitions import CONSUMER_LOCATION, PRODUCER_LOCATION
from jobs.pipeline import COMMIT_SENSOR, CONSUMER_JOBS, PRODUCER_JOB, REGION_SENSOR

PARENT_TAG = "dagster/parent_run_id"

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DAY = "2013-01-03"
FAILING = "aircraft_delay_streaks"
FAILING_JOB = f"{FAILING}_job"
PARTITION_TAG = "dagster/partition"
DONE = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}


def _dagster(env: dict, location: str, *args: str) -> str:
    exe = Path(sys.executable).with_name("dagster")
    proc = subprocess.run(
        [str(exe), *args, "-w", "workspace.yaml", "-l", location],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, f"dagster {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _location(run) -> str:
    return run.remote_job_origin.repository_origin.code_location_origin.location_name


def _runs_of(instance: DagsterInstance, job: str) -> list:
    return list(instance.get_runs(RunsFilter(job_name=job)))


@pytest.mark.timeout(600)
def test_daemon_launches_consumers_and_retries_only_the_failed_region(
    bootstrap, postgres, tmp_path, unique, monkeypatch
):
    home = tmp_path / "dagster_home"
    home.mkdir()
    # Queued runs, two at a time, one at a time per pool (the shuffle's writers share one).
    (home / "dagster.yaml").write_text(dagster_yaml(max_concurrent_runs=2))
    warehouse = tmp_path / "warehouse"
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "SHUFFLE_DAGSTER_PG_URL": postgres(unique("daemon").replace("-", "_")),
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SHUFFLE_FLIGHTS_TOPIC": unique("flights.daemon"),
        "SHUFFLE_WAREHOUSE": str(warehouse),
        "SHUFFLE_INJECT_FAILURES": f"{FAILING}:{DAY}",
        "SHUFFLE_MAX_RETRIES": "1",
        "PYSPARK_PYTHON": sys.executable,
    }
    consumers = list(CONSUMER_JOBS)

    tags = f'{{"{PARTITION_TAG}": "{DAY}"}}'
    _dagster(env, PRODUCER_LOCATION, "job", "launch", "-j", PRODUCER_JOB, "--tags", tags)
    _dagster(env, CONSUMER_LOCATION, "sensor", "start", COMMIT_SENSOR)
    _dagster(env, PRODUCER_LOCATION, "sensor", "start", REGION_SENSOR)

    log = (tmp_path / "daemon.log").open("w")
    daemon = subprocess.Popen(
        [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w", "workspace.yaml"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    monkeypatch.setenv("SHUFFLE_DAGSTER_PG_URL", env["SHUFFLE_DAGSTER_PG_URL"])
    instance = DagsterInstance.from_config(str(home))
    try:

        def settled() -> bool:
            ok = [j for j in consumers if j != FAILING_JOB]
            done_ok = all(
                any(r.status == DagsterRunStatus.SUCCESS for r in _runs_of(instance, j)) for j in ok
            )
            failing = _runs_of(instance, FAILING_JOB)
            # The first run and its one retry, both failed (the fault stays on).
            return done_ok and len(failing) == 2 and all(r.status in DONE for r in failing)

        deadline = time.monotonic() + 480
        while not settled():
            assert daemon.poll() is None, "dagster-daemon exited; see daemon.log"
            assert time.monotonic() < deadline, (
                "the daemon did not settle the day in time; runs: "
                + str([(r.job_name, r.status.value) for r in instance.get_runs()])
            )
            time.sleep(3)
        # Give the retries a chance to (wrongly) go past their limit: the daemon creates a
        # retry within seconds of a failure (about 3 s here), so 8 s is ample.
        time.sleep(8)
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
        log.close()

    producer_runs = _runs_of(instance, PRODUCER_JOB)
    assert [r.status for r in producer_runs] == [DagsterRunStatus.SUCCESS]
    assert _location(producer_runs[0]) == PRODUCER_LOCATION
    for job in consumers:
        runs = _runs_of(instance, job)
        assert {r.tags.get(PARTITION_TAG) for r in runs} == {DAY}, job
        # Launched from the consumer team's location, by its commit sensor (or a retry).
        assert {_location(r) for r in runs} == {CONSUMER_LOCATION}, job
        if job != FAILING_JOB:
            assert [r.status for r in runs] == [DagsterRunStatus.SUCCESS], job
    first, retry = sorted(_runs_of(instance, FAILING_JOB), key=lambda r: r.tags.get(PARENT_TAG, ""))
    assert first.status == retry.status == DagsterRunStatus.FAILURE
    assert PARENT_TAG not in first.tags and retry.tags[PARENT_TAG] == first.run_id
    # The consumers that succeeded wrote their day; the failed one wrote nothing.
    assert (warehouse / "aircraft_daily_utilization" / f"day={DAY}").is_dir()
    assert (warehouse / "carrier_hourly_otp" / f"day={DAY}").is_dir()
    assert not (warehouse / FAILING / f"day={DAY}").exists()
