"""What the failed-region sensor re-runs for each way a shuffle asset's run can fail, what the
backfill schedule requests, and which consumers the commit sensor leaves to automation: the
decisions alone, on an in-memory Dagster instance (assets that fail on purpose, no Kafka)."""

import datetime as dt

import pytest
from dagster import (
    AutomationCondition,
    BackfillPolicy,
    DagsterEventType,
    DagsterInstance,
    DailyPartitionsDefinition,
    Definitions,
    SkipReason,
    asset,
    build_run_status_sensor_context,
    build_schedule_context,
    build_sensor_context,
    define_asset_job,
    mem_io_manager,
)

from orchestration import (
    FAILED_WINDOWS_TAG,
    failed_region_sensor,
    shuffle_backfill_schedule,
    shuffle_metadata,
)
from orchestration.definition import RANGE_END_TAG, RANGE_START_TAG, RETRY_OF_TAG, RETRY_TAG
from orchestration.sensors import consecutive_windows, consumer_selection
from orchestration.shuffle import ShuffleOptionError

D1, D2, D3, D4 = "2024-03-01", "2024-03-02", "2024-03-03", "2024-03-04"
daily = DailyPartitionsDefinition(start_date=D1)
# (asset, partition) pairs that fail; set per test.
FAILING: set[tuple[str, str]] = set()


def fail_if_asked(name: str, context) -> int:
    for key in context.partition_keys:
        if (name, key) in FAILING:
            raise RuntimeError(f"{name} {key} fails on purpose")
    return 1


@asset(partitions_def=daily, backfill_policy=BackfillPolicy.single_run())
def raw(context) -> int:
    return fail_if_asked("raw", context)


# Dependencies without inputs: a run of one asset needs nothing stored by another run.
@asset(
    partitions_def=daily,
    deps=[raw],
    backfill_policy=BackfillPolicy.single_run(),
    metadata=shuffle_metadata(key="user_id", num_partitions=2, window_column="day"),
)
def events(context) -> int:
    return fail_if_asked("events", context)


@asset(partitions_def=daily, deps=[events])
def clicks(context) -> int:
    return fail_if_asked("clicks", context)


@asset(partitions_def=daily)
def unrelated(context) -> int:
    return fail_if_asked("unrelated", context)


events_job = define_asset_job("events_job", selection=[events])
other_job = define_asset_job("other_job", selection=[raw, events])
region = failed_region_sensor("failed", jobs=[events_job], assets=[events], max_retries=2)
legacy = failed_region_sensor("legacy", jobs=[events_job])
defs = Definitions(
    assets=[raw, events, clicks, unrelated],
    jobs=[events_job, other_job],
    sensors=[region, legacy],
    resources={"io_manager": mem_io_manager},
)
repo = defs.get_repository_def()


@pytest.fixture
def instance():
    FAILING.clear()
    with DagsterInstance.ephemeral() as inst:
        yield inst
    FAILING.clear()


def run(instance, *, job=None, selection=None, partition=None, window=None, tags=None):
    all_tags = dict(tags or {})
    if window is not None:
        all_tags.update({RANGE_START_TAG: window[0], RANGE_END_TAG: window[1]})
    job_def = defs.resolve_job_def(job) if job else defs.resolve_implicit_global_asset_job_def()
    result = job_def.execute_in_process(
        instance=instance,
        partition_key=partition,
        asset_selection=selection,
        tags=all_tags,
        raise_on_error=False,
        resources={"io_manager": mem_io_manager},
    )
    return instance.get_run_by_id(result.run_id)


def evaluate(instance, dagster_run, sensor=region):
    event = (
        instance.get_records_for_run(dagster_run.run_id, of_type=DagsterEventType.RUN_FAILURE)
        .records[-1]
        .event_log_entry.dagster_event
    )
    context = build_run_status_sensor_context(
        sensor_name=sensor.name,
        dagster_event=event,
        dagster_instance=instance,
        dagster_run=dagster_run,
        repository_def=repo,
    ).for_run_failure()
    return sensor(context)


