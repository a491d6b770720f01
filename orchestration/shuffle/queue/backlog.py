"""A queue's backlog for one share group, read from the queue's own bookkeeping:
:func:`queue_backlog`. No Spark.

Kafka brokers report a share group's lag themselves (``DescribeShareGroupOffsets`` v1,
KIP-1226, Kafka 4.2 and later: the Java ``Admin.listShareGroupOffsets``,
``kafka-share-groups.sh --describe``), but no Python client asks for it: confluent-kafka's
admin client has no share-group operations, nor has the librdkafka it is built on, and
kafka-python speaks no share-group protocol. So the backlog is counted from what queue mode
writes itself: the work topic (``<topic>.queue``: one item per record to process, and the
``fed/`` records that say what was fed), the done topic (``<topic>.queue.done``: the items
each group's consumers settled, recorded before they acknowledge them) and, for a shuffle,
its commit log (the runs committed). The pure counting is
:func:`~orchestration.shuffle.core.queue.queue_backlog_of`.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition

from orchestration.shuffle.core.commitlog import ShuffleLog, commit_topic
from orchestration.shuffle.core.queue import (
    QueueBacklog,
    done_ranges,
    done_topic,
    queue_backlog_of,
    work_topic,
)
from orchestration.shuffle.errors import ShuffleTopicNotFoundError
from orchestration.shuffle.kafka.client import KafkaClient, KafkaConfig, read_range
from orchestration.shuffle.kafka.commitlog import read_log


def _records(kafka: KafkaClient, topic: str) -> list[Any]:
    """Every committed record of partition 0 of ``topic`` (none when it does not exist)."""
    if kafka.describe_topic(topic, timeout=30) is None:
        return []
    with kafka.consumer(**{"isolation.level": "read_committed"}) as c:
        with kafka.errors(f"reading the offsets of topic {topic!r}"):
            low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        return list(read_range(c, topic, 0, low, high))


def queue_backlog(
    topic: str, group: str, *, kafka: KafkaConfig, log: ShuffleLog | None = None
) -> QueueBacklog:
    """What :func:`~orchestration.shuffle.process_queue` has left to do on ``topic`` for
    share group ``group``: the runs, rows and records not fed to the work topic yet, and
    the work items fed that the group's consumers have not settled
    (:class:`~orchestration.shuffle.core.queue.QueueBacklog`).

    It reads the work topic and the done topic whole (one small record per item, and per
    batch settled), and a shuffle's commit log (``log``, when the caller has it).

    Example::

        backlog = queue_backlog("events.by_user", "scorers", kafka=conf)
        if backlog.records > 10_000: ...

    Raises:
        ShuffleTopicNotFoundError: ``topic`` does not exist.
    """
    client = KafkaClient.of(kafka)
    if client.describe_topic(topic, timeout=30) is None:
        raise ShuffleTopicNotFoundError(f"queue_backlog: topic {topic!r} does not exist")
    shuffle = client.describe_topic(commit_topic(topic), timeout=30) is not None
    if shuffle and log is None:
        log = read_log(client, topic)
    work = [(m.offset(), m.key(), m.value()) for m in _records(client, work_topic(topic))]
    key = group.encode()
    done = [m for m in _records(client, done_topic(topic)) if m.key() == key]
    settled = [r for m in done for r in done_ranges(m.value())]
    ends = None
    if not shuffle:
        ends = dict(enumerate(client.end_offsets(topic, client.partition_count(topic))))
    return queue_backlog_of(
        topic, group, work, settled, log=log if shuffle else None, source_ends=ends
    )
