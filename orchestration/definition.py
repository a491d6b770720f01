"""How an asset says it is a shuffle, and the names the integration writes on Dagster's side.

- The ``shuffle/*`` keys of an asset's definition metadata: :func:`shuffle_metadata` writes
  them, :func:`shuffle_asset` reads and checks them (errors name the asset and the key),
  :func:`asset_shuffle` reads them off an ``AssetsDefinition``.
- The tags of runs: those Dagster sets and reads (a partition, a range of partitions, a run
  its own retries will re-run) and the shuffle's own (``shuffle/*``).
- Keys of the metadata the expiry job records (:data:`WRITTEN_BY`, :data:`EXPIRED_BY`).
- :data:`DAGSTER_RUN_ATTR`: the commit attribute that ties a committed run to the Dagster run
  that wrote it.

Example::

    @asset(io_manager_key="shuffle_io_manager",
           metadata=shuffle_metadata(key="user_id", num_partitions=8, event_time="ts"))
    def events_by_user(...) -> DataFrame: ...

    asset_shuffle(events_by_user).under(kafka_resource).topic

Keys (all under ``shuffle/``): ``key`` (a column or a list), ``num_partitions`` (int),
``max_parallelism`` (int, default 128), ``event_time`` (optional column), ``topic`` (optional;
default the asset key path joined with "."; the Kafka resource's ``topic_prefix`` goes before
it, see :meth:`ShuffleAsset.under`), ``window_column`` (optional: the column whose
value is the partition key, needed to write a range of partitions in one run),
``replication_factor`` (optional int; default min(3, brokers)), ``schema_mode`` (optional:
``"strict"`` or ``"merge"``, how a run whose columns differ from the shuffle's is written;
default the IO manager's ``schema_mode``), ``refuse_outside_window`` (optional bool: a run whose
rows' event times fall outside its time-window partition is not committed).

It imports no other module of the integration, so that every one of them may import it.
"""

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from dagster import (
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    Failure,
    MetadataValue,
    PartitionsDefinition,
    TimeWindowPartitionsDefinition,
)

from orchestration.shuffle.core.commitlog import Layout
from orchestration.shuffle.core.evolution import check_schema_mode, type_name
from orchestration.shuffle.errors import ShuffleOptionError, ShuffleWriteError
from orchestration.shuffle.kafka.client import KafkaClient
from orchestration.shuffle.kafka.commitlog import read_log
from orchestration.shuffle.spec import ShuffleSpec

# --- definition metadata ---------------------------------------------------------------

PREFIX = "shuffle/"
KEYS = (
    "key",
    "num_partitions",
    "max_parallelism",
    "event_time",
    "topic",
    "window_column",
    "replication_factor",
    "schema_mode",
    "refuse_outside_window",
)

# --- run tags ---------------------------------------------------------------------------

# Dagster's: a run of one partition, a run over a range of partitions (as backfills tag it),
# and a failed run that Dagster's own run retries will re-run.
PARTITION_TAG = "dagster/partition"
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
WILL_RETRY_TAG = "dagster/will_retry"
# A producer run sets it on itself when some windows of its range failed (comma-separated).
FAILED_WINDOWS_TAG = "shuffle/failed_windows"
# A retry by the failed-region sensor: its attempt number and the run it retries.
RETRY_TAG = "shuffle/retry"
RETRY_OF_TAG = "shuffle/retry_of"
# A consumer run the commit sensor launched: the commit's run id and window.
COMMIT_TAG = "shuffle/commit"
WINDOW_TAG = "shuffle/window"

# --- concurrency ------------------------------------------------------------------------
# The Dagster pool of a shuffle's writers (shuffle_pool): with the instance's pools limited
# to one at a time, two runs never write one shuffle at once.
POOL_PREFIX = "shuffle/"

# --- metadata the integration records ------------------------------------------------------

# A materialization the expiry job reports again: the run that wrote the window.
WRITTEN_BY = "shuffle/written_by_run"
# A readability check result the expiry job reports: the run that reported it.
EXPIRED_BY = "shuffle/expired_by_run"

