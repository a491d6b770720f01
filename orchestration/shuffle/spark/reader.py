"""The Spark side of reading a shuffle: the batch reader of the ``kafka-shuffle`` Python data
source (its streaming reader is :mod:`orchestration.shuffle.spark.stream`, the data source
itself :mod:`orchestration.shuffle.spark.sources`, above both).

Each Spark partition follows its :class:`~orchestration.shuffle.core.planner.SplitPlan`: it
reads each of its Kafka partitions with :class:`~orchestration.shuffle.kafka.reader.RowReader`,
which seeks straight to the committed offset ranges, keeps the DATA frames of committed
subtask attempts only, merges the producers' watermarks per partition (a regression is an
error), and checks each committed attempt's END frame against what it read, so a lost or
extra frame cannot go unnoticed (the reads without Spark execute a plan the same way).

Options (:class:`SourceOptions`, declared in
:data:`~orchestration.shuffle.core.optiondefs.SHUFFLE`, which refuses any other):
``topic`` and ``kafka.*`` (librdkafka settings), the read options of
:class:`~orchestration.shuffle.core.planner.ReadOptions` (``windows``, ``runs``, the
event-time range, ``parallelism``, ``with_metadata``) and, for streaming reads, those of
:class:`~orchestration.shuffle.core.stream.StreamOptions`.
``plan_shuffle_read`` plans on the driver and hands the plan over (options ``layout`` and
``plan``, see :func:`source_options`); used directly, the source reads the commit log
itself. ``aggregate`` (JSON ``{"name": ["column", "function"]}``, see
:mod:`orchestration.shuffle.core.aggregation`) returns per-key aggregates instead of rows.

``per_key`` (set by :func:`orchestration.shuffle.apply_per_key`: a pickled
:class:`~orchestration.shuffle.core.perkey.KeyFunction`, base64, with its output schema in
``per_key_schema``) runs a function over whole keys inside the reader and returns its
results instead of rows: a key never spans two Kafka partitions, so a pass over a partition's
key groups holds every row of its keys. ``pass_rows`` bounds the rows of one pass (see
:func:`~orchestration.shuffle.core.planner.split_passes`).
"""

from __future__ import annotations

import base64
import ctypes
import functools
import json
import logging
import os
import pickle
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer
from pyspark.sql.datasource import DataSourceReader, InputPartition

from orchestration.shuffle.core import aggregation as agg
from orchestration.shuffle.core import perkey
from orchestration.shuffle.core.commitlog import Layout, ShuffleLog, schema_from_b64
from orchestration.shuffle.core.optiondefs import BATCH, SHUFFLE, STREAM
from orchestration.shuffle.core.options import Options, kafka_to_options
from orchestration.shuffle.core.planner import (
    PartitionRead,
    ReadOptions,
    SplitPlan,
    split_passes,
)
from orchestration.shuffle.core.stream import StreamOptions
from orchestration.shuffle.errors import ShuffleOptionError
from orchestration.shuffle.kafka.client import KafkaClient
from orchestration.shuffle.kafka.commitlog import read_log
from orchestration.shuffle.kafka.planner import plan_shuffle
from orchestration.shuffle.kafka.reader import RowReader, fetch_bytes, output_schema

log = logging.getLogger(__name__)

SOURCE = "kafka-shuffle"


def source_options(
    topic: str,
    kafka: KafkaClient,
    options: ReadOptions,
    *,
    plan: tuple[Layout, Sequence[SplitPlan]] | None = None,
    stream: StreamOptions | None = None,
    aggregate: Sequence[agg.Aggregation] = (),
) -> dict[str, str]:
    """The ``kafka-shuffle`` options that :class:`SourceOptions` reads back.

    With ``plan`` (the layout and the splits, planned on the driver) the source reads exactly
    those splits; the plan has fixed the runs and the splits, so only the options that apply
    to rows go along (:meth:`~orchestration.shuffle.core.planner.ReadOptions.row_options`).
    """
    out = {"topic": topic}
    if plan is not None:
        layout, splits = plan
        out.update(
            layout=layout.to_json(),
            plan=json.dumps([s.to_json() for s in splits]),
            **options.row_options().to_options(),
        )
    else:
        out.update(options.to_options())
    if stream is not None:
        out.update(stream.to_options())
    if aggregate:
        out["aggregate"] = agg.to_json(aggregate)
    return {**out, **kafka_to_options(kafka.settings)}


# What a row takes in a frame, for a split's fetch size (fetch_bytes): generous, so that a
# read of wide rows takes at most a few more fetches than it needs.
ROW_BYTES_GUESS = 256


