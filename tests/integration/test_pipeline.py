"""The reference pipeline through Dagster's harness, on the real broker, Spark and instance."""

import datetime as dt
import zipfile

import pandas as pd
import pyarrow as pa
import pytest
from dagster import instance_for_test
from pyspark.sql import functions as F

from assets.flights_data import flights_csv_path
from assets.pipeline import (
    FLIGHTS_BY_TAILNUM,
    MISSING_TAILNUM,
    PANDAS_CONSUMERS,
    ROW_CONSUMERS,
    FaultInjection,
    carrier_hourly,
    daily_utilization,
    delay_streaks,
)
from assets.warehouse import WarehouseResource
from devstack.runner import PARENT_RUN_TAG, RETRY_NUMBER_TAG, LocalRunner
from jobs.definitions import build_defs
from jobs.pipeline import COMMIT_SENSOR, CONSUMER_JOBS, PRODUCER_JOB, REGION_SENSOR
from orchestration import FAILED_WINDOWS_TAG, KafkaResource
from orchestration.definition import RETRY_OF_TAG, RETRY_TAG
from orchestration.shuffle import (
    plan_shuffle_read,
    read_shuffle,
    read_table,
    runs_read,
    shuffle_log,
)

pytestmark = pytest.mark.integration

D1, D2, D3 = "2013-01-01", "2013-01-02", "2013-01-03"
STREAKS_JOB = "aircraft_delay_streaks_job"


