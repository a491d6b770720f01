"""The Dagster integration of the Kafka shuffle, and the engine beneath it (``.shuffle``).

Example::

    from orchestration import KafkaResource, KafkaShuffleIOManager, shuffle_metadata

Names are imported on first use, so that importing the engine's pure modules does not load
Dagster, Spark or Kafka.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "KafkaResource": "resources",
    "WarehouseResource": "resources",
    "KafkaShuffleIOManager": "io_manager",
    "FAILED_WINDOWS_TAG": "io_manager",
    "shuffle_metadata": "metadata",
    "shuffle_commit_sensor": "sensors",
    "failed_region_sensor": "sensors",
    "shuffle_asset_checks": "checks",
    "shuffle_expiry_job": "maintenance",
}

if TYPE_CHECKING:
    from .checks import shuffle_asset_checks
    from .io_manager import FAILED_WINDOWS_TAG, KafkaShuffleIOManager
    from .maintenance import shuffle_expiry_job
    from .metadata import shuffle_metadata
    from .resources import KafkaResource, WarehouseResource
    from .sensors import failed_region_sensor, shuffle_commit_sensor


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = sorted(_EXPORTS)
