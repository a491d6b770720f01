"""The shuffle engine: a keyed shuffle persisted in Kafka, written and read by Spark.

This package imports no Dagster. Its pure modules (key groups, frames, watermarks, the
commit-log model) import neither Spark nor Kafka.
"""

from .errors import (
    ShuffleConnectionError,
    ShuffleError,
    ShuffleFormatError,
    ShuffleKeyError,
    ShuffleLayoutError,
    ShuffleOptionError,
    ShuffleSchemaError,
    ShuffleTopicNotFoundError,
    ShuffleWatermarkError,
    ShuffleWriteError,
)

__all__ = [
    "ShuffleConnectionError",
    "ShuffleError",
    "ShuffleFormatError",
    "ShuffleKeyError",
    "ShuffleLayoutError",
    "ShuffleOptionError",
    "ShuffleSchemaError",
    "ShuffleTopicNotFoundError",
    "ShuffleWatermarkError",
    "ShuffleWriteError",
]
