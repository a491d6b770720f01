"""``KafkaShuffleIOManager``: any asset that returns a Spark DataFrame, stored as a shuffle.

Example::

    from dagster import AssetIn, DailyPartitionsDefinition, Definitions, EnvVar, asset
    from orchestration import KafkaResource, KafkaShuffleIOManager, shuffle_metadata

    daily = DailyPartitionsDefinition(start_date="2024-01-01")

    @asset(partitions_def=daily, io_manager_key="shuffle_io_manager",
           metadata=shuffle_metadata(key="user_id", num_partitions=8, event_time="ts"))
    def events_by_user(context) -> DataFrame:
        return spark.read.parquet(f"/data/events/day={context.partition_key}")

    @asset(partitions_def=daily)
    def sessions(events_by_user: DataFrame) -> None:
        apply_per_key(events_by_user, "user_id", sessionize, schema=...)   # no Exchange

    defs = Definitions(
        assets=[events_by_user, sessions],
        resources={"shuffle_io_manager": KafkaShuffleIOManager(
            kafka=KafkaResource(bootstrap_servers=EnvVar("KAFKA_BOOTSTRAP_SERVERS")))},
    )

Output: one committed run per partition key (``window`` = the key; for time-window
partitions ``complete_until`` = the window's end). A run over a range of partitions writes
each key's rows (``shuffle/window_column`` = the key) as its own committed run; days that
committed stay committed if another fails: Dagster records them as materialized (each with
its own metadata), the run fails for the rest and is tagged ``shuffle/failed_windows`` so
that a failed-region sensor re-runs only those. An unpartitioned asset commits one run with
no window, and its latest run is what downstream assets read. Every materialization carries
:func:`~orchestration.metadata.commit_metadata`: Dagster's ``dagster/row_count``,
``dagster/partition_row_count``, ``dagster/column_schema`` and ``dagster/uri``, and the
shuffle's own keys.

Input: a keyed read of exactly the upstream partitions the downstream asset depends on, as a
DataFrame, or as a :class:`~orchestration.shuffle.ShuffleRead` if the parameter is annotated
so (for in-reader aggregation, commit details and row counts). The materialization of the
asset that reads it records what it read and its lag (``shuffle/runs_read``,
``shuffle/rows_read``, ``shuffle/lag_windows``, ``shuffle/lag_s``: see
:func:`~orchestration.metadata.lag_metadata`), not an observation of the shuffle, whose
plots then draw each commit once.
"""

from __future__ import annotations

import datetime as dt
from collections import abc
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from dagster import (
    AssetExecutionContext,
    AssetMaterialization,
    ConfigurableIOManager,
    DagsterInstance,
    DagsterInvariantViolationError,
    InitResourceContext,
    InputContext,
    MetadataValue,
    OutputContext,
)
from dagster_pyspark import LazyPySparkResource
from pydantic import Field, PrivateAttr
from pyspark.sql import DataFrame, SparkSession

from orchestration.definition import (
    DAGSTER_RUN_ATTR,
    FAILED_WINDOWS_TAG,
    ShuffleAsset,
    declaration_differences,
    shuffle_asset,
    window_ends,
    windows_failure,
)
from orchestration.metadata import (
    commit_metadata,
    consumer_metadata,
    outside_window,
    spark_ui_url,
    watermark_as_of,
    window_bounds,
)
from orchestration.progress import (
    ProgressLog,
    StepReads,
    spark_context,
    spark_progress,
    watch_spark_reads,
)
from orchestration.resources import KafkaResource
from orchestration.shuffle.core.commitlog import Commit, ShuffleLog
from orchestration.shuffle.errors import (
    ShuffleError,
    ShuffleOptionError,
    ShuffleWindowNotFoundError,
)
from orchestration.shuffle.kafka.client import KafkaClient
from orchestration.shuffle.read import ShuffleRead, plan_shuffle_read, shuffle_log
from orchestration.shuffle.spec import WriteResult
from orchestration.shuffle.table_read import read_batches, read_table, to_pandas
from orchestration.shuffle.table_write import as_table, is_table, write_table
from orchestration.shuffle.write import write_shuffle, write_windows


