"""Reading a shuffle: plan a read of its committed runs and read them keyed, aggregated or as a
stream; ask its commit log and watermark; follow what a streaming read did. And a batch read
of any topic's plain records (:func:`read_records`), on the JVM when the session can.

What a read selects is one object, :class:`~orchestration.shuffle.core.planner.ReadOptions`,
whatever the entry: :func:`plan_shuffle_read`, :func:`read_shuffle` and
:func:`aggregate_shuffle` build it from their keyword arguments
(:class:`~orchestration.shuffle.core.planner.ReadSelection`), and hand it to the
``kafka-shuffle`` data source as its string options.
"""

from __future__ import annotations

import datetime as dt
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Unpack

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from orchestration.shuffle.core import aggregation as agg
from orchestration.shuffle.core.commitlog import (
    Commit,
    Layout,
    ShuffleLog,
    commit_topic,
    from_micros,
    to_micros,
)
from orchestration.shuffle.core.metrics import BatchMetrics, offsets_behind, progress_metrics
from orchestration.shuffle.core.optiondefs import check_keywords
from orchestration.shuffle.core.planner import (
    AUTO,
    ReadOptions,
    ReadPlan,
    ReadSelection,
    SplitPlan,
    balance_splits,
)
from orchestration.shuffle.core.records import OWNER, parse_options
from orchestration.shuffle.core.stream import StreamOptions
from orchestration.shuffle.errors import ShuffleOptionError, ShuffleSessionError
from orchestration.shuffle.kafka.client import KafkaClient, KafkaConfig
from orchestration.shuffle.kafka.commitlog import read_commits_since, read_log
from orchestration.shuffle.kafka.planner import plan_shuffle
from orchestration.shuffle.kafka.reader import output_schema
from orchestration.shuffle.spark.compat import require_admission_control
from orchestration.shuffle.spark.jvm import (
    ENGINES,
    SMALL_READ_ROWS,
    Engine,
    choose_engine,
    choose_stream_engine,
    jvm_available,
    jvm_splits,
    load_jvm,
    load_jvm_stream,
)
from orchestration.shuffle.spark.perkey import KEY_METADATA
from orchestration.shuffle.spark.reader import SOURCE, read_in_tasks, source_options
from orchestration.shuffle.spark.records import KafkaRecordsReader, discover
from orchestration.shuffle.spark.session import is_connect, task_slots
from orchestration.shuffle.spark.sources import register_data_sources


def shuffle_log(topic: str, *, kafka: KafkaConfig) -> ShuffleLog:
    """The shuffle's commit log: its layout and every committed run."""
    return read_log(KafkaClient.of(kafka), topic)


