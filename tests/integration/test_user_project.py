"""A Dagster project of a user's own, built from the library pieces only (no flights code):
its own data, daily partitions, a shuffle keyed by ``user_id``, a per-key consumer, the
commit sensor and the shuffle checks, on the real broker, Spark and a Dagster instance."""

import datetime as dt
import json

import numpy as np
import pandas as pd
import pytest
from dagster import (
    AssetExecutionContext,
    BackfillPolicy,
    DailyPartitionsDefinition,
    Definitions,
    MaterializeResult,
    asset,
    build_sensor_context,
    define_asset_job,
    instance_for_test,
)
from pyspark.sql import DataFrame, SparkSession

from orchestration import (
    KafkaResource,
    KafkaShuffleIOManager,
    failed_region_sensor,
    shuffle_asset_checks,
    shuffle_commit_sensor,
    shuffle_metadata,
)
from orchestration.shuffle import ShuffleWindowNotFoundError, apply_per_key, shuffle_log

pytestmark = pytest.mark.integration

D1, D2, D3, D4 = "2024-03-01", "2024-03-02", "2024-03-03", "2024-03-04"
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"


def events_of(day: str, seed: int, n: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    start = pd.Timestamp(day, tz="UTC")
    return pd.DataFrame(
        {
            "user_id": [f"user-{i}" for i in rng.integers(0, 40, n)],
            "day": day,
            "ts": start + pd.to_timedelta(rng.integers(0, 86_400, n), unit="s"),
            "clicks": rng.integers(0, 5, n).astype("int64"),
        }
    )


def clicks_per_user(pdf: pd.DataFrame) -> pd.DataFrame:
    pdf = pdf.sort_values("ts")
    return pd.DataFrame(
        {
            "user_id": [pdf["user_id"].iloc[0]],
            "day": [pdf["day"].iloc[0]],
            "events": [len(pdf)],
            "clicks": [int(pdf["clicks"].sum())],
        }
    )


def make_project(topic: str, data: str, out: str, bootstrap: str, kafka=None):
    daily = DailyPartitionsDefinition(start_date=D1, end_date="2024-03-10")

    @asset(
        partitions_def=daily,
        backfill_policy=BackfillPolicy.single_run(),
        io_manager_key="shuffle_io",
        metadata=shuffle_metadata(
            key="user_id",
            num_partitions=3,
            max_parallelism=24,
            event_time="ts",
            topic=topic,
            window_column="day",
        ),
    )
    def events_by_user(context: AssetExecutionContext) -> DataFrame:
        spark = SparkSession.getActiveSession()
        return spark.read.parquet(*[f"{data}/day={d}" for d in context.partition_keys])

    @asset(partitions_def=daily)
    def user_clicks(context: AssetExecutionContext, events_by_user: DataFrame) -> MaterializeResult:
        result = apply_per_key(
            events_by_user,
            "user_id",
            clicks_per_user,
            "user_id string, day string, events long, clicks long",
        )
        rows = [r.asDict() for r in result.collect()]
        with open(f"{out}/{context.partition_key}.json", "w") as f:
            json.dump(rows, f)
        return MaterializeResult(metadata={"users": len(rows)})

    consumer_job = define_asset_job("user_clicks_job", selection=[user_clicks])
    producer_job = define_asset_job("events_job", selection=[events_by_user])
    checks = shuffle_asset_checks(events_by_user)
    defs = Definitions(
        assets=[events_by_user, user_clicks],
        asset_checks=checks,
        jobs=[producer_job, consumer_job],
        sensors=[
            shuffle_commit_sensor("events_commits", asset=events_by_user, jobs=[consumer_job]),
            failed_region_sensor("events_failed_days", jobs=[producer_job]),
        ],
        resources={
            "shuffle_io": KafkaShuffleIOManager(
                kafka=kafka or KafkaResource(bootstrap_servers=bootstrap)
            )
        },
    )
    return defs


@pytest.fixture(scope="module")
def project(bootstrap, spark, tmp_path_factory):
    import uuid

    base = tmp_path_factory.mktemp("user_project")
    data, out = base / "data", base / "out"
    out.mkdir()
    topic = f"user.events-{uuid.uuid4().hex[:8]}"

    def write_day(day: str, seed: int, n: int = 400) -> pd.DataFrame:
        frame = events_of(day, seed, n)
        path = data / f"day={day}"
        path.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(
            path / "part-0.parquet",
            index=False,
            coerce_timestamps="us",
            allow_truncated_timestamps=True,
        )
        return frame

    defs = make_project(topic, str(data), str(out), bootstrap)
    with instance_for_test() as instance:
        yield dict(defs=defs, topic=topic, write_day=write_day, out=out, instance=instance)


def run(project, job: str, *, partition=None, tags=None):
    job_def = project["defs"].resolve_job_def(job)
    return job_def.execute_in_process(
        instance=project["instance"], partition_key=partition, tags=tags or {}
    )


def expected_clicks(frame: pd.DataFrame) -> dict:
    g = frame.groupby("user_id")
    sizes, clicks = g.size(), g["clicks"].sum()
    return {u: (int(sizes[u]), int(clicks[u])) for u in sizes.index}


def output(project, day: str) -> dict:
    rows = json.loads((project["out"] / f"{day}.json").read_text())
    assert all(r["day"] == day for r in rows)
    return {r["user_id"]: (r["events"], r["clicks"]) for r in rows}


def test_user_project_end_to_end(project, kafka_conf):
    write_day, topic = project["write_day"], project["topic"]
    days = {D1: write_day(D1, 1), D2: write_day(D2, 2), D3: write_day(D3, 3), D4: write_day(D4, 4)}
    # Two days, one run each.
    for day in (D1, D2):
        result = run(project, "events_job", partition=day)
        assert result.success
        checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
        assert checks == {
            "shuffle_layout": True,
            "shuffle_rows": True,
            "shuffle_window_readable": True,
            "shuffle_event_times_in_window": True,
            "shuffle_watermark_progress": True,
        }
        # The asset returns a plain Parquet scan: the tasks read the files themselves.
        (mat,) = result.asset_materializations_for_node("events_by_user")
        assert mat.metadata["shuffle/write_path"].value == "columnar"
    # Two days in one run: one committed run per day, each with its own metadata.
    result = run(project, "events_job", tags={RANGE_START: D3, RANGE_END: D4})
    assert result.success
    mats = {
        m.partition: m.metadata for m in result.asset_materializations_for_node("events_by_user")
    }
    log = shuffle_log(topic, kafka=kafka_conf)
    assert sorted(log.latest_by_window()) == [D1, D2, D3, D4]
    for day in (D3, D4):
        commit = log.latest_by_window()[day]
        assert mats[day]["shuffle/run_id"].value == commit.run_id
        assert mats[day]["rows"].value == commit.rows == len(days[day])
        # A range run writes each day from the rows it has cached.
        assert mats[day]["shuffle/write_path"].value == "rows"
        # The window's end (midnight UTC of the next day) is declared complete.
        end = dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC) + dt.timedelta(days=1)
        assert commit.complete_until == int(end.timestamp() * 1_000_000)

    # The commit sensor asks for the consumer of every complete day, once.
    defs = project["defs"]
    sensor_def = defs.resolve_sensor_def("events_commits")
    with build_sensor_context(
        instance=project["instance"], resources=defs.resources, definitions=defs
    ) as ctx:
        tick = sensor_def(ctx)
    assert sorted(r.partition_key for r in tick.run_requests) == [D1, D2, D3, D4]
    # Each day's materialization shows its commit: the sensor observes none of them again.
    assert list(tick.asset_events) == []
    for req in tick.run_requests:
        assert run(project, req.job_name, partition=req.partition_key).success
        assert output(project, req.partition_key) == expected_clicks(days[req.partition_key])

    # New data for D2: the day is replaced, not duplicated, and the consumer sees only it.
    days[D2] = write_day(D2, 22, n=150)
    assert run(project, "events_job", partition=D2).success
    with build_sensor_context(
        instance=project["instance"],
        resources=defs.resources,
        definitions=defs,
        cursor=tick.cursor,
    ) as ctx:
        again = sensor_def(ctx)
    assert [r.partition_key for r in again.run_requests] == [D2]
    assert run(project, "user_clicks_job", partition=D2).success
    assert output(project, D2) == expected_clicks(days[D2])
    assert sum(n for n, _ in output(project, D2).values()) == 150
    assert len([c for c in shuffle_log(topic, kafka=kafka_conf).commits if c.window == D2]) == 2


def test_missing_upstream_day_is_a_clear_error(project):
    project["write_day"](D1, 1)
    assert run(project, "events_job", partition=D1).success
    result = (
        project["defs"]
        .resolve_job_def("user_clicks_job")
        .execute_in_process(
            instance=project["instance"], partition_key="2024-03-09", raise_on_error=False
        )
    )
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.error
    text = str(failure)
    assert "2024-03-09" in text and ShuffleWindowNotFoundError.__name__ in text


def test_shuffle_metadata_errors_name_the_asset_and_key():
    from orchestration.definition import shuffle_asset
    from orchestration.shuffle import ShuffleOptionError

    with pytest.raises(ShuffleOptionError, match="'shuffle/num_partitions' is required"):
        shuffle_asset("my_asset", ["my_asset"], {"shuffle/key": "user_id"})
    with pytest.raises(ShuffleOptionError, match="my_asset: unknown shuffle metadata"):
        shuffle_asset("my_asset", ["my_asset"], {"shuffle/keys": "user_id"})
    spec = shuffle_asset("a", ["grp", "a"], {"shuffle/key": ["x"], "shuffle/num_partitions": 2})
    assert spec.topic == "grp.a" and spec.spec.max_parallelism == 128