# --- commit attributes --------------------------------------------------------------------

# The commit attribute that ties a committed run to the Dagster run that wrote it.
DAGSTER_RUN_ATTR = "dagster_run_id"


def shuffle_metadata(
    *,
    key: str | Sequence[str],
    num_partitions: int,
    max_parallelism: int = 128,
    event_time: str | None = None,
    topic: str | None = None,
    window_column: str | None = None,
    replication_factor: int | None = None,
    schema_mode: str | None = None,
    refuse_outside_window: bool | None = None,
) -> dict[str, Any]:
    """The definition metadata that makes an asset stored by ``KafkaShuffleIOManager`` a
    shuffle (a typo-proof way to write the ``shuffle/*`` keys). ``schema_mode``: ``"merge"``
    lets a run add nullable columns and widen types (see the Evolution guide); None: the IO
    manager's. ``refuse_outside_window``: a run whose rows' event times fall outside its
    time-window partition is refused before its commit (by default it is committed, warned
    of in the run and failed by the ``shuffle_event_times_in_window`` check)."""
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
        "schema_mode": schema_mode,
        "refuse_outside_window": refuse_outside_window,
    }
    md.update({f"{PREFIX}{k}": v for k, v in optional.items() if v is not None})
    return md


class TopicPrefixed(Protocol):
    """What :meth:`ShuffleAsset.under` needs of a cluster: its ``topic_prefix``
    (:class:`~orchestration.KafkaResource` has one)."""

    @property
    def topic_prefix(self) -> str: ...


@dataclass(frozen=True)
class ShuffleAsset:
    """A shuffle asset's layout and options, as its metadata declares them."""

    spec: ShuffleSpec
    window_column: str | None
    # How a run whose columns differ from the shuffle's is written (None: the IO manager's).
    schema_mode: str | None = None
    # A run whose rows' event times fall outside its window is not committed.
    refuse_outside_window: bool = False

    @property
    def topic(self) -> str:
        return self.spec.topic

    def under(self, kafka: TopicPrefixed) -> "ShuffleAsset":
        """The shuffle as it lives on ``kafka``'s cluster: its topic with the resource's
        ``topic_prefix`` before it. The one place the prefix is applied: the IO manager, the
        sensors, the checks and the expiry job all take the topic from here.

        Example::

            shuffle_asset(name, key.path, metadata).under(io_manager.kafka).topic
        """
        if not kafka.topic_prefix:
            return self
        # Rebuilt, not edited, so ShuffleSpec checks the longer name as it checks any topic.
        return replace(self, spec=replace(self.spec, topic=kafka.topic_prefix + self.spec.topic))


def declaration_differences(
    asset: ShuffleAsset, layout: Layout, metadata: Mapping[str, Any] | None = None
) -> list[str]:
    """How an asset's declaration of a shuffle differs from its commit log's latest layout,
    each difference named: key, partitions (a declaration still naming a count the shuffle
    grew from says so), key groups, event time, and the columns of a declared
    ``dagster/column_schema`` (``metadata``: the asset's definition metadata), which a
    consumer's ``AssetSpec`` may have copied before the producer's schema evolved."""
    spec = asset.spec
    out = []
    if tuple(spec.key) != layout.key:
        out.append(f"key: declared {list(spec.key)}, the shuffle's is {list(layout.key)}")
    if spec.num_partitions != layout.num_partitions:
        counts = sorted({v.num_partitions for v in layout.versions})
        grown = (
            f" since layout version {layout.version} (grown from {spec.num_partitions})"
            if spec.num_partitions in counts
            else ""
        )
        out.append(
            f"num_partitions: declared {spec.num_partitions}, the shuffle has "
            f"{layout.num_partitions}{grown}"
        )
    if spec.max_parallelism != layout.max_parallelism:
        out.append(
            f"max_parallelism: declared {spec.max_parallelism}, the shuffle's is "
            f"{layout.max_parallelism}"
        )
    if spec.event_time != layout.event_time:
        out.append(
            f"event_time: declared {spec.event_time!r}, the shuffle's is {layout.event_time!r}"
        )
    declared = _value((metadata or {}).get(COLUMN_SCHEMA))
    columns = getattr(declared, "columns", None)
    if columns is not None:
        have = {f.name: type_name(f.type) for f in layout.schema}
        told = {c.name: c.type for c in columns}
        for name, t in told.items():
            if name not in have:
                out.append(
                    f"column {name!r}: declared, not in the shuffle's schema (version "
                    f"{layout.version})"
                )
            elif have[name] != t:
                out.append(f"column {name!r}: declared {t}, the shuffle's is {have[name]}")
        for name, t in have.items():
            if name not in told:
                out.append(f"column {name!r} ({t}): in the shuffle's schema, not declared")
    return out