def _key_tag(topic: str, layout: Layout, parallelism: int | str) -> dict:
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

    Attributes:
        spark: The session the read runs on.
        topic: The shuffle's data topic.
        plan: The commits read and the splits (one per Spark partition).
        options: The read's options, as asked (see
            :class:`~orchestration.shuffle.core.planner.ReadOptions`).
    """

    def __init__(
        self,
        spark: SparkSession,
        topic: str,
        kafka: KafkaConfig,
        plan: ReadPlan,
        options: ReadOptions | None = None,
    ):
        self.spark = spark
        self.topic = topic
        self._kafka = KafkaClient.of(kafka)
        self.plan = plan
        self.options = options if options is not None else ReadOptions()

    def __repr__(self) -> str:
        return (
            f"ShuffleRead(topic={self.topic!r}, runs={[c.run_id for c in self.commits]}, "
            f"rows={self.rows})"
        )

    @property
    def parallelism(self) -> int | str | None:
        """The parallelism asked for (``"auto"`` unless given): None is one split per Kafka
        partition."""
        return self.options.parallelism

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

    def _load(
        self,
        options: ReadOptions,
        splits: Sequence[SplitPlan] | None = None,
        aggregate: Sequence[agg.Aggregation] = (),
    ) -> DataFrame:
        planned = (self.layout, self.plan.splits if splits is None else splits)
        given = source_options(self.topic, self._kafka, options, plan=planned, aggregate=aggregate)
        if aggregate and not is_connect(self.spark):
            # Aggregates are no keyed rows: read in tasks of ours, with no planning in Python.
            return read_in_tasks(self.spark, given)
        register_data_sources(self.spark)
        return self.spark.read.format(SOURCE).options(**given).load()

    def dataframe(self, *, with_metadata: bool = False, engine: Engine = "auto") -> DataFrame:
        """The rows, already keyed: Spark partition *i* holds the key groups of split *i*.

        With ``with_metadata``, adds ``_partition``, ``_key_group``, ``_run_id``,
        ``_offset`` and ``_window``. The key columns carry metadata that
        :func:`apply_per_key` checks.

        ``engine``: ``"jvm"`` reads with the JVM source (see
        :mod:`orchestration.shuffle.spark.jvm`: Spark then sees the rows as keyed, so
        ``groupBy``, windows and joins on the key need no Exchange; ``"auto"`` parallelism is
        one split per Kafka partition there, or one split, still keyed, for a read of at most
        ``small_read_rows`` rows: see :mod:`orchestration.shuffle.spark.jvm`), ``"python"``
        with the Python one, ``"auto"`` with the JVM when the session has its jar and a
        catalog for this cluster.
        """
        options = replace(self.options, with_metadata=with_metadata)
        catalog = choose_engine(self.spark, self._kafka, engine)
        if catalog is not None:
            # The JVM table tags its key columns itself (ShuffleTable.keyTagged): a
            # withMetadata here would cost another analysis of the plan (~18 ms).
            return self._load_jvm(catalog, options, tuple(jvm_splits(self.plan, self.parallelism)))
        df = self._load(options)
        tag = _key_tag(self.topic, self.layout, len(self.plan.splits))
        for c in self.layout.key:
            df = df.withMetadata(c, tag)
        return df

    def _load_jvm(
        self, catalog: str, options: ReadOptions, splits: Sequence[SplitPlan]
    ) -> DataFrame:
        planned = (self.layout, tuple(splits))
        given = source_options(self.topic, self._kafka, options, plan=planned)
        if self.parallelism != AUTO:
            # A parallelism asked for is kept: a small read is one split only by default.
            given[SMALL_READ_ROWS] = "0"
        return load_jvm(self.spark, catalog, given)

    def aggregate(
        self, aggregations: Mapping[str, tuple[str, str]], *, engine: Engine = "auto"
    ) -> DataFrame:
        """Aggregates the rows per key (see :func:`aggregate_shuffle`).

        ``engine="auto"`` or ``"python"``: the Python reader aggregates as it decodes; without a
        ``parallelism`` asked for, that read runs as one task per core, each aggregating
        whole Kafka partitions (see :func:`~orchestration.shuffle.core.planner.
        balance_splits`): the output is one row per key, not keyed rows, so nothing needs a
        task per partition. ``engine="jvm"``: Spark's own ``groupBy(*key).agg(...)`` over
        the keyed JVM read, which the read runs itself when it can (one task per core, no
        Exchange, no Python process; docs/guides/jvm.md), else Spark aggregates it. The
        Python reader is the default: the JVM's code is compiled as it runs, so a session's
        first reads aggregate faster there (docs/performance.md).
        """
        if engine not in ENGINES:
            raise ShuffleOptionError(f"engine must be one of {ENGINES}, got {engine!r}")
        aggs = agg.parse(aggregations, output_schema(self.layout, False), self.layout.key)
        if engine == "jvm":
            catalog = choose_engine(self.spark, self._kafka, engine)
            assert catalog is not None  # "jvm" without the JVM path raises
            return self._aggregate_on_jvm(catalog, aggs)
        splits: Sequence[SplitPlan] = self.plan.splits
        slots = task_slots(self.spark)
        if self.parallelism in (None, AUTO) and slots:
            layout = self.layout
            splits = balance_splits(splits, slots, layout.max_parallelism, layout.num_partitions)
        return self._load(replace(self.options, with_metadata=False), splits, aggs)

    def _aggregate_on_jvm(self, catalog: str, aggs: Sequence[agg.Aggregation]) -> DataFrame:
        """``aggs`` as Spark's ``groupBy(*key).agg`` over the JVM read, each output column
        cast to the type the Python reader gives it, so that both engines return one schema
        (``mean`` is the mean of the values as doubles on both)."""
        from pyspark.sql import functions as F

        from orchestration.shuffle.spark.compat import from_arrow_schema_ntz

        options = replace(self.options, with_metadata=False)
        splits = jvm_splits(self.plan, self.parallelism)
        df = self._load_jvm(catalog, options, tuple(splits))
        arrow = agg.PartialAggregator(
            self.layout.key, aggs, output_schema(self.layout, False)
        ).output_schema()
        types = {f.name: f.dataType for f in from_arrow_schema_ntz(arrow).fields}
        spark_function = {"count": F.count, "sum": F.sum, "min": F.min, "max": F.max}
        schema = output_schema(self.layout, False)
        columns = []
        for a in aggs:
            if a.column == agg.ALL_ROWS:
                column = F.count(F.lit(1))
            elif a.function == "mean" and _numeric(schema.field(a.column).type):
                # Spark's avg of any number but a decimal is of the values as doubles; taken
                # as it is, a column the JVM read can aggregate itself (no cast in between).
                column = F.avg(_column(a.column))
            elif a.function == "mean":
                column = F.avg(_column(a.column).cast("double"))
            else:
                column = spark_function[a.function](_column(a.column))
            columns.append(column.cast(types[a.name]).alias(a.name))
        return df.groupBy(*[_column(k) for k in self.layout.key]).agg(*columns)


def _numeric(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t))


def _column(name: str) -> Any:
    """The column ``name`` taken as it is (a dot or a backquote in it is no path)."""
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def _check_selection(function: Callable[..., Any], selection: Mapping[str, Any]) -> None:
    """Refuses keywords ``function`` does not take: Python checks named parameters, but
    ``**selection`` would take any, so a misspelled ``window=`` would read every window."""
    named = [
        p.name
        for p in inspect.signature(function).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    check_keywords(function.__name__, selection, [*ReadSelection.__annotations__, *named])


def plan_shuffle_read(
    spark: SparkSession,
    topic: str,
    *,
    kafka: KafkaConfig,
    log: ShuffleLog | None = None,
    **selection: Unpack[ReadSelection],
) -> ShuffleRead:
    """Plans a read of a shuffle's committed runs from its commit log; the
    :class:`ShuffleRead` returned reads them (arguments as for :func:`read_shuffle`)."""
    _check_selection(plan_shuffle_read, selection)
    client = KafkaClient.of(kafka)
    options = ReadOptions.select(**selection)
    if log is None:
        # A refused client (authentication, TLS) is told so at once, not after a timeout.
        client.check_reachable(commit_topic(topic))
    plan = plan_shuffle(client, topic, options, log)
    return ShuffleRead(spark, topic, client, plan, options)


def read_shuffle(
    spark: SparkSession,
    topic: str,
    *,
    kafka: KafkaConfig,
    with_metadata: bool = False,
    log: ShuffleLog | None = None,
    engine: Engine = "auto",
    **selection: Unpack[ReadSelection],
) -> DataFrame:
    """Reads committed runs of a shuffle as a DataFrame that is already keyed.

    Example::

        keyed = read_shuffle(spark, "flights.by_tailnum", kafka=conf, windows=["2013-01-01"])

    Args:
        spark: Any SparkSession; the project's data sources are registered on it if needed.
        topic: The shuffle's data topic.
        kafka: A :class:`~orchestration.shuffle.kafka.client.KafkaClient`, or librdkafka
            settings (``bootstrap.servers`` is required).
        with_metadata: Add ``_partition``, ``_key_group``, ``_run_id``, ``_offset``,
            ``_window``.
        log: The shuffle's commit log if the caller has just read it (saves reading it
            again); by default it is read here.
        engine: ``"auto"`` (the JVM source when the session has it, see
            :func:`jvm_spark_conf`), ``"jvm"`` or ``"python"`` (see
            :meth:`ShuffleRead.dataframe`).
        **selection: What to read and in how many Spark partitions: ``windows``, ``runs``,
            ``event_time_range``, ``parallelism``, as documented on
            :class:`~orchestration.shuffle.core.planner.ReadOptions` (by default all runs
            visible and ``parallelism="auto"``: one Spark partition per Kafka partition,
            but a small read in fewer tasks, each of whole partitions;
            ``parallelism=None`` always gives one per partition).

    Returns:
        A DataFrame with exactly the written columns and types (plus metadata columns if
        asked). Its key columns carry metadata that :func:`apply_per_key` checks.

    Raises:
        ShuffleTopicNotFoundError: The shuffle does not exist.
        ShuffleWindowNotFoundError: A window or run named has no committed run; for one
            that retention expired, the message says which run, when and why.
    """
    _check_selection(read_shuffle, selection)
    read = plan_shuffle_read(spark, topic, kafka=kafka, log=log, **selection)
    return read.dataframe(with_metadata=with_metadata, engine=engine)


def aggregate_shuffle(
    spark: SparkSession,
    topic: str,
    *,
    kafka: KafkaConfig,
    aggregations: Mapping[str, tuple[str, str]],
    log: ShuffleLog | None = None,
    engine: Engine = "auto",
    **selection: Unpack[ReadSelection],
) -> DataFrame:
    """Aggregates committed runs of a shuffle per key, with no Spark shuffle.

    Equal to ``read_shuffle(...).groupBy(*key).agg(...)``, but the rows are aggregated as
    their frames are decoded (see :mod:`orchestration.shuffle.core.aggregation`), in Spark
    tasks of the engine over the read's plan: they never cross from Python to the JVM, and a
    reader's memory follows the number of keys in its partition (plus one chunk of rows),
    not the number of rows. Frames decode only the key and the aggregated columns. Without
    ``parallelism``, the read runs one task per core, each aggregating whole Kafka
    partitions balanced by their committed rows. With ``engine="jvm"`` it is Spark's own
    ``groupBy(*key).agg(...)`` over the keyed JVM read instead (same schema), which the JVM
    read runs itself for the aggregations and key types ``docs/guides/jvm.md`` lists (no
    Exchange, no Python process, one task per core) and Spark runs otherwise: the same in
    every state of the session's Python workers, slower in a session's first reads.

    Example::

        per_plane = aggregate_shuffle(spark, "flights.by_tailnum", kafka=conf,
                                      aggregations={"flights": ("*", "count")})

    Args:
        aggregations: ``{output name: (column, function)}`` with functions ``count``,
            ``sum``, ``min``, ``max``, ``mean``; ``("*", "count")`` counts rows.
        engine: ``"auto"`` and ``"python"`` aggregate in the Python reader, ``"jvm"``
            with Spark's ``groupBy`` over the JVM read; both return the same schema.
        Other arguments: as for :func:`read_shuffle`.

    Returns:
        One row per key: the key columns, then one column per aggregation, in order.
    """
    _check_selection(aggregate_shuffle, selection)
    read = plan_shuffle_read(spark, topic, kafka=kafka, log=log, **selection)
    return read.aggregate(aggregations, engine=engine)


def shuffle_commits_since(
    topic: str, *, kafka: KafkaConfig, offset: int = 0
) -> tuple[list[Commit], int]:
    """Commits appended to the shuffle's commit log from ``offset`` on, and the next offset.

    Incremental: a caller that keeps the returned offset reads only what is new.
    """
    return read_commits_since(KafkaClient.of(kafka), topic, offset)


def shuffle_watermark(topic: str, *, kafka: KafkaConfig) -> dt.datetime | None:
    """The shuffle's event-time completeness, from its commit log alone (no data scan)."""
    return from_micros(shuffle_log(topic, kafka=kafka).watermark())