@pytest.fixture(scope="module")
def stack(bootstrap, spark, s3, unique_module):
    topic = unique_module("flights.by_tailnum")
    # The warehouse is on the local S3 server: every output, the queue-mode enrichment's
    # files and the running totals' streaming checkpoint go through s3a:// and pyarrow.fs.
    resources = dict(
        kafka=KafkaResource(bootstrap_servers=bootstrap),
        warehouse=WarehouseResource(path=s3("warehouse")),
    )

    def defs(*faults):
        return build_defs(
            topic=topic,
            num_partitions=4,
            max_parallelism=64,
            resources={**resources, "faults": FaultInjection(fail=list(faults))},
        )

    with instance_for_test() as instance:
        faulty = LocalRunner(defs(f"aircraft_delay_streaks:{D2}"), instance)
        clean = LocalRunner(defs(), instance)
        # The producer backfill of two days: one run, one committed shuffle run per day.
        backfill = faulty.run(PRODUCER_JOB, partition_range=(D1, D2))
        first_requests = faulty.tick(COMMIT_SENSOR)
        first_cursor = faulty.cursors[COMMIT_SENSOR]
        faulty.execute_requests(COMMIT_SENSOR, first_requests)
        # The one consumer run that failed, retried as Dagster's run retries would.
        (failed,) = [o for o in faulty.outcomes if not o.success]
        retry = clean.retry(failed)
        yield dict(
            instance=instance,
            faulty=faulty,
            clean=clean,
            topic=topic,
            backfill=backfill,
            first_requests=first_requests,
            first_cursor=first_cursor,
            resources=resources,
            defs=defs,
            failed=failed,
            retry=retry,
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
    warehouse = stack["resources"]["warehouse"]
    return warehouse.read_table(warehouse.day_path(asset, day)).to_pandas()


def test_backfill_is_one_run_with_one_commit_per_day(stack, kafka_conf):
    backfill = stack["backfill"]
    assert backfill.success
    # One Dagster run for the range committed exactly one shuffle run per day.
    log = shuffle_log(stack["topic"], kafka=kafka_conf)
    mine = [c for c in log.commits if c.attrs.get("dagster_run_id") == backfill.run_id]
    assert sorted(c.window for c in mine) == [D1, D2]
    result = stack["backfill"].result
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks == {
        "rows_balance": True,
        "shuffle_layout": True,
        "shuffle_rows": True,
        "shuffle_window_readable": True,
        "shuffle_event_times_in_window": True,
        "shuffle_watermark_progress": True,
    }
    # One materialization per day, each with its own committed run, rows and watermark.
    md = {
        m.partition: m.metadata
        for m in result.asset_materializations_for_node("flights_by_tailnum")
        if m.asset_key == FLIGHTS_BY_TAILNUM
    }
    assert sorted(md) == [D1, D2]
    for day in (D1, D2):
        (commit,) = [c for c in mine if c.window == day]
        assert md[day]["shuffle/run_id"].value == commit.run_id
        assert md[day]["rows"].value == commit.rows > 0
        assert md[day]["shuffle/watermark"].value == commit.effective_watermark / 1e6
        # As numbers the plots draw: the run's watermark, and the shuffle's as this day's
        # commit left it (the range's days are recorded together, after both committed).
        assert md[day]["shuffle/watermark_epoch_s"].value == commit.effective_watermark / 1e6
        assert md[day]["shuffle/shuffle_watermark_epoch_s"].value == (
            commit.effective_watermark / 1e6
        )
        assert md[day]["shuffle/event_time_max_epoch_s"].value < commit.effective_watermark / 1e6
        # 2013's days were committed years after they ended.
        assert md[day]["shuffle/commit_delay_s"].value > 3e8
    assert md[D1]["rows"].value != md[D2]["rows"].value
    missing = result.asset_materializations_for_node("flights_missing_tailnum")
    assert {m.partition for m in missing} == {D1, D2}


def test_commit_sensor_requests_each_consumer_once_per_complete_day(stack):
    reqs = stack["first_requests"]
    assert sorted((r.job_name, r.partition_key) for r in reqs) == sorted(
        (j, d) for j in CONSUMER_JOBS for d in (D1, D2)
    )
    assert len({r.run_key for r in reqs}) == len(reqs)


def test_region_isolation_and_retry(stack):
    faulty, failed, retry = stack["faulty"], stack["failed"], stack["retry"]
    assert (failed.job_name, failed.partition) == (STREAKS_JOB, D2)
    # Everything else of that day, and the other day, succeeded.
    for job in CONSUMER_JOBS:
        for day in (D1, D2):
            if (job, day) != (STREAKS_JOB, D2):
                assert [o.success for o in outcomes(faulty, job, day)] == [True]
    # Dagster's run retry re-runs exactly that job and day (emulated here as the daemon would).
    assert (retry.job_name, retry.partition) == (STREAKS_JOB, D2)
    assert retry.tags[RETRY_NUMBER_TAG] == "1" and retry.tags[PARENT_RUN_TAG] == failed.run_id
    assert retry.success
    # Only that job was re-run for the failure: never the producer.
    instance = stack["instance"]
    children = [
        instance.get_run_by_id(r)
        for r in instance.get_run_ids()
        if instance.get_run_by_id(r).tags.get(PARENT_RUN_TAG) == failed.run_id
    ]
    assert [r.job_name for r in children] == [STREAKS_JOB]
    # After the retry, the output equals a clean computation.
    expected = expected_streaks(D2)
    got = read_output(stack, "aircraft_delay_streaks", D2)
    assert_frames_equal(got, expected, ["tailnum"])


def test_consumer_retries_stop_at_max_retries(stack):
    faulty = stack["faulty"]
    o = faulty.run(STREAKS_JOB, partition=D2, tags={RETRY_NUMBER_TAG: "2"})
    assert not o.success
    assert faulty.retry(o) is None


def test_repeated_tick_requests_nothing_new(stack):
    first_keys = {r.run_key for r in stack["first_requests"]}
    runner = LocalRunner(stack["defs"](), stack["instance"])
    runner.cursors[COMMIT_SENSOR] = stack["first_cursor"]
    # A tick from the first tick's cursor never requests those runs again (other tests may
    # commit new runs, which it may request).
    assert not {r.run_key for r in runner.tick(COMMIT_SENSOR)} & first_keys
    # A tick from no cursor gives the same run keys for the same commits; they already ran,
    # so nothing is launched.
    fresh = LocalRunner(stack["defs"](), stack["instance"])
    again = [r for r in fresh.tick(COMMIT_SENSOR) if r.run_key in first_keys]
    assert again  # D2's first run is never superseded in this module
    assert fresh.execute_requests(COMMIT_SENSOR, again) == []
    # And the cursor it returns asks for nothing at all.
    assert fresh.tick(COMMIT_SENSOR) == []


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
        if o.success and o.job_name in CONSUMER_JOBS:
            evals = {e.check_name: e.passed for e in o.result.get_asset_check_evaluations()}
            assert evals == {"rows_read_match_commit": True, "shuffle_consumer_lag": True}, (
                o.job_name,
                o.partition,
            )


def test_each_consumer_records_its_lag(stack, kafka_conf):
    # The commit sensor launched every consumer of D1, then every consumer of D2: when a
    # consumer read D1, D2 was complete and not read yet.
    log = shuffle_log(stack["topic"], kafka=kafka_conf)
    for o in stack["faulty"].outcomes + [stack["retry"]]:
        if not o.success or o.job_name not in CONSUMER_JOBS:
            continue
        name = o.job_name.removesuffix("_job")
        (md,) = [m.metadata for m in o.result.asset_materializations_for_node(name)]
        commit = log.visible(windows=[o.partition])[0]
        assert md["shuffle/runs_read"].value == {commit.run_id: o.partition}
        assert md["shuffle/rows_read"].value == commit.rows
        assert md["shuffle/lag_windows"].value == (1 if o.partition == D1 else 0), o.job_name
        # Seconds from the day's commit to its reading: a few, in this test.
        assert 0 <= md["shuffle/lag_s"].value < 600
    # The shuffle itself is not observed by its readers (input metadata would be): its
    # plots draw each commit once, from its materialization.
    observed = stack["instance"].fetch_observations(FLIGHTS_BY_TAILNUM, limit=100).records
    assert not [r for r in observed if "shuffle/topic_read" in r.asset_observation.metadata]
    assert not [r for r in observed if "shuffle/runs" in r.asset_observation.metadata]


def test_the_shuffle_and_its_consumers_are_watched(stack):
    from dagster import AssetCheckSeverity, build_sensor_context

    from assets.pipeline import flights_pipeline
    from jobs.pipeline import LAG_SENSOR, PROGRESS_SENSOR
    from orchestration import shuffle_progress_sensor

    defs, instance = stack["defs"](), stack["instance"]

    def tick(sensor, cursor=None):
        with build_sensor_context(
            instance=instance, cursor=cursor, resources=defs.resources, definitions=defs
        ) as ctx:
            return sensor(ctx)

    # Every reader is judged: the per-day consumers read both days; the running totals and
    # the enrichment (launched by their schedule and their own sensor) read none yet, but
    # the days committed minutes ago, within the 6 hours a daily window may wait.
    lag = tick(defs.resolve_sensor_def(LAG_SENSOR))
    verdicts = {e.asset_key.to_user_string(): e for e in lag.asset_events}
    assert set(verdicts) == {
        *(job.removesuffix("_job") for job in CONSUMER_JOBS),
        "aircraft_running_totals",
        "flights_enriched",
    }
    assert all(e.passed and e.check_name == "shuffle_consumer_lag" for e in verdicts.values())
    assert verdicts["flights_enriched"].metadata["lag_windows"].value >= 2
    # A repeated tick reports nothing that did not change.
    assert list(tick(defs.resolve_sensor_def(LAG_SENSOR), lag.cursor).asset_events) == []

    # The shuffle's watermark: the check passes, and the watermark asset is materialized.
    progress = tick(defs.resolve_sensor_def(PROGRESS_SENSOR))
    (check,) = [e for e in progress.asset_events if hasattr(e, "check_name")]
    assert (check.check_name, check.passed) == ("shuffle_watermark_progress", True)
    (mark,) = [e for e in progress.asset_events if not hasattr(e, "check_name")]
    assert mark.asset_key.to_user_string() == "flights_by_tailnum_watermark"
    assert (
        mark.metadata["shuffle/watermark_epoch_s"].value
        == check.metadata["watermark_epoch_s"].value
    )
    # Nothing committed since, with a limit of a second: a tick fails the check by itself.
    pipeline = flights_pipeline(stack["topic"], num_partitions=4, max_parallelism=64)
    impatient = shuffle_progress_sensor(
        "impatient", asset=pipeline.shuffle, stall_after=dt.timedelta(seconds=1)
    )
    first = tick(impatient)
    assert [e.passed for e in first.asset_events] == [False]
    (stalled,) = first.asset_events
    assert stalled.severity == AssetCheckSeverity.ERROR  # past twice the limit
    assert "stalled" in stalled.description
    assert list(tick(impatient, first.cursor).asset_events) == []


def test_prekeyed_consumers_have_no_exchange(stack, spark, kafka_conf):
    df = read_shuffle(spark, stack["topic"], kafka=kafka_conf, windows=[D1])
    read = plan_shuffle_read(spark, stack["topic"], kafka=kafka_conf, windows=[D1])
    for out in (daily_utilization(read), delay_streaks(df)):
        plan = out._jdf.queryExecution().executedPlan().toString()
        assert "Exchange" not in plan, plan
    assert "Exchange" in carrier_hourly(df)._jdf.queryExecution().executedPlan().toString()


def test_pandas_consumers_equal_their_spark_versions(stack, spark, kafka_conf):
    # The pipeline runs two consumers on pandas (no Spark); on the same window their Spark
    # versions give exactly the same rows, nulls and doubles included.
    keys = {"aircraft_delay_streaks": ["tailnum"], "carrier_hourly_otp": ["carrier", "hour"]}
    for day in (D1, D2):
        df = read_shuffle(spark, stack["topic"], kafka=kafka_conf, windows=[day])
        table = read_table(stack["topic"], kafka=kafka_conf, windows=[day])
        assert runs_read(table) == {
            c.run_id: {"window": day, "rows": c.rows}
            for c in shuffle_log(stack["topic"], kafka=kafka_conf).visible(windows=[day])
        }
        for name, (compute, schema) in PANDAS_CONSUMERS.items():
            order = [(k, "ascending") for k in keys[name]]
            on_pandas = pa.Table.from_pandas(
                compute(table.to_pandas()), schema=schema, preserve_index=False
            ).sort_by(order)
            on_spark = ROW_CONSUMERS[name](df).toArrow().select(schema.names)
            on_spark = on_spark.cast(schema).sort_by(order)
            assert on_pandas.num_rows > 0
            assert on_pandas.equals(on_spark), (name, day)


def test_new_producer_run_relaunches_consumers_with_new_data(stack, spark, kafka_conf):
    runner = stack["clean"]
    warehouse = stack["resources"]["warehouse"]
    first = runner.run(PRODUCER_JOB, partition=D3)
    assert first.success
    first_commit = shuffle_log(stack["topic"], kafka=kafka_conf).visible(windows=[D3])[0].run_id
    runner.execute_requests(
        COMMIT_SENSOR, [r for r in runner.tick(COMMIT_SENSOR) if r.partition_key == D3]
    )
    before = read_output(stack, "aircraft_daily_utilization", D3)
    # Corrected data for D3: drop every American Airlines flight, then produce D3 again.
    # The session has read D3's flights already: the corrected file must reach it.
    path = warehouse.day_path("flights", D3)
    table = warehouse.read_table(path)
    frame = table.to_pandas()
    corrected = frame[frame["carrier"] != "AA"]
    warehouse.replace_with_table(path, table.from_pandas(corrected, preserve_index=False))
    second = runner.run(
        PRODUCER_JOB, partition=D3, asset_selection=[FLIGHTS_BY_TAILNUM, MISSING_TAILNUM]
    )
    assert second.success
    reqs = [
        r
        for r in runner.tick(COMMIT_SENSOR)
        if r.partition_key == D3 and not runner._already_ran(r.run_key)
    ]
    assert sorted((r.job_name, r.partition_key) for r in reqs) == sorted(
        (j, D3) for j in CONSUMER_JOBS
    )
    new_commit = shuffle_log(stack["topic"], kafka=kafka_conf).visible(windows=[D3])[0].run_id
    assert new_commit != first_commit
    assert {r.tags["shuffle/commit"] for r in reqs} == {new_commit}
    assert all(o.success for o in runner.execute_requests(COMMIT_SENSOR, reqs))
    after = read_output(stack, "aircraft_daily_utilization", D3)
    assert after["flights"].sum() == corrected["tailnum"].notna().sum()
    assert after["flights"].sum() < before["flights"].sum()
    assert not after.duplicated(["tailnum", "day"]).any()
    log = shuffle_log(stack["topic"], kafka=kafka_conf)
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
    # The fault lets d5's rows without a tailnum through: the shuffle refuses that day only.
    runner = LocalRunner(stack["defs"](f"flights_by_tailnum:{d5}"), stack["instance"])
    failed = runner.run(PRODUCER_JOB, partition_range=(d4, d5))
    assert not failed.success
    windows = shuffle_log(stack["topic"], kafka=kafka_conf).latest_by_window()
    assert d4 in windows and d5 not in windows
    tags = stack["instance"].get_run_by_id(failed.run_id).tags
    assert tags[FAILED_WINDOWS_TAG] == d5
    # Consumers of the day that did commit go ahead.
    reqs = [r for r in runner.tick(COMMIT_SENSOR) if r.partition_key in (d4, d5)]
    assert sorted((r.job_name, r.partition_key) for r in reqs) == sorted(
        (j, d4) for j in CONSUMER_JOBS
    )
    # The failed-region sensor re-runs the producer for the failed day only.
    (req,) = runner.failure_requests(REGION_SENSOR, failed.run_id)
    assert (req.job_name, req.partition_key) == (PRODUCER_JOB, d5)
    assert req.tags[RETRY_TAG] == "1" and req.tags[RETRY_OF_TAG] == failed.run_id
    (retry,) = stack["clean"].execute_requests(REGION_SENSOR, [req])
    assert retry.success
    assert d5 in shuffle_log(stack["topic"], kafka=kafka_conf).latest_by_window()


def test_running_totals_equal_a_batch_computation_over_visible_runs(stack, spark, kafka_conf):
    from assets.pipeline import RUNNING_TOTALS
    from jobs.pipeline import RUNNING_TOTALS_JOB

    runner = stack["clean"]

    def expected():
        visible = read_shuffle(spark, stack["topic"], kafka=kafka_conf)
        rows = visible.groupBy("tailnum").agg(
            F.count(F.lit(1)).alias("n"),
            F.sum("distance").alias("miles"),
            F.countDistinct("day").alias("days"),
        )
        return {r.tailnum: (r.n, r.miles, r.days) for r in rows.collect()}

    def got():
        warehouse = stack["resources"]["warehouse"]
        table = warehouse.read_table(f"{warehouse.root()}/{RUNNING_TOTALS}/totals").to_pandas()
        return {r.tailnum: (r.flights, r.distance_miles, r.days) for r in table.itertuples()}

    first = runner.run(RUNNING_TOTALS_JOB)
    assert first.success
    assert got() == expected()
    md = first.result.asset_materializations_for_node(RUNNING_TOTALS)[0].metadata
    # Each committed row is read once (every visible run, from the earliest).
    assert md["rows_read"].value == read_shuffle(spark, stack["topic"], kafka=kafka_conf).count()
    # A re-run of a day and a new day, then the incremental run again: still equal.
    assert runner.run(PRODUCER_JOB, partition="2013-01-06").success
    assert runner.run(
        PRODUCER_JOB, partition=D1, asset_selection=[FLIGHTS_BY_TAILNUM, MISSING_TAILNUM]
    ).success
    second = runner.run(RUNNING_TOTALS_JOB)
    assert second.success
    md = second.result.asset_materializations_for_node(RUNNING_TOTALS)[0].metadata
    assert md["micro_batches"].value >= 1
    assert md["commit_records_behind"].value == 0
    # Exactly the two new runs were read, and their bytes are those of their commits.
    log = shuffle_log(stack["topic"], kafka=kafka_conf)
    read = md["shuffle/runs_read"].value
    new_runs = [c for c in log.commits if c.run_id in set(read)]
    assert [c.window for c in new_runs] == ["2013-01-06", D1]
    assert read == {c.run_id: c.window for c in new_runs}
    # It read every complete day there is: none left behind.
    assert md["shuffle/lag_windows"].value == 0
    assert md["bytes_read"].value == sum(c.bytes for c in new_runs)
    assert got() == expected()


def test_expiry_job_removes_superseded_runs_only(stack, spark, kafka_conf, unique_module):
    from jobs.pipeline import EXPIRY_JOB

    # A topic of its own, so that no other test of this module sees runs disappear.
    topic = unique_module("flights.expiry")
    defs = build_defs(
        topic=topic,
        num_partitions=4,
        max_parallelism=64,
        resources={**stack["resources"], "faults": FaultInjection()},
    )
    runner = LocalRunner(defs, stack["instance"])
    shuffle_only = [FLIGHTS_BY_TAILNUM, MISSING_TAILNUM]
    for day in (D1, D2, D1):  # D1 twice: its first run is superseded
        assert runner.run(PRODUCER_JOB, partition=day, asset_selection=shuffle_only).success
    before = shuffle_log(topic, kafka=kafka_conf)
    superseded = {c.run_id for c in before.commits} - {c.run_id for c in before.visible()}
    assert len(superseded) == 1
    visible_rows = read_shuffle(spark, topic, kafka=kafka_conf).count()
    result = defs.resolve_job_def(EXPIRY_JOB).execute_in_process(
        instance=stack["instance"],
        run_config={"ops": {f"{EXPIRY_JOB}_expire": {"config": {"min_age_minutes": 0}}}},
    )
    assert result.success
    (obs,) = [
        e.event_specific_data.asset_observation
        for e in result.all_events
        if e.event_type_value == "ASSET_OBSERVATION"
    ]
    assert obs.asset_key == FLIGHTS_BY_TAILNUM
    assert set(obs.metadata["expired"].value) == superseded
    assert obs.metadata["bytes_freed_total"].value > 0
    assert obs.metadata["records_deleted"].value
    after = shuffle_log(topic, kafka=kafka_conf)
    assert [c.run_id for c in after.commits] == [c.run_id for c in before.visible()]
    assert read_shuffle(spark, topic, kafka=kafka_conf).count() == visible_rows


def _as_tuples(df, columns):
    out = []
    for row in df[columns].itertuples(index=False):
        out.append(
            tuple(None if pd.isna(v) else (round(v, 6) if isinstance(v, float) else v) for v in row)
        )
    return sorted(out, key=repr)


def test_queue_mode_enrichment_equals_a_batch_computation(stack, spark, kafka_conf):
    from assets.enrichment import (
        DEAD_LETTERS,
        ENRICHED,
        dead_letter_topic,
        enrich,
        flight_id,
    )
    from jobs.pipeline import ENRICHED_JOB
    from orchestration.shuffle import KafkaClient, read_queue_output, read_range

    topic = stack["topic"]
    rows = read_shuffle(spark, topic, kafka=kafka_conf, windows=[D1]).toPandas()
    rows["sched_dep"] = pd.to_datetime(rows["sched_dep"]).dt.tz_localize("UTC")
    victim = rows.sort_values(["carrier", "flight"]).iloc[0]
    poison = flight_id(victim["carrier"], victim["flight"], D1)
    hit = (rows["carrier"] == victim["carrier"]) & (rows["flight"] == victim["flight"])
    defs = build_defs(
        topic=topic,
        num_partitions=4,
        max_parallelism=64,
        resources={**stack["resources"], "faults": FaultInjection(poison_flights=[poison])},
    )
    out = LocalRunner(defs, stack["instance"]).run(ENRICHED_JOB, partition=D1)
    assert out.success
    (mat,) = [m for m in out.result.asset_materializations_for_node(ENRICHED) if m.partition == D1]
    md = {k: v.value for k, v in mat.metadata.items()}
    # More consumers than the shuffle's partitions, all of them counted.
    assert md["consumers"] == 8 > 4
    assert md["rows_out"] == len(rows) - int(hit.sum()) and md["dead_lettered"] == hit.sum()
    assert md["rejected"] >= 1 and md["accepted"] > 0
    assert sum(md["records_per_task"].values()) == md["accepted"]
    # What read_queue_output returns equals the plain batch computation over the day's
    # committed rows, without the flight made to fail.
    assert md["path"].startswith("s3a://")
    got = read_queue_output(spark, md["path"]).toPandas()
    want = enrich(rows[~hit])
    columns = [
        "tailnum",
        "carrier",
        "flight",
        "origin_name",
        "dest_name",
        "dest_tz_hours",
        "manufacturer",
        "seats",
        "plane_age_years",
        "distance_km",
        "late_arrival",
    ]
    assert len(got) == len(want)
    assert _as_tuples(got, columns) == _as_tuples(want, columns)
    assert not ((got["carrier"] == victim["carrier"]) & (got["flight"] == victim["flight"])).any()
    # The flight is in the dead-letter topic, and nowhere else; the check warns.
    dlq = dead_letter_topic(topic)
    dead = []
    kafka = KafkaClient(kafka_conf)
    with kafka.consumer() as c:
        for p, (lo, hi) in enumerate(kafka.end_offsets(dlq, 1)):
            dead.extend(read_range(c, dlq, p, lo, hi))
    import json

    values = [json.loads(m.value()) for m in dead]
    assert len(values) == hit.sum()
    assert all(
        v["carrier"] == victim["carrier"] and v["flight"] == victim["flight"] for v in values
    )
    assert all(dict(m.headers())["queue.error"].startswith(b"ValueError: injected") for m in dead)
    (check,) = [
        e for e in out.result.get_asset_check_evaluations() if e.check_name == "no_dead_letters"
    ]
    assert not check.passed and check.severity.value == "WARN"
    assert check.asset_key.path == [DEAD_LETTERS]
