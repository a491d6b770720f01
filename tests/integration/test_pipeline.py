"""The reference pipeline through Dagster's harness, on the real broker, Spark and instance."""

import datetime as dt
import zipfile

import pandas as pd
import pyarrow.parquet as pq
import pytest
from dagster import instance_for_test

from assets.flights_data import flights_csv_path
from assets.pipeline import (
    FLIGHTS_BY_TAILNUM,
    MISSING_TAILNUM,
    carrier_hourly,
    daily_utilization,
    delay_streaks,
)
from jobs.pipeline import commit_sensor, consumer_jobs, producer_job, region_sensor
from orchestration.definitions import build_defs
from orchestration.local_runner import LocalRunner
from orchestration.resources import (
    FaultInjection,
    KafkaResource,
    ShuffleResource,
    WarehouseResource,
)
from orchestration.sensors import RETRY_OF_TAG, RETRY_TAG
from orchestration.shuffle import read_shuffle, shuffle_log

pytestmark = pytest.mark.integration

D1, D2, D3 = "2013-01-01", "2013-01-02", "2013-01-03"
STREAKS_JOB = "aircraft_delay_streaks_job"


@pytest.fixture(scope="module")
def stack(bootstrap, spark, tmp_path_factory, unique_module):
    topic = unique_module("flights.by_tailnum")
    resources = dict(
        kafka=KafkaResource(bootstrap_servers=bootstrap),
        warehouse=WarehouseResource(path=str(tmp_path_factory.mktemp("warehouse"))),
        shuffle=ShuffleResource(
            topic=topic,
            key=["tailnum"],
            num_partitions=4,
            max_parallelism=64,
            event_time="sched_dep",
        ),
    )
    with instance_for_test() as instance:
        faulty = LocalRunner(
            build_defs(faults=FaultInjection(fail=[f"aircraft_delay_streaks:{D2}"]), **resources),
            instance,
        )
        clean = LocalRunner(build_defs(**resources), instance)
        # The producer backfill of two days: one run, one committed shuffle run per day.
        backfill = faulty.run(producer_job.name, partition_range=(D1, D2))
        first_requests = faulty.tick(commit_sensor.name)
        first_cursor = faulty.cursors[commit_sensor.name]
        faulty.execute_requests(commit_sensor.name, first_requests)
        yield dict(
            instance=instance,
            faulty=faulty,
            clean=clean,
            topic=topic,
            backfill=backfill,
            first_requests=first_requests,
            first_cursor=first_cursor,
            resources=resources,
        )


@pytest.fixture(scope="module")
def unique_module():
    import uuid

    return lambda prefix: f"{prefix}-{uuid.uuid4().hex[:10]}"


def outcomes(runner, job=None, partition=None):
    return [
        o
        for o in runner.outcomes
        if (job is None or o.job_name == job) and (partition is None or o.partition == partition)
    ]


def read_output(stack, asset, day):
    path = stack["resources"]["warehouse"].day_path(asset, day)
    return pq.read_table(path).to_pandas()


def test_backfill_is_one_run_with_one_commit_per_day(stack, kafka_conf):
    assert stack["backfill"].success
    runs = stack["instance"].get_run_ids()
    producer_runs = [
        r for r in runs if stack["instance"].get_run_by_id(r).job_name == producer_job.name
    ]
    assert len(producer_runs) == 1
    log = shuffle_log(stack["topic"], kafka_conf)
    assert sorted(log.latest_by_window()) == [D1, D2]
    result = stack["backfill"].result
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks == {"rows_balance": True, "flights_by_tailnum_layout": True}
    md = result.asset_materializations_for_node("flights_by_tailnum")
    assert any(m.asset_key == FLIGHTS_BY_TAILNUM and m.metadata["rows"].value > 0 for m in md)
    assert any(m.asset_key == MISSING_TAILNUM for m in md)


def test_commit_sensor_requests_each_consumer_once_per_complete_day(stack):
    reqs = stack["first_requests"]
    assert sorted((r.job_name, r.partition_key) for r in reqs) == sorted(
        (j.name, d) for j in consumer_jobs for d in (D1, D2)
    )
    assert len({r.run_key for r in reqs}) == len(reqs)


def test_region_isolation_and_retry(stack):
    faulty, clean = stack["faulty"], stack["clean"]
    (failed,) = [o for o in faulty.outcomes if not o.success]
    assert (failed.job_name, failed.partition) == (STREAKS_JOB, D2)
    # Everything else of that day, and the other day, succeeded.
    for job in consumer_jobs:
        for day in (D1, D2):
            if (job.name, day) != (STREAKS_JOB, D2):
                assert [o.success for o in outcomes(faulty, job.name, day)] == [True]
    # The failed-region sensor asks for exactly that job and day, tagged as a retry.
    (req,) = faulty.failure_requests(region_sensor.name, failed.run_id)
    assert (req.job_name, req.partition_key) == (STREAKS_JOB, D2)
    assert req.tags[RETRY_TAG] == "1" and req.tags[RETRY_OF_TAG] == failed.run_id
    (retry,) = clean.execute_requests(region_sensor.name, [req])
    assert retry.success
    # The producer was not re-run.
    jobs = [stack["instance"].get_run_by_id(r).job_name for r in stack["instance"].get_run_ids()]
    assert jobs.count(producer_job.name) == 1
    # After the retry, the output equals a clean computation.
    expected = expected_streaks(D2)
    got = read_output(stack, "aircraft_delay_streaks", D2)
    assert_frames_equal(got, expected, ["tailnum"])


