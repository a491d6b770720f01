"""The sensors that watch a shuffle, against the real broker and a Dagster instance, commits
written through the commit log's I/O (no Spark): a stall caught by a tick while nothing is
committed, the watermark asset materialized by progress alone, each consumer's lag judged
from its materializations, and a consumer group's lag observed."""

import datetime as dt
import uuid

import pyarrow as pa
import pytest
from dagster import (
    AssetCheckSeverity,
    AssetMaterialization,
    DailyPartitionsDefinition,
    Definitions,
    asset,
    build_sensor_context,
    instance_for_test,
)

from orchestration import (
    KafkaResource,
    KafkaShuffleIOManager,
    shuffle_consumer_checks,
    shuffle_lag_sensor,
    shuffle_metadata,
    shuffle_progress_sensor,
    shuffle_watermark_asset,
)
from orchestration.shuffle import Commit, KafkaClient, Layout
from orchestration.shuffle.core.commitlog import PartitionRange, to_micros
from orchestration.shuffle.kafka.commitlog import create_or_check, write_commit

pytestmark = pytest.mark.integration

START = dt.date(2023, 1, 1)
SCHEMA = pa.schema([pa.field("user_id", pa.string()), pa.field("clicks", pa.int64())])
NOW = dt.datetime.now(dt.UTC)


def window(i: int) -> str:
    return (START + dt.timedelta(days=i)).isoformat()


def commit_of(i: int, committed: dt.datetime, run_id: str | None = None) -> Commit:
    end = dt.datetime.combine(START + dt.timedelta(days=i + 1), dt.time(), dt.UTC)
    return Commit(
        run_id=run_id or str(uuid.uuid4()),
        window=window(i),
        committed_at=committed.isoformat(),
        tasks=((0, 0),),
        partitions={0: PartitionRange(0, 0, 10, 1)},
        rows=10,
        bytes=100,
        frames=1,
        complete_until=to_micros(end),
    )


@pytest.fixture
def project(bootstrap, kafka_conf):
    """A shuffle whose commits the tests write, a daily consumer of it, an unpartitioned one
    (a stream's running totals), the watermark asset and the two watching sensors."""
    topic = f"watch.events-{uuid.uuid4().hex[:8]}"
    kafka = KafkaClient(kafka_conf)
    create_or_check(kafka, Layout(topic, ("user_id",), 2, 8, SCHEMA))
    daily = DailyPartitionsDefinition(start_date=window(0))

    @asset(
        partitions_def=daily,
        io_manager_key="shuffle_io",
        metadata=shuffle_metadata(key="user_id", num_partitions=2, max_parallelism=8, topic=topic),
    )
    def events_by_user():
        raise AssertionError("never materialized here: the commits are written directly")

    @asset(partitions_def=daily, deps=[events_by_user])
    def user_totals() -> None: ...

    @asset(deps=[events_by_user])
    def running_totals() -> None: ...

    group = f"watch.group-{uuid.uuid4().hex[:8]}"
    watermark = shuffle_watermark_asset(events_by_user)
    defs = Definitions(
        assets=[events_by_user, user_totals, running_totals, watermark],
        asset_checks=shuffle_consumer_checks(events_by_user, [user_totals, running_totals]),
        sensors=[
            shuffle_progress_sensor("progress", asset=events_by_user, watermark_asset=watermark),
            shuffle_lag_sensor(
                "lag",
                asset=events_by_user,
                consumers=[user_totals, running_totals],
                groups={running_totals.key: group},
            ),
        ],
        resources={
            "shuffle_io": KafkaShuffleIOManager(kafka=KafkaResource(bootstrap_servers=bootstrap))
        },
    )
    with instance_for_test() as instance:
        yield dict(
            defs=defs,
            instance=instance,
            kafka=kafka,
            conf=kafka_conf,
            topic=topic,
            group=group,
            consumers=(user_totals, running_totals),
            watermark=watermark,
        )


def tick(project, name, cursor=None):
    defs = project["defs"]
    with build_sensor_context(
        instance=project["instance"], cursor=cursor, resources=defs.resources, definitions=defs
    ) as ctx:
        return defs.resolve_sensor_def(name)(ctx)


def split(events):
    checks = [e for e in events if hasattr(e, "check_name")]
    return checks, [e for e in events if not hasattr(e, "check_name")]


