"""The Kafka side of the engine: one client object per cluster, the commit log's I/O,
retention and access control. No Spark.

Example::

    from orchestration.shuffle.kafka import KafkaClient, read_range

    kafka = KafkaClient({"bootstrap.servers": "127.0.0.1:19092"})
    kafka.ensure_topic("events", partitions=4)
    with kafka.consumer() as c:
        for p, (low, high) in enumerate(kafka.end_offsets("events", 4)):
            for message in read_range(c, "events", p, low, high):
                ...
"""

from typing import TYPE_CHECKING

from orchestration.shuffle.core.exports import lazy_exports

# Names are imported on first use: the client needs only confluent-kafka, the commit log
# pyarrow too.
_EXPORTS = {
    "CONNECT_TIMEOUT_S": "client",
    "KafkaClient": "client",
    "KafkaConfig": "client",
    "kept_admin": "client",
    "read_chunks": "client",
    "read_range": "client",
    "check_partitions": "commitlog",
}

if TYPE_CHECKING:
    from orchestration.shuffle.kafka.client import (
        CONNECT_TIMEOUT_S,
        KafkaClient,
        KafkaConfig,
        kept_admin,
        read_chunks,
        read_range,
    )
    from orchestration.shuffle.kafka.commitlog import check_partitions


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())

# Spelled out (not computed from _EXPORTS) so that linters see the names as exported.
__all__ = [
    "CONNECT_TIMEOUT_S",
    "KafkaClient",
    "KafkaConfig",
    "check_partitions",
    "kept_admin",
    "read_chunks",
    "read_range",
]
