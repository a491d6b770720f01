"""Queue mode on the real broker and a real SparkSession: share groups, acknowledgement,
dead letters, crashes, shuffle topics."""

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from orchestration.shuffle import (
    DeliveryPolicy,
    KafkaClient,
    QueueGroupError,
    QueueScale,
    QueueSchemaError,
    QueueStop,
    ShuffleConnectionError,
    ShuffleSpec,
    ShuffleTopicNotFoundError,
    ShuffleWriteError,
    process_queue,
    read_queue_output,
    read_range,
    read_shuffle,
    write_shuffle,
)
from orchestration.shuffle.queue.driver import RecordFeeder, set_group_configs
from orchestration.shuffle.testing import fail_write_attempts_below

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
IDS = "id long, doubled long"


def produce(conf, topic, ids, partitions=2, headers=None):
    # One record per producer batch: a share group hands out whole batches, so this lets
    # every consumer get records.
    p = Producer({**conf, "batch.num.messages": 1, "linger.ms": 0, "enable.idempotence": True})
    for i in ids:
        p.produce(topic, key=f"k{i}", value=str(i), partition=i % partitions, headers=headers or [])
    assert p.flush(30) == 0


def doubled(table):
    ids = [int(v) for v in table.column("value").to_pylist()]
    return pa.table({"id": ids, "doubled": [2 * i for i in ids]})


def dlq_messages(conf, topic, expected, timeout=20):
    out = []
    with KafkaClient(conf).consumer() as c:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        out = list(read_range(c, topic, 0, lo, hi, poll_timeout=timeout))
    assert len(out) == expected, [m.value() for m in out]
    return out