def test_failed_region_sensor_gives_up_after_max_retries(stack):
    faulty = stack["faulty"]
    o = faulty.run(STREAKS_JOB, partition=D2, tags={RETRY_TAG: "2"})
    assert not o.success
    assert faulty.failure_requests(region_sensor.name, o.run_id) == []


def test_repeated_tick_requests_nothing_new(stack):
    runner = stack["clean"]
    runner.cursors[commit_sensor.name] = stack["first_cursor"]
    again = runner.tick(commit_sensor.name)
    # The same cursor gives the same run keys, which already ran: nothing new is launched.
    assert [] == [r for r in again if r.run_key not in {x.run_key for x in stack["first_requests"]}]
    assert runner.execute_requests(commit_sensor.name, again) == []
    # And the cursor it returns asks for nothing at all.
    assert runner.tick(commit_sensor.name) == []


def test_outputs_equal_pandas_from_the_csv(stack):
    for day in (D1, D2):
        assert_frames_equal(
            read_output(stack, "aircraft_daily_utilization", day),
            expected_utilization(day),
            ["tailnum"],
        )
        assert_frames_equal(
            read_output(stack, "aircraft_delay_streaks", day), expected_streaks(day), ["tailnum"]
        )
        assert_frames_equal(
            read_output(stack, "carrier_hourly_otp", day), expected_otp(day), ["carrier", "hour"]
        )


def test_consumer_checks_pass(stack):
    for o in stack["faulty"].outcomes + stack["clean"].outcomes:
        if o.success and o.job_name != producer_job.name:
            evals = o.result.get_asset_check_evaluations()
            assert [e.passed for e in evals] == [True], (o.job_name, o.partition)


def test_layout_check(stack):
    from assets.pipeline import flights_by_tailnum_layout

    result = flights_by_tailnum_layout(
        kafka=stack["resources"]["kafka"], shuffle=stack["resources"]["shuffle"]
    )
    assert result.passed, result.metadata
    wrong = ShuffleResource(
        topic=stack["topic"],
        key=["carrier"],
        num_partitions=4,
        max_parallelism=64,
        event_time="sched_dep",
    )
    assert not flights_by_tailnum_layout(kafka=stack["resources"]["kafka"], shuffle=wrong).passed


def test_prekeyed_consumers_have_no_exchange(stack, spark, kafka_conf):
    df = read_shuffle(spark, stack["topic"], kafka_conf, windows=[D1])
    run_id = shuffle_log(stack["topic"], kafka_conf).visible(windows=[D1])[0].run_id
    for out in (
        daily_utilization(spark, stack["topic"], kafka_conf, run_id),
        delay_streaks(df),
    ):
        plan = out._jdf.queryExecution().executedPlan().toString()
        assert "Exchange" not in plan, plan
    assert "Exchange" in carrier_hourly(df)._jdf.queryExecution().executedPlan().toString()


def test_new_producer_run_relaunches_consumers_with_new_data(stack, spark, kafka_conf):
    runner = stack["clean"]
    warehouse = stack["resources"]["warehouse"]
    first = runner.run(producer_job.name, partition=D3)
    assert first.success
    first_commit = shuffle_log(stack["topic"], kafka_conf).visible(windows=[D3])[0].run_id
    runner.execute_requests(commit_sensor.name, runner.tick(commit_sensor.name))
    before = read_output(stack, "aircraft_daily_utilization", D3)
    # Corrected data for D3: drop every American Airlines flight, then produce D3 again.
    path = warehouse.day_path("flights", D3)
    table = pq.read_table(path).to_pandas()
    corrected = table[table["carrier"] != "AA"]
    pq.write_table(
        pq.read_table(path).from_pandas(corrected, preserve_index=False), f"{path}/part-0.parquet"
    )
    second = runner.run(
        producer_job.name, partition=D3, asset_selection=[FLIGHTS_BY_TAILNUM, MISSING_TAILNUM]
    )
    assert second.success
    reqs = [r for r in runner.tick(commit_sensor.name) if not runner._already_ran(r.run_key)]
    assert sorted((r.job_name, r.partition_key) for r in reqs) == sorted(
        (j.name, D3) for j in consumer_jobs
    )
    new_commit = shuffle_log(stack["topic"], kafka_conf).visible(windows=[D3])[0].run_id
    assert new_commit != first_commit
    assert {r.tags["shuffle/commit"] for r in reqs} == {new_commit}
    assert all(o.success for o in runner.execute_requests(commit_sensor.name, reqs))
    after = read_output(stack, "aircraft_daily_utilization", D3)
    assert after["flights"].sum() == corrected["tailnum"].notna().sum()
    assert after["flights"].sum() < before["flights"].sum()
    assert not after.duplicated(["tailnum", "day"]).any()
    log = shuffle_log(stack["topic"], kafka_conf)
    assert len([c for c in log.commits if c.window == D3]) == 2


