"""How an asset says it is a shuffle: its definition metadata, read and checked in one place.

Example::

    @asset(io_manager_key="shuffle_io_manager",
           metadata=shuffle_metadata(key="user_id", num_partitions=8, event_time="ts"))
    def events_by_user(...) -> DataFrame: ...

Keys (all under ``shuffle/``): ``key`` (a column or a list), ``num_partitions`` (int),
``max_parallelism`` (int, default 128), ``event_time`` (optional column), ``topic`` (optional;
default the asset key path joined with "."), ``window_column`` (optional: the column whose
value is the partition key, needed to write a range of partitions in one run),
``replication_factor`` (optional int; default min(3, brokers)).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestration.shuffle import ShuffleOptionError, ShuffleSpec

PREFIX = "shuffle/"
KEYS = (
    "key",
    "num_partitions",
    "max_parallelism",
    "event_time",
    "topic",
    "window_column",
    "replication_factor",
)


def shuffle_metadata(
    *,
    key: str | Sequence[str],
    num_partitions: int,
    max_parallelism: int = 128,
    event_time: str | None = None,
    topic: str | None = None,
    window_column: str | None = None,
    replication_factor: int | None = None,
) -> dict[str, Any]:
    """The definition metadata that makes an asset stored by ``KafkaShuffleIOManager`` a
    shuffle (a typo-proof way to write the ``shuffle/*`` keys)."""
    md: dict[str, Any] = {
        f"{PREFIX}key": key if isinstance(key, str) else list(key),
        f"{PREFIX}num_partitions": num_partitions,
        f"{PREFIX}max_parallelism": max_parallelism,
    }
    optional = {
        "event_time": event_time,
        "topic": topic,
        "window_column": window_column,
        "replication_factor": replication_factor,
    }
    md.update({f"{PREFIX}{k}": v for k, v in optional.items() if v is not None})
    return md


@dataclass(frozen=True)
class ShuffleAsset:
    """A shuffle asset's layout and options, as its metadata declares them."""

    spec: ShuffleSpec
    window_column: str | None

    @property
    def topic(self) -> str:
        return self.spec.topic


def _value(raw: Any) -> Any:
    # Dagster wraps metadata values (TextMetadataValue, IntMetadataValue, ...).
    return getattr(raw, "value", raw)


def shuffle_asset(asset: str, path: Sequence[str], metadata: Mapping[str, Any]) -> ShuffleAsset:
    """Reads and checks a shuffle asset's metadata; errors name the asset and the key.

    Args:
        asset: The asset's name for error messages (e.g. its key as a string).
        path: The asset key's path (the default topic is its parts joined with ".").
        metadata: The asset's definition metadata.
    """
    md = {k[len(PREFIX) :]: _value(v) for k, v in metadata.items() if k.startswith(PREFIX)}
    unknown = sorted(set(md) - set(KEYS))
    if unknown:
        raise ShuffleOptionError(
            f"asset {asset}: unknown shuffle metadata {[PREFIX + k for k in unknown]}; "
            f"known keys are {[PREFIX + k for k in KEYS]}"
        )

    def need(name: str) -> Any:
        if md.get(name) is None:
            raise ShuffleOptionError(
                f"asset {asset}: definition metadata {PREFIX + name!r} is required to store it "
                "as a shuffle"
            )
        return md[name]

    def integer(name: str, default: int | None = None) -> int:
        value = md.get(name, default)
        if value is None:
            value = need(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ShuffleOptionError(
                f"asset {asset}: metadata {PREFIX + name!r} must be an int, got {value!r}"
            )
        return value

    def column(name: str, required: bool = False) -> str | None:
        value = need(name) if required else md.get(name)
        if value is not None and (not isinstance(value, str) or not value):
            raise ShuffleOptionError(
                f"asset {asset}: metadata {PREFIX + name!r} must be a column name, got {value!r}"
            )
        return value

    key = need("key")
    if isinstance(key, str):
        key = (key,)
    if not isinstance(key, list | tuple) or not key or not all(isinstance(k, str) for k in key):
        raise ShuffleOptionError(
            f"asset {asset}: metadata 'shuffle/key' must be a column name or a list of them, "
            f"got {key!r}"
        )
    topic = md.get("topic") or ".".join(path)
    if not isinstance(topic, str):
        raise ShuffleOptionError(f"asset {asset}: metadata 'shuffle/topic' must be a string")
    try:
        spec = ShuffleSpec(
            topic=topic,
            key=tuple(key),
            num_partitions=integer("num_partitions"),
            max_parallelism=integer("max_parallelism", 128),
            event_time=column("event_time"),
            max_out_of_orderness=dt.timedelta(0),
            replication_factor=(
                integer("replication_factor") if md.get("replication_factor") is not None else None
            ),
        )
    except ShuffleOptionError as exc:
        raise ShuffleOptionError(f"asset {asset}: {exc}") from None
    return ShuffleAsset(spec, column("window_column"))