def read_shuffle_stream(
    spark: SparkSession,
    topic: str,
    *,
    kafka: KafkaConfig,
    starting_offsets: str = "earliest",
    starting_timestamp: dt.datetime | None = None,
    max_runs_per_trigger: int | None = None,
    max_rows_per_trigger: int | None = None,
    parallelism: int | str | None = None,
    with_metadata: bool = False,
    engine: Engine = "auto",
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
        starting_offsets, max_runs_per_trigger, max_rows_per_trigger: As documented on
            :class:`~orchestration.shuffle.core.stream.StreamOptions`.
        starting_timestamp: Runs committed at or after this instant (wins over
            ``starting_offsets``).
        parallelism, with_metadata: As documented on
            :class:`~orchestration.shuffle.core.planner.ReadOptions`.
        engine: ``"auto"`` streams on the JVM (``spark.readStream.table`` over the session's
            catalog of the JVM path: no Python process per query) when the session has the
            jar and a catalog for this cluster (on Spark Connect: the jar in the server's
            ``spark.jars``), else with the Python source; ``"jvm"`` and ``"python"`` force
            one (see :func:`read_shuffle`). Both read the same runs in the
            same micro-batches, with the same offsets and progress metrics.
        Other arguments: as for :func:`read_shuffle`.
    """
    client = KafkaClient.of(kafka)
    layout = read_log(client, topic).require_layout()
    start_us = to_micros(starting_timestamp)
    stream = StreamOptions(
        starting_offsets=starting_offsets,
        starting_timestamp_ms=None if start_us is None else start_us // 1000,
        max_runs_per_trigger=max_runs_per_trigger,
        max_rows_per_trigger=max_rows_per_trigger,
    )
    options = ReadOptions(parallelism=parallelism, with_metadata=with_metadata)
    catalog = choose_stream_engine(spark, client, engine)
    if catalog is None:
        # Refused here, before Spark, where the Python source cannot honour them.
        limits = {"max_runs_per_trigger": max_runs_per_trigger}
        limits["max_rows_per_trigger"] = max_rows_per_trigger
        require_admission_control(
            f"read_shuffle_stream of {topic}",
            [k for k, v in limits.items() if v is not None],
            spark_version=spark.version,
            jvm=True,
        )
        register_data_sources(spark)
        reader = spark.readStream.format(SOURCE).options(
            **source_options(topic, client, options, stream=stream)
        )
        df = reader.load()
    else:
        read = replace(options, with_metadata=False).to_options()
        # The JVM table tags its key columns itself (ShuffleTable.keyTagged).
        return load_jvm_stream(
            spark, catalog, topic, {**read, **stream.to_options()}, with_metadata=with_metadata
        )
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
    return progress_metrics([json.loads(p.json) for p in query.recentProgress])


def group_offsets_behind(kafka: KafkaConfig, group: str, topics: Sequence[str]) -> dict[str, Any]:
    """How far consumer group ``group`` is behind the latest offsets of ``topics``: per
    partition (``"topic/partition"``) and min / max / avg, from the offsets the group
    committed (e.g. by a ``kafka-records`` read with ``commitOffsets``). A partition with no
    committed offset counts from its earliest offset."""
    from orchestration.shuffle.core.records import Subscription
    from orchestration.shuffle.spark.records import bounds, committed_offsets, discover

    client = KafkaClient.of(kafka)
    tps = discover(client, Subscription(topics=tuple(topics)))
    limits = bounds(client, tps)
    done = {tp: o for tp, o in committed_offsets(client, group, tps).items() if o >= 0}
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


JVM_RECORDS_SOURCE = "kafka-records-jvm"


def read_records(spark, options: Mapping[str, str], *, engine: str = "auto"):
    """A batch read of any Kafka topic with the ``kafka-records`` options (``subscribe``,
    ``kafka.bootstrap.servers``, ``startingOffsets``, ...), on the JVM when the session can.

    The driver plans the read as the ``kafka-records`` source does (partitions, starting and
    ending offsets, data-loss checks, ``minPartitions``); the ranges are then read either by
    the ``kafka-records-jvm`` source (``jvm/``: records copied from the fetched bytes straight
    into column vectors, no Python worker) or by the Python ``kafka-records`` source. The
    rows are the same either way.

    Example::

        spark = SparkSession.builder.config(map=jvm_spark_conf(kafka=conf)).getOrCreate()
        df = read_records(spark, {"subscribe": "events",
                                  "kafka.bootstrap.servers": "127.0.0.1:19092"})

    Args:
        options: the ``kafka-records`` source's options, as ``spark.read.format(
            "kafka-records").options(**options)`` takes them.
        engine: ``"auto"`` (the JVM when the session has the jar, see
            :func:`~orchestration.shuffle.jvm_available`, and the read commits no group
            offsets), ``"jvm"`` (an error if it cannot) or ``"python"``.

    Raises:
        ShuffleOptionError: a bad option, or ``engine="jvm"`` with ``commitOffsets`` (a JVM
            read commits no group offsets).
        ShuffleSessionError: ``engine="jvm"`` on a session without the jar.
        ShuffleTopicNotFoundError: a topic named by ``subscribe`` or ``assign`` does not
            exist.
        ShuffleAuthorizationError: this principal may not describe a topic it names.
    """
    if engine not in ENGINES:
        raise ShuffleOptionError(f"engine must be one of {ENGINES}, got {engine!r}")
    given = {str(k): str(v) for k, v in options.items()}
    opts = parse_options(given, streaming=False)
    on_jvm = engine != "python" and not opts.commit_offsets and jvm_available(spark)
    if engine == "jvm" and not on_jvm:
        if opts.commit_offsets:
            raise ShuffleOptionError(
                f"{OWNER}: engine='jvm' with option 'commitOffsets': a read on the JVM commits "
                "no group offsets; use engine='python' or leave commitOffsets unset"
            )
        raise ShuffleSessionError(
            f"{OWNER}: engine='jvm': the session does not have the kafka-shuffle-jvm jar "
            "(build the session with jvm_spark_conf(kafka=...))"
        )
    if not on_jvm:
        # Spark plans the Python source in a worker of its own, where a missing topic or
        # one this principal may not read fails as Spark's AnalysisException: looked up
        # here first (one metadata request), it is the engine's error, as on the JVM path.
        discover(KafkaClient(opts.kafka), opts.subscription)
        register_data_sources(spark)
        return spark.read.format("kafka-records").options(**given).load()
    ranges = [[p.topic, p.partition, p.start, p.end] for p in KafkaRecordsReader(opts).partitions()]
    kafka = {k: v for k, v in given.items() if k.lower().startswith("kafka.")}
    return (
        spark.read.format(JVM_RECORDS_SOURCE)
        .options(
            **kafka,
            ranges=json.dumps(ranges),
            includeHeaders=str(opts.include_headers).lower(),
            failOnDataLoss=str(opts.fail_on_data_loss).lower(),
        )
        .load()
    )
