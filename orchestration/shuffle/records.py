"""Plain Kafka records as a Spark Python data source (``kafka-records``), and a bounded reader.

This is the raw connector under the shuffle: it reads a topic's records between fixed
offsets, one Spark partition per Kafka partition, with the end offsets fixed when the read
is planned (a bounded read: records produced later are not seen).

Example::

    register_data_sources(spark)
    df = (spark.read.format("kafka-records")
          .option("topic", "events")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .load())   # partition, offset, timestamp, key, value
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from ._kafka import (
    client_config,
    consumer,
    end_offsets,
    kafka_errors,
    partition_count,
    producer,
    read_range,
)
from ._options import Options
from .errors import ShuffleConnectionError, ShuffleOptionError

RECORDS_SCHEMA = "partition int, offset long, timestamp timestamp, key binary, value binary"


@dataclass
class OffsetRange(InputPartition):
    partition: int
    start: int
    end: int


class KafkaRecordsReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]):
        opts = Options(options, "kafka-records")
        self.topic = opts.text("topic", required=True)
        self.kafka = opts.kafka()
        self.starting = opts.offsets("startingOffsets", "earliest")
        self.ending = opts.offsets("endingOffsets", "latest")

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
        with consumer(self.kafka) as c:
            for m in read_range(c, self.topic, partition.partition, partition.start, partition.end):
                _, ts = m.timestamp()
                yield (
                    m.partition(),
                    m.offset(),
                    dt.datetime.fromtimestamp(ts / 1000, tz=dt.UTC) if ts >= 0 else None,
                    m.key(),
                    m.value(),
                )


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
        errors: list[str] = []

        def on_delivery(err, msg) -> None:
            if err is not None:
                errors.append(f"partition {msg.partition()}: {err}")

        n = 0
        with producer(conf, **{"enable.idempotence": True, "acks": "all", "linger.ms": 20}) as p:
            with kafka_errors(f"producing to topic {topic!r}", conf):
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
