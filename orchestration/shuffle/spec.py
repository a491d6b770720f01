"""What a shuffle is (:class:`ShuffleSpec`), what a committed producer run wrote
(:class:`WriteResult`), and the steps every writer takes before it produces (the window
checked, the layout created or checked, the producers' options): Spark's
(:mod:`orchestration.shuffle.write`) and the one without Spark
(:mod:`orchestration.shuffle.table_write`) share them. Nothing here imports pyspark."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from orchestration.shuffle.core.commitlog import (
    Commit,
    Layout,
    commit_topic,
    from_micros,
    to_micros,
)
from orchestration.shuffle.core.evolution import check_schema_mode
from orchestration.shuffle.core.keygroups import validate_layout
from orchestration.shuffle.errors import ShuffleOptionError
from orchestration.shuffle.kafka.client import KafkaClient
from orchestration.shuffle.kafka.commitlog import create_or_check
from orchestration.shuffle.spark.writer import DEFAULT_FRAME_ROWS, WriteOptions
from orchestration.shuffle.testing import write_attempts_to_fail

# WriteResult.path: how the rows reached the producer.
COLUMNAR_PATH = "columnar"
ROWS_PATH = "rows"
# A pyarrow table or pandas frame written without Spark (write_table).
TABLE_PATH = "table"


@dataclass(frozen=True)
class ShuffleSpec:
    """What a shuffle is: its topic, key, partitions, key groups and event time.

    Example::

        spec = ShuffleSpec(topic="flights.by_tailnum", key=("tailnum",), num_partitions=8,
                           max_parallelism=128, event_time="sched_dep")

    Args:
        topic: The data topic; the commit log is ``<topic>__commits``.
        key: The key column(s).
        num_partitions: Kafka partitions of the data topic.
        max_parallelism: Number of key groups; the most consumer partitions a read can
            have without fetching a Kafka partition twice. Fixed at creation.
        event_time: Optional timestamp column that watermarks are computed from.
        max_out_of_orderness: How late an event may arrive behind the largest event time a
            producer subtask has seen.
        replication_factor: Replicas of the data topic and commit log when they are
            created (None: min(3, brokers)); ``min.insync.replicas`` is one less (at
            least 1), and producers write with ``acks=all``.
        sort_by: Optional order of each run's rows within each partition: the key columns
            (in the key's order), then optional further columns, all ascending with nulls
            first, as Spark orders them. Fixed at creation. Each run is then written by one
            Spark task per partition, which sorts its rows with Spark's own sort, and the
            JVM read reports the order to Spark (see the JVM read path guide, "Sorted runs").
    """

    topic: str
    key: tuple[str, ...] | str
    num_partitions: int
    max_parallelism: int = 128
    event_time: str | None = None
    max_out_of_orderness: dt.timedelta = dt.timedelta(0)
    replication_factor: int | None = None
    sort_by: tuple[str, ...] | str = ()

    def __post_init__(self) -> None:
        if isinstance(self.key, str):
            object.__setattr__(self, "key", (self.key,))
        else:
            object.__setattr__(self, "key", tuple(self.key))
        if not self.key:
            raise ShuffleOptionError(f"shuffle {self.topic!r}: key must name at least one column")
        sort_by = (self.sort_by,) if isinstance(self.sort_by, str) else tuple(self.sort_by or ())
        object.__setattr__(self, "sort_by", sort_by)
        problem = sort_by_problem(self.key, sort_by)
        if problem:
            raise ShuffleOptionError(f"shuffle {self.topic!r}: sort_by {list(sort_by)} {problem}")
        if not self.topic:
            raise ShuffleOptionError("shuffle topic must not be empty")
        problem = topic_name_problem(self.topic)
        if problem:
            raise ShuffleOptionError(f"shuffle topic {self.topic!r} {problem}")
        try:
            validate_layout(self.num_partitions, self.max_parallelism)
        except ValueError as exc:
            raise ShuffleOptionError(f"shuffle {self.topic!r}: {exc}") from None
        if self.max_out_of_orderness < dt.timedelta(0):
            raise ShuffleOptionError(f"shuffle {self.topic!r}: max_out_of_orderness is negative")


@dataclass(frozen=True)
class WriteResult:
    """What one committed producer run wrote.

    ``path`` says how the rows reached the producer tasks: ``"columnar"`` (the tasks read
    the Parquet files themselves) or ``"rows"`` (Spark handed them over, ``mapInArrow``).
    """

    run_id: str
    topic: str
    window: str | None
    rows: int
    frames: int
    bytes: int
    watermark: dt.datetime | None
    offsets: dict[int, tuple[int, int]]
    commit: Commit = field(repr=False)
    path: str = ROWS_PATH

    @classmethod
    def of(cls, commit: Commit, topic: str, path: str) -> WriteResult:
        """What the committed run ``commit`` of shuffle ``topic`` wrote, by ``path``."""
        return cls(
            run_id=commit.run_id,
            topic=topic,
            window=commit.window,
            rows=commit.rows,
            frames=commit.frames,
            bytes=commit.bytes,
            watermark=from_micros(commit.effective_watermark),
            offsets={p: (r.first, r.last) for p, r in commit.partitions.items()},
            commit=commit,
            path=path,
        )


# Kafka's own rule for topic names (kafka.common.internals.Topic): what a broker refuses.
_TOPIC_CHARS = re.compile(r"[a-zA-Z0-9._-]+")
_TOPIC_MAX = 249


def topic_name_problem(topic: str) -> str | None:
    """Why Kafka would refuse ``topic`` as a shuffle's data topic (its commit log,
    ``<topic>__commits``, must be a legal name too), or None.

    Example::

        topic_name_problem("flights/by tailnum")  # "holds characters ..."
    """
    if not isinstance(topic, str):
        return f"is a {type(topic).__name__}, not a string"
    if topic in (".", ".."):
        return "is not a name Kafka takes ('.' and '..' are refused)"
    if not _TOPIC_CHARS.fullmatch(topic):
        bad = sorted({c for c in topic if not _TOPIC_CHARS.fullmatch(c)})
        return (
            f"holds characters Kafka refuses in a topic name ({''.join(bad)!r}); "
            "only ASCII letters, digits, '.', '_' and '-' are allowed"
        )
    longest = _TOPIC_MAX - len(commit_topic(""))
    if len(topic) > longest:
        return (
            f"is {len(topic)} characters long; a shuffle's topic may have at most {longest} "
            f"(Kafka's limit of {_TOPIC_MAX}, less the commit log's suffix "
            f"{commit_topic('')!r})"
        )
    return None


def sort_by_problem(key: Sequence[str], sort_by: Sequence[str]) -> str | None:
    """Why ``sort_by`` cannot order a shuffle keyed by ``key``, or None (also for an empty
    ``sort_by``: no order). It must start with the key columns in the key's order, since
    each partition's rows are sorted as one sequence that groups, joins and windows by the
    key use; further columns may follow, each named once.

    Example::

        sort_by_problem(("k",), ("ts", "k"))  # "must start with the key ..."
    """
    if not sort_by:
        return None
    for i, c in enumerate(sort_by):
        if not isinstance(c, str) or not c:
            return f"names {c!r}, not a column name"
        if c in sort_by[:i]:
            return f"names column {c!r} twice"
    for i, k in enumerate(key):
        if i >= len(sort_by) or sort_by[i] != k:
            got = "ends" if i >= len(sort_by) else f"has column {sort_by[i]!r}"
            return (
                f"must start with the key columns {list(key)} in that order; at position "
                f"{i} it {got} where key column {k!r} belongs"
            )
    return None


def check_window(spec: ShuffleSpec, window: object) -> None:
    """Refuses a ``window`` that is not a string or None."""
    if window is not None and not isinstance(window, str):
        raise ShuffleOptionError(
            f"shuffle {spec.topic!r}: window must be a string or None, got "
            f"{type(window).__name__} {window!r}"
        )


def created_layout(
    client: KafkaClient, spec: ShuffleSpec, schema: pa.Schema, schema_mode: str | None = None
) -> Layout:
    """The shuffle's layout: created with its topics on first write, else the latest version
    checked against ``spec`` and ``schema`` in ``schema_mode`` (``"strict"``, the default, or
    ``"merge"``, which records a new version first when ``schema`` adds or widens columns).
    Its ``version`` is the one the run records."""
    mode = check_schema_mode(schema_mode, f"shuffle {spec.topic!r}")
    layout, _ = create_or_check(
        client,
        Layout(
            topic=spec.topic,
            key=tuple(spec.key),
            num_partitions=spec.num_partitions,
            max_parallelism=spec.max_parallelism,
            schema=schema,
            event_time=spec.event_time,
            max_out_of_orderness_us=spec.max_out_of_orderness // dt.timedelta(microseconds=1),
            sort_by=tuple(spec.sort_by),
        ),
        spec.replication_factor,
        schema_mode=mode,
        made_by=f"a write with schema_mode={mode!r}",
    )
    return layout


def bounds_us(
    spec: ShuffleSpec, bounds: tuple[dt.datetime, dt.datetime] | None
) -> tuple[int, int] | None:
    """A write's ``event_time_bounds`` in epoch microseconds (naive times: UTC).

    Raises:
        ShuffleOptionError: Bounds on a shuffle without an event-time column, or not a pair
            of datetimes with start before end.
    """
    if bounds is None:
        return None
    where = f"shuffle {spec.topic!r}: event_time_bounds"
    if spec.event_time is None:
        raise ShuffleOptionError(f"{where} needs an event_time column; the shuffle has none")
    if (
        not isinstance(bounds, tuple | list)
        or len(bounds) != 2
        or not all(isinstance(b, dt.datetime) for b in bounds)
    ):
        raise ShuffleOptionError(f"{where} must be (start, end) datetimes, got {bounds!r}")
    start, end = to_micros(bounds[0]), to_micros(bounds[1])
    if start >= end:
        raise ShuffleOptionError(f"{where}: start {bounds[0]} is not before end {bounds[1]}")
    return start, end


def written_columns(layout: Layout, schema: pa.Schema) -> list[str]:
    """The columns a run of ``schema`` writes, in the layout's order: all of the layout's,
    or (a write with ``schema_mode="merge"``) those the run has; the others read as null."""
    return [n for n in layout.schema.names if schema.get_field_index(n) >= 0]


def run_options(
    client: KafkaClient,
    spec: ShuffleSpec,
    layout: Layout,
    window: str | None,
    frame_rows: int | None,
    compression: str,
) -> WriteOptions:
    """The producers' options for a new run (its id made here) of the shuffle ``layout``."""
    return WriteOptions(
        topic=spec.topic,
        run_id=str(uuid.uuid4()),
        kafka=client,
        num_partitions=layout.num_partitions,
        max_parallelism=layout.max_parallelism,
        event_time=spec.event_time,
        max_out_of_orderness_us=layout.max_out_of_orderness_us,
        frame_rows=frame_rows or DEFAULT_FRAME_ROWS,
        compression=None if compression == "none" else compression,
        fail_attempts_below=write_attempts_to_fail(spec.topic, window),
    )
