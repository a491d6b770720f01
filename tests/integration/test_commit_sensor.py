"""The commit sensor against the real broker: 400 windows committed through the commit log's
I/O (no Spark job), its cursor's size, re-runs, and what its observations carry."""

import datetime as dt
import logging
import time
import uuid

import pyarrow as pa
import pytest
from dagster import (
    DailyPartitionsDefinition,
    Definitions,
    TableSchema,
    asset,
    build_sensor_context,
    define_asset_job,
    instance_for_test,
)

from orchestration import (
    KafkaResource,
    KafkaShuffleIOManager,
    shuffle_commit_sensor,
    shuffle_metadata,
)
from orchestration.sensors import KEPT_LAUNCHES
from orchestration.shuffle import Commit, KafkaClient, Layout
from orchestration.shuffle.core.commitlog import PartitionRange, to_micros
from orchestration.shuffle.kafka.commitlog import create_or_check, write_commit

pytestmark = pytest.mark.integration

START = dt.date(2023, 1, 1)
SCHEMA = pa.schema([pa.field("user_id", pa.string()), pa.field("clicks", pa.int64())])
# A cursor's size whatever the number of windows (see tests/unit/test_sensor_cursor.py).
BOUND = 64 * KEPT_LAUNCHES + 64


def window(i: int) -> str:
    return (START + dt.timedelta(days=i)).isoformat()


def commit_of(i: int, rows: int = 10) -> Commit:
    end = dt.datetime.combine(START + dt.timedelta(days=i + 1), dt.time(), dt.UTC)
    return Commit(
        run_id=str(uuid.uuid4()),
        window=window(i),
        committed_at=dt.datetime.now(dt.UTC).isoformat(),
        tasks=((0, 0),),
        partitions={0: PartitionRange(0, 0, rows, 1)},
        rows=rows,
        bytes=100,
        frames=1,
        complete_until=to_micros(end),
    )


def sensor_project(topic: str, bootstrap: str) -> Definitions:
    """A shuffle asset whose commits the tests write directly, a consumer of it and the
    commit sensor ``events_commits`` that launches the consumer's job."""
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

    consumer = define_asset_job("user_totals_job", selection=[user_totals])
    return Definitions(
        assets=[events_by_user, user_totals],
        jobs=[consumer],
        sensors=[shuffle_commit_sensor("events_commits", asset=events_by_user, jobs=[consumer])],
        resources={
            "shuffle_io": KafkaShuffleIOManager(kafka=KafkaResource(bootstrap_servers=bootstrap))
        },
    )


def test_cursor_stays_bounded_over_400_windows(bootstrap, kafka_conf):
    topic = f"sensor.events-{uuid.uuid4().hex[:8]}"
    kafka = KafkaClient(kafka_conf)
    create_or_check(kafka, Layout(topic, ("user_id",), 2, 8, SCHEMA))
    defs = sensor_project(topic, bootstrap)

    def tick(instance, cursor):
        with build_sensor_context(
            instance=instance, cursor=cursor, resources=defs.resources, definitions=defs
        ) as ctx:
            return defs.resolve_sensor_def("events_commits")(ctx)

    commits = [commit_of(i, rows=10 + i) for i in range(400)]
    started = time.monotonic()
    with instance_for_test() as instance:
        for c in commits[:10]:
            write_commit(kafka, topic, c)
        first = tick(instance, None)
        assert [r.partition_key for r in first.run_requests] == [window(i) for i in range(10)]
        for c in commits[10:]:
            write_commit(kafka, topic, c)
        second = tick(instance, first.cursor)
        assert len(second.run_requests) == 390
        small, large = len(first.cursor.encode()), len(second.cursor.encode())
        print(f"cursor bytes: 10 windows {small}, 400 windows {large}")
        assert small < large <= BOUND

        # Each commit is observed with the metadata a materialization carries.
        obs = {o.partition: o.metadata for o in second.asset_events}
        assert len(obs) == 390
        md = obs[window(399)]
        assert md["dagster/row_count"].value == md["dagster/partition_row_count"].value == 409
        schema = md["dagster/column_schema"].value
        assert isinstance(schema, TableSchema)
        assert [(c.name, c.type) for c in schema.columns] == [
            ("user_id", "string"),
            ("clicks", "bigint"),
        ]
        assert md["dagster/uri"].value == f"kafka://{bootstrap}/{topic}?window={window(399)}"
        assert md["shuffle/run_id"].value == commits[399].run_id
        assert md["shuffle/complete"].value is True
        # Its progress as numbers Dagster plots: the run's watermark (its window's end),
        # the shuffle's, and the delay from the window's end to the commit.
        end = commits[399].complete_until / 1e6
        assert md["shuffle/watermark_epoch_s"].value == end
        assert md["shuffle/shuffle_watermark_epoch_s"].value == end
        committed = dt.datetime.fromisoformat(commits[399].committed_at).timestamp()
        assert md["shuffle/commit_delay_s"].value == pytest.approx(committed - end, abs=0.01)

        # A repeated tick is a no-op.
        again = tick(instance, second.cursor)
        assert list(again.run_requests) == [] and again.cursor == second.cursor
        # A re-run of the oldest window, long pruned from the cursor, launches again.
        rerun = commit_of(0, rows=5)
        write_commit(kafka, topic, rerun)
        third = tick(instance, second.cursor)
        (req,) = third.run_requests
        assert (req.partition_key, req.tags["shuffle/commit"]) == (window(0), rerun.run_id)
        assert req.run_key == f"user_totals_job:{window(0)}:{rerun.run_id}"
        assert len(third.cursor.encode()) <= BOUND
        assert [o.partition for o in third.asset_events] == [window(0)]
        # A run a Dagster run wrote is shown by its materialization: launched, not observed.
        recorded = commit_of(1, rows=7)
        recorded.attrs["dagster_run_id"] = "a-dagster-run"
        write_commit(kafka, topic, recorded)
        fourth = tick(instance, third.cursor)
        assert [r.partition_key for r in fourth.run_requests] == [window(1)]
        assert list(fourth.asset_events) == []
    print(f"400 commits written and read in {time.monotonic() - started:.1f}s")


class _Kept(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_an_unreadable_commit_record_is_skipped_and_reported(bootstrap, kafka_conf):
    """A commit record cut short between two good ones: the sensor launches for both good
    windows, skips the bad record with a warning naming its key and offset, and goes on."""
    from confluent_kafka import Producer

    from orchestration.shuffle.core.commitlog import commit_topic

    topic = f"sensor.bad-{uuid.uuid4().hex[:8]}"
    kafka = KafkaClient(kafka_conf)
    create_or_check(kafka, Layout(topic, ("user_id",), 2, 8, SCHEMA))
    defs = sensor_project(topic, bootstrap)
    write_commit(kafka, topic, commit_of(0))
    producer = Producer(kafka_conf)
    producer.produce(commit_topic(topic), key=b"commit/r-bad", value=b'{"run_id": "r-bad", "wi')
    producer.flush(30)
    write_commit(kafka, topic, commit_of(2))
    with instance_for_test() as instance:
        with build_sensor_context(
            instance=instance, cursor=None, resources=defs.resources, definitions=defs
        ) as ctx:
            kept = _Kept()
            ctx.log.addHandler(kept)  # what the tick's log in the UI shows
            result = defs.resolve_sensor_def("events_commits")(ctx)
    assert [r.partition_key for r in result.run_requests] == [window(0), window(2)]
    warned = [m for m in kept.messages if "unreadable record" in m]
    assert warned and "'commit/r-bad' at partition 0 offset 2" in warned[0], kept.messages