class SourceOptions:
    """The ``kafka-shuffle`` data source's options, parsed and validated once on the driver:
    the read options (:class:`~orchestration.shuffle.core.planner.ReadOptions`), the streaming
    ones (:class:`~orchestration.shuffle.core.stream.StreamOptions`), and what the source
    itself needs (topic, Kafka settings, a plan handed over, in-reader aggregation or per-key
    work). :func:`source_options` writes them.

    A batch read is planned from the commit log when its splits are first needed (unless
    :func:`~orchestration.shuffle.plan_shuffle_read` handed a plan over); a streaming read
    plans each micro-batch itself.

    Example::

        opts = SourceOptions({"topic": "events", "kafka.bootstrap.servers": "host:9092"})
        opts.read.parallelism, opts.layout.key
    """

    def __init__(self, options: Mapping[str, str]):
        opts = Options(options, SHUFFLE)
        self._names = [str(k) for k in options]
        self.topic = opts.require("topic")
        self.kafka = KafkaClient(opts.kafka())
        self.read = ReadOptions.parse(opts)
        # Parsed when a stream asks for them, after the stream-only options were checked
        # against the kind of read (a batch read refuses them by name).
        self._stream_given = {k: v for k, v in options.items() if _is_stream_option(str(k))}
        self._stream: StreamOptions | None = None
        layout = opts.raw("layout")
        plan = opts.raw("plan")
        self._plans: list[SplitPlan] | None = None
        self._log: ShuffleLog | None = None
        if layout and plan:
            # Planned by plan_shuffle_read on the driver, handed over as strings.
            self.layout = Layout.from_json(layout)
            self._plans = [SplitPlan.from_json(p) for p in json.loads(plan)]
        else:
            self._log = read_log(self.kafka, self.topic)
            self.layout = self._log.require_layout()
        self.aggregate: tuple[agg.Aggregation, ...] = ()
        aggregate = opts.raw("aggregate")
        if aggregate:
            if self.read.with_metadata:
                raise ShuffleOptionError(
                    f"{SOURCE}: options 'aggregate' and 'with_metadata' cannot be combined"
                )
            self.aggregate = agg.from_json(
                aggregate, output_schema(self.layout, False), self.layout.key
            )
        # Unpickled by the task that reads (the function may only import there).
        self.per_key = opts.raw("per_key")
        self.per_key_schema: pa.Schema | None = None
        self.pass_rows = opts.require_integer("pass_rows")
        if self.per_key:
            if self.aggregate:
                raise ShuffleOptionError(
                    f"{SOURCE}: options 'aggregate' and 'per_key' cannot be combined"
                )
            schema = opts.require("per_key_schema")
            try:
                self.per_key_schema = schema_from_b64(schema)
            except (ValueError, pa.ArrowInvalid):
                raise ShuffleOptionError(
                    f"{SOURCE}: option 'per_key_schema' is not a base64 Arrow schema"
                ) from None
        self._key_function: perkey.KeyFunction | None = None

    def check_mode(self, mode: str) -> None:
        """Refuses the options that a ``mode`` read (``"batch"`` or ``"stream"``) does not
        take, by name (the kind of read is known only once Spark asks for a reader)."""
        SHUFFLE.check(self._names, mode)

    @property
    def stream(self) -> StreamOptions:
        """The streaming options (defaults for a batch read, which refuses them given)."""
        if self._stream is None:
            self._stream = StreamOptions.parse(Options(self._stream_given, SHUFFLE, STREAM))
        return self._stream

    def key_function(self) -> perkey.KeyFunction:
        """The per-key function of option ``per_key``."""
        if self._key_function is None:
            if not self.per_key:
                raise ShuffleOptionError(f"{SOURCE}: option 'per_key' is not set")
            kf = pickle.loads(base64.b64decode(self.per_key))
            if not isinstance(kf, perkey.KeyFunction):
                raise ShuffleOptionError(
                    f"{SOURCE}: option 'per_key' does not hold a per-key function"
                )
            self._key_function = kf
        return self._key_function

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_key_function"] = None  # shipped as the option's bytes
        return state

    @property
    def plans(self) -> list[SplitPlan]:
        """The splits of a batch read: handed over, or planned here on first use."""
        if self._plans is None:
            self._plans = list(plan_shuffle(self.kafka, self.topic, self.read, self._log).splits)
        return self._plans


def _is_stream_option(name: str) -> bool:
    lowered = name.lower()
    return any(d.name.lower() == lowered and d.modes == (STREAM,) for d in SHUFFLE.options)


@functools.cache
def _libc() -> Any:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc
        return None


