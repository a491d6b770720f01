"""The local stack for real: broker, Spark and share groups."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from devstack import localstack
from orchestration.shuffle import (
    KafkaClient,
    ShuffleConnectionError,
    ShuffleError,
    register_data_sources,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def set_share_group_offset_reset(conf: dict, group: str, reset: str) -> None:
    """A new share group starts at the latest offset unless its config says otherwise."""
    entry = ConfigEntry(
        "share.auto.offset.reset", reset, incremental_operation=AlterConfigOpType.SET
    )
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    admin = AdminClient(conf)
    admin.incremental_alter_configs([res], request_timeout=30)[res].result(30)


def produce(conf: dict, topic: str, n: int, partitions: int = 1) -> None:
    p = Producer({**conf, "enable.idempotence": True})
    for i in range(n):
        p.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=i % partitions)
    assert p.flush(30) == 0


def consume_all(conf: dict, topic: str, expected: int, group: str, timeout: float = 30) -> list:
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    out: list = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append((m.key(), m.value()))
    finally:
        c.close()
    return out


def test_produce_and_consume(kafka_conf, unique):
    topic = unique("stack-pc")
    kafka = KafkaClient(kafka_conf)
    assert kafka.ensure_topic(topic, partitions=3)
    assert not kafka.ensure_topic(topic, partitions=3)  # idempotent
    produce(kafka_conf, topic, 300, partitions=3)
    got = consume_all(kafka_conf, topic, 300, unique("g"))
    assert sorted(got) == sorted((str(i).encode(), f"v{i}".encode()) for i in range(300))


def test_spark_reads_records(kafka_conf, spark, unique):
    topic = unique("stack-spark")
    KafkaClient(kafka_conf).ensure_topic(topic, partitions=2)
    produce(kafka_conf, topic, 200, partitions=2)
    register_data_sources(spark)  # by name: registered as a user would
    df = (
        spark.read.format("kafka-records")
        .option("topic", topic)
        .option("kafka.bootstrap.servers", kafka_conf["bootstrap.servers"])
        .load()
    )
    assert df.rdd.getNumPartitions() == 2
    rows = df.collect()
    assert len(rows) == 200
    assert {bytes(r.value) for r in rows} == {f"v{i}".encode() for i in range(200)}
    # Each Spark partition is one Kafka partition.
    per_partition = df.rdd.glom().map(lambda rs: {r.partition for r in rs}).collect()
    assert per_partition == [{0}, {1}]


# Restarting the broker takes ~40 s: with the end-to-end tests, out of the quick loop.
@pytest.mark.slow
@pytest.mark.skipif(
    localstack.external_bootstrap() is not None, reason="restarts only the local broker"
)
def test_records_survive_broker_restart(kafka_conf, unique):
    topic = unique("stack-restart")
    KafkaClient(kafka_conf).ensure_topic(topic, partitions=1)
    produce(kafka_conf, topic, 50)
    assert localstack.stop()
    assert "stopped" in localstack.status()
    assert localstack.start() == kafka_conf["bootstrap.servers"]
    got = consume_all(kafka_conf, topic, 50, unique("g"), timeout=60)
    assert len(got) == 50


def test_share_consumer_receives_records(kafka_conf, unique):
    topic = unique("stack-share")
    KafkaClient(kafka_conf).ensure_topic(topic, partitions=1)
    produce(kafka_conf, topic, 20)
    group = unique("share")
    set_share_group_offset_reset(kafka_conf, group, "earliest")
    sc = ShareConsumer({**kafka_conf, "group.id": group, "share.acknowledgement.mode": "explicit"})
    sc.subscribe([topic])
    got: list = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < 20 and time.monotonic() < deadline:
            for m in sc.poll(timeout=1.0):
                assert m.error() is None, m.error()
                got.append(m.value())
                sc.acknowledge(m)
            sc.commit_sync()
    finally:
        sc.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(20))


def test_unreachable_bootstrap_fails_fast():
    start = time.monotonic()
    with pytest.raises(ShuffleConnectionError, match="127.0.0.1:1") as info:
        KafkaClient({"bootstrap.servers": "127.0.0.1:1"}).check_reachable(timeout=5)
    assert isinstance(info.value, ShuffleError) and isinstance(info.value, ConnectionError)
    assert time.monotonic() - start < 10


def test_localstack_cli_reports_bad_external_cluster_quickly():
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "devstack.localstack", "start"],
        env={"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "cannot reach Kafka at bootstrap.servers='127.0.0.1:1'" in proc.stderr
    assert time.monotonic() - start < 20
