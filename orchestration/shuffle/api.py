"""The public API: describe a shuffle, write one run of it, read it back, ask its watermark."""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from orchestration.shuffle.core import aggregation as agg
from orchestration.shuffle.core import frames as fr
from orchestration.shuffle.core.commitlog import (
    Commit,
    Layout,
    ShuffleLog,
    TaskResult,
    commit_topic,
    from_micros,
    to_micros,
)
from orchestration.shuffle.core.keygroups import validate_layout
from orchestration.shuffle.core.metrics import BatchMetrics, offsets_behind, progress_metrics
from orchestration.shuffle.core.options import kafka_to_options
from orchestration.shuffle.core.reader import AUTO, ReadPlan, SplitPlan, balance_splits
from orchestration.shuffle.errors import (
    ShuffleKeyError,
    ShuffleOptionError,
    ShuffleSchemaError,
    ShuffleWriteError,
)
from orchestration.shuffle.kafka.client import check_reachable, client_config
from orchestration.shuffle.kafka.commitlog import (
    create_or_check,
    read_commits_since,
    read_log,
    read_plan,
)
from orchestration.shuffle.spark.columnar import ColumnarPlan, ColumnarUnavailable, plan_columnar
from orchestration.shuffle.spark.perkey import KEY_METADATA
from orchestration.shuffle.spark.reader import output_schema
from orchestration.shuffle.spark.session import register_data_sources, task_slots
from orchestration.shuffle.spark.writer import (
    DEFAULT_FRAME_ROWS,
    ColumnarProducerTask,
    ProducerTask,
    WriteOptions,
    commit_run,
)
from orchestration.shuffle.testing import write_attempts_to_fail

log = logging.getLogger(__name__)

