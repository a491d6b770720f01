"""The Spark side of reading a shuffle: the ``kafka-shuffle`` Python data source.

Each Spark partition follows its :class:`~orchestration.shuffle.core.reader.SplitPlan`: it seeks
straight to the committed offset ranges of its Kafka partitions, keeps the DATA frames of
committed subtask attempts only, merges the producers' watermarks per partition (a
regression is an error), and checks each committed attempt's END frame against what it
read, so a lost or extra frame cannot go unnoticed.

``plan_shuffle_read`` plans on the driver and hands the plan over as an option. Used directly
(``spark.read.format("kafka-shuffle").option("topic", ...)``), the source reads the commit
log itself; options ``windows`` / ``runs`` (JSON lists), ``event_time_start`` /
``event_time_end`` (epoch microseconds), ``parallelism`` and ``with_metadata`` select what
to read; ``aggregate`` (JSON ``{"name": ["column", "function"]}``, see
:mod:`orchestration.shuffle.core.aggregation`) returns per-key aggregates instead of rows.

``per_key`` (set by :func:`orchestration.shuffle.apply_per_key`: a pickled
:class:`~orchestration.shuffle.core.perkey.KeyFunction`, base64, with its output schema in
``per_key_schema``) runs a function over whole keys inside the reader and returns its
results instead of rows: a key never spans two Kafka partitions, so a pass over a partition's
key groups holds every row of its keys. ``pass_rows`` bounds the rows of one pass (see
:func:`~orchestration.shuffle.core.reader.split_passes`).
"""

from __future__ import annotations

import base64
import ctypes
import functools
import json
import pickle
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from orchestration.shuffle.core import aggregation as agg
from orchestration.shuffle.core import frames as fr
from orchestration.shuffle.core import perkey as grouping
from orchestration.shuffle.core.commitlog import Layout, schema_from_b64
from orchestration.shuffle.core.metrics import METRICS_KEY
from orchestration.shuffle.core.options import Options
from orchestration.shuffle.core.reader import (
    AUTO,
    PartitionRead,
    SplitPlan,
    merged_intervals,
    plan_splits,
    split_passes,
)
from orchestration.shuffle.core.stream import StreamOffset, admit, starting_offset, stream_commits
from orchestration.shuffle.core.watermarks import WatermarkMerger
from orchestration.shuffle.errors import ShuffleFormatError, ShuffleOptionError
from orchestration.shuffle.kafka.client import consumer, read_range
from orchestration.shuffle.kafka.commitlog import read_plan

METADATA_FIELDS = [
    pa.field("_partition", pa.int32()),
    pa.field("_key_group", pa.int32()),
    pa.field("_run_id", pa.string()),
    pa.field("_offset", pa.int64()),
    pa.field("_window", pa.string()),
]


def output_schema(layout: Layout, with_metadata: bool) -> pa.Schema:
    fields = list(layout.schema)
    return pa.schema(fields + (METADATA_FIELDS if with_metadata else []))


