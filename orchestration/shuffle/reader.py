"""The Spark side of reading a shuffle: the ``kafka-shuffle`` Python data source.

Each Spark partition follows its :class:`~orchestration.shuffle.planning.SplitPlan`: it seeks
straight to the committed offset ranges of its Kafka partitions, keeps the DATA frames of
committed subtask attempts only, merges the producers' watermarks per partition (a
regression is an error), and checks each committed attempt's END frame against what it
read, so a lost or extra frame cannot go unnoticed.

``plan_shuffle_read`` plans on the driver and hands the plan over as an option. Used directly
(``spark.read.format("kafka-shuffle").option("topic", ...)``), the source reads the commit
log itself; options ``windows`` / ``runs`` (JSON lists), ``event_time_start`` /
``event_time_end`` (epoch microseconds), ``parallelism`` and ``with_metadata`` select what
to read; ``aggregate`` (JSON ``{"name": ["column", "function"]}``, see
:mod:`orchestration.shuffle.aggregation`) returns per-key aggregates instead of rows.
"""

from __future__ import annotations

import ctypes
import functools
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from . import aggregation as agg
from . import frames as fr
from ._kafka import consumer, read_range
from ._log_io import read_plan
from ._options import Options
from .commitlog import Layout
from .errors import ShuffleFormatError, ShuffleOptionError
from .planning import PartitionRead, SplitPlan, merged_intervals
from .watermarks import WatermarkMerger

METADATA_FIELDS = [
    pa.field("_partition", pa.int32()),
    pa.field("_key_group", pa.int32()),
    pa.field("_run_id", pa.string()),
    pa.field("_offset", pa.int64()),
]


def output_schema(layout: Layout, with_metadata: bool) -> pa.Schema:
    fields = list(layout.schema)
    return pa.schema(fields + (METADATA_FIELDS if with_metadata else []))


class ReadOptions:
    """The reader's options, parsed and validated once on the driver."""

    def __init__(self, options: Mapping[str, str]):
        opts = Options(options, "kafka-shuffle")
        self.topic = opts.text("topic", required=True)
        self.kafka = opts.kafka()
        self.with_metadata = opts.flag("with_metadata")
        self.event_time_start = opts.integer("event_time_start", minimum=-(2**63))
        self.event_time_end = opts.integer("event_time_end", minimum=-(2**63))
        layout = opts.text("layout")
        plan = opts.text("plan")
        if layout and plan:
            # Planned by plan_shuffle_read on the driver, handed over as strings.
            self.layout = Layout.from_json(layout)
            self.plans = [SplitPlan.from_json(p) for p in json.loads(plan)]
        else:
            read = read_plan(
                self.kafka,
                self.topic,
                windows=opts.json_list("windows"),
                runs=opts.json_list("runs"),
                event_time_start=self.event_time_start,
                event_time_end=self.event_time_end,
                parallelism=opts.integer("parallelism", minimum=1),
            )
            self.layout, self.plans = read.layout, list(read.splits)
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


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number


@functools.cache
def _libc() -> Any:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc
        return None


@functools.cache
def _bound_worker_memory() -> None:
    """Keeps a Python worker's memory flat however many frames it decodes.

    A frame arrives as a ~1 MiB message and is decoded into a few MiB of Arrow buffers.
    Measured on a 10M-row shuffle read split after split in one process: with Arrow's
    default (mimalloc) pool and glibc's adaptive mmap threshold, resident memory crept up
    by 5-10 MiB per split (117 -> 167 MiB); with the system pool, a fixed 128 KiB mmap
    threshold (large blocks are unmapped when freed instead of fragmenting the heap) and a
    trim after each split, it stayed at 90 MiB. Both settings are process-wide and only
    choose where memory comes from; they are applied once, in the worker that reads.
    """
    pa.set_memory_pool(pa.system_memory_pool())
    libc = _libc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, 128 * 1024)


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

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(p.to_json()) for p in self.opts.plans]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        plan = SplitPlan.from_json(partition.value)
        _bound_worker_memory()
        try:
            with consumer(self.opts.kafka) as c:
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

    def _read_partition(self, c: Any, pr: PartitionRead) -> Iterator[pa.RecordBatch]:
        topic = self.opts.topic
        allowed = {s.run_id: set(s.tasks) for s in pr.segments}
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
                    batch = frame.batch()
                    counts[0] += batch.num_rows
                    counts[1] += 1
                    out = self._rows(batch, pr, h.run_id, m.offset(), where)
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
        self, batch: pa.RecordBatch, pr: PartitionRead, run_id: str, offset: int, where: str
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
        for f in layout.schema:
            try:
                col = batch.column(f.name)
            except KeyError:
                raise ShuffleFormatError(
                    f"DATA frame at {where} has no column {f.name!r}"
                ) from None
            columns.append(col if col.type.equals(f.type) else col.cast(f.type))
        if self.opts.with_metadata:
            n = batch.num_rows
            columns += [
                pa.array([pr.partition] * n, pa.int32()),
                batch.column(fr.KEY_GROUP_COLUMN).cast(pa.int32()),
                pa.array([run_id] * n, pa.string()),
                pa.array([offset] * n, pa.int64()),
            ]
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
        if opts.aggregate:
            schema = agg.PartialAggregator(opts.layout.key, opts.aggregate, schema).output_schema()
        return from_arrow_schema(schema)

    def reader(self, schema) -> ShuffleReader:
        return ShuffleReader(self._read_options())
