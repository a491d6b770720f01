"""The Dagster integration of the Kafka shuffle, and the engine beneath it (``.shuffle``).

Example::

    from orchestration import KafkaResource, KafkaShuffleIOManager, shuffle_metadata

Names are imported on first use, so that importing the engine's pure modules does not load
Dagster, Spark or Kafka.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _distribution_version
from typing import TYPE_CHECKING

from orchestration.shuffle.core.exports import lazy_exports

try:
    __version__ = _distribution_version("kafka-shuffle")
except PackageNotFoundError:  # a source tree on the path that was never installed
    __version__ = "0+unknown"

_EXPORTS = {
    "KafkaResource": "resources",
    "ShuffleSparkResource": "resources",
    "KafkaShuffleIOManager": "io_manager",
    "RecordBatches": "io_manager",
    "FAILED_WINDOWS_TAG": "definition",
    "shuffle_metadata": "definition",
    "shuffle_asset_spec": "definition",
    "shuffle_pool": "definition",
    "shuffle_commit_sensor": "sensors",
    "failed_region_sensor": "sensors",
    "shuffle_progress_sensor": "sensors",
    "shuffle_lag_sensor": "sensors",
    "shuffle_watermark_asset": "sensors",
    "shuffle_asset_checks": "checks",
    "shuffle_consumer_checks": "checks",
    "shuffle_queue_checks": "checks",
    "consumer_metadata": "metadata",
    "shuffle_expiry_job": "maintenance",
    "shuffle_backfill_schedule": "schedules",
    "KafkaShuffle": "components",
    "run_shuffle_pipes": "pipes",
    "shuffle_pipes_extras": "pipes",
    "pipes_write_shuffle": "pipes_application",
}

if TYPE_CHECKING:
    from .checks import shuffle_asset_checks, shuffle_consumer_checks, shuffle_queue_checks
    from .components import KafkaShuffle
    from .definition import (
        FAILED_WINDOWS_TAG,
        shuffle_asset_spec,
        shuffle_metadata,
        shuffle_pool,
    )
    from .io_manager import KafkaShuffleIOManager, RecordBatches
    from .maintenance import shuffle_expiry_job
    from .metadata import consumer_metadata
    from .pipes import run_shuffle_pipes, shuffle_pipes_extras
    from .pipes_application import pipes_write_shuffle
    from .resources import KafkaResource, ShuffleSparkResource
    from .schedules import shuffle_backfill_schedule
    from .sensors import (
        failed_region_sensor,
        shuffle_commit_sensor,
        shuffle_lag_sensor,
        shuffle_progress_sensor,
        shuffle_watermark_asset,
    )


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())


__all__ = sorted(_EXPORTS)