@functools.cache
def _bound_worker_memory() -> None:
    """Keeps a Python worker's memory bounded however many frames it decodes.

    A frame arrives as a ~1 MiB message and is decoded into a few MiB of Arrow buffers.
    Measured on a 10M-row shuffle read split after split in one process (24 splits): with
    Arrow's default (mimalloc) pool resident memory crept up from 126 to 183 MiB; with the
    system pool and a trim after each split (:func:`_release_memory`) it stays at 100-125
    MiB. A fixed 128 KiB mmap threshold on top (every large buffer unmapped when freed)
    kept it at 96 MiB but made decoding about 1.6x slower (4.0-4.6 s against 2.7-3.9 s
    for the 24 splits): every frame's buffers were fresh pages to fault in. The setting is
    process-wide and only chooses where memory comes from; it is applied once, in the
    worker that reads.
    """
    pa.set_memory_pool(pa.system_memory_pool())


def _release_memory() -> None:
    """Hands memory freed during a split back to the system (Spark reuses workers)."""
    pa.default_memory_pool().release_unused()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


class SpillFile:
    """Rows a pass sets apart, in an Arrow IPC file of the task's local directory (Spark's,
    as PySpark's own spills: ``SPARK_LOCAL_DIRS``), read back as often as asked, a batch at a
    time. The file is made at the first row and removed by :meth:`close`."""

    def __init__(self, where: str):
        self.where = where
        self.path: str | None = None
        self.writer: pa.ipc.RecordBatchStreamWriter | None = None
        self.rows = 0
        self.bytes = 0

    def write(self, batch: pa.RecordBatch) -> None:
        if self.writer is None:
            base = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0] or None
            fd, self.path = tempfile.mkstemp(prefix="shuffle-spill-", suffix=".arrows", dir=base)
            os.close(fd)
            self.writer = pa.ipc.new_stream(self.path, batch.schema)
        try:
            self.writer.write_batch(batch)
        except OSError as exc:
            raise OSError(f"{self.where}: spilling to {self.path!r} failed: {exc}") from exc
        self.rows += batch.num_rows
        self.bytes += batch.nbytes

    def read(self) -> Iterator[pa.RecordBatch]:
        """Every batch spilled, in the order written."""
        if self.path is None:
            return
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        # Read, not memory-mapped: a mapped file's pages stay in the worker's resident memory
        # once read, so a key streamed from the spill would end up holding all of its rows,
        # and the whole file would count against an address-space limit (PySpark's
        # spark.executor.pyspark.memory). Read, each batch is freed once used.
        with pa.OSFile(self.path) as source:
            yield from pa.ipc.open_stream(source)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self.path is not None:
            os.unlink(self.path)
            self.path = None


