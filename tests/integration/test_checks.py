"""The shuffle checks, partition by partition, on the real broker, Spark and a Dagster instance:
with the materialization of a day, on their own for a chosen day, and against a commit record
that disagrees with the frames in Kafka."""

import dataclasses
import uuid

import numpy as np
import pandas as pd
import pytest
from dagster import (
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetSelection,
    DailyPartitionsDefinition,
    Definitions,
    MaterializeResult,
    asset,
    define_asset_job,
    instance_for_test,
)
from pyspark.sql import DataFrame, SparkSession

from orchestration import (
    KafkaResource,
    KafkaShuffleIOManager,
    shuffle_asset_checks,
    shuffle_metadata,
)
from orchestration.checks import count_run_frames
from orchestration.shuffle import KafkaClient, shuffle_log
from orchestration.shuffle.kafka.commitlog import write_commit

pytestmark = pytest.mark.integration

D1, D2 = "2024-05-01", "2024-05-02"
ROWS = {D1: 300, D2: 170}
PARTITION_TAG = "dagster/partition"


def events_of(day: str) -> pd.DataFrame:
    rng = np.random.default_rng(ROWS[day])
    n = ROWS[day]
    return pd.DataFrame(
        {
            "user_id": [f"user-{i}" for i in rng.integers(0, 30, n)],
            "ts": pd.Timestamp(day, tz="UTC") + pd.to_timedelta(rng.integers(0, 86_400, n), "s"),
            "clicks": rng.integers(0, 5, n).astype("int64"),
        }
    )


def make_defs(topic: str, bootstrap: str, *, full_read: bool = False) -> Definitions:
    daily = DailyPartitionsDefinition(start_date=D1, end_date="2024-05-10")

    @asset(
        partitions_def=daily,
        io_manager_key="shuffle_io",
        metadata=shuffle_metadata(
            key="user_id", num_partitions=3, max_parallelism=24, event_time="ts", topic=topic
        ),
    )
    def events_by_user(context: AssetExecutionContext) -> DataFrame:
        spark = SparkSession.getActiveSession()
        return spark.createDataFrame(events_of(context.partition_key))

    @asset(partitions_def=daily)
    def user_totals(events_by_user: DataFrame) -> MaterializeResult:
        return MaterializeResult(metadata={"rows": events_by_user.count()})

    return Definitions(
        assets=[events_by_user, user_totals],
        asset_checks=shuffle_asset_checks(events_by_user, full_read=full_read),
        jobs=[
            define_asset_job("produce", selection=[events_by_user]),
            # The checks alone, or with the consumer they guard: a run of a chosen partition
            # carries it in its tags, as a run launched from the UI does.
            define_asset_job("checks", selection=AssetSelection.checks_for_assets(events_by_user)),
            define_asset_job(
                "checks_then_consume",
                selection=AssetSelection.checks_for_assets(events_by_user)
                | AssetSelection.assets(user_totals),
            ),
        ],
        resources={
            "shuffle_io": KafkaShuffleIOManager(kafka=KafkaResource(bootstrap_servers=bootstrap))
        },
    )


@pytest.fixture(scope="module")
def project(bootstrap, spark):
    topic = f"checks.events-{uuid.uuid4().hex[:8]}"
    defs = make_defs(topic, bootstrap)
    with instance_for_test() as instance:
        produced = {
            day: defs.resolve_job_def("produce").execute_in_process(
                instance=instance, partition_key=day
            )
            for day in (D1, D2)
        }
        yield dict(
            defs=defs, topic=topic, instance=instance, produced=produced, bootstrap=bootstrap
        )


def run_alone(project, job: str, day: str, defs: Definitions | None = None):
    return (
        (defs or project["defs"])
        .resolve_job_def(job)
        .execute_in_process(
            instance=project["instance"], tags={PARTITION_TAG: day}, raise_on_error=False
        )
    )


def evaluations(result) -> dict:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def value(evaluation, key):
    return evaluation.metadata[key].value


