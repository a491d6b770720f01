"""Plain Kafka records as a Spark Python data source (``kafka-records``), and a bounded reader.

This is the raw connector under the shuffle: it reads a topic's records between fixed
offsets, one Spark partition per Kafka partition, with the end offsets fixed when the read
is planned (a bounded read: records produced later are not seen).

Example::

    spark.dataSource.register(KafkaRecordsDataSource)
    df = (spark.read.format("kafka-records")
          .option("topic", "events")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .load())   # partition, offset, timestamp, key, value
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from ._kafka import CONNECT_TIMEOUT_S, admin_client, client_config
from .errors import ShuffleConnectionError, ShuffleOptionError, ShuffleTopicNotFoundError

RECORDS_SCHEMA = "partition int, offset long, timestamp timestamp, key binary, value binary"

# Options that start with this prefix are passed to librdkafka without it.
KAFKA_OPTION_PREFIX = "kafka."


def kafka_options(options: Mapping[str, str]) -> dict[str, str]:
    """Extracts ``kafka.*`` data source options into a librdkafka config dict."""
    return {
        k[len(KAFKA_OPTION_PREFIX) :]: v
        for k, v in options.items()
        if k.lower().startswith(KAFKA_OPTION_PREFIX)
    }


def int_option(
    options: Mapping[str, str],
    name: str,
    owner: str,
    default: int | None = None,
    required: bool = False,
) -> int | None:
    """An integer option given as a string; errors name the option and the data source."""
    value = options.get(name)
    if value is None or value == "":
        if required:
            raise ShuffleOptionError(f"{owner}: option {name!r} is required")
        return default
    try:
        return int(value)
    except ValueError:
        raise ShuffleOptionError(
            f"{owner}: option {name!r} must be an integer, got {value!r}"
        ) from None


def consumer(kafka: Mapping[str, Any], **overrides: Any) -> Consumer:
    """A consumer for assigned (not subscribed) reads: no group offsets are committed."""
    conf = client_config(
        kafka,
        **{
            # Reads are planned by offsets, never by a group's position.
            "group.id": overrides.pop("group.id", "kafka-shuffle-reader"),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
            # A fetch holds a few frames (a frame is cut at 4 MiB before compression). The
            # prefetch queue is what a reader holds beyond the frame it decodes: kept small,
            # memory stays flat however much is read.
            "fetch.max.bytes": 4 * 1024 * 1024,
            "max.partition.fetch.bytes": 4 * 1024 * 1024,
            "queued.max.messages.kbytes": 4 * 1024,
            # With a small queue the queue is often full; librdkafka then postpones the next
            # fetch by this much (1 s by default), which made a reader wait more than it read.
            "fetch.queue.backoff.ms": 5,
            **overrides,
        },
    )
    return Consumer(conf)


def partition_count(
    kafka: Mapping[str, Any], topic: str, timeout: float = CONNECT_TIMEOUT_S
) -> int:
    """The number of partitions of ``topic``; errors name the topic and the cluster."""
    try:
        md = admin_client(kafka).list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        raise ShuffleConnectionError(
            f"cannot reach Kafka at bootstrap.servers={kafka.get('bootstrap.servers')!r} "
            f"to describe topic {topic!r}: {exc.args[0] if exc.args else exc}"
        ) from None
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None:
        raise ShuffleTopicNotFoundError(
            f"topic {topic!r} does not exist on {kafka.get('bootstrap.servers')!r}"
        )
    return len(tmd.partitions)


# Errors a just-created or just-moved partition gives for a moment; worth a retry.
_TRANSIENT = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
}


def end_offsets(kafka: Mapping[str, Any], topic: str, partitions: int) -> list[tuple[int, int]]:
    """(low, high) offsets of each partition, read from the brokers (not a cache)."""
    c = consumer(kafka)
    try:
        out = []
        for p in range(partitions):
            deadline = time.monotonic() + CONNECT_TIMEOUT_S
            while True:
                try:
                    tp = TopicPartition(topic, p)
                    out.append(c.get_watermark_offsets(tp, timeout=CONNECT_TIMEOUT_S, cached=False))
                    break
                except KafkaException as exc:
                    err = exc.args[0] if exc.args else None
                    code = err.code() if isinstance(err, KafkaError) else None
                    if code in _TRANSIENT and time.monotonic() < deadline:
                        time.sleep(0.2)
                        continue
                    raise ShuffleConnectionError(
                        f"cannot read the offsets of topic {topic!r} partition {p}: {exc}"
                    ) from None
        return out
    finally:
        c.close()


def read_range(
    c: Consumer,
    topic: str,
    partition: int,
    start: int,
    end: int,
    poll_timeout: float = 30.0,
    max_batch: int = 1000,
) -> Iterator[Any]:
    """Yields the messages of ``topic``/``partition`` with offsets in ``[start, end)``.

    Stops at ``end`` or at the end of the partition, whichever comes first (offsets may
    have gaps, e.g. transaction markers, so the last offset is not always a record).
    ``max_batch`` bounds how many messages are taken from the client at once: for large
    messages (shuffle frames) keep it at 1, so that a taken list does not hold the whole
    prefetch queue while the client fills the queue again.
    """
    if end <= start:
        return
    c.assign([TopicPartition(topic, partition, start)])
    idle_since = time.monotonic()
    next_offset = start
    try:
        while True:
            # consume() waits until it has num_messages or its timeout passes, even when the
            # end of the partition has been reached: keep its timeout short and track idleness.
            # Ask for no more than the range holds, so the last call returns at once.
            msgs = c.consume(num_messages=max(1, min(max_batch, end - next_offset)), timeout=0.2)
            if not msgs:
                if time.monotonic() - idle_since > poll_timeout:
                    raise ShuffleConnectionError(
                        f"no data from topic {topic!r} partition {partition} for "
                        f"{poll_timeout:.0f}s while reading offsets [{start}, {end})"
                    )
                continue
            idle_since = time.monotonic()
            next_offset = max(next_offset, msgs[-1].offset() + 1)
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return
                    raise ShuffleConnectionError(
                        f"reading topic {topic!r} partition {partition} near offset {start}: {err}"
                    )
                if m.offset() >= end:
                    return
                yield m
                if m.offset() >= end - 1:
                    return
    finally:
        c.unassign()


@dataclass
class OffsetRange(InputPartition):
    partition: int
    start: int
    end: int


class KafkaRecordsReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]):
        self.topic = options.get("topic")
        if not self.topic:
            raise ShuffleOptionError("option 'topic' is required for format 'kafka-records'")
        self.kafka = kafka_options(options)
        if "bootstrap.servers" not in self.kafka:
            raise ShuffleOptionError(
                "option 'kafka.bootstrap.servers' is required for format 'kafka-records'"
            )
        self.starting = _parse_offsets(
            options.get("startingOffsets", "earliest"), "startingOffsets"
        )
        self.ending = _parse_offsets(options.get("endingOffsets", "latest"), "endingOffsets")

    def partitions(self) -> list[OffsetRange]:
        n = partition_count(self.kafka, self.topic)
        ranges = []
        for p, (low, high) in enumerate(end_offsets(self.kafka, self.topic, n)):
            start = (
                low if self.starting in ("earliest", None) else max(low, self.starting.get(p, low))
            )
            end = high if self.ending in ("latest", None) else min(high, self.ending.get(p, high))
            ranges.append(OffsetRange(p, start, end))
        return ranges

    def read(self, partition: OffsetRange) -> Iterator[tuple]:
        import datetime as dt

        c = consumer(self.kafka)
        try:
            for m in read_range(c, self.topic, partition.partition, partition.start, partition.end):
                _, ts = m.timestamp()
                yield (
                    m.partition(),
                    m.offset(),
                    dt.datetime.fromtimestamp(ts / 1000, tz=dt.UTC) if ts >= 0 else None,
                    m.key(),
                    m.value(),
                )
        finally:
            c.close()


def _parse_offsets(value: str, option: str) -> str | dict[int, int]:
    if value in ("earliest", "latest"):
        return value
    try:
        parsed = json.loads(value)
        return {int(k): int(v) for k, v in parsed.items()}
    except (ValueError, AttributeError, TypeError):
        raise ShuffleOptionError(
            f"option {option!r} must be 'earliest', 'latest' or a JSON object "
            f'{{"partition": offset}}, got {value!r}'
        ) from None


class KafkaRecordsDataSource(DataSource):
    """Bounded reads of a Kafka topic's raw records.

    Options: ``topic`` (required); ``kafka.<librdkafka key>`` (``kafka.bootstrap.servers``
    required); ``startingOffsets`` / ``endingOffsets``: ``earliest`` / ``latest`` (default)
    or a JSON object ``{"0": 42}`` of partition to offset (end exclusive).
    """

    @classmethod
    def name(cls) -> str:
        return "kafka-records"

    def schema(self) -> str:
        return RECORDS_SCHEMA

    def reader(self, schema) -> KafkaRecordsReader:
        return KafkaRecordsReader(self.options)


def write_records(
    df, topic: str, kafka: Mapping[str, Any], key: str = "key", value: str = "value"
) -> int:
    """Produces one record per row of ``df`` (binary or string ``key`` and ``value`` columns).

    This is the per-row path: simple, and slow next to the shuffle's Arrow frames.

    Returns:
        The number of records produced.
    """
    from pyspark.sql import functions as F

    conf = client_config(kafka)
    missing = [c for c in (key, value) if c not in df.columns]
    if missing:
        raise ShuffleOptionError(f"write_records: column(s) {missing} not in {df.columns}")

    def produce(rows) -> Iterator[int]:
        from confluent_kafka import Producer

        errors: list[str] = []

        def on_delivery(err, msg) -> None:
            if err is not None:
                errors.append(f"partition {msg.partition()}: {err}")

        p = Producer({**conf, "enable.idempotence": True, "acks": "all", "linger.ms": 20})
        n = 0
        for row in rows:
            p.produce(topic, key=row[0], value=row[1], on_delivery=on_delivery)
            p.poll(0)
            n += 1
        remaining = p.flush(60)
        if remaining or errors:
            raise ShuffleConnectionError(
                f"producing to topic {topic!r} failed ({remaining} undelivered): {errors[:3]}"
            )
        yield n

    counts = df.select(F.col(key), F.col(value)).rdd.mapPartitions(produce).collect()
    return int(sum(counts))
