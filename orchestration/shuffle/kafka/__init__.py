"""The Kafka side of the engine: one client object per cluster, the commit log's I/O,
retention and access control. No Spark.

Example::

    from orchestration.shuffle.kafka import KafkaClient, read_range

    kafka = KafkaClient({"bootstrap.servers": "127.0.0.1:19092"})
    with kafka.consumer() as c:
        for message in read_range(c, "events", 0, 0, 100):
            ...
"""

from orchestration.shuffle.kafka.client import (
    CONNECT_TIMEOUT_S,
    KafkaClient,
    KafkaSettings,
    read_chunks,
    read_range,
)

__all__ = ["CONNECT_TIMEOUT_S", "KafkaClient", "KafkaSettings", "read_chunks", "read_range"]