# WriteResult.path: how the rows reached the producer tasks.
COLUMNAR_PATH = "columnar"
ROWS_PATH = "rows"


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
    """

    topic: str
    key: tuple[str, ...] | str
    num_partitions: int
    max_parallelism: int = 128
    event_time: str | None = None
    max_out_of_orderness: dt.timedelta = dt.timedelta(0)
    replication_factor: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.key, str):
            object.__setattr__(self, "key", (self.key,))
        else:
            object.__setattr__(self, "key", tuple(self.key))
        if not self.key:
            raise ShuffleOptionError(f"shuffle {self.topic!r}: key must name at least one column")
        if not self.topic:
            raise ShuffleOptionError("shuffle topic must not be empty")
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


def _arrow_schema(df: DataFrame) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(df.schema, timezone="UTC")
    fields = []
    for f in schema:
        t = f.type
        if pa.types.is_timestamp(t) and t.tz is not None:
            # Instants are stored in UTC whatever the session's time zone.
            t = pa.timestamp(t.unit, tz="UTC")
        # Nullability is not part of a shuffle's contract: Spark infers it differently
        # from one plan to the next, and key columns are checked for nulls row by row.
        fields.append(pa.field(f.name, t, nullable=True))
    return pa.schema(fields)


def _check_columns(df: DataFrame, spec: ShuffleSpec) -> None:
    names = df.columns
    for c in spec.key:
        if c not in names:
            raise ShuffleSchemaError(f"shuffle {spec.topic!r}: key column {c!r} is not in {names}")
    if fr.KEY_GROUP_COLUMN in names:
        raise ShuffleSchemaError(
            f"shuffle {spec.topic!r}: column name {fr.KEY_GROUP_COLUMN!r} is reserved"
        )
    if spec.event_time is not None:
        if spec.event_time not in names:
            raise ShuffleSchemaError(
                f"shuffle {spec.topic!r}: event_time column {spec.event_time!r} is not in {names}"
            )
        t = df.schema[spec.event_time].dataType
        if not isinstance(t, T.TimestampType):
            raise ShuffleSchemaError(
                f"shuffle {spec.topic!r}: event_time column {spec.event_time!r} must be a "
                f"timestamp, not {t.simpleString()}"
            )


def _count_null_keys(df: DataFrame, key: Sequence[str]) -> int:
    cond = F.lit(False)
    for c in key:
        cond = cond | F.col(c).isNull()
    return df.filter(cond).count()


def write_shuffle(
    df: DataFrame,
    spec: ShuffleSpec,
    *,
    kafka: Mapping[str, Any],
    window: str | None = None,
    complete_until: dt.datetime | None = None,
    frame_rows: int | None = None,
    compression: str = "lz4",
    attrs: Mapping[str, str] | None = None,
    columnar: bool | None = None,
) -> WriteResult:
    """Writes ``df`` as one producer run of the shuffle ``spec``, and commits it.

    The run becomes visible to readers only once every Spark task has finished and its
    commit record is written; a failed run leaves nothing visible. A committed run with
    the same ``window`` as earlier ones supersedes them.

    Rows reach the producer tasks one of two ways (``WriteResult.path``):

    - ``"columnar"``: ``df`` is a plain scan of Parquet files on a local file system
      (Hive-style partition directories included; optionally a selection of its columns,
      optionally filtered by comparisons, ``IS [NOT] NULL``, ``IN``, ``AND``, ``OR`` and
      ``NOT`` of a column and literals, or by any condition on partition columns alone),
      with key columns of a type hashed in Arrow (booleans, integers, dates, timestamps,
      floating point, strings, binary, decimals up to 18 digits). Each task reads its
      share of the files' row groups with pyarrow and computes key groups in numpy, so the
      rows never become JVM rows; it runs as many tasks as Spark's scan of ``df`` would.
    - ``"rows"``: anything else. Spark adds ``_key_group`` with its own ``hash`` and hands
      the rows to the tasks (``mapInArrow``).

    Both give the same rows, key groups, partitions and guarantees.

    Args:
        df: The rows. Key columns must not be null.
        spec: The shuffle; created on first write, checked against its layout after.
        kafka: librdkafka settings; ``bootstrap.servers`` is required.
        window: Optional label of what this run covers (e.g. a Dagster partition key).
        complete_until: Optional: the run declares event time complete up to here.
        frame_rows: Rows per DATA frame per partition (default 65536).
        compression: Arrow IPC body compression: ``lz4`` (default, as Spark's own shuffle:
            the cheapest to write and read), ``zstd`` (about a quarter fewer bytes in Kafka
            for more CPU on both sides) or ``none``.
        attrs: Free-form strings stored in the commit record.
        columnar: None (default): the columnar path when it applies, else the row path.
            False: always the row path. True: the columnar path, or a
            :class:`ShuffleOptionError` saying why it does not apply.

    Returns:
        The committed run's :class:`WriteResult`.

    Raises:
        ShuffleKeyError: Some rows have a null key (nothing is written).
        ShuffleOptionError: ``columnar=True`` and the columnar path does not apply.
        ShuffleLayoutError: The shuffle exists with another key, partition count,
            max_parallelism or schema.
        ShuffleConnectionError: Kafka is unreachable.
        ShuffleWriteError: The Spark job failed; nothing was committed.
    """
    if columnar not in (None, True, False):
        raise ShuffleOptionError(
            f"shuffle {spec.topic!r}: columnar must be True, False or None, got {columnar!r}"
        )
    conf = client_config(kafka)
    _check_columns(df, spec)
    check_reachable(conf, topic=commit_topic(spec.topic))
    schema = _arrow_schema(df)
    plan = _columnar_plan(df, spec, schema, columnar)
    if plan is None or not plan.nulls_ruled_out:
        nulls = _count_null_keys(df, spec.key)
        if nulls:
            raise ShuffleKeyError(
                f"shuffle {spec.topic!r}: {nulls} row(s) have a null in key column(s) "
                f"{list(spec.key)}; nothing was written. Filter or fill them first."
            )
    layout, _ = create_or_check(
        conf,
        Layout(
            topic=spec.topic,
            key=tuple(spec.key),
            num_partitions=spec.num_partitions,
            max_parallelism=spec.max_parallelism,
            schema=schema,
            event_time=spec.event_time,
            max_out_of_orderness_us=spec.max_out_of_orderness // dt.timedelta(microseconds=1),
        ),
        spec.replication_factor,
    )
    run_id = str(uuid.uuid4())
    options = WriteOptions(
        topic=spec.topic,
        run_id=run_id,
        kafka=conf,
        num_partitions=layout.num_partitions,
        max_parallelism=layout.max_parallelism,
        event_time=spec.event_time,
        max_out_of_orderness_us=layout.max_out_of_orderness_us,
        frame_rows=frame_rows or DEFAULT_FRAME_ROWS,
        compression=None if compression == "none" else compression,
        fail_attempts_below=write_attempts_to_fail(),
    )
    if plan is not None:
        plan = plan.in_order(layout.schema.names)
        task = ColumnarProducerTask(options, plan.scan, spec.key, plan.assignments)
        # One row per task: row i stands for the row groups assigned to task i.
        tasks = df.sparkSession.range(0, plan.tasks, 1, plan.tasks)
        job = tasks.mapInArrow(task, ColumnarProducerTask.RESULT_SCHEMA)
        path = COLUMNAR_PATH
    else:
        keyed = df.select(*layout.schema.names).withColumn(
            fr.KEY_GROUP_COLUMN,
            F.pmod(F.hash(*[F.col(c) for c in spec.key]), F.lit(layout.max_parallelism)).cast(
                "int"
            ),
        )
        job = keyed.mapInArrow(ProducerTask(options), ProducerTask.RESULT_SCHEMA)
        path = ROWS_PATH
    try:
        rows = job.collect()
    except Exception as exc:  # Spark wraps task errors in its own exception types.
        raise ShuffleWriteError(
            f"run {run_id} of shuffle {spec.topic!r} (window {window!r}) failed and was not "
            f"committed: {_first_line(exc)}"
        ) from exc
    commit = commit_run(
        conf,
        spec.topic,
        run_id,
        window,
        to_micros(complete_until),
        [TaskResult.from_json(r.task_result) for r in rows],
        attrs,
    )
    return WriteResult(
        run_id=run_id,
        topic=spec.topic,
        window=window,
        rows=commit.rows,
        frames=commit.frames,
        bytes=commit.bytes,
        watermark=from_micros(commit.effective_watermark),
        offsets={p: (r.first, r.last) for p, r in commit.partitions.items()},
        commit=commit,
        path=path,
    )


def _columnar_plan(
    df: DataFrame, spec: ShuffleSpec, schema: pa.Schema, columnar: bool | None
) -> ColumnarPlan | None:
    """The columnar plan of a write, None for the row path (logged with the reason)."""
    if columnar is False:
        log.info("shuffle %r: writing through the row path (columnar=False)", spec.topic)
        return None
    try:
        plan = plan_columnar(df, schema, spec.key)
    except ColumnarUnavailable as exc:
        if columnar:
            raise ShuffleOptionError(
                f"shuffle {spec.topic!r}: columnar=True, but the columnar path does not "
                f"apply: {exc}"
            ) from None
        log.info("shuffle %r: writing through the row path: %s", spec.topic, exc)
        return None
    except Exception as exc:
        # Planning reads Spark's plan through internal classes that may differ in another
        # Spark version, and the files' footers. The row path is always right, so an
        # automatic choice falls back to it (loudly); an explicit one fails.
        if columnar:
            raise ShuffleOptionError(
                f"shuffle {spec.topic!r}: columnar=True, but planning the columnar path "
                f"failed: {_first_line(exc)}"
            ) from exc
        log.warning(
            "shuffle %r: planning the columnar path failed, writing through the row path",
            spec.topic,
            exc_info=True,
        )
        return None
    log.info(
        "shuffle %r: writing through the columnar path: %d task(s) read %d row group(s)",
        spec.topic,
        plan.tasks,
        sum(len(a) for a in plan.assignments),
    )
    return plan


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    for marker in ("ShuffleWriteError:", "ShuffleError", "Error:"):
        i = text.find(marker)
        if i >= 0:
            return text[i:].splitlines()[0][:500]
    return text.splitlines()[0][:500] if text else type(exc).__name__


def shuffle_log(topic: str, *, kafka: Mapping[str, Any]) -> ShuffleLog:
    """The shuffle's commit log: its layout and every committed run."""
    return read_log(client_config(kafka), topic)