# Dagster's standard key of an asset's columns.
COLUMN_SCHEMA = "dagster/column_schema"


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
        mode = md.get("schema_mode")
        if mode is not None:
            check_schema_mode(mode, "metadata 'shuffle/schema_mode'")
        refuse = md.get("refuse_outside_window", False)
        if not isinstance(refuse, bool):
            raise ShuffleOptionError(
                f"metadata 'shuffle/refuse_outside_window' must be a bool, got {refuse!r}"
            )
        if refuse and spec.event_time is None:
            raise ShuffleOptionError(
                "metadata 'shuffle/refuse_outside_window' needs 'shuffle/event_time'"
            )
    except ShuffleOptionError as exc:
        raise ShuffleOptionError(f"asset {asset}: {exc}") from None
    return ShuffleAsset(spec, column("window_column"), mode, refuse)


# What Dagster's AssetSpec.with_io_manager_key sets.
IO_MANAGER_KEY_METADATA = "dagster/io_manager_key"


def asset_shuffle(asset: AssetsDefinition | AssetSpec) -> ShuffleAsset:
    """The shuffle an asset declares in its metadata: the producer's own asset (stored by
    ``KafkaShuffleIOManager``), or an ``AssetSpec`` by which another code location declares
    it (with ``shuffle_metadata`` and the shuffle IO manager's key)."""
    key = asset.key
    return shuffle_asset(key.to_user_string(), key.path, declared_metadata(asset))


def declared_metadata(asset: AssetsDefinition | AssetSpec) -> Mapping[str, Any]:
    """The definition metadata of a shuffle asset, or of the ``AssetSpec`` declaring it."""
    if isinstance(asset, AssetSpec):
        return asset.metadata
    return asset.specs_by_key[asset.key].metadata


def asset_io_manager_key(asset: AssetsDefinition | AssetSpec) -> str:
    """The resource key of the IO manager that stores ``asset`` (an ``AssetSpec``: the key
    ``with_io_manager_key`` gave it)."""
    if isinstance(asset, AssetSpec):
        key = asset.metadata.get(IO_MANAGER_KEY_METADATA)
        if not key:
            raise ShuffleOptionError(
                f"asset {asset.key.to_user_string()}: an AssetSpec of a shuffle names the "
                "shuffle IO manager's resource key: AssetSpec(...).with_io_manager_key("
                "'shuffle_io')"
            )
        return str(getattr(key, "value", key))
    return asset.get_io_manager_key_for_asset_key(asset.key)


def window_ends(
    partitions_def: PartitionsDefinition | None, keys: Sequence[str]
) -> dict[str, dt.datetime]:
    """When each partition of ``keys`` ends, in UTC, for a time-window partitions definition
    (a run of the window is complete until then); empty for any other."""
    if not isinstance(partitions_def, TimeWindowPartitionsDefinition):
        return {}
    return {k: partitions_def.time_window_for_partition_key(k).end.astimezone(dt.UTC) for k in keys}


class Cluster(TopicPrefixed, Protocol):
    """What :func:`shuffle_asset_spec` needs of a cluster (a
    :class:`~orchestration.KafkaResource`): its topic prefix and a client."""

    def client(self) -> KafkaClient: ...