def test_an_asset_backfill_range_run_is_retried_for_its_failed_windows(instance):
    FAILING.add(("events", D3))
    failed = run(instance, selection=[events.key], window=(D1, D4))
    assert failed.job_name == "__ASSET_JOB"
    (request,) = evaluate(instance, failed)
    assert request.job_name == "failed_retry" and request.asset_selection == [events.key]
    assert request.partition_key is None
    assert (request.tags[RANGE_START_TAG], request.tags[RANGE_END_TAG]) == (D1, D4)
    assert request.run_key == f"retry:{failed.run_id}:{D1}...{D4}"
    assert request.tags[RETRY_TAG] == "1" and request.tags[RETRY_OF_TAG] == failed.run_id

    # The IO manager's tag names the windows that did not commit: those alone, neighbours
    # as one range run.
    instance.add_run_tags(failed.run_id, {FAILED_WINDOWS_TAG: f"{D2},{D3},{D1}"})
    (request,) = evaluate(instance, failed)
    assert (request.tags[RANGE_START_TAG], request.tags[RANGE_END_TAG]) == (D1, D3)
    instance.add_run_tags(failed.run_id, {FAILED_WINDOWS_TAG: f"{D1},{D3}"})
    requests = evaluate(instance, failed)
    assert [(r.partition_key, r.run_key) for r in requests] == [
        (D1, f"retry:{failed.run_id}:{D1}"),
        (D3, f"retry:{failed.run_id}:{D3}"),
    ]


def test_job_runs_are_retried_by_their_job_and_others_by_the_retry_job(instance):
    FAILING.add(("events", D2))
    failed = run(instance, job="events_job", partition=D2)
    (request,) = evaluate(instance, failed)
    assert (request.job_name, request.partition_key, request.asset_selection) == (
        "events_job",
        D2,
        None,
    )
    # A job not given to the sensor (a schedule's, say) that targets the shuffle: the
    # planned materializations say so; the retry runs the shuffle asset alone.
    failed = run(instance, job="other_job", partition=D2)
    (request,) = evaluate(instance, failed)
    assert (request.job_name, request.partition_key, request.asset_selection) == (
        "failed_retry",
        D2,
        [events.key],
    )
    # The same run for the sensor given only jobs: not one of them.
    assert evaluate(instance, run(instance, job="events_job", partition=D2), legacy)


def test_a_sensor_given_jobs_only_reads_a_range_from_the_jobs_partitions(instance):
    FAILING.add(("events", D2))
    failed = run(instance, job="events_job", window=(D1, D3))
    (request,) = evaluate(instance, failed, legacy)
    assert (request.job_name, request.asset_selection, request.partition_key) == (
        "events_job",
        None,
        None,
    )
    assert (request.tags[RANGE_START_TAG], request.tags[RANGE_END_TAG]) == (D1, D3)


def test_what_is_not_the_shuffles_failure_is_not_retried(instance):
    FAILING.add(("unrelated", D1))
    assert evaluate(instance, run(instance, selection=[unrelated.key], partition=D1)) is None
    # The shuffle committed; the consumer in the same run failed.
    FAILING.clear()
    FAILING.add(("clicks", D1))
    skip = evaluate(instance, run(instance, selection=[events.key, clicks.key], partition=D1))
    assert isinstance(skip, SkipReason) and "no window of the shuffle" in skip.skip_message
    # Its upstream failed, so the shuffle's step never ran.
    FAILING.clear()
    FAILING.add(("raw", D1))
    skip = evaluate(instance, run(instance, selection=[raw.key, events.key], partition=D1))
    assert isinstance(skip, SkipReason) and "not the shuffle's" in skip.skip_message


def test_retries_stop_at_the_limit_and_leave_dagsters_own_retries_alone(instance):
    FAILING.add(("events", D1))
    failed = run(instance, selection=[events.key], partition=D1, tags={RETRY_TAG: "2"})
    skip = evaluate(instance, failed)
    assert isinstance(skip, SkipReason) and "after 2 retries" in skip.skip_message
    failed = run(instance, selection=[events.key], partition=D1)
    instance.add_run_tags(failed.run_id, {"dagster/will_retry": "true"})
    skip = evaluate(instance, instance.get_run_by_id(failed.run_id))
    assert isinstance(skip, SkipReason) and "Dagster's run retries" in skip.skip_message