class ReadOptions:
    """The reader's options, parsed and validated once on the driver.

    A batch read is planned from the commit log when its splits are first needed (unless
    :func:`~orchestration.shuffle.plan_shuffle_read` handed a plan over); a streaming read
    plans each micro-batch itself.
    """

    def __init__(self, options: Mapping[str, str]):
        opts = Options(options, "kafka-shuffle")
        self.topic = opts.text("topic", required=True)
        self.kafka = opts.kafka()
        self.with_metadata = opts.flag("with_metadata")
        self.event_time_start = opts.integer("event_time_start", minimum=-(2**63))
        self.event_time_end = opts.integer("event_time_end", minimum=-(2**63))
        self.parallelism: int | str | None = (
            AUTO
            if (opts.text("parallelism") or "").lower() == AUTO
            else opts.integer("parallelism", minimum=1)
        )
        self.windows = opts.json_list("windows")
        self.runs = opts.json_list("runs")
        # Streaming options.
        self.starting = opts.choice("startingOffsets", ("earliest", "latest"), "earliest")
        self.starting_timestamp = opts.integer("startingTimestamp")
        self.max_runs = opts.integer("maxRunsPerTrigger", minimum=1)
        self.max_rows = opts.integer("maxRowsPerTrigger", minimum=1)
        layout = opts.text("layout")
        plan = opts.text("plan")
        self._plans: list[SplitPlan] | None = None
        if layout and plan:
            # Planned by plan_shuffle_read on the driver, handed over as strings.
            self.layout = Layout.from_json(layout)
            self._plans = [SplitPlan.from_json(p) for p in json.loads(plan)]
        else:
            from orchestration.shuffle.kafka.commitlog import read_log

            self._log = read_log(self.kafka, self.topic)
            self.layout = self._log.require_layout()
        self.aggregate: tuple[agg.Aggregation, ...] = ()
        aggregate = opts.text("aggregate")
        if aggregate:
            if self.with_metadata:
                raise ShuffleOptionError(
                    "kafka-shuffle: options 'aggregate' and 'with_metadata' cannot be combined"
                )
            self.aggregate = agg.from_json(
                aggregate, output_schema(self.layout, False), self.layout.key
            )
        # Unpickled by the task that reads (the function may only import there).
        self.per_key = opts.text("per_key")
        self.per_key_schema: pa.Schema | None = None
        self.pass_rows = opts.integer("pass_rows", default=DEFAULT_PASS_ROWS, minimum=1)
        if self.per_key:
            if self.aggregate:
                raise ShuffleOptionError(
                    "kafka-shuffle: options 'aggregate' and 'per_key' cannot be combined"
                )
            schema = opts.text("per_key_schema", required=True)
            try:
                self.per_key_schema = schema_from_b64(schema)
            except (ValueError, pa.ArrowInvalid):
                raise ShuffleOptionError(
                    "kafka-shuffle: option 'per_key_schema' is not a base64 Arrow schema"
                ) from None

    def key_function(self) -> grouping.KeyFunction:
        """The per-key function of option ``per_key``."""
        cached = getattr(self, "_key_function", None)
        if cached is None:
            cached = pickle.loads(base64.b64decode(self.per_key))
            if not isinstance(cached, grouping.KeyFunction):
                raise ShuffleOptionError(
                    "kafka-shuffle: option 'per_key' does not hold a per-key function"
                )
            self._key_function = cached
        return cached

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_key_function", None)  # shipped as the option's bytes
        return state

    @property
    def plans(self) -> list[SplitPlan]:
        if self._plans is None:
            read = read_plan(
                self.kafka,
                self.topic,
                log=self._log,
                windows=self.windows,
                runs=self.runs,
                event_time_start=self.event_time_start,
                event_time_end=self.event_time_end,
                parallelism=self.parallelism,
            )
            self._plans = list(read.splits)
        return self._plans


# Rows one pass of per-key work holds by default (about 120 MiB of Arrow at 60 bytes a row,
# and as much again once converted to pandas).
DEFAULT_PASS_ROWS = 2_000_000


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