class KafkaShuffleIOManager(ConfigurableIOManager):
    """Stores Spark DataFrame assets as shuffles in Kafka; loads them already keyed.

    The asset's layout comes from its definition metadata (see
    :func:`orchestration.shuffle_metadata`): ``shuffle/key``, ``shuffle/num_partitions``,
    ``shuffle/max_parallelism``, ``shuffle/event_time``, ``shuffle/topic``,
    ``shuffle/window_column``. The topic is the Kafka resource's ``topic_prefix`` followed by
    ``shuffle/topic`` (default: the asset key's parts joined with ".").

    Args:
        kafka: The cluster, and the prefix of the topics stored there.
        spark: Optional; without it the active SparkSession is used, else one is created
            with ``SparkSession.builder``.
        compression: Of the frames written: ``lz4`` (default), ``zstd`` or ``none``.
        schema_mode: ``strict`` (default) or ``merge``: see the Evolution guide; an asset's
            ``shuffle/schema_mode`` metadata takes precedence.
    """

    kafka: KafkaResource
    spark: LazyPySparkResource | None = Field(
        default=None, description="The Spark session to read with; default the active one."
    )
    compression: str = Field(
        default="lz4",
        description="Compression of the frames written: lz4, zstd (fewer bytes, more CPU) or none.",
    )
    progress_every_s: float = Field(
        default=10.0,
        description=(
            "While a write or a read runs, its progress is logged to the run's log this "
            "often, in seconds (a Spark write: its stages' tasks done of all; a Spark input: "
            "while the asset's code runs, the stages of the Spark jobs its step starts; a "
            "write or read without Spark: partitions, rows and bytes so far); 0: never."
        ),
    )
    schema_mode: str = Field(
        default="strict",
        description=(
            "How a run whose columns differ from its shuffle's is written: strict (refused) or "
            "merge (new nullable columns added, wider types widened, as a new schema version); "
            "an asset's 'shuffle/schema_mode' metadata takes precedence."
        ),
    )

    # Set up per run: the Dagster instance the run records into (None outside a run).
    _instance: DagsterInstance | None = PrivateAttr(default=None)
    # The watchers of the steps' Spark inputs (each stops as its step ends), and whether the
    # run's log was told that a Spark Connect session's reads are not watched.
    _reads: list[StepReads] = PrivateAttr(default_factory=list)
    _said_connect: bool = PrivateAttr(default=False)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self._instance = context.instance

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        # Each watcher has stopped at its step's end; this is for a step whose end it missed.
        for reads in self._reads:
            reads.stop()
        self._reads.clear()

    def session(self) -> SparkSession:
        if self.spark is not None:
            return self.spark.spark_session
        return SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()

    # --- output ---------------------------------------------------------------------

    # A generator (IOManager declares None; Dagster 1.13's step execution runs a generator
    # handle_output too): the events an IO manager logs reach the run's event log at each
    # value it yields, which is how the windows a failing range run committed are recorded
    # before its error (see _write_range_and_report).
    def handle_output(  # type: ignore[override]
        self, context: OutputContext, obj: Any
    ) -> Iterator[dict]:
        name = context.asset_key.to_user_string()
        asset = shuffle_asset(name, context.asset_key.path, context.definition_metadata).under(
            self.kafka
        )
        if not isinstance(obj, DataFrame) and not is_table(obj):
            raise ShuffleOptionError(
                f"asset {name}: KafkaShuffleIOManager stores Spark DataFrames, pyarrow "
                f"tables, pandas and Polars DataFrames; the asset returned {type(obj).__name__}"
            )
        kafka = self.kafka.client()
        window = None
        if context.has_asset_partitions:
            keys = list(context.asset_partition_keys)
            if len(keys) > 1:
                yield from self._write_range_and_report(context, asset, obj, keys, kafka)
                return
            window = keys[0]
        result = self._write(context, asset, obj, window, kafka)
        log = shuffle_log(asset.topic, kafka=kafka)
        context.add_output_metadata(self._metadata(context, result, log))

    def _metadata(
        self, context: OutputContext, result: WriteResult, log: ShuffleLog | None
    ) -> dict[str, Any]:
        """The run's materialization metadata; a run whose rows' event times fall outside
        its window is said in the run's log."""
        commit = result.commit
        partitions_def = context.asset_partitions_def if context.has_asset_partitions else None
        bounds = window_bounds(partitions_def, commit.window)
        wrong = outside_window(commit, *bounds) if bounds is not None else None
        if wrong is not None:
            context.log.warning(f"{result.topic}: {wrong}")
        return commit_metadata(
            commit,
            log.layout if log is not None else None,
            self.kafka,
            topic=result.topic,
            write_path=result.path,
            shuffle_watermark=watermark_as_of(log, commit) if log is not None else None,
        )

    def _bounds(
        self, context: OutputContext, asset: ShuffleAsset, window: str | None
    ) -> tuple[dt.datetime, dt.datetime] | None:
        """The event times a window's rows must fall in, when the asset asks for runs
        outside their window to be refused (``shuffle/refuse_outside_window``)."""
        if not asset.refuse_outside_window:
            return None
        return window_bounds(context.asset_partitions_def, window)

    def _write(
        self,
        context: OutputContext,
        asset: ShuffleAsset,
        df: DataFrame,
        window: str | None,
        kafka: KafkaClient,
    ) -> WriteResult:
        complete_until = None
        if window is not None:
            complete_until = window_ends(context.asset_partitions_def, [window]).get(window)
        what = f"{asset.topic}: window {window!r}"
        # A pyarrow table or a pandas or Polars frame is written without Spark, and tells
        # its progress itself.
        write: Any = write_shuffle
        extra: dict[str, Any] = {}
        if is_table(df):
            write = write_table
            extra["progress"] = ProgressLog(context.log, what, self.progress_every_s)
        with spark_progress(context.log, what, None if is_table(df) else df, self.progress_every_s):
            result = write(
                df,
                asset.spec,
                kafka=kafka,
                window=window,
                complete_until=complete_until,
                event_time_bounds=self._bounds(context, asset, window),
                compression=self.compression,
                attrs={DAGSTER_RUN_ATTR: context.run_id},
                schema_mode=asset.schema_mode or self.schema_mode,
                **extra,
            )
        context.log.info(
            f"{asset.topic}: window {window!r} committed as run {result.run_id} "
            f"({result.rows} rows, {result.frames} frames, {result.bytes} bytes, "
            f"{result.path} path)"
        )
        return result

    def _write_range_and_report(
        self,
        context: OutputContext,
        asset: ShuffleAsset,
        df: DataFrame,
        keys: list[str],
        kafka: KafkaClient,
    ) -> Iterator[dict]:
        """Writes each window of a range run and tells Dagster exactly which committed: each
        committed window is materialized once, with its own metadata; if any failed, the
        run fails for those (tagged and named in the error) and only for those."""
        committed, failed = self._write_range(context, asset, df, keys, kafka)
        log = shuffle_log(asset.topic, kafka=kafka) if committed else None
        metadata = {key: self._metadata(context, r, log) for key, r in committed.items()}
        if not failed:
            try:
                step = AssetExecutionContext.get()
            except DagsterInvariantViolationError:
                step = None
            if step is not None:
                # Dagster records one materialization per partition of the range once this
                # returns; per-partition metadata goes on those. In Dagster 1.13 OutputContext
                # cannot set it (add_output_metadata is the same for every partition) and
                # events logged here would be second materializations; the public
                # add_asset_metadata(partition_key=) of the step's AssetExecutionContext can.
                # AssetExecutionContext.get() is how code that is not the asset's body gets
                # that context (added for that, dagster-io/dagster#14954, though absent from
                # the API reference); the IO manager runs inside the step's context.
                for key, md in metadata.items():
                    step.add_asset_metadata(md, partition_key=key)
                return
        # A failed range, or an OutputContext built outside a run: one event per window.
        for key, md in metadata.items():
            context.log_event(
                AssetMaterialization(asset_key=context.asset_key, partition=key, metadata=md)
            )
        if not failed:
            return
        # Written to the event log now: the error below ends the step, and Dagster then
        # records no materialization of its own for any partition of the range.
        yield {}
        name = context.asset_key.to_user_string()
        windows = ",".join(sorted(failed))
        if self._instance is not None:
            # Read by failed_region_sensor. Dagster 1.13 has no public API for a run to tag
            # itself (dagster-io/dagster#27502): DagsterInstance.add_run_tags is not in its
            # API reference, called here on the instance the resource was set up with
            # (InitResourceContext.instance, public). The failed windows are also in the
            # Failure's metadata (public), from which a sensor can read them instead.
            self._instance.add_run_tags(context.run_id, {FAILED_WINDOWS_TAG: windows})
        failure, error = windows_failure(name, len(keys), list(committed), failed)
        raise failure from error

    def _write_range(
        self,
        context: OutputContext,
        asset: ShuffleAsset,
        df: DataFrame,
        keys: list[str],
        kafka: KafkaClient,
    ) -> tuple[dict[str, WriteResult], dict[str, str]]:
        """Writes each key's rows as its own run: (runs committed, errors of those that
        failed), by key."""
        name = context.asset_key.to_user_string()
        column = asset.window_column
        if column is None:
            raise ShuffleOptionError(
                f"asset {name}: a run over {len(keys)} partitions ({keys[0]} .. {keys[-1]}) "
                "needs definition metadata 'shuffle/window_column' naming the column whose "
                "value is the partition key"
            )

        def report(key: str, outcome: WriteResult | ShuffleError) -> None:
            if isinstance(outcome, WriteResult):
                context.log.info(
                    f"{asset.topic}: window {key!r} committed as run {outcome.run_id} "
                    f"({outcome.rows} rows, {outcome.frames} frames, {outcome.bytes} bytes, "
                    f"{outcome.path} path)"
                )
            else:
                # Windows that committed stay committed; the failed-region sensor re-runs
                # the rest.
                context.log.error(f"{asset.topic}: window {key} failed: {outcome}")

        if is_table(df):
            return self._write_table_range(context, asset, df, keys, kafka, column, report)
        if column not in df.columns:
            raise ShuffleOptionError(
                f"asset {name}: 'shuffle/window_column' {column!r} is not a column of the "
                f"asset's DataFrame {df.columns}"
            )
        try:
            with spark_progress(
                context.log, f"{asset.topic}: windows {keys[0]} .. {keys[-1]}", df,
                self.progress_every_s,
            ):  # fmt: skip
                result = write_windows(
                    df,
                    asset.spec,
                    kafka=kafka,
                    windows=keys,
                    window_column=column,
                    complete_until=window_ends(context.asset_partitions_def, keys),
                    compression=self.compression,
                    attrs={DAGSTER_RUN_ATTR: context.run_id},
                    schema_mode=asset.schema_mode or self.schema_mode,
                    event_time_bounds={
                        k: b for k in keys if (b := self._bounds(context, asset, k)) is not None
                    },
                    on_window=report,
                )
        except ShuffleOptionError as exc:
            raise ShuffleOptionError(f"asset {name}: {exc}") from exc
        return result.committed, result.failed

    def _write_table_range(
        self,
        context: OutputContext,
        asset: ShuffleAsset,
        rows: Any,
        keys: list[str],
        kafka: KafkaClient,
        column: str,
        report: Any,
    ) -> tuple[dict[str, WriteResult], dict[str, str]]:
        """:meth:`_write_range` for rows that are not Spark's: each key's rows (those whose
        ``column``, as a string, is the key) written without Spark, as a run of its own."""
        table = as_table(rows)
        name = context.asset_key.to_user_string()
        if column not in table.column_names:
            raise ShuffleOptionError(
                f"asset {name}: 'shuffle/window_column' {column!r} is not a column of the "
                f"asset's table {table.column_names}"
            )
        values = pc.cast(table.column(column), pa.string())
        ends = window_ends(context.asset_partitions_def, keys)
        committed: dict[str, WriteResult] = {}
        failed: dict[str, str] = {}
        for key in keys:
            outcome: WriteResult | ShuffleError
            try:
                result = write_table(
                    table.filter(pc.equal(values, key)),
                    asset.spec,
                    kafka=kafka,
                    window=key,
                    complete_until=ends.get(key),
                    event_time_bounds=self._bounds(context, asset, key),
                    compression=self.compression,
                    attrs={DAGSTER_RUN_ATTR: context.run_id},
                    schema_mode=asset.schema_mode or self.schema_mode,
                    progress=ProgressLog(
                        context.log, f"{asset.topic}: window {key!r}", self.progress_every_s
                    ),
                )
            except ShuffleError as exc:
                outcome = exc
                failed[key] = str(exc)
            else:
                outcome = committed[key] = result
            report(key, outcome)
        return committed, failed

    # --- input ----------------------------------------------------------------------

    def load_input(self, context: InputContext) -> Any:
        upstream = context.upstream_output
        key = context.asset_key
        name = key.to_user_string()
        md = upstream.definition_metadata if upstream else {}
        asset = shuffle_asset(name, key.path, md).under(self.kafka)
        kafka = self.kafka.client()
        log = shuffle_log(asset.topic, kafka=kafka)
        if log.layout is not None:
            # A declaration (another code location's AssetSpec, say) that no longer matches
            # the log is said where it is read; the read itself follows the log.
            for difference in declaration_differences(asset, log.layout, md):
                context.log.warning(
                    f"asset {name}: its declaration differs from shuffle {asset.topic!r}: "
                    f"{difference}"
                )
        windows = runs = None
        if context.has_asset_partitions:
            windows = list(context.asset_partition_keys)
        else:
            unwindowed = [c for c in log.commits if c.window is None]
            if not unwindowed:
                gone = [e for e in log.expired.values() if e.window is None]
                if gone:
                    raise ShuffleWindowNotFoundError(
                        f"asset {name}: shuffle {asset.topic!r}: its last run {gone[-1].run_id} "
                        f"expired {gone[-1].expired_at}: {gone[-1].reason}"
                    )
                raise ShuffleWindowNotFoundError(
                    f"asset {name}: shuffle {asset.topic!r} has no committed run yet"
                )
            runs = [unwindowed[-1].run_id]
        kind = _arrow_kind(context)
        if kind is not None:
            return self._load_without_spark(context, asset.topic, kafka, log, windows, runs, kind)
        session = self.session()
        read = plan_shuffle_read(
            session, asset.topic, kafka=kafka, windows=windows, runs=runs, log=log
        )
        _report_input(context, asset.topic, read.commits, log, spark_ui_url(session))
        self._watch_spark_read(context, session, _describe_input(asset.topic, windows, runs))
        if _wants_shuffle_read(context):
            return read
        return read.dataframe()

    def _watch_spark_read(self, context: InputContext, session: SparkSession, what: str) -> None:
        """A Spark input is read when the asset's code runs an action, after this returns:
        its progress is logged by the step's watcher (see :func:`watch_spark_reads`)."""
        if watch_spark_reads(context.log, session, what, self.progress_every_s, self._reads):
            return
        if self.progress_every_s > 0 and spark_context(session) is None and not self._said_connect:
            self._said_connect = True
            context.log.debug(
                f"{what}: not watched: a Spark Connect session's jobs run in its server, "
                "whose status the client cannot read; the server's Spark UI shows them"
            )

    def _load_without_spark(
        self,
        context: InputContext,
        topic: str,
        kafka: KafkaClient,
        log: ShuffleLog,
        windows: list[str] | None,
        runs: list[str] | None,
        kind: str,
    ) -> Any:
        """An input annotated ``pyarrow.Table``, ``pandas.DataFrame``, ``polars.DataFrame``
        or :class:`RecordBatches`: read without Spark (``read_table``,
        ``read_batches``), the same rows a Spark input of the same partitions gets."""
        if kind == "polars":
            try:
                import polars
            except ImportError:
                raise ShuffleOptionError(
                    f"asset {context.asset_key.to_user_string()}: an input annotated "
                    "polars.DataFrame needs Polars: pip install 'kafka-shuffle[polars]'"
                ) from None
        progress = ProgressLog(context.log, topic, self.progress_every_s)
        if kind == "batches":
            batches = read_batches(
                topic, kafka=kafka, windows=windows, runs=runs, log=log, progress=progress
            )
            _report_input(context, topic, _commits_read(log, windows, runs), log)
            return RecordBatches(batches)
        table = read_table(
            topic, kafka=kafka, windows=windows, runs=runs, log=log, progress=progress
        )
        _report_input(context, topic, _commits_read(log, windows, runs), log)
        if kind == "pandas":
            return to_pandas(table)
        if kind == "polars":
            return polars.from_arrow(table)
        return table