def _key_tag(topic: str, layout: Layout, parallelism: int) -> dict:
    return {
        KEY_METADATA: {
            "topic": topic,
            "key": list(layout.key),
            "num_partitions": layout.num_partitions,
            "max_parallelism": layout.max_parallelism,
            "parallelism": parallelism,
        }
    }


class ShuffleRead:
    """A planned read of a shuffle: which committed runs, and which offsets each split reads.

    The plan is fixed when it is made (runs committed later are not seen), so the rows, the
    aggregates and the commits it reports all describe the same snapshot. Make one with
    :func:`plan_shuffle_read`.

    Example::

        read = plan_shuffle_read(spark, "flights.by_tailnum", kafka=conf, windows=["2013-01-01"])
        read.rows                                     # rows committed, from the commit log
        per_plane = read.aggregate({"flights": ("*", "count")})
        keyed = read.dataframe()                      # the rows, already keyed
    """

    def __init__(
        self,
        spark: SparkSession,
        topic: str,
        kafka: Mapping[str, Any],
        plan: ReadPlan,
        parallelism: int | str | None = None,
    ):
        self.spark = spark
        self.topic = topic
        self._kafka = dict(kafka)  # may hold credentials: never printed
        self.plan = plan
        self.parallelism = parallelism  # as asked: None is one split per Kafka partition

    def __repr__(self) -> str:
        return (
            f"ShuffleRead(topic={self.topic!r}, runs={[c.run_id for c in self.commits]}, "
            f"rows={self.rows})"
        )

    @property
    def layout(self) -> Layout:
        return self.plan.layout

    @property
    def commits(self) -> tuple[Commit, ...]:
        """The committed runs this read sees, in commit-log order."""
        return self.plan.commits

    @property
    def rows(self) -> int:
        """Rows those runs hold, from their commit records (no data is read)."""
        return self.plan.rows

    @property
    def windows(self) -> list[str | None]:
        return [c.window for c in self.commits]

    def _reader(self, splits: Sequence[SplitPlan] | None = None, **options: str) -> Any:
        register_data_sources(self.spark)
        plan = self.plan
        return self.spark.read.format("kafka-shuffle").options(
            topic=self.topic,
            layout=plan.layout.to_json(),
            plan=json.dumps([p.to_json() for p in (plan.splits if splits is None else splits)]),
            event_time_start="" if plan.event_time_start is None else str(plan.event_time_start),
            event_time_end="" if plan.event_time_end is None else str(plan.event_time_end),
            **options,
            **kafka_to_options(self._kafka),
        )

    def dataframe(self, *, with_metadata: bool = False) -> DataFrame:
        """The rows, already keyed: Spark partition *i* holds the key groups of split *i*.

        With ``with_metadata``, adds ``_partition``, ``_key_group``, ``_run_id``,
        ``_offset`` and ``_window``. The key columns carry metadata that
        :func:`apply_per_key` checks.
        """
        df = self._reader(with_metadata=str(with_metadata).lower()).load()
        tag = _key_tag(self.topic, self.layout, len(self.plan.splits))
        for c in self.layout.key:
            df = df.withMetadata(c, tag)
        return df

    def aggregate(self, aggregations: Mapping[str, tuple[str, str]]) -> DataFrame:
        """Aggregates the rows per key inside the reader (see :func:`aggregate_shuffle`).

        Without a ``parallelism`` asked for, the read runs as one task per core, each
        aggregating whole Kafka partitions (see :func:`~orchestration.shuffle.core.reader.
        balance_splits`): the output is one row per key, not keyed rows, so nothing needs
        a task per partition.
        """
        aggs = agg.parse(aggregations, output_schema(self.layout, False), self.layout.key)
        splits = self.plan.splits
        slots = task_slots(self.spark)
        if self.parallelism in (None, AUTO) and slots:
            layout = self.layout
            splits = balance_splits(splits, slots, layout.max_parallelism, layout.num_partitions)
        return self._reader(splits, aggregate=agg.to_json(aggs)).load()


