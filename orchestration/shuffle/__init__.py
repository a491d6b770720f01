"""The shuffle engine: a keyed shuffle persisted in Kafka, written and read by Spark.

Example::

    from orchestration.shuffle import ShuffleSpec, read_shuffle, write_shuffle

    spec = ShuffleSpec(topic="flights.by_tailnum", key=("tailnum",), num_partitions=8,
                       max_parallelism=128, event_time="sched_dep")
    result = write_shuffle(df, spec, kafka={"bootstrap.servers": "localhost:9092"},
                           window="2013-01-01")
    keyed = read_shuffle(spark, "flights.by_tailnum", kafka={...}, windows=["2013-01-01"])

Any SparkSession works: the functions register the project's data sources on the session
they are given (:func:`register_data_sources` does it for use by name).

This package imports no Dagster. Its layers (``docs/ARCHITECTURE.md``): ``core`` (pure
logic: no Spark, no Kafka), ``kafka`` (clients, the commit log's I/O, retention, ACLs),
``spark`` (the data sources, the writer, per-key work) and ``queue`` (queue mode); the names
below are the public API, each exported here only (the layers' packages export nothing).
"""

from typing import TYPE_CHECKING

from orchestration.shuffle.core.exports import lazy_exports

# Names are imported on first use, so that importing a pure module (e.g.
# ``orchestration.shuffle.core.keygroups``) does not drag in Spark or Kafka.
_EXPORTS = {
    "ShuffleRead": "read",
    "ShuffleSpec": "spec",
    "WriteResult": "spec",
    "write_table": "table_write",
    "WriteProgress": "table_write",
    "ReadProgress": "table_read",
    "read_table": "table_read",
    "read_batches": "table_read",
    "iter_keys": "table_read",
    "runs_read": "table_read",
    "plan_shuffle_read": "read",
    "read_shuffle": "read",
    "read_shuffle_stream": "read",
    "aggregate_shuffle": "read",
    "shuffle_log": "read",
    "shuffle_commits_since": "read",
    "shuffle_watermark": "read",
    "stream_metrics": "read",
    "group_offsets_behind": "read",
    "BatchMetrics": "core.metrics",
    "summarize_stream_metrics": "core.metrics",
    "write_shuffle": "write",
    "write_windows": "write",
    "WindowsResult": "write",
    "Commit": "core.commitlog",
    "Layout": "core.commitlog",
    "ShuffleLog": "core.commitlog",
    "BadRecord": "core.commitlog",
    "ShuffleAuthorizationError": "errors",
    "ShuffleConnectionError": "errors",
    "ShuffleError": "errors",
    "ShuffleFormatError": "errors",
    "ShuffleKeyError": "errors",
    "ShuffleLayoutError": "errors",
    "ShuffleOptionError": "errors",
    "ShuffleSchemaError": "errors",
    "ShuffleTopicNotFoundError": "errors",
    "ShuffleWatermarkError": "errors",
    "ShuffleWindowNotFoundError": "errors",
    "ShuffleWriteError": "errors",
    "ShuffleSessionError": "errors",
    "key_group_of": "core.keygroups",
    "key_group_range": "core.keygroups",
    "partition_of": "core.keygroups",
    "apply_per_key": "spark.perkey",
    "ExpiryResult": "kafka.retention",
    "expire_shuffle": "kafka.retention",
    "register_data_sources": "spark.sources",
    "jvm_spark_conf": "spark.jvm",
    "jvm_available": "spark.jvm",
    "jvm_jars": "spark.jvm",
    "spark_session": "spark.sources",
    "session_settings": "spark.session",
    "write_records": "spark.records",
    "read_records": "read",
    "QueueGroupError": "errors",
    "QueueResult": "queue.driver",
    "QueueSchemaError": "errors",
    "feed_queue": "queue.driver",
    "process_queue": "queue.driver",
    "read_queue_output": "queue.driver",
    "QueueCounts": "core.queue",
    "DeliveryPolicy": "core.queue",
    "QueueScale": "core.queue",
    "QueueStop": "core.queue",
    "QueueBacklog": "core.queue",
    "queue_backlog": "queue.backlog",
    "grant_shuffle_access": "kafka.access",
    "shuffle_acls": "kafka.access",
    "KafkaClient": "kafka.client",
    "KafkaConfig": "kafka.client",
    "read_chunks": "kafka.client",
    "read_range": "kafka.client",
    "check_partitions": "kafka.commitlog",
    "alter_shuffle": "evolve",
    "rewrite_shuffle": "evolve",
    "RewriteResult": "evolve",
    "LayoutVersion": "core.evolution",
}

if TYPE_CHECKING:
    from orchestration.shuffle.core.commitlog import BadRecord, Commit, Layout, ShuffleLog
    from orchestration.shuffle.core.evolution import LayoutVersion
    from orchestration.shuffle.core.keygroups import key_group_of, key_group_range, partition_of
    from orchestration.shuffle.core.metrics import BatchMetrics, summarize_stream_metrics
    from orchestration.shuffle.core.queue import (
        DeliveryPolicy,
        QueueBacklog,
        QueueCounts,
        QueueScale,
        QueueStop,
    )
    from orchestration.shuffle.errors import (
        QueueGroupError,
        QueueSchemaError,
        ShuffleAuthorizationError,
        ShuffleConnectionError,
        ShuffleError,
        ShuffleFormatError,
        ShuffleKeyError,
        ShuffleLayoutError,
        ShuffleOptionError,
        ShuffleSchemaError,
        ShuffleSessionError,
        ShuffleTopicNotFoundError,
        ShuffleWatermarkError,
        ShuffleWindowNotFoundError,
        ShuffleWriteError,
    )
    from orchestration.shuffle.evolve import RewriteResult, alter_shuffle, rewrite_shuffle
    from orchestration.shuffle.kafka.access import grant_shuffle_access, shuffle_acls
    from orchestration.shuffle.kafka.client import KafkaClient, KafkaConfig, read_chunks, read_range
    from orchestration.shuffle.kafka.commitlog import check_partitions
    from orchestration.shuffle.kafka.retention import ExpiryResult, expire_shuffle
    from orchestration.shuffle.queue.backlog import queue_backlog
    from orchestration.shuffle.queue.driver import (
        QueueResult,
        feed_queue,
        process_queue,
        read_queue_output,
    )
    from orchestration.shuffle.read import (
        ShuffleRead,
        aggregate_shuffle,
        group_offsets_behind,
        plan_shuffle_read,
        read_records,
        read_shuffle,
        read_shuffle_stream,
        shuffle_commits_since,
        shuffle_log,
        shuffle_watermark,
        stream_metrics,
    )
    from orchestration.shuffle.spark.jvm import jvm_available, jvm_jars, jvm_spark_conf
    from orchestration.shuffle.spark.perkey import apply_per_key
    from orchestration.shuffle.spark.records import write_records
    from orchestration.shuffle.spark.session import session_settings
    from orchestration.shuffle.spark.sources import register_data_sources, spark_session
    from orchestration.shuffle.spec import ShuffleSpec, WriteResult
    from orchestration.shuffle.table_read import (
        ReadProgress,
        iter_keys,
        read_batches,
        read_table,
        runs_read,
    )
    from orchestration.shuffle.table_write import WriteProgress, write_table
    from orchestration.shuffle.write import WindowsResult, write_shuffle, write_windows


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())


__all__ = sorted(_EXPORTS)
