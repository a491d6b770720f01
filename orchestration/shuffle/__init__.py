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

This package imports no Dagster. Its pure modules (``keygroups``, ``frames``,
``watermarks``, ``commitlog``, ``planning``, ``aggregation``) import neither Spark nor Kafka.
"""

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

# Names are imported on first use, so that importing a pure module (e.g.
# ``orchestration.shuffle.keygroups``) does not drag in Spark or Kafka.
_EXPORTS = {
    "ShuffleRead": "api",
    "ShuffleSpec": "api",
    "WriteResult": "api",
    "plan_shuffle_read": "api",
    "read_shuffle": "api",
    "read_shuffle_stream": "api",
    "aggregate_shuffle": "api",
    "shuffle_log": "api",
    "shuffle_commits_since": "api",
    "shuffle_watermark": "api",
    "stream_metrics": "api",
    "group_offsets_behind": "api",
    "BatchMetrics": "sourcemetrics",
    "summarize_stream_metrics": "sourcemetrics",
    "write_shuffle": "api",
    "Commit": "commitlog",
    "Layout": "commitlog",
    "ShuffleLog": "commitlog",
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
    "key_group_of": "keygroups",
    "key_group_range": "keygroups",
    "partition_of": "keygroups",
    "apply_per_key": "prekeyed",
    "ExpiryResult": "expiry",
    "expire_shuffle": "expiry",
    "register_data_sources": "spark",
    "spark_session": "spark",
    "QueueGroupError": "errors",
    "QueueResult": "queue",
    "QueueSchemaError": "errors",
    "feed_queue": "queue",
    "process_queue": "queue",
    "read_queue_output": "queue",
    "QueueCounts": "queueplan",
    "grant_shuffle_access": "access",
    "shuffle_acls": "access",
}

if TYPE_CHECKING:
    from .access import grant_shuffle_access, shuffle_acls
    from .api import (
        ShuffleRead,
        ShuffleSpec,
        WriteResult,
        aggregate_shuffle,
        group_offsets_behind,
        plan_shuffle_read,
        read_shuffle,
        read_shuffle_stream,
        shuffle_commits_since,
        shuffle_log,
        shuffle_watermark,
        stream_metrics,
        write_shuffle,
    )
    from .commitlog import Commit, Layout, ShuffleLog
    from .errors import (
        QueueGroupError,
        QueueSchemaError,
        ShuffleConnectionError,
        ShuffleError,
        ShuffleFormatError,
        ShuffleKeyError,
        ShuffleLayoutError,
        ShuffleOptionError,
        ShuffleSchemaError,
        ShuffleTopicNotFoundError,
        ShuffleWatermarkError,
        ShuffleWindowNotFoundError,
        ShuffleWriteError,
    )
    from .expiry import ExpiryResult, expire_shuffle
    from .keygroups import key_group_of, key_group_range, partition_of
    from .prekeyed import apply_per_key
    from .queue import (
        QueueResult,
        feed_queue,
        process_queue,
        read_queue_output,
    )
    from .queueplan import QueueCounts
    from .sourcemetrics import BatchMetrics, summarize_stream_metrics
    from .spark import register_data_sources, spark_session


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())


__all__ = sorted(_EXPORTS)