def _micros_range(
    event_time_range: tuple[dt.datetime | None, dt.datetime | None] | None,
) -> tuple[int | None, int | None]:
    if event_time_range is None:
        return None, None
    start, end = event_time_range
    return to_micros(start), to_micros(end)


def plan_shuffle_read(
    spark: SparkSession,
    topic: str,
    *,
    kafka: Mapping[str, Any],
    windows: Iterable[str] | None = None,
    runs: Iterable[str] | None = None,
    event_time_range: tuple[dt.datetime | None, dt.datetime | None] | None = None,
    parallelism: int | str | None = None,
    log: ShuffleLog | None = None,
) -> ShuffleRead:
    """Plans a read of a shuffle's committed runs from its commit log (arguments as for
    :func:`read_shuffle`)."""
    conf = client_config(kafka)
    if log is None:
        # A refused client (authentication, TLS) is told so at once, not after a timeout.
        check_reachable(conf, topic=commit_topic(topic))
    start_us, end_us = _micros_range(event_time_range)
    plan = read_plan(
        conf,
        topic,
        log=log,
        windows=None if windows is None else list(windows),
        runs=None if runs is None else list(runs),
        event_time_start=start_us,
        event_time_end=end_us,
        parallelism=parallelism,
    )
    return ShuffleRead(spark, topic, conf, plan, parallelism)