class RecordBatches(abc.Iterator):
    """An input's rows as ``pyarrow.RecordBatch``es, read without Spark, a batch of a Kafka
    partition at a time (memory bounded by about a batch per partition): annotate an input
    ``RecordBatches`` for the shuffle IO manager to load it so (Dagster takes no
    ``Iterator[pa.RecordBatch]`` annotation)."""

    def __init__(self, batches: Iterator[pa.RecordBatch]):
        self._batches = iter(batches)

    def __iter__(self) -> RecordBatches:
        return self

    def __next__(self) -> pa.RecordBatch:
        return next(self._batches)


def _report_input(
    context: InputContext,
    topic: str,
    commits: Sequence[Commit],
    log: ShuffleLog,
    spark_ui: str | None = None,
) -> None:
    """Says what an input read: in the run's log, and on the materialization of the asset
    that reads it, with how far behind the shuffle that asset is (its lag) and, for a read
    by a Spark session whose UI is on, a link to that UI (where the read's jobs run)."""
    rows = sum(c.rows for c in commits)
    context.log.info(
        f"{topic}: reading {len(commits)} committed run(s), {rows} rows"
        + (f"; Spark UI {spark_ui}" if spark_ui else "")
    )
    read: dict[str, Any] = {
        "shuffle/topic_read": topic,
        "shuffle/rows_read": rows,
        "shuffle/bytes_read": sum(c.bytes for c in commits),
    }
    if spark_ui:
        read["spark/ui"] = MetadataValue.url(spark_ui)
    step = _asset_step()
    if step is None:
        # An op's input. Input metadata is recorded as an observation of the shuffle, next
        # to its materializations: only what was read, no number to draw a commit again.
        context.add_input_metadata(
            {
                "shuffle/topic": topic,
                "shuffle/runs": MetadataValue.json({c.run_id: c.window for c in commits}),
            }
        )
        return
    try:
        upstream_partitions = context.asset_partitions_def
    except DagsterInvariantViolationError:
        upstream_partitions = None  # an unpartitioned shuffle
    now = dt.datetime.now(dt.UTC)
    for key in sorted(step.selected_asset_keys, key=lambda k: k.to_user_string()):
        lag = consumer_metadata(
            step.instance,
            key,
            log,
            commits,
            partitioned=step.assets_def.specs_by_key[key].partitions_def is not None,
            shuffle_partitions=upstream_partitions,
            now=now,
        )
        step.add_asset_metadata({**read, **lag}, asset_key=key)