def raw_output(path):
    files = sorted(Path(path).glob("part-*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]) if files else None


class FailFirst:
    """Fails on the first delivery of any of ``flaky``, and always on any of ``poison``."""

    def __init__(self, flaky, poison):
        self.flaky, self.poison = set(flaky), set(poison)

    def __call__(self, table):
        ids = [int(v) for v in table.column("value").to_pylist()]
        deliveries = table.column("_delivery").to_pylist()
        for i, d in zip(ids, deliveries, strict=True):
            if i in self.poison:
                raise ValueError(f"poison record {i}")
            if i in self.flaky and d == 1:
                raise RuntimeError(f"flaky record {i}, first delivery")
        return doubled(table)


def test_poison_records_end_in_the_dead_letter_topic_and_flaky_ones_are_retried(
    spark, kafka_conf, unique, tmp_path
):
    topic, group = unique("q-poison"), unique("qg")
    KafkaClient(kafka_conf).ensure_topic(topic, partitions=2)
    ids = list(range(120))
    produce(kafka_conf, topic, ids, headers=[("origin", b"test")])
    poison, flaky = {7, 50}, {3, 88}
    out = tmp_path / "out"
    res = process_queue(
        spark,
        topic,
        group,
        FailFirst(flaky, poison),
        IDS,
        kafka=kafka_conf,
        output=str(out),
        scale=QueueScale(tasks=2, consumers_per_task=2, batch_size=20),
        stop=QueueStop(idle_timeout=3),
        delivery=DeliveryPolicy(max_deliveries=3, dead_letter_topic=topic + ".dlq"),
    )
    # Poison records are released until their third delivery, then dead-lettered, rejected.
    assert res.accepted == 118
    assert res.rejected == 2 and res.dead_lettered == 2
    # Every delivery the consumers saw was settled exactly once. (The broker may count a
    # delivery no function saw: records the client had fetched ahead when a consumer left
    # are released, and come back with a higher delivery count.)
    assert res.accepted + res.released + res.rejected == res.rows_in
    assert len(flaky) + len(poison) <= res.released <= len(flaky) + 2 * len(poison)
    assert res.lock_lost == 0 and res.skipped == 0
    assert sum(t["accepted"] for t in res.per_task) == 118
    # The output holds every good record once, even raw (no crash happened).
    raw = raw_output(out)
    assert sorted(raw.column("id").to_pylist()) == [i for i in ids if i not in poison]
    got = read_queue_output(spark, str(out))
    assert got.columns == ["id", "doubled", "_topic", "_partition", "_offset"]
    rows = got.collect()
    assert sorted(r.id for r in rows) == [i for i in ids if i not in poison]
    assert all(r.doubled == 2 * r.id and r._topic == topic for r in rows)
    assert all(r._partition == r.id % 2 and r._offset == r.id // 2 for r in rows)
    # Flaky records were delivered twice and kept their second delivery's rows.
    deliveries = dict(
        zip(raw.column("id").to_pylist(), raw.column("_delivery").to_pylist(), strict=True)
    )
    assert all(deliveries[i] >= 2 for i in flaky)
    # The dead-letter topic holds exactly the poison records, with their own key, value and
    # headers, and headers saying what failed where.
    dead = dlq_messages(kafka_conf, topic + ".dlq", expected=2)
    by_value = {int(m.value()): m for m in dead}
    assert set(by_value) == poison
    for i, m in by_value.items():
        h = dict(m.headers())
        assert m.key() == f"k{i}".encode()
        assert h["origin"] == b"test"
        assert h["queue.error"] == f"ValueError: poison record {i}".encode()
        assert h["queue.source.topic"] == topic.encode()
        assert int(h["queue.source.partition"]) == i % 2
        assert int(h["queue.source.offset"]) == i // 2
        assert h["queue.delivery.count"] == b"3"
        assert h["queue.group"] == group.encode()


def test_more_consumers_than_partitions_all_get_work(spark, kafka_conf, unique, tmp_path):
    topic, group = unique("q-wide"), unique("qg")
    KafkaClient(kafka_conf).ensure_topic(topic, partitions=2)
    produce(kafka_conf, topic, range(600))

    def slow(table):
        time.sleep(0.1)  # a remote call per batch
        return doubled(table)

    res = process_queue(
        spark,
        topic,
        group,
        slow,
        IDS,
        kafka=kafka_conf,
        output=str(tmp_path / "out"),
        scale=QueueScale(tasks=2, consumers_per_task=3, batch_size=5),
        stop=QueueStop(idle_timeout=3),
    )
    assert res.accepted == 600
    assert len(res.per_task) == 6
    # Six consumers on two partitions: every one of them processed records.
    assert all(t["accepted"] > 0 for t in res.per_task), res.per_task
    assert read_queue_output(spark, str(tmp_path / "out")).count() == 600


KILLED = """
import sys, threading, time
import pyarrow as pa
from orchestration.shuffle.core.commitlog import schema_to_b64
from orchestration.shuffle import DeliveryPolicy
from orchestration.shuffle.kafka.client import KafkaClient
from orchestration.shuffle.queue.executor import QueueConsumer, TaskSpec

topic, group, servers, marker, out = sys.argv[1:6]

def hang(table):
    with open(marker, "w") as f:
        f.write(str(table.num_rows))
    time.sleep(600)

spec = TaskSpec(
    topic=topic, group=group, kafka=KafkaClient({"bootstrap.servers": servers}), fn=hang,
    schema=schema_to_b64(pa.schema([("id", pa.int64()), ("doubled", pa.int64())])),
    output=out, consumers_per_task=1, delivery=DeliveryPolicy(max_deliveries=3),
    idle_timeout=120, max_seconds=None, data="arrow", batch_size=25, shuffle=False, runs=None,
)
QueueConsumer(spec, 0, 0, threading.Event()).run()
"""


def test_a_consumer_killed_mid_batch_loses_nothing(spark, kafka_conf, unique, tmp_path):
    topic, group = unique("q-kill"), unique("qg")
    KafkaClient(kafka_conf).ensure_topic(topic, partitions=2)
    produce(kafka_conf, topic, range(200))
    # A plain topic reaches its consumers through its work topic; process_queue feeds it,
    # the bare consumer below needs it fed first.
    assert RecordFeeder(topic, KafkaClient(kafka_conf), "earliest").feed() == 200
    set_group_configs(
        KafkaClient(kafka_conf),
        group,
        {
            "share.auto.offset.reset": "earliest",
            "share.isolation.level": "read_committed",
            "share.record.lock.duration.ms": "2000",
        },
    )
    out = tmp_path / "out"
    out.mkdir()
    marker = tmp_path / "acquired"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            KILLED,
            topic,
            group,
            kafka_conf["bootstrap.servers"],
            str(marker),
            str(out),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() or not marker.read_text():
            assert proc.poll() is None, "the consumer process ended on its own"
            assert time.monotonic() < deadline, "the consumer process never got records"
            time.sleep(0.1)
        acquired = int(marker.read_text())
        assert acquired > 0
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    res = process_queue(
        spark,
        topic,
        group,
        doubled,
        IDS,
        kafka=kafka_conf,
        output=str(out),
        scale=QueueScale(tasks=2),
        stop=QueueStop(idle_timeout=4),
        delivery=DeliveryPolicy(lock_seconds=2),
    )
    # Every record ends accepted with its output written, the killed batch included.
    assert res.accepted == 200 and res.rejected == 0
    assert sorted(r.id for r in read_queue_output(spark, str(out)).collect()) == list(range(200))
    raw = raw_output(out)
    # The records the killed process held came back with a second delivery.
    assert raw.column("_delivery").to_pylist().count(2) >= acquired


def rows_df(spark, n, offset=0):
    start = int(dt.datetime(2013, 1, 1, tzinfo=dt.UTC).timestamp())
    return spark.range(offset, offset + n).selectExpr(
        "concat('k', cast(id % 17 as string)) as k",
        "id",
        f"timestamp_seconds({start} + id) as ts",
    )


def shuffle_spec(topic):
    return ShuffleSpec(
        topic=topic, key=("k",), num_partitions=2, max_parallelism=16, event_time="ts"
    )


def test_shuffle_topic_only_committed_rows_are_processed(spark, kafka_conf, unique, tmp_path):
    topic, group = unique("q-sh"), unique("qg")
    spec = shuffle_spec(topic)
    # A run whose first task attempts failed after writing frames (losing attempts), ...
    with fail_write_attempts_below(1):
        first = write_shuffle(
            rows_df(spark, 1500).repartition(2), spec, kafka=kafka_conf, window="d1", frame_rows=200
        )
    # ... and a run that never committed: its frames are in the data topic.
    with pytest.raises(ShuffleWriteError), fail_write_attempts_below(99):
        write_shuffle(
            rows_df(spark, 700, offset=10_000), spec, kafka=kafka_conf, window="d2", frame_rows=200
        )

    def ids_of(table):
        # Rows arrive decoded, with the shuffle's own columns and their source record.
        assert table.column_names == [
            "k",
            "id",
            "ts",
            "_topic",
            "_partition",
            "_offset",
            "_delivery",
        ]
        time.sleep(0.05)
        return table.select(["id"]).append_column("run_partition", table.column("_partition"))

    out = tmp_path / "out"
    result: dict = {}

    def run():
        result["res"] = process_queue(
            spark,
            topic,
            group,
            ids_of,
            "id long, run_partition int",
            kafka=kafka_conf,
            output=str(out),
            # One task: the other core writes the run committed meanwhile.
            scale=QueueScale(tasks=1, consumers_per_task=3, batch_size=2),
            stop=QueueStop(idle_timeout=8),
            feed_interval=0.5,
        )

    t = threading.Thread(target=run)
    t.start()
    time.sleep(4)
    # A run committed while the queue runs is picked up.
    third = write_shuffle(
        rows_df(spark, 400, offset=20_000), spec, kafka=kafka_conf, window="d3", frame_rows=200
    )
    t.join(240)
    assert not t.is_alive()
    res = result["res"]
    got = sorted(r.id for r in read_queue_output(spark, str(out)).collect())
    want = sorted(
        r.id
        for r in read_shuffle(
            spark, topic, kafka=kafka_conf, runs=[first.run_id, third.run_id]
        ).collect()
    )
    assert got == want == list(range(1500)) + list(range(20_000, 20_400))
    assert res.fed_runs == 2 and res.rows_out == 1900
    # Frames of losing attempts, of the failed run, and WATERMARK / END frames were
    # acknowledged as not work.
    assert res.skipped > 0 and res.rejected == 0 and res.released == 0
    # The failed run is not lost either: its window, written again, is processed.
    again = write_shuffle(
        rows_df(spark, 700, offset=10_000), spec, kafka=kafka_conf, window="d2", frame_rows=200
    )
    res2 = process_queue(
        spark,
        topic,
        group,
        ids_of,
        "id long, run_partition int",
        kafka=kafka_conf,
        output=str(out),
        scale=QueueScale(tasks=1),
        stop=QueueStop(idle_timeout=3),
    )
    assert res2.fed_runs == 1 and res2.rows_out == 700
    got = sorted(r.id for r in read_queue_output(spark, str(out)).collect())
    assert got == sorted(want + list(range(10_000, 10_700)))
    assert again.run_id


# Waits out max_seconds and a group's idle time (~30 s): out of the quick loop.
@pytest.mark.slow
def test_start_latest_max_seconds_and_an_existing_group_goes_on(
    spark, kafka_conf, unique, tmp_path
):
    topic, group = unique("q-start"), unique("qg")
    KafkaClient(kafka_conf).ensure_topic(topic, partitions=2)
    produce(kafka_conf, topic, range(50))  # before the group exists
    out = str(tmp_path / "out")
    result: dict = {}

    def run():
        result["res"] = process_queue(
            spark,
            topic,
            group,
            doubled,
            IDS,
            kafka=kafka_conf,
            output=out,
            scale=QueueScale(tasks=1),
            stop=QueueStop(idle_timeout=12),
            start="latest",
        )

    t = threading.Thread(target=run)
    t.start()
    time.sleep(6)
    produce(kafka_conf, topic, range(100, 140))  # after it started
    t.join(120)
    assert result["res"].accepted == 40
    assert sorted(r.id for r in read_queue_output(spark, out).collect()) == list(range(100, 140))

    # The group goes on from where it is: only new records, and max_seconds stops early.
    produce(kafka_conf, topic, range(200, 300))

    def slow(table):
        time.sleep(0.5)
        return doubled(table)

    part = process_queue(
        spark,
        topic,
        group,
        slow,
        IDS,
        kafka=kafka_conf,
        output=out,
        scale=QueueScale(tasks=1, batch_size=10),
        stop=QueueStop(idle_timeout=3, max_seconds=3),
    )
    assert 0 < part.accepted < 100
    rest = process_queue(
        spark,
        topic,
        group,
        doubled,
        IDS,
        kafka=kafka_conf,
        output=out,
        scale=QueueScale(tasks=1),
        stop=QueueStop(idle_timeout=3),
    )
    assert part.accepted + rest.accepted == 100
    ids = sorted(r.id for r in read_queue_output(spark, out).collect())
    assert ids == list(range(100, 140)) + list(range(200, 300))


def test_bad_input_gets_clear_errors_and_loses_nothing(spark, kafka_conf, unique, tmp_path):
    out = str(tmp_path / "out")
    missing = unique("q-missing")
    with pytest.raises(ShuffleTopicNotFoundError, match=missing):
        process_queue(spark, missing, unique("qg"), doubled, IDS, kafka=kafka_conf, output=out)

    topic = unique("q-bad")
    KafkaClient(kafka_conf).ensure_topic(topic, partitions=2)
    produce(kafka_conf, topic, range(30))

    classic = unique("classic")
    c = Consumer({**kafka_conf, "group.id": classic, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    deadline = time.monotonic() + 30
    while c.poll(0.5) is None and time.monotonic() < deadline:
        pass
    c.commit(asynchronous=False)
    try:
        with pytest.raises(QueueGroupError, match=f"group '{classic}' is a"):
            process_queue(spark, topic, classic, doubled, IDS, kafka=kafka_conf, output=out)
    finally:
        c.close()

    group = unique("qg")

    def wrong(table):
        return pa.table({"id": table.column("offset"), "twice": table.column("offset")})

    with pytest.raises(QueueSchemaError, match="no column 'doubled'"):
        process_queue(
            spark,
            topic,
            group,
            wrong,
            IDS,
            kafka=kafka_conf,
            output=out,
            scale=QueueScale(tasks=1),
            stop=QueueStop(idle_timeout=3),
        )
    # The records the failed run held were released: a fixed function gets all of them.
    res = process_queue(
        spark,
        topic,
        group,
        doubled,
        IDS,
        kafka=kafka_conf,
        output=out,
        scale=QueueScale(tasks=1),
        stop=QueueStop(idle_timeout=3),
        delivery=DeliveryPolicy(lock_seconds=2),
    )
    assert res.accepted == 30
    assert read_queue_output(spark, out).count() == 30

    started = time.monotonic()
    with pytest.raises(ShuffleConnectionError):
        process_queue(
            spark,
            topic,
            group,
            doubled,
            IDS,
            kafka={"bootstrap.servers": "127.0.0.1:1"},
            output=out,
        )
    assert time.monotonic() - started < 20
    assert json.loads((tmp_path / "out" / "_queue.json").read_text())["topic"] == topic


def slow_doubled(table):
    """An I/O-bound fn: it waits as a call to a remote service would."""
    time.sleep(0.02 * table.num_rows)
    return doubled(table)


def test_two_consumers_share_one_partition_written_with_default_batching(
    spark, kafka_conf, unique, tmp_path
):
    topic = unique("q-default")
    KafkaClient(kafka_conf).ensure_topic(topic, partitions=1)
    # A producer at its defaults: the 300 records go to the broker in one or few batches,
    # which a share group would hand to one consumer whole.
    p = Producer(kafka_conf)
    for i in range(300):
        p.produce(topic, key=f"k{i}", value=str(i))
    assert p.flush(30) == 0
    out = str(tmp_path / "out")
    res = process_queue(
        spark,
        topic,
        unique("qg"),
        slow_doubled,
        IDS,
        kafka=kafka_conf,
        output=out,
        scale=QueueScale(tasks=2, batch_size=10),
        stop=QueueStop(idle_timeout=3),
    )
    assert res.accepted == 300 and res.rejected == 0 and res.skipped == 0
    # Both consumers processed records.
    per_consumer = [c["accepted"] for c in res.per_task]
    assert len(per_consumer) == 2 and min(per_consumer) > 0, per_consumer
    got = sorted(r.id for r in read_queue_output(spark, out).collect())
    assert got == list(range(300))


class SlowOnFirstDelivery:
    """Outlasts the record lock on a batch that holds a first delivery."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __call__(self, table):
        if 1 in table.column("_delivery").to_pylist():
            time.sleep(self.seconds)
        return doubled(table)


def test_acknowledgements_refused_after_the_lock_are_counted_and_the_records_come_again(
    spark, kafka_conf, unique, tmp_path
):
    # A batch that outlasts its record lock has its acknowledgements refused by the broker:
    # they are counted as lock_lost, and the records are delivered again and accepted.
    topic = unique("q-lock")
    KafkaClient(kafka_conf).ensure_topic(topic, partitions=1)
    produce(kafka_conf, topic, range(20), partitions=1)
    out = str(tmp_path / "out")
    res = process_queue(
        spark,
        topic,
        unique("qg"),
        SlowOnFirstDelivery(2.5),
        IDS,
        kafka=kafka_conf,
        output=out,
        scale=QueueScale(tasks=1, batch_size=10),
        stop=QueueStop(idle_timeout=4),
        delivery=DeliveryPolicy(lock_seconds=1),
    )
    assert res.lock_lost >= 10, res
    assert res.accepted == 20 and res.rejected == 0 and res.released == 0, res
    assert sorted(r.id for r in read_queue_output(spark, out).collect()) == list(range(20))
    raw = raw_output(out)
    # Each id was accepted on a later delivery than the first.
    later = {
        i
        for i, d in zip(
            raw.column("id").to_pylist(), raw.column("_delivery").to_pylist(), strict=True
        )
        if d > 1
    }
    assert later == set(range(20))


def test_a_work_topic_made_with_several_partitions_is_refused_by_name(kafka_conf, unique):
    from orchestration.shuffle import ShuffleLayoutError

    topic = unique("q-wp")
    client = KafkaClient(kafka_conf)
    client.ensure_topic(topic, partitions=2)
    produce(kafka_conf, topic, range(10))
    # Made elsewhere with 3 partitions: feeding it would feed the records again each time.
    client.ensure_topic(f"{topic}.queue", partitions=3)
    with pytest.raises(ShuffleLayoutError, match=rf"work topic '{topic}\.queue'.* 3 partitions"):
        RecordFeeder(topic, client, start="earliest")


def test_an_item_whose_record_a_read_cannot_reach_is_released_not_done(
    spark, kafka_conf, unique, tmp_path
):
    from orchestration.shuffle.core.queue import WorkItem, work_topic

    topic, group, out = unique("q-later"), unique("g-later"), str(tmp_path / "out")
    KafkaClient(kafka_conf).ensure_topic(topic, partitions=1)
    produce(kafka_conf, topic, range(5), partitions=1)
    first = process_queue(
        spark,
        topic,
        group,
        doubled,
        IDS,
        kafka=kafka_conf,
        output=out,
        scale=QueueScale(tasks=1),
        stop=QueueStop(idle_timeout=3),
    )
    assert first.accepted == 5
    # A work item naming offset 7 of a partition that ends at 5: what a consumer sees when
    # its read of the source stops at a new leader's end that has not caught up yet.
    p = Producer(kafka_conf)
    p.produce(work_topic(topic), value=WorkItem(partition=0, offset=7, run_id="").to_json())
    assert p.flush(30) == 0
    second = process_queue(
        spark,
        topic,
        group,
        doubled,
        IDS,
        kafka=kafka_conf,
        output=out,
        scale=QueueScale(tasks=1),
        stop=QueueStop(idle_timeout=3, max_seconds=8),
    )
    # Not taken for a record that is gone (acknowledged as done, so lost): handed back.
    assert second.skipped == 0 and second.accepted == 0
    assert second.released >= 1
    ids = sorted(r.id for r in read_queue_output(spark, out).collect())
    assert ids == list(range(5))


def test_a_record_whose_dead_letter_acknowledgement_was_lost_is_not_dead_lettered_twice(
    spark, kafka_conf, unique, tmp_path
):
    # A broker killed between the dead-letter write and the REJECT acknowledgement: the
    # record comes back once more, past its last attempt. Made here by hand: the work items
    # are delivered (and released) up to the last attempt by a bare share consumer, and the
    # dead-letter message of record 1's lost attempt is written as process_queue writes it.
    from confluent_kafka import AcknowledgeType, ShareConsumer

    from orchestration.shuffle.core.queue import dead_letter_headers, work_topic

    topic, group, dlq = unique("q-lost-ack"), unique("g-lost-ack"), unique("q-lost-ack-dlq")
    client = KafkaClient(kafka_conf)
    client.ensure_topic(topic, partitions=1)
    client.ensure_topic(dlq, partitions=1)
    produce(kafka_conf, topic, range(4), partitions=1)
    assert RecordFeeder(topic, client, "earliest").feed() == 4
    policy = DeliveryPolicy(max_deliveries=2, dead_letter_topic=dlq)
    set_group_configs(
        client,
        group,
        {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"},
    )
    sc = ShareConsumer(
        client.config(**{"group.id": group, "share.acknowledgement.mode": "explicit"})
    )
    sc.subscribe([work_topic(topic)])
    seen: dict[int, int] = {}
    deadline = time.monotonic() + 60
    while min(seen.values(), default=0) < 2 or len(seen) < 4:
        assert time.monotonic() < deadline, seen
        for m in sc.poll(0.5) or []:
            seen[m.offset()] = max(seen.get(m.offset(), 0), m.delivery_count())
            sc.acknowledge(m, AcknowledgeType.RELEASE)
        sc.commit_sync(30)
    sc.close()
    p = Producer(kafka_conf)
    headers = dead_letter_headers(ValueError("poison record 1"), (topic, 0, 1), 2, group)
    p.produce(dlq, key=b"k1", value=b"1", headers=headers)
    assert p.flush(30) == 0
    res = process_queue(
        spark,
        topic,
        group,
        FailFirst(flaky=(), poison={1, 2}),
        IDS,
        kafka=kafka_conf,
        output=str(tmp_path / "out"),
        scale=QueueScale(tasks=1),
        stop=QueueStop(idle_timeout=3),
        delivery=policy,
    )
    assert res.accepted == 2 and res.rejected == 2
    # Record 2 is dead-lettered on this delivery; record 1's unit was there already.
    assert res.dead_lettered == 1 and res.dead_lettered_before == 1
    dead = dlq_messages(kafka_conf, dlq, expected=2)
    assert sorted(int(m.value()) for m in dead) == [1, 2]
    new = next(m for m in dead if m.value() == b"2")
    assert dict(new.headers())["queue.delivery.count"] == b"3"
    assert dict(new.headers())["queue.source.row"] == b"0"