def shuffle_asset_spec(
    key: str | Sequence[str] | AssetKey,
    *,
    kafka: Cluster,
    topic: str | None = None,
    partitions_def: PartitionsDefinition | None = None,
    window_column: str | None = None,
    io_manager_key: str = "shuffle_io",
    **spec_args: Any,
) -> AssetSpec:
    """The ``AssetSpec`` by which a consumer team's code location declares a shuffle that
    another location produces, its ``shuffle_metadata`` read from the shuffle's commit log
    (the key, partitions, key groups and event time the producer created it with), so the
    team does not retype the producer's metadata.

    It reads the commit log when the definitions load (one small read, a second at most):
    a location that must load while Kafka is unreachable writes the spec itself, with the
    producer's ``shuffle_metadata``.

    Example::

        events = shuffle_asset_spec("events", kafka=kafka, partitions_def=daily)
        shuffle_commit_sensor("events_commits", asset=events, jobs=[report_job])

    Args:
        key: The producer's asset key.
        kafka: The cluster (a ``KafkaResource``; its ``topic_prefix`` applies).
        topic: The shuffle's topic, if the producer's metadata names one (default: the
            key's path joined with ".").
        partitions_def: The producer's partitions definition.
        window_column: The producer's ``shuffle/window_column``, if it has one.
        io_manager_key: The shuffle IO manager's resource key in this location.
        spec_args: More ``AssetSpec`` arguments (``group_name``, ``description``, ...).

    Raises:
        ShuffleTopicNotFoundError: The shuffle does not exist yet (the producer never ran).
    """
    asset_key = AssetKey.from_coercible(key)
    name = topic or ".".join(asset_key.path)
    layout = read_log(kafka.client(), kafka.topic_prefix + name).require_layout()
    metadata = shuffle_metadata(
        key=layout.key[0] if len(layout.key) == 1 else list(layout.key),
        num_partitions=layout.num_partitions,
        max_parallelism=layout.max_parallelism,
        event_time=layout.event_time,
        topic=topic,
        window_column=window_column,
    )
    spec = AssetSpec(asset_key, partitions_def=partitions_def, metadata=metadata, **spec_args)
    return spec.with_io_manager_key(io_manager_key)


def shuffle_pool(topic: str) -> str:
    """The Dagster concurrency pool of the assets that write the shuffle ``topic`` (as its
    metadata names it, without the resource's ``topic_prefix``).

    Give it to the producer asset (``@asset(pool=shuffle_pool("events"))``; the
    ``KafkaShuffle`` component does) and limit the instance's pools to one at a time
    (``concurrency: pools: default_limit: 1`` in ``dagster.yaml``): a retry by the
    failed-region sensor, a user's re-run of the same day and a backfill overlapping a
    schedule then write the shuffle one after the other, so Dagster's materializations come
    in the order of Kafka's commit records. Without it, two writers of one window still
    leave readers exactly one of the two runs (the later commit), but Dagster's latest
    materialization of the window may be the other.
    """
    return POOL_PREFIX + topic


def windows_failure(
    asset: str, windows: int, committed: Sequence[str], failed: Mapping[str, str], by: str = ""
) -> tuple[Failure, ShuffleWriteError]:
    """The ``Failure`` a run over ``windows`` windows ends with when some of them did not
    commit (and the error it is raised from): its metadata names the failed windows
    (:data:`FAILED_WINDOWS_TAG`), the committed ones and each failure's reason, for
    ``failed_region_sensor`` and the UI. ``by`` says who wrote them, for the message."""
    error = ShuffleWriteError(
        f"asset {asset}: {len(failed)} of {windows} window(s) failed and were not "
        f"committed{by}: {dict(failed)}"
    )
    failure = Failure(
        description=str(error),
        metadata={
            FAILED_WINDOWS_TAG: ",".join(sorted(failed)),
            "shuffle/committed_windows": ",".join(sorted(committed)),
            "shuffle/errors": MetadataValue.json(dict(failed)),
        },
    )
    return failure, error