def read_shuffle(
    spark: SparkSession,
    topic: str,
    *,
    kafka: Mapping[str, Any],
    windows: Iterable[str] | None = None,
    runs: Iterable[str] | None = None,
    event_time_range: tuple[dt.datetime | None, dt.datetime | None] | None = None,
    parallelism: int | str | None = None,
    with_metadata: bool = False,
    log: ShuffleLog | None = None,
) -> DataFrame:
    """Reads committed runs of a shuffle as a DataFrame that is already keyed.

    Example::

        keyed = read_shuffle(spark, "flights.by_tailnum", kafka=conf, windows=["2013-01-01"])

    Args:
        spark: Any SparkSession; the project's data sources are registered on it if needed.
        topic: The shuffle's data topic.
        kafka: librdkafka settings; ``bootstrap.servers`` is required.
        windows: Only these windows (their latest committed run each). Every window named
            must have a committed run.
        runs: Only these runs (even superseded ones).
        event_time_range: ``(start, end)``: only rows with ``start <= event time < end``;
            either bound may be None.
        parallelism: Spark partitions; default one per Kafka partition. ``"auto"``: the
            same, but a small read merges whole contiguous partitions so that each task
            reads about 500k rows or more (each task has a fixed cost). See
            :mod:`orchestration.shuffle.core.reader` for smaller and larger values.
        with_metadata: Add ``_partition``, ``_key_group``, ``_run_id``, ``_offset``,
            ``_window``.
        log: The shuffle's commit log if the caller has just read it (saves reading it
            again); by default it is read here.

    Returns:
        A DataFrame with exactly the written columns and types (plus metadata columns if
        asked). Its key columns carry metadata that :func:`apply_per_key` checks.

    Raises:
        ShuffleTopicNotFoundError: The shuffle does not exist.
        ShuffleWindowNotFoundError: A window or run named has no committed run.
    """
    read = plan_shuffle_read(
        spark,
        topic,
        kafka=kafka,
        windows=windows,
        runs=runs,
        event_time_range=event_time_range,
        parallelism=parallelism,
        log=log,
    )
    return read.dataframe(with_metadata=with_metadata)