# --- an independent computation from the CSV ------------------------------------------


def csv_day(day: str) -> pd.DataFrame:
    with zipfile.ZipFile(flights_csv_path()) as z, z.open("flights.csv") as f:
        df = pd.read_csv(f)
    d = dt.date.fromisoformat(day)
    df = df[(df.year == d.year) & (df.month == d.month) & (df.day == d.day)]
    return df[df.tailnum.notna()].copy()


def expected_utilization(day: str) -> pd.DataFrame:
    df = csv_day(day)
    g = df.groupby("tailnum")
    out = pd.DataFrame(
        {
            "flights": g.size(),
            "cancelled": g["dep_time"].apply(lambda s: s.isna().sum()),
            "air_minutes": g["air_time"].sum(min_count=1),
            "distance_miles": g["distance"].sum(),
            "avg_dep_delay": g["dep_delay"].mean(),
        }
    ).reset_index()
    out["day"] = dt.date.fromisoformat(day)
    return out


def expected_streaks(day: str) -> pd.DataFrame:
    df = csv_day(day).sort_values(["sched_dep_time", "flight", "origin"], kind="stable")
    rows = []
    for tailnum, legs in df.groupby("tailnum", sort=False):
        flags = [bool(x > 15) if pd.notna(x) else False for x in legs["dep_delay"]]
        best = cur = 0
        for f in flags:
            cur = cur + 1 if f else 0
            best = max(best, cur)
        first = flags.index(True) + 1 if True in flags else None
        rows.append((tailnum, len(flags), best, first))
    out = pd.DataFrame(rows, columns=["tailnum", "legs", "max_delayed_streak", "first_delayed_leg"])
    out["day"] = dt.date.fromisoformat(day)
    return out


def expected_otp(day: str) -> pd.DataFrame:
    df = csv_day(day)
    df["hour"] = df["sched_dep_time"] // 100
    g = df.groupby(["carrier", "hour"])
    out = pd.DataFrame(
        {
            "flights": g.size(),
            "arrivals_known": g["arr_delay"].count(),
            "on_time": g["arr_delay"].apply(lambda s: (s <= 15).sum()),
        }
    ).reset_index()
    out["on_time_pct"] = (100.0 * out["on_time"] / out["arrivals_known"]).where(
        out["arrivals_known"] > 0
    )
    out["day"] = dt.date.fromisoformat(day)
    return out.drop(columns=["on_time"])


def assert_frames_equal(got: pd.DataFrame, want: pd.DataFrame, keys: list[str]) -> None:
    cols = [c for c in want.columns]
    assert sorted(got.columns) == sorted(cols), (sorted(got.columns), sorted(cols))
    got = got[cols].sort_values(keys).reset_index(drop=True)
    want = want[cols].sort_values(keys).reset_index(drop=True)
    assert len(got) == len(want)
    for c in cols:
        g, w = got[c], want[c]
        if c == "day":
            assert list(pd.to_datetime(g).dt.date) == list(w), c
        elif pd.api.types.is_float_dtype(w) or pd.api.types.is_float_dtype(g):
            gv, wv = g.astype("float64").to_numpy(), w.astype("float64").to_numpy()
            both_nan = pd.isna(gv) & pd.isna(wv)
            close = abs(gv - wv) < 1e-9
            assert (both_nan | close).all(), c
        else:
            assert [None if pd.isna(x) else x for x in g] == [
                None if pd.isna(x) else x for x in w
            ], c


def test_failed_producer_day_does_not_block_other_days(stack, kafka_conf):
    d4, d5 = "2013-01-04", "2013-01-05"
    runner = LocalRunner(
        build_defs(faults=FaultInjection(fail=[f"flights_by_tailnum:{d5}"]), **stack["resources"]),
        stack["instance"],
    )
    failed = runner.run(producer_job.name, partition_range=(d4, d5))
    assert not failed.success
    windows = shuffle_log(stack["topic"], kafka_conf).latest_by_window()
    assert d4 in windows and d5 not in windows
    # Consumers of the day that did commit go ahead.
    reqs = [r for r in runner.tick(commit_sensor.name) if r.partition_key in (d4, d5)]
    assert sorted((r.job_name, r.partition_key) for r in reqs) == sorted(
        (j.name, d4) for j in consumer_jobs
    )
    # The failed-region sensor re-runs the producer for the failed day only.
    (req,) = runner.failure_requests(region_sensor.name, failed.run_id)
    assert (req.job_name, req.partition_key) == (producer_job.name, d5)
    (retry,) = stack["clean"].execute_requests(region_sensor.name, [req])
    assert retry.success
    assert d5 in shuffle_log(stack["topic"], kafka_conf).latest_by_window()
