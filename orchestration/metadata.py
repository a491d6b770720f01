"""How an asset says it is a shuffle: its definition metadata, read and checked in one place.

Example::

    @asset(io_manager_key="shuffle_io_manager",
           metadata=shuffle_metadata(key="user_id", num_partitions=8, event_time="ts"))
    def events_by_user(...) -> DataFrame: ...

Keys (all under ``shuffle/``): ``key`` (a column or a list), ``num_partitions`` (int),
``max_parallelism`` (int, default 128), ``event_time`` (optional column), ``topic`` (optional;
default the asset key path joined with "."; the Kafka resource's ``topic_prefix`` goes before
it, see :meth:`ShuffleAsset.under`), ``window_column`` (optional: the column whose
value is the partition key, needed to write a range of partitions in one run),
``replication_factor`` (optional int; default min(3, brokers)).

What a committed run's materialization or observation shows is :func:`commit_metadata`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from dagster import MetadataValue, TableColumn, TableColumnConstraints, TableSchema

from orchestration.shuffle import ShuffleOptionError, ShuffleSpec

if TYPE_CHECKING:
    from orchestration.resources import KafkaResource
    from orchestration.shuffle import Commit, Layout

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

    def under(self, kafka: KafkaResource) -> ShuffleAsset:
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


# --- what a committed run shows --------------------------------------------------------


def commit_metadata(
    commit: Commit,
    layout: Layout | None,
    kafka: KafkaResource | Mapping[str, Any],
    *,
    topic: str | None = None,
    write_path: str | None = None,
) -> dict[str, Any]:
    """The metadata of a committed run, for its materialization or an observation of it.

    Dagster's standard keys, which fill the UI's row count, columns and location:
    ``dagster/row_count`` (the run's rows), ``dagster/partition_row_count`` (the same, for a
    run of a window, i.e. a partition), ``dagster/column_schema`` (from the layout's Arrow
    schema; absent if ``layout`` is None) and ``dagster/uri``
    (``kafka://<bootstrap servers>/<topic>?window=<window>``). Then the shuffle's own:
    ``shuffle/topic``, ``shuffle/run_id``, ``shuffle/window`` ("" for a run without one),
    ``shuffle/committed_at``, ``shuffle/watermark`` (if the run declares one),
    ``shuffle/write_path`` (if given), ``rows``, ``bytes``, ``frames`` and ``offsets``
    (``{"partition": [first, last]}``).

    Args:
        commit: The run's commit record.
        layout: The shuffle's layout (``ShuffleLog.layout``).
        kafka: The cluster, as a :class:`~orchestration.KafkaResource` or a librdkafka
            config dict; only its bootstrap servers are shown, never its credentials.
        topic: The shuffle's topic; default ``layout.topic``.
        write_path: How the rows reached the producer tasks (``WriteResult.path``), when
            known.

    Example::

        log = shuffle_log("events.by_user", kafka=conf)
        commit = log.latest_by_window()["2024-01-01"]
        AssetObservation(asset_key=key, partition=commit.window,
                         metadata=commit_metadata(commit, log.layout, conf))
    """
    name = topic or (layout.topic if layout is not None else None)
    if not name:
        raise ShuffleOptionError(f"run {commit.run_id}: commit_metadata needs a topic or a layout")
    md: dict[str, Any] = {"dagster/row_count": commit.rows}
    if commit.window is not None:
        md["dagster/partition_row_count"] = commit.rows
    if layout is not None:
        md["dagster/column_schema"] = MetadataValue.table_schema(column_schema(layout))
    # A path value: the UI shows it as text to copy, where a link to kafka:// would lead nowhere.
    md["dagster/uri"] = MetadataValue.path(shuffle_uri(kafka, name, commit.window))
    md.update(
        {
            "shuffle/topic": name,
            "shuffle/run_id": commit.run_id,
            "shuffle/window": commit.window or "",
            "shuffle/committed_at": MetadataValue.timestamp(
                dt.datetime.fromisoformat(commit.committed_at)
            ),
        }
    )
    mark = commit.watermark_time
    if mark is not None:
        md["shuffle/watermark"] = MetadataValue.timestamp(mark)
    if write_path is not None:
        # "columnar" (the tasks read the Parquet files) or "rows" (handed over by Spark).
        md["shuffle/write_path"] = write_path
    md.update(
        {
            "rows": commit.rows,
            "bytes": commit.bytes,
            "frames": commit.frames,
            "offsets": MetadataValue.json(
                {str(p): [r.first, r.last] for p, r in sorted(commit.partitions.items())}
            ),
        }
    )
    return md


def shuffle_uri(kafka: KafkaResource | Mapping[str, Any], topic: str, window: str | None) -> str:
    """``kafka://<bootstrap servers>/<topic>[?window=<window>]``: where a shuffle's run lives.

    Only host:port pairs go in; a listener prefix (``SASL_SSL://``) is dropped, and
    credentials, which librdkafka keeps in settings of their own, never appear.
    """
    servers = (
        kafka.get("bootstrap.servers", "")
        if isinstance(kafka, Mapping)
        else kafka.bootstrap_servers
    )
    hosts = [s.strip().rpartition("://")[2].rpartition("@")[2] for s in str(servers).split(",")]
    uri = f"kafka://{','.join(h for h in hosts if h)}/{topic}"
    return uri if window is None else f"{uri}?window={window}"


def column_schema(layout: Layout) -> TableSchema:
    """The layout's Arrow schema as Dagster's table schema, with Spark SQL type names (the
    names a user of the DataFrame sees); key and event-time columns say so."""
    roles = {name: "shuffle key" for name in layout.key}
    if layout.event_time is not None:
        roles[layout.event_time] = "event time" + (
            " (and shuffle key)" if layout.event_time in layout.key else ""
        )
    return TableSchema(
        columns=[
            TableColumn(
                name=f.name,
                type=type_name(f.type),
                description=roles.get(f.name),
                constraints=TableColumnConstraints(nullable=f.nullable),
            )
            for f in layout.schema
        ]
    )


_SIMPLE_TYPES = {
    pa.bool_(): "boolean",
    pa.int8(): "tinyint",
    pa.int16(): "smallint",
    pa.int32(): "int",
    pa.int64(): "bigint",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.string(): "string",
    pa.large_string(): "string",
    pa.binary(): "binary",
    pa.large_binary(): "binary",
    pa.date32(): "date",
    pa.date64(): "date",
    pa.null(): "void",
}


def type_name(t: pa.DataType) -> str:
    """A readable name of an Arrow type: Spark SQL's where Spark has one
    (``bigint``, ``timestamp``, ``decimal(10,2)``, ``array<string>``), else Arrow's."""
    if t in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[t]
    if pa.types.is_timestamp(t):
        # Spark's two kinds: an instant (with a zone) or a wall-clock time (without).
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_map(t):
        return f"map<{type_name(t.key_type)},{type_name(t.item_type)}>"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return f"array<{type_name(t.value_type)}>"
    if pa.types.is_struct(t):
        fields = ",".join(
            f"{t.field(i).name}:{type_name(t.field(i).type)}" for i in range(t.num_fields)
        )
        return f"struct<{fields}>"
    if pa.types.is_dictionary(t):
        return type_name(t.value_type)
    return str(t)