def aggregate_shuffle(
    spark: SparkSession,
    topic: str,
    *,
    kafka: Mapping[str, Any],
    aggregations: Mapping[str, tuple[str, str]],
    windows: Iterable[str] | None = None,
    runs: Iterable[str] | None = None,
    event_time_range: tuple[dt.datetime | None, dt.datetime | None] | None = None,
    parallelism: int | str | None = None,
    log: ShuffleLog | None = None,
) -> DataFrame:
    """Aggregates committed runs of a shuffle per key, inside the reader.

    Equal to ``read_shuffle(...).groupBy(*key).agg(...)``, but the rows are aggregated
    as their frames are decoded (see :mod:`orchestration.shuffle.core.aggregation`): they never
    cross from Python to the JVM, no Spark shuffle runs, and a reader's memory follows
    the number of keys in its partition (plus one chunk of rows), not the number of rows.
    Frames decode only the key and the aggregated columns. Without ``parallelism``, the
    read runs one task per core, each aggregating whole Kafka partitions balanced by their
    committed rows.

    Example::

        per_plane = aggregate_shuffle(spark, "flights.by_tailnum", kafka=conf,
                                      aggregations={"flights": ("*", "count")})

    Args:
        aggregations: ``{output name: (column, function)}`` with functions ``count``,
            ``sum``, ``min``, ``max``, ``mean``; ``("*", "count")`` counts rows.
        Other arguments: as for :func:`read_shuffle`.

    Returns:
        One row per key: the key columns, then one column per aggregation, in order.
    """
    read = plan_shuffle_read(
        spark,
        topic,
        kafka=kafka,
        windows=windows,
        runs=runs,
        event_time_range=event_time_range,
        parallelism=parallelism,
        log=log,
    )
    return read.aggregate(aggregations)


def shuffle_commits_since(
    topic: str, *, kafka: Mapping[str, Any], offset: int = 0
) -> tuple[list[Commit], int]:
    """Commits appended to the shuffle's commit log from ``offset`` on, and the next offset.

    Incremental: a caller that keeps the returned offset reads only what is new.
    """
    return read_commits_since(client_config(kafka), topic, offset)


def shuffle_watermark(topic: str, *, kafka: Mapping[str, Any]) -> dt.datetime | None:
    """The shuffle's event-time completeness, from its commit log alone (no data scan)."""
    return from_micros(shuffle_log(topic, kafka=kafka).watermark())