class ShuffleReader(DataSourceReader):
    def __init__(self, opts: ReadOptions):
        self.opts = opts
        self.schema = output_schema(opts.layout, opts.with_metadata)
        # The columns decoded from frames (None: all): aggregations and per-key functions
        # read only the columns they use.
        self.columns: list[str] | None = None
        self._decoded: set[str] | None = None  # what frames decode: columns and key group
        self._layout_names = set(opts.layout.schema.names)
        if opts.aggregate:
            self._use_columns(
                agg.PartialAggregator(opts.layout.key, opts.aggregate, self.schema).columns()
            )

    def _use_columns(self, wanted: list[str]) -> None:
        layout = self.opts.layout
        names = set(wanted)
        if layout.event_time and (
            self.opts.event_time_start is not None or self.opts.event_time_end is not None
        ):
            names.add(layout.event_time)
        fields = [f for f in layout.schema if f.name in names]
        self.columns = [f.name for f in fields]
        self._decoded = {*self.columns, fr.KEY_GROUP_COLUMN}
        meta = METADATA_FIELDS if self.opts.with_metadata else []
        self.schema = pa.schema(fields + [f for f in meta if f.name in names])

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(p.to_json()) for p in self.opts.plans]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if partition.value is None:
            return  # Spark reads one empty partition when a plan has none
        plan = SplitPlan.from_json(partition.value)
        _bound_worker_memory()
        try:
            with consumer(self.opts.kafka) as c:
                if self.opts.per_key:
                    yield from self._per_key(c, plan)
                    return
                for pr in plan.reads:
                    batches = self._read_partition(c, pr)
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

    def _per_key(self, c: Any, plan: SplitPlan) -> Iterator[pa.RecordBatch]:
        """The per-key function over each pass: the rows of a contiguous range of one Kafka
        partition's key groups, so every row of each of its keys (see
        :func:`~orchestration.shuffle.core.reader.split_passes` for what bounds a pass)."""
        kf = self.opts.key_function()
        if kf.columns is not None:
            self._use_columns(list(kf.columns))
        layout = self.opts.layout
        for read in plan.reads:
            for piece in split_passes(
                read, layout.max_parallelism, layout.num_partitions, self.opts.pass_rows
            ):
                # Not bound to a name here: the function's pass owns the rows, and drops
                # them as read once they are sorted by key.
                yield from kf.apply(self._pass_rows(c, piece))

    def _pass_rows(self, c: Any, read: PartitionRead) -> pa.Table:
        return pa.Table.from_batches(list(self._read_partition(c, read)), schema=self.schema)

    def _read_partition(self, c: Any, pr: PartitionRead) -> Iterator[pa.RecordBatch]:
        topic = self.opts.topic
        allowed = {s.run_id: set(s.tasks) for s in pr.segments}
        windows = {s.run_id: s.window for s in pr.segments}
        mergers = {
            s.run_id: WatermarkMerger(
                {t for t, _ in s.tasks},
                where=f"topic {topic!r} partition {pr.partition} run {s.run_id}",
            )
            for s in pr.segments
        }
        seen: dict[tuple[str, int], list[int]] = {}
        ended: dict[tuple[str, int], tuple[int, int]] = {}
        for start, end in merged_intervals(pr.segments):
            for m in read_range(c, topic, pr.partition, start, end + 1, max_batch=1):
                where = f"topic {topic!r} partition {pr.partition} offset {m.offset()}"
                frame = fr.decode(m.value(), where)
                h = frame.header
                tasks = allowed.get(h.run_id)
                if tasks is None or (h.subtask, h.attempt) not in tasks:
                    continue
                counts = seen.setdefault((h.run_id, h.subtask), [0, 0])
                if h.type is fr.FrameType.DATA:
                    batch = frame.batch(self._decoded)
                    counts[0] += batch.num_rows
                    counts[1] += 1
                    out = self._rows(batch, pr, h.run_id, windows[h.run_id], m.offset(), where)
                    if out is not None and out.num_rows:
                        yield out
                elif h.type is fr.FrameType.WATERMARK:
                    mergers[h.run_id].observe(h.subtask, frame.watermark())
                else:
                    ended[(h.run_id, h.subtask)] = frame.end_counts()
                    mergers[h.run_id].end(h.subtask)
        for s in pr.segments:
            for subtask, attempt in s.tasks:
                got = tuple(seen.get((s.run_id, subtask), (0, 0)))
                want = ended.get((s.run_id, subtask))
                where = (
                    f"topic {topic!r} partition {pr.partition}, run {s.run_id} subtask {subtask}"
                )
                if want is None:
                    raise ShuffleFormatError(
                        f"{where} attempt {attempt}: no END frame within committed offsets "
                        f"[{s.first}, {s.last}]; the topic lost data or was truncated"
                    )
                if got != tuple(want):
                    raise ShuffleFormatError(
                        f"{where}: read {got[0]} rows in {got[1]} frames, the producer wrote "
                        f"{want[0]} rows in {want[1]} frames"
                    )

    def _rows(
        self,
        batch: pa.RecordBatch,
        pr: PartitionRead,
        run_id: str,
        window: str | None,
        offset: int,
        where: str,
    ) -> pa.RecordBatch | None:
        layout = self.opts.layout
        try:
            kg = batch.column(fr.KEY_GROUP_COLUMN)
        except KeyError:
            raise ShuffleFormatError(
                f"DATA frame at {where} has no {fr.KEY_GROUP_COLUMN} column"
            ) from None
        mask = None
        if not pr.full:
            mask = pc.and_(pc.greater_equal(kg, pr.key_group_start), pc.less(kg, pr.key_group_end))
        et = layout.event_time
        if et and (self.opts.event_time_start is not None or self.opts.event_time_end is not None):
            t = batch.column(et).cast(pa.int64())
            for bound, op in (
                (self.opts.event_time_start, pc.greater_equal),
                (self.opts.event_time_end, pc.less),
            ):
                if bound is not None:
                    cond = pc.fill_null(op(t, bound), False)
                    mask = cond if mask is None else pc.and_(mask, cond)
        if mask is not None:
            batch = batch.filter(mask)
        columns = []
        for f in self.schema:
            if f.name not in self._layout_names:
                break  # the metadata columns come last
            try:
                col = batch.column(f.name)
            except KeyError:
                raise ShuffleFormatError(
                    f"DATA frame at {where} has no column {f.name!r}"
                ) from None
            columns.append(col if col.type.equals(f.type) else col.cast(f.type))
        if self.opts.with_metadata:
            n = batch.num_rows
            meta = {
                "_partition": lambda: pa.array([pr.partition] * n, pa.int32()),
                "_key_group": lambda: batch.column(fr.KEY_GROUP_COLUMN).cast(pa.int32()),
                "_run_id": lambda: pa.array([run_id] * n, pa.string()),
                "_offset": lambda: pa.array([offset] * n, pa.int64()),
                "_window": lambda: pa.array([window] * n, pa.string()),
            }
            columns += [meta[f.name]() for f in self.schema if f.name in meta]
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