def _asset_step() -> AssetExecutionContext | None:
    """The step's context when it materializes assets (its metadata goes on their
    materializations), else None: an op, or a context built outside a run."""
    try:
        step = AssetExecutionContext.get()
    except DagsterInvariantViolationError:
        return None
    if not isinstance(step, AssetExecutionContext) or not step.has_assets_def:
        return None
    return step


def _describe_input(topic: str, windows: list[str] | None, runs: list[str] | None) -> str:
    """An input as its progress lines name it: the topic, and its windows or run."""
    if windows:
        if len(windows) == 1:
            return f"{topic}: window {windows[0]!r}"
        return f"{topic}: windows {windows[0]!r} .. {windows[-1]!r}"
    return f"{topic}: run {runs[0]}" if runs else topic


def _commits_read(log: ShuffleLog, windows: list[str] | None, runs: list[str] | None) -> list:
    """The commits a read of ``windows`` or ``runs`` covers (after the read checked them)."""
    if runs is not None:
        return [c for c in log.commits if c.run_id in set(runs)]
    visible = log.latest_by_window()
    if windows is None:
        return list(log.visible())
    return [visible[w] for w in windows if w in visible]


def _arrow_kind(context: InputContext) -> str | None:
    """How an input is annotated, if it is loaded without Spark: ``"pyarrow"``, ``"pandas"``,
    ``"polars"`` or ``"batches"`` (:class:`RecordBatches`); else None."""
    typing_type = getattr(context.dagster_type, "typing_type", None)
    if typing_type is pa.Table:
        return "pyarrow"
    if isinstance(typing_type, type) and issubclass(typing_type, RecordBatches):
        return "batches"
    if isinstance(typing_type, type) and typing_type.__name__ == "DataFrame":
        module = typing_type.__module__.split(".")[0]
        if module in ("pandas", "polars"):
            return module
    return None


def _wants_shuffle_read(context: InputContext) -> bool:
    typing_type = getattr(context.dagster_type, "typing_type", None)
    return isinstance(typing_type, type) and issubclass(typing_type, ShuffleRead)