def read_shuffle_stream(
    spark: SparkSession,
    topic: str,
    *,
    kafka: Mapping[str, Any],
    starting_offsets: str = "earliest",
    starting_timestamp: dt.datetime | None = None,
    max_runs_per_trigger: int | None = None,
    max_rows_per_trigger: int | None = None,
    parallelism: int | str | None = None,
    with_metadata: bool = False,
) -> DataFrame:
    """A streaming read of a shuffle: each micro-batch holds the runs committed since the
    previous one, keyed as a batch read is.

    Equal to ``spark.readStream.format("kafka-shuffle")`` with the matching options, plus the
    key metadata that :func:`apply_per_key` checks (inside ``foreachBatch``). A run that
    supersedes an earlier run of its window arrives as new data; with ``with_metadata`` its
    rows carry ``_run_id`` and ``_window``, so a sink can replace that window.

    Example::

        stream = read_shuffle_stream(spark, "flights.by_tailnum", kafka=conf,
                                     max_runs_per_trigger=1, with_metadata=True)
        query = (stream.writeStream.foreachBatch(replace_windows)
                 .option("checkpointLocation", "/chk/flights")
                 .trigger(availableNow=True).start())

    Args:
        starting_offsets: ``earliest`` (every visible committed run) or ``latest`` (runs
            committed after the query starts). A query restarted from its checkpoint goes on
            from there instead.
        starting_timestamp: Runs committed at or after this instant (wins over
            ``starting_offsets``).
        max_runs_per_trigger / max_rows_per_trigger: Whole runs per micro-batch; at least
            one run each.
        parallelism, with_metadata: As for :func:`read_shuffle`.
    """
    register_data_sources(spark)
    conf = client_config(kafka)
    layout = read_log(conf, topic).require_layout()
    options: dict[str, str] = {
        "topic": topic,
        "startingOffsets": starting_offsets,
        "with_metadata": str(with_metadata).lower(),
    }
    if starting_timestamp is not None:
        options["startingTimestamp"] = str(to_micros(starting_timestamp) // 1000)
    for name, value in (
        ("maxRunsPerTrigger", max_runs_per_trigger),
        ("maxRowsPerTrigger", max_rows_per_trigger),
        ("parallelism", parallelism),
    ):
        if value is not None:
            options[name] = str(value)
    df = spark.readStream.format("kafka-shuffle").options(**options, **kafka_to_options(conf))
    df = df.load()
    tag = _key_tag(topic, layout, parallelism or layout.num_partitions)
    for c in layout.key:
        df = df.withMetadata(c, tag)
    return df


def stream_metrics(query: Any) -> list[BatchMetrics]:
    """Per micro-batch metrics of this project's streaming sources in ``query``.

    From the query's recent progress reports (Spark keeps the last
    ``spark.sql.streaming.numRecentProgressUpdates``, 100 by default): records, offsets
    behind latest (min / max / avg over partitions, as Spark's Kafka source reports them),
    and what the source reported with its latest offset: for ``kafka-records``, offset
    commits succeeded / failed and records lost so far; for ``kafka-shuffle``, the runs
    each batch read and their bytes. See :mod:`orchestration.shuffle.core.metrics`;
    :func:`summarize_stream_metrics` totals them (e.g. for Dagster metadata).

    Example::

        query = stream.writeStream.foreachBatch(f).trigger(availableNow=True).start()
        query.awaitTermination()
        context.add_output_metadata(summarize_stream_metrics(stream_metrics(query)))
    """
    import json

    return progress_metrics([json.loads(p.json) for p in query.recentProgress])


def group_offsets_behind(
    kafka: Mapping[str, Any], group: str, topics: Sequence[str]
) -> dict[str, Any]:
    """How far consumer group ``group`` is behind the latest offsets of ``topics``: per
    partition (``"topic/partition"``) and min / max / avg, from the offsets the group
    committed (e.g. by a ``kafka-records`` read with ``commitOffsets``). A partition with no
    committed offset counts from its earliest offset."""
    from orchestration.shuffle.core.records import Subscription
    from orchestration.shuffle.spark.records import bounds, committed_offsets, discover

    conf = client_config(kafka)
    tps = discover(conf, Subscription(topics=tuple(topics)))
    limits = bounds(conf, tps)
    done = {tp: o for tp, o in committed_offsets(conf, group, tps).items() if o >= 0}
    lows = {tp: lo for tp, (lo, _) in limits.items()}
    latest = {tp: hi for tp, (_, hi) in limits.items()}
    behind = offsets_behind(done, latest, lows)
    out: dict[str, Any] = {
        "partitions": {
            f"{t}/{p}": max(0, latest[(t, p)] - done.get((t, p), lows[(t, p)])) for t, p in tps
        }
    }
    if behind is not None:
        out.update(
            min_offsets_behind_latest=behind.min,
            max_offsets_behind_latest=behind.max,
            avg_offsets_behind_latest=behind.avg,
        )
    return out