class ShuffleDataSource(DataSource):
    """``kafka-shuffle``: read a shuffle's committed runs.

    Prefer :func:`orchestration.shuffle.read_shuffle`, which also checks the layout and
    tags the key columns for :func:`orchestration.shuffle.apply_per_key`. Writing goes
    through :func:`orchestration.shuffle.write_shuffle`.
    """

    @classmethod
    def name(cls) -> str:
        return "kafka-shuffle"

    def _read_options(self) -> ReadOptions:
        cached = getattr(self, "_opts", None)
        if cached is None:
            cached = ReadOptions(self.options)
            self._opts = cached
        return cached

    def schema(self):
        from pyspark.sql.pandas.types import from_arrow_schema

        opts = self._read_options()
        schema = output_schema(opts.layout, opts.with_metadata)
        if opts.per_key_schema is not None:
            return from_arrow_schema(opts.per_key_schema)
        if opts.aggregate:
            schema = agg.PartialAggregator(opts.layout.key, opts.aggregate, schema).output_schema()
        return from_arrow_schema(schema)

    def reader(self, schema) -> ShuffleReader:
        return ShuffleReader(self._read_options())

    def streamReader(self, schema) -> ShuffleStreamReader:
        return ShuffleStreamReader(self._read_options())


class ShuffleStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming reads of a shuffle: each micro-batch reads the runs committed since the
    previous one (see :mod:`orchestration.shuffle.core.stream`), keyed as a batch read is."""

    def __init__(self, opts: ReadOptions):
        self.opts = opts
        self.batch = ShuffleReader(opts)
        self._target: int | None = None  # Trigger.AvailableNow: the log's end when it started
        self._last_read: tuple[int, list, int] | None = None  # (from, records, end offset)
        self._planned: list = []  # the commits latestOffset() admitted last
        self._log_end: int | None = None  # the commit log's end latestOffset() last read

    def _records(self, start: StreamOffset, needed_until: int | None = None) -> tuple[list, int]:
        """Commit-log records from ``start`` on. Planning a micro-batch reuses what
        ``latestOffset`` just read when it reaches ``needed_until``."""
        from orchestration.shuffle.kafka.commitlog import read_log_records

        # Visibility before the snapshot needs the log from its beginning.
        first = 0 if start.log < start.snapshot else start.log
        cached = self._last_read
        if needed_until is not None and cached and cached[0] == first and cached[2] >= needed_until:
            return cached[1], cached[2]
        records, high = read_log_records(self.opts.kafka, self.opts.topic, first)
        self._last_read = (first, records, high)
        return records, high

    def initialOffset(self) -> dict:
        from orchestration.shuffle.kafka.commitlog import read_log_records

        records, high = read_log_records(self.opts.kafka, self.opts.topic)
        return starting_offset(
            records, high, self.opts.starting, self.opts.starting_timestamp
        ).to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        # Spark only passes its own limit types: a run stands for a file here.
        if self.opts.max_runs is not None:
            return ReadMaxFiles(self.opts.max_runs)
        if self.opts.max_rows is not None:
            return ReadMaxRows(self.opts.max_rows)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        from orchestration.shuffle.kafka.commitlog import log_end

        self._target = log_end(self.opts.kafka, self.opts.topic)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = StreamOffset.from_dict(start)
        records, high = self._records(begin)
        self._log_end = high
        if self._target is not None:
            high = min(high, self._target)
        limited = not isinstance(limit, ReadAllAvailable)
        commits = stream_commits(self.opts.topic, records, begin, high)
        end = admit(
            commits,
            begin,
            high,
            max_runs=self.opts.max_runs if limited else None,
            max_rows=self.opts.max_rows if limited else None,
        )
        self._planned = [c for off, c in commits if off < end.log]
        return end.to_dict()

    def reportLatestOffset(self) -> dict | None:
        from orchestration.shuffle.kafka.commitlog import log_end

        # Shown in the query's progress as ``latestOffset``. Spark asks for it right after
        # latestOffset() planned a micro-batch: the runs planned are that batch's.
        planned = self._planned
        metrics = {
            "topic": self.opts.topic,
            "runs": [c.run_id for c in planned],
            "rows": sum(c.rows for c in planned),
            "bytes": sum(c.bytes for c in planned),
        }
        end = (
            self._log_end
            if self._log_end is not None
            else log_end(self.opts.kafka, self.opts.topic)
        )
        return {"log": end, METRICS_KEY: metrics}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, stop = StreamOffset.from_dict(start), StreamOffset.from_dict(end)
        if stop.log <= begin.log:
            return []
        records, _ = self._records(begin, needed_until=stop.log)
        commits = [c for _, c in stream_commits(self.opts.topic, records, begin, stop.log)]
        if not commits:
            return []
        plans = plan_splits(self.opts.layout, commits, self.opts.parallelism)
        return [InputPartition(p.to_json()) for p in plans]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.batch.read(partition)

    def commit(self, end: dict) -> None:
        pass