def test_checks_with_a_materialization_check_its_partition(project, kafka_conf):
    log = shuffle_log(project["topic"], kafka=kafka_conf)
    for day, result in project["produced"].items():
        assert result.success
        evals = evaluations(result)
        assert {n: (e.passed, e.partition) for n, e in evals.items()} == {
            "shuffle_layout": (True, day),
            "shuffle_rows": (True, day),
            "shuffle_window_readable": (True, day),
            "shuffle_event_times_in_window": (True, day),
            # Of the asset as a whole: the watermark just advanced.
            "shuffle_watermark_progress": (True, None),
        }
        (commit,) = [c for c in log.commits if c.attrs.get("dagster_run_id") == result.run_id]
        rows = evals["shuffle_rows"]
        assert value(rows, "runs") == {
            commit.run_id: {
                "window": day,
                "rows_counted": ROWS[day],
                "rows_committed": ROWS[day],
                "passed": True,
            }
        }
        assert value(rows, "rows_counted") == value(rows, "rows_committed") == ROWS[day]
        assert value(rows, "method") == "frame headers"


def test_checks_run_alone_check_the_chosen_partition(project, kafka_conf):
    latest = shuffle_log(project["topic"], kafka=kafka_conf).latest_by_window()
    # D2 committed last: a check of D1 must still look at D1's run.
    result = run_alone(project, "checks", D1)
    assert result.success
    rows = evaluations(result)["shuffle_rows"]
    assert (rows.passed, rows.partition) == (True, D1)
    assert list(value(rows, "runs")) == [latest[D1].run_id]
    assert value(rows, "rows_counted") == ROWS[D1]
    # A day never materialized has no run to check.
    missing = run_alone(project, "checks", "2024-05-07")
    rows = evaluations(missing)["shuffle_rows"]
    assert (rows.passed, rows.partition) == (False, "2024-05-07")
    assert "window 2024-05-07: no committed run" in rows.description
    readable = evaluations(missing)["shuffle_window_readable"]
    assert (readable.passed, readable.severity) == (False, AssetCheckSeverity.ERROR)
    assert readable.description == "window 2024-05-07: no committed run"


def test_full_read_reads_the_rows_back(project):
    defs = make_defs(project["topic"], project["bootstrap"], full_read=True)
    rows = evaluations(run_alone(project, "checks", D1, defs))["shuffle_rows"]
    assert rows.passed and rows.partition == D1
    assert value(rows, "method") == "full read"
    assert value(rows, "rows_counted") == ROWS[D1]


def test_frames_missing_from_kafka_are_found(project, kafka_conf):
    commit = shuffle_log(project["topic"], kafka=kafka_conf).latest_by_window()[D1]
    kafka = KafkaClient(kafka_conf)
    assert count_run_frames(kafka, project["topic"], commit).passed
    # A committed subtask that wrote nothing the commit's offsets hold.
    phantom = dataclasses.replace(commit, tasks=(*commit.tasks, (99, 0)))
    count = count_run_frames(kafka, project["topic"], phantom)
    assert not count.passed
    assert count.rows == commit.rows  # what the frames that are there hold
    assert sum("subtask 99 attempt 0: no END frame" in p for p in count.problems) == len(
        commit.partitions
    )


def test_a_commit_record_that_disagrees_with_the_frames_fails_and_blocks(project, kafka_conf):
    topic = project["topic"]
    good = shuffle_log(topic, kafka=kafka_conf).latest_by_window()[D2]
    # The commit record of D2's run written again, claiming 7 rows more than its frames hold.
    write_commit(KafkaClient(kafka_conf), topic, dataclasses.replace(good, rows=good.rows + 7))
    assert shuffle_log(topic, kafka=kafka_conf).latest_by_window()[D2].rows == ROWS[D2] + 7

    result = run_alone(project, "checks_then_consume", D2)
    assert not result.success
    evals = evaluations(result)
    assert evals["shuffle_layout"].passed
    rows = evals["shuffle_rows"]
    assert (rows.passed, rows.partition) == (False, D2)
    assert value(rows, "rows_counted") == ROWS[D2]
    assert value(rows, "rows_committed") == ROWS[D2] + 7
    assert f"the frames hold {ROWS[D2]} rows, the commit record says {ROWS[D2] + 7}" in (
        rows.description
    )
    # Blocking: the consumer of D2 did not run.
    assert result.get_asset_materialization_events() == []
    # D1 is untouched and still passes.
    assert evaluations(run_alone(project, "checks", D1))["shuffle_rows"].passed
    # A full read finds the same.
    defs = make_defs(topic, project["bootstrap"], full_read=True)
    rows = evaluations(run_alone(project, "checks", D2, defs))["shuffle_rows"]
    assert not rows.passed and value(rows, "rows_counted") == ROWS[D2]