def test_a_stall_is_caught_by_a_tick_and_only_progress_renews_the_watermark(project):
    kafka, topic = project["kafka"], project["topic"]
    # Three days, the last committed three days ago; nothing since.
    for i in range(3):
        write_commit(kafka, topic, commit_of(i, NOW - dt.timedelta(days=5 - i)))
    first = tick(project, "progress")
    (check,), (mark,) = split(first.asset_events)
    assert (check.check_name, check.passed) == ("shuffle_watermark_progress", False)
    # 72 hours without progress: past twice the 30 hours a daily shuffle is allowed.
    assert check.severity == AssetCheckSeverity.ERROR
    assert check.metadata["idle_s"].value > 71 * 3600
    assert mark.asset_key == project["watermark"].key
    day_3_end = dt.datetime.combine(START + dt.timedelta(days=3), dt.time(), dt.UTC)
    assert mark.metadata["shuffle/watermark_epoch_s"].value == day_3_end.timestamp()
    # The watermark asset is what the freshness policy judges: a day and a quarter to warn.
    policy = project["watermark"].freshness_policy
    assert policy.warn_window.to_timedelta() == dt.timedelta(hours=30)
    assert policy.fail_window.to_timedelta() == dt.timedelta(hours=60)

    # Nothing changed: the next tick reports nothing.
    assert list(tick(project, "progress", first.cursor).asset_events) == []
    # A re-run of an old day is no progress: no new verdict, no new watermark.
    write_commit(kafka, topic, commit_of(0, NOW))
    again = tick(project, "progress", first.cursor)
    assert list(again.asset_events) == []
    # A new day is: the check passes and the watermark asset is materialized again.
    write_commit(kafka, topic, commit_of(3, NOW))
    moved = tick(project, "progress", again.cursor)
    (check,), (mark,) = split(moved.asset_events)
    assert check.passed
    assert mark.metadata["shuffle/window"].value == window(3)


def test_each_consumers_lag_and_a_groups_are_judged_from_what_it_consumed(project):
    kafka, topic, instance = project["kafka"], project["topic"], project["instance"]
    user_totals, running_totals = project["consumers"]
    commits = [commit_of(i, NOW - dt.timedelta(days=3)) for i in range(3)]
    for c in commits:
        write_commit(kafka, topic, c)
    # The daily consumer read days 0 and 1 (it says which runs); the stream ran after all.
    for c in commits[:2]:
        instance.report_runless_asset_event(
            AssetMaterialization(
                user_totals.key,
                partition=c.window,
                metadata={"shuffle/runs_read": {c.run_id: c.window}},
            )
        )
    instance.report_runless_asset_event(AssetMaterialization(running_totals.key))
    # The stream's group read 2 of 5 records of the data topic's partition 0.
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer(project["conf"])
    for _ in range(5):
        producer.produce(topic, value=b"x", partition=0)
    producer.flush(30)
    consumer = Consumer({**project["conf"], "group.id": project["group"]})
    consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    consumer.close()

    first = tick(project, "lag")
    checks, observed = split(first.asset_events)
    verdicts = {e.asset_key: e for e in checks}
    late = verdicts[user_totals.key]
    # Day 2 waited three days for the daily consumer: past twice the 6 hours allowed.
    assert (late.check_name, late.passed, late.severity) == (
        "shuffle_consumer_lag",
        False,
        AssetCheckSeverity.ERROR,
    )
    assert late.metadata["lag_windows"].value == 1
    assert late.metadata["windows_behind"].value == [window(2)]
    assert window(2) in late.description
    # The stream, recorded after every commit, is not behind.
    assert verdicts[running_totals.key].passed
    assert verdicts[running_totals.key].metadata["lag_windows"].value == 0
    (group,) = observed
    assert group.asset_key == running_totals.key
    assert group.metadata["kafka/consumer_group"].value == project["group"]
    assert group.metadata["kafka/offsets_behind_total"].value == 3

    # Nothing changed: nothing reported. The daily consumer catches up: it passes.
    assert list(tick(project, "lag", first.cursor).asset_events) == []
    instance.report_runless_asset_event(
        AssetMaterialization(
            user_totals.key,
            partition=window(2),
            metadata={"shuffle/runs_read": {commits[2].run_id: window(2)}},
        )
    )
    caught_up = tick(project, "lag", first.cursor)
    (verdict,) = caught_up.asset_events
    assert verdict.asset_key == user_totals.key and verdict.passed
    # A re-run of day 0, after both consumers ran, is a window to consume again, for both.
    write_commit(kafka, topic, commit_of(0, dt.datetime.now(dt.UTC)))
    rerun = tick(project, "lag", caught_up.cursor)
    behind = {e.asset_key: e.metadata["lag_windows"].value for e in rerun.asset_events}
    assert behind == {user_totals.key: 1, running_totals.key: 1}
    # Committed a moment ago: within the 6 hours, so they still pass.
    assert all(e.passed for e in rerun.asset_events)