class ShuffleReader(DataSourceReader):
    """Reads the splits of a shuffle read (batch, or one micro-batch of a stream): rows, or
    per-key aggregates (option ``aggregate``), or a per-key function's results (``per_key``)."""

    def __init__(self, opts: SourceOptions):
        self.opts = opts
        self.rows = RowReader(opts.topic, opts.layout, opts.read)
        if opts.aggregate:
            # Aggregations and per-key functions decode only the columns they use.
            self.rows.use_columns(
                agg.PartialAggregator(opts.layout.key, opts.aggregate, self.schema).columns()
            )

    @property
    def schema(self) -> pa.Schema:
        """The rows' schema, as read from frames (:attr:`RowReader.schema`)."""
        return self.rows.schema

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(p.to_json()) for p in self.opts.plans]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if partition.value is None:
            return  # Spark reads one empty partition when a plan has none
        plan = SplitPlan.from_json(partition.value)
        _bound_worker_memory()
        try:
            # librdkafka does not check the CRC of what it fetches unless asked (Kafka's Java
            # consumer does): a record batch damaged on a broker's disk or on the way is
            # then refused rather than decoded.
            # A split's fetch size by its rows (the task has no bytes of the commits): a
            # small window in the middle of a long partition is not fetched past by 4 MiB.
            rows = max((sum(seg.rows for seg in pr.segments) for pr in plan.reads), default=0)
            fetch = fetch_bytes(ROW_BYTES_GUESS * rows, 1)
            settings = {"check.crcs": True, "max.partition.fetch.bytes": fetch}
            with self.opts.kafka.consumer(**settings) as c:
                if self.opts.per_key:
                    yield from self._per_key(c, plan)
                    return
                for pr in plan.reads:
                    batches = self.rows.read_partition(c, pr)
                    yield from self._aggregated(batches) if self.opts.aggregate else batches
        finally:
            _release_memory()

    def _aggregated(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """One Kafka partition's rows, aggregated. Keys never cross Kafka partitions, so a
        partition's aggregates are final once its range is read."""
        partial = agg.PartialAggregator(self.opts.layout.key, self.opts.aggregate, self.schema)
        for batch in batches:
            partial.add(batch)
        yield from partial.finish().to_batches()

    def _per_key(self, c: Consumer, plan: SplitPlan) -> Iterator[pa.RecordBatch]:
        """The per-key function over each pass: the rows of a contiguous range of one Kafka
        partition's key groups, so every row of each of its keys (see
        :func:`~orchestration.shuffle.core.planner.split_passes` for what bounds a pass)."""
        kf = self.opts.key_function()
        if kf.columns is not None:
            self.rows.use_columns(kf.columns)
        layout = self.opts.layout
        for read in plan.reads:
            for piece in split_passes(
                read, layout.max_parallelism, layout.num_partitions, self.opts.pass_rows
            ):
                yield from self._per_key_pass(c, kf, piece)

    def _per_key_pass(
        self, c: Consumer, kf: perkey.KeyFunction, piece: PartitionRead
    ) -> Iterator[pa.RecordBatch]:
        """One pass: its rows held up to about ``pass_rows`` (:class:`perkey.KeyedPass`),
        and the rows of the keys that pass set apart spilled to a local file as read, then
        given to the function from there, a bundle of keys at a time, a key of more than
        ``pass_rows`` rows alone and streamed (:meth:`perkey.KeyFunction.apply_key`). A
        function that needs a whole key at once keeps the largest key's rows instead of
        spilling them: it will hold them anyway."""
        where = (
            f"topic {self.opts.topic!r} partition {piece.partition} key groups "
            f"[{piece.key_group_start}, {piece.key_group_end})"
        )
        spill = SpillFile(where)
        try:
            held = perkey.KeyedPass(
                kf.keys, self.opts.pass_rows, spill.write, keep_largest=not kf.streams
            )
            for batch in self.rows.read_partition(c, piece):
                held.add(batch)
            # Not bound to a name here: the function's pass owns the rows, and drops them as
            # read once they are sorted by key.
            yield from kf.apply(held.table(self.schema))
            yield from kf.apply_key(held.kept())
            bundles = held.bundles()
            if bundles:
                log.info(
                    "%s: %d key(s) of at least %d rows set apart, %d rows (%d MiB) spilled to "
                    "%s, given to the function in %d bundle(s)",
                    where, sum(b.num_rows for b in bundles),
                    self.opts.pass_rows // perkey.HEAVY_SHARE, spill.rows, spill.bytes >> 20,
                    spill.path, len(bundles),
                )  # fmt: skip
            for keys in bundles:
                # The spill holds the bundles' rows and no other: one bundle is all of it.
                parts = (
                    spill.read()
                    if len(bundles) == 1
                    else (
                        batch.filter(pa.array(perkey.key_index(batch, keys, kf.keys) >= 0))
                        for batch in spill.read()
                    )
                )
                if keys.num_rows == 1:
                    yield from kf.apply_key(parts)
                else:
                    yield from kf.apply(pa.Table.from_batches(list(parts), schema=self.schema))
        finally:
            spill.close()


def result_schema(opts: SourceOptions) -> pa.Schema:
    """What a read with ``opts`` returns: the per-key function's schema, the aggregates', or
    the rows'."""
    schema = output_schema(opts.layout, opts.read.with_metadata)
    if opts.per_key_schema is not None:
        return opts.per_key_schema
    if opts.aggregate:
        return agg.PartialAggregator(opts.layout.key, opts.aggregate, schema).output_schema()
    return schema


class SplitTasks:
    """The reader of a result-returning read (option ``aggregate`` or ``per_key``) as a
    ``mapInArrow`` function over one row per split (``spark.range(splits)``): row *i* reads
    split *i* with :class:`ShuffleReader`, exactly as the data source's task would.

    What it spares is the data source's planning, which Spark runs in Python processes of
    the driver that it starts afresh after a minute idle (1-3 s): these tasks run in Spark's
    ordinary Python workers, forked from the executors' daemon. Picklable; the options go as
    the strings the data source would get."""

    # The name Spark shows for the function in plans and the UI.
    __name__ = "kafka_shuffle_read"

    def __init__(self, options: Mapping[str, str]):
        self.options = dict(options)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        opts = SourceOptions(self.options)
        reader = ShuffleReader(opts)
        plans = opts.plans
        for batch in batches:
            for i in batch.column(0).to_pylist():
                yield from reader.read(InputPartition(plans[i].to_json()))


def read_in_tasks(spark: Any, options: Mapping[str, str]) -> Any:
    """A result-returning read (option ``aggregate`` or ``per_key``, with a ``plan``) as
    :class:`SplitTasks` over ``spark.range``: the data source's rows without its planning.
    The options are checked here first, as the data source would check them."""
    from orchestration.shuffle.spark.compat import from_arrow_schema_ntz

    opts = SourceOptions(options)
    opts.check_mode(BATCH)
    if opts.per_key_schema is None and not opts.aggregate:
        raise ShuffleOptionError(f"{SOURCE}: read_in_tasks needs option 'aggregate' or 'per_key'")
    schema = result_schema(opts)
    splits = len(opts.plans)
    task = SplitTasks(options)
    return spark.range(0, splits, 1, max(splits, 1)).mapInArrow(task, from_arrow_schema_ntz(schema))