def test_a_retry_carries_the_runs_own_tags_only(instance):
    FAILING.add(("events", D1))
    failed = run(instance, selection=[events.key], partition=D1, tags={"team": "growth"})
    (request,) = evaluate(instance, failed)
    assert request.tags == {"team": "growth", RETRY_TAG: "1", RETRY_OF_TAG: failed.run_id}


def test_neighbouring_windows_group_in_their_ranges_order():
    order = [D1, D2, D3, D4]
    assert consecutive_windows([D4, D1, D2], order) == [[D1, D2], [D4]]
    assert consecutive_windows(["x", D3], order) == [[D3], ["x"]]


def test_the_sensor_needs_something_to_watch_and_one_partitions_definition():
    with pytest.raises(ShuffleOptionError, match="jobs=.*assets="):
        failed_region_sensor("nothing")

    @asset
    def unpartitioned() -> int:
        return 1

    with pytest.raises(ShuffleOptionError, match="different partitions definitions"):
        failed_region_sensor("mixed", assets=[events, unpartitioned])


def test_the_backfill_schedule_requests_one_range_run_of_the_trailing_partitions():
    nightly = shuffle_backfill_schedule(
        "nightly", asset=events, partitions=3, cron_schedule="0 2 * * *"
    )
    one = shuffle_backfill_schedule(
        "daily", asset=events, partitions=1, cron_schedule="0 2 * * *", job=events_job
    )
    assert nightly.job_name == "nightly_job"
    schedules = Definitions(assets=[raw, events], schedules=[nightly, one]).get_repository_def()

    def tick(schedule, time):
        with build_schedule_context(
            scheduled_execution_time=time, repository_def=schedules
        ) as context:
            return schedule.evaluate_tick(context)

    (request,) = tick(nightly, dt.datetime(2024, 3, 10, 2, tzinfo=dt.UTC)).run_requests
    assert request.partition_key is None and request.run_key == "2024-03-07...2024-03-09"
    assert (request.tags[RANGE_START_TAG], request.tags[RANGE_END_TAG]) == (
        "2024-03-07",
        "2024-03-09",
    )
    (request,) = tick(one, dt.datetime(2024, 3, 10, 2, tzinfo=dt.UTC)).run_requests
    assert request.partition_key == "2024-03-09" and RANGE_START_TAG not in request.tags
    # Near the partitions' start there are fewer; before it, none.
    (request,) = tick(nightly, dt.datetime(2024, 3, 2, 2, tzinfo=dt.UTC)).run_requests
    assert request.partition_key == D1
    assert tick(nightly, dt.datetime(2024, 3, 1, 2, tzinfo=dt.UTC)).skip_message


def test_the_backfill_schedule_refuses_what_cannot_run_as_a_range():
    @asset(partitions_def=daily, metadata=shuffle_metadata(key="k", num_partitions=2))
    def no_column() -> int:
        return 1

    @asset(metadata=shuffle_metadata(key="k", num_partitions=2, window_column="day"))
    def unpartitioned() -> int:
        return 1

    with pytest.raises(ShuffleOptionError, match="'shuffle/window_column'"):
        shuffle_backfill_schedule("s", asset=no_column, partitions=3, cron_schedule="0 2 * * *")
    with pytest.raises(ShuffleOptionError, match="no time-window partitions"):
        shuffle_backfill_schedule("s", asset=unpartitioned, partitions=3, cron_schedule="@daily")


def test_the_commit_sensor_leaves_automated_consumers_to_their_condition():
    @asset(partitions_def=daily, deps=[events], automation_condition=AutomationCondition.eager())
    def automated() -> int:
        return 1

    jobs = [
        define_asset_job("automated_job", selection=[automated]),
        define_asset_job("mixed_job", selection=[automated, clicks]),
        define_asset_job("clicks_job", selection=[clicks]),
    ]
    project = Definitions(assets=[raw, events, clicks, automated], jobs=jobs)
    with build_sensor_context(definitions=project) as context:
        assert consumer_selection(context, "automated_job") == []
        assert consumer_selection(context, "mixed_job") == [clicks.key]
        assert consumer_selection(context, "clicks_job") is None
