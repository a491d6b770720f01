"""Executing a planned shuffle read: the rows of one Kafka partition's committed offsets, as
every Python reader gets them (the ``kafka-shuffle`` source's Spark tasks,
:mod:`orchestration.shuffle.spark.reader`; the reads without Spark,
:mod:`orchestration.shuffle.table_read`). No Spark.

A :class:`RowReader` follows a :class:`~orchestration.shuffle.core.planner.PartitionRead`:
it seeks straight to the committed offset ranges, keeps the DATA frames of committed subtask
attempts only, keeps the rows of the read's key groups and event-time range, merges the
producers' watermarks per run (a regression is an error), and checks each committed
attempt's END frame against what it read, so a lost or extra frame cannot go unnoticed. A
frame that cannot be decoded is refused naming its topic, partition and offset.
:func:`in_threads` reads several partitions at once, each thread with a consumer of its own.

Example::

    rows = RowReader("events.by_user", plan.layout, ReadOptions())
    with kafka.consumer(**{"check.crcs": True}) as c:
        for batch in rows.read_partition(c, plan.splits[0].reads[0]):
            ...
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer

from orchestration.shuffle.core import frames as fr
from orchestration.shuffle.core.commitlog import Layout
from orchestration.shuffle.core.evolution import Resolution, resolve, resolved_column
from orchestration.shuffle.core.planner import PartitionRead, ReadOptions, merged_intervals
from orchestration.shuffle.core.watermarks import WatermarkMerger
from orchestration.shuffle.errors import ShuffleFormatError, ShuffleOptionError
from orchestration.shuffle.kafka.client import KafkaClient, read_range

T = TypeVar("T")
R = TypeVar("R")

METADATA_FIELDS = [
    pa.field("_partition", pa.int32()),
    pa.field("_key_group", pa.int32()),
    pa.field("_run_id", pa.string()),
    pa.field("_offset", pa.int64()),
    pa.field("_window", pa.string()),
]


def output_schema(layout: Layout, with_metadata: bool) -> pa.Schema:
    """The rows a read returns: the layout's columns, then the metadata columns if asked."""
    fields = list(layout.schema)
    return pa.schema(fields + (METADATA_FIELDS if with_metadata else []))


def selected_schema(
    topic: str, layout: Layout, with_metadata: bool, columns: Sequence[str] | None
) -> pa.Schema:
    """The schema of a read of ``columns`` (in that order; None: every column, as
    :func:`output_schema`), as ``select(*columns)`` over a Spark read of it gives it.

    Raises:
        ShuffleOptionError: A column the read does not have (a metadata column without
            ``with_metadata``), or one named twice.
    """
    schema = output_schema(layout, with_metadata)
    if columns is None:
        return schema
    if isinstance(columns, str):
        raise ShuffleOptionError(
            f"shuffle {topic!r}: columns must be a list of column names, not the string {columns!r}"
        )
    names = list(columns)
    twice = sorted({c for c in names if names.count(c) > 1})
    if twice:
        raise ShuffleOptionError(f"shuffle {topic!r}: columns {twice} named more than once")
    unknown = [c for c in names if schema.get_field_index(c) < 0]
    if unknown:
        meta = {f.name for f in METADATA_FIELDS}
        hint = (
            " (metadata columns need with_metadata=True)"
            if any(c in meta for c in unknown) and not with_metadata
            else ""
        )
        raise ShuffleOptionError(
            f"shuffle {topic!r} has no column(s) {unknown}{hint}; its columns are {schema.names}"
        )
    return pa.schema([schema.field(c) for c in names])


def decoded_batch(frame: fr.Frame, columns: set[str] | None, where: str) -> pa.RecordBatch:
    """The rows of a DATA frame, or a :class:`ShuffleFormatError` naming where it is.

    A version 2 frame's payload was checked against its checksum when it was parsed; a
    version 1 frame (no checksum) damaged before it was produced is refused here only when
    Arrow cannot decode it or its buffers do not add up (``validate``, which costs no pass
    over the data).
    """
    try:
        batch = frame.batch(columns)
        batch.validate()
    except (pa.ArrowException, OSError, StopIteration, ValueError) as exc:
        h = frame.header
        raise ShuffleFormatError(
            f"DATA frame at {where} (run {h.run_id} subtask {h.subtask} attempt {h.attempt}) "
            f"cannot be decoded: {type(exc).__name__}: {exc}"
        ) from exc
    return batch


class RowReader:
    """The rows of a shuffle read's partition reads, for a read that the plan has already
    fixed (runs, offsets, key groups): what still applies to rows is in ``options``
    (:meth:`~orchestration.shuffle.core.planner.ReadOptions.row_options`: the event-time
    range and the metadata columns).

    Picklable (Spark ships it to its tasks inside the data source's reader).

    Attributes:
        schema: The batches' schema: the layout's columns (or those of
            :meth:`use_columns`), then the metadata columns asked for.
        columns: The layout's columns decoded from frames (None: all).
    """

    def __init__(self, topic: str, layout: Layout, options: ReadOptions):
        self.topic = topic
        self.layout = layout
        self.options = options
        self.schema = output_schema(layout, options.with_metadata)
        self.columns: list[str] | None = None
        self._decoded: set[str] | None = None  # what frames decode: columns and key group
        self._layout_names = set(layout.schema.names)
        self._resolutions: dict[int, tuple[Resolution, set[str] | None]] = {}

    def _resolution(self, version: int) -> tuple[Resolution, set[str] | None]:
        """How frames of a run of layout ``version`` are read as the latest version, and
        which of their columns to decode (None: all)."""
        got = self._resolutions.get(version)
        if got is None:
            layout = self.layout
            res = resolve(layout.layout_version(version), layout.layout_version())
            if res.identity:
                got = (res, self._decoded)
            else:
                wanted = self.columns if self.columns is not None else layout.schema.names
                names = set(wanted)
                if layout.event_time:
                    names.add(layout.event_time)
                got = (res, {*res.frame_columns(names), fr.KEY_GROUP_COLUMN})
            self._resolutions[version] = got
        return got

    def use_columns(self, wanted: Iterable[str]) -> None:
        """Decodes only ``wanted`` of the layout's columns (and of the metadata columns, only
        those adds), and the event-time column when the read filters on it: a frame's other
        columns are never decompressed. The schema keeps the layout's order."""
        layout = self.layout
        names = set(wanted)
        if layout.event_time and self.filters_event_time:
            names.add(layout.event_time)
        fields = [f for f in layout.schema if f.name in names]
        self.columns = [f.name for f in fields]
        self._decoded = {*self.columns, fr.KEY_GROUP_COLUMN}
        self._resolutions.clear()
        meta = METADATA_FIELDS if self.options.with_metadata else []
        self.schema = pa.schema(fields + [f for f in meta if f.name in names])

    @property
    def filters_event_time(self) -> bool:
        o = self.options
        return o.event_time_start_us is not None or o.event_time_end_us is not None

    def read_partition(self, c: Consumer, pr: PartitionRead) -> Iterator[pa.RecordBatch]:
        """The rows ``pr`` selects, fetched with ``c`` (each offset once), batch by batch in
        offset order; the END frames are checked once the last offset is read."""

        def fetched() -> Generator[Any, None, None]:
            for start, end in merged_intervals(pr.segments):
                yield from read_range(c, self.topic, pr.partition, start, end + 1, max_batch=1)

        messages = fetched()
        try:
            yield from self.rows_of_messages(pr, messages)
        finally:
            # Closed here, with ``c`` still open, however the read ends (an error, a
            # reader that stops): the fetch unassigns its partition now, not when an
            # error's traceback lets it go, after ``c`` was closed.
            messages.close()

    def rows_of_messages(
        self, pr: PartitionRead, messages: Iterable[Any]
    ) -> Iterator[pa.RecordBatch]:
        """The rows of ``messages`` (Kafka messages of ``pr``'s partition: ``offset()`` and
        ``value()``, in offset order, covering ``pr``'s segments) that ``pr`` selects."""
        topic = self.topic
        allowed = {s.run_id: set(s.tasks) for s in pr.segments}
        windows = {s.run_id: s.window for s in pr.segments}
        versions = {s.run_id: self._resolution(s.layout_version) for s in pr.segments}
        mergers = {
            s.run_id: WatermarkMerger(
                {t for t, _ in s.tasks},
                where=f"topic {topic!r} partition {pr.partition} run {s.run_id}",
            )
            for s in pr.segments
        }
        seen: dict[tuple[str, int], list[int]] = {}
        ended: dict[tuple[str, int], tuple[int, int]] = {}
        for m in messages:
            where = f"topic {topic!r} partition {pr.partition} offset {m.offset()}"
            frame = fr.decode(m.value(), where)
            h = frame.header
            tasks = allowed.get(h.run_id)
            if tasks is None or (h.subtask, h.attempt) not in tasks:
                continue
            counts = seen.setdefault((h.run_id, h.subtask), [0, 0])
            if h.type is fr.FrameType.DATA:
                resolution, decoded = versions[h.run_id]
                batch = decoded_batch(frame, decoded, where)
                counts[0] += batch.num_rows
                counts[1] += 1
                out = self.rows(
                    batch, pr, h.run_id, windows[h.run_id], m.offset(), where, resolution
                )
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

    def rows(
        self,
        batch: pa.RecordBatch,
        pr: PartitionRead,
        run_id: str,
        window: str | None,
        offset: int,
        where: str,
        resolution: Resolution | None = None,
    ) -> pa.RecordBatch | None:
        """The rows of one DATA frame's ``batch`` that the read keeps (its key groups, its
        event-time range), in :attr:`schema`: the latest layout version's columns, read
        through ``resolution`` when the run was written under another (by field id: nulls
        for a column it lacks, widened where it was narrower). A column a run of the latest
        version left out (a write with ``schema_mode="merge"``) is null too."""
        layout = self.layout
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
        if et and self.filters_event_time:
            t = batch.column(et).cast(pa.int64())
            for bound, op in (
                (self.options.event_time_start_us, pc.greater_equal),
                (self.options.event_time_end_us, pc.less),
            ):
                if bound is not None:
                    cond = pc.fill_null(op(t, bound), False)
                    mask = cond if mask is None else pc.and_(mask, cond)
        if mask is not None:
            batch = batch.filter(mask)
        columns = []
        mapped = resolution if resolution is not None and not resolution.identity else None
        for f in self.schema:
            if f.name not in self._layout_names:
                break  # the metadata columns come last
            if mapped is not None:
                columns.append(resolved_column(batch, f.name, mapped.sources[f.name]))
                continue
            i = batch.schema.get_field_index(f.name)
            if i < 0:
                columns.append(pa.nulls(batch.num_rows, f.type))
                continue
            col = batch.column(i)
            columns.append(col if col.type.equals(f.type) else col.cast(f.type))
        if self.options.with_metadata:
            n = batch.num_rows
            meta = {
                "_partition": lambda: pa.repeat(pa.scalar(pr.partition, pa.int32()), n),
                "_key_group": lambda: batch.column(fr.KEY_GROUP_COLUMN).cast(pa.int32()),
                "_run_id": lambda: pa.repeat(pa.scalar(run_id, pa.string()), n),
                "_offset": lambda: pa.repeat(pa.scalar(offset, pa.int64()), n),
                "_window": lambda: pa.repeat(pa.scalar(window, pa.string()), n),
            }
            columns += [meta[f.name]() for f in self.schema if f.name in meta]
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


# What a thread of in_threads puts last.
_DONE = object()


def _put(out: queue.Queue, item: Any, stop: threading.Event) -> bool:
    """Puts ``item`` on ``out``, waiting for room; False when the read was stopped."""
    while not stop.is_set():
        try:
            out.put(item, timeout=0.05)
            return True
        except queue.Full:
            continue
    return False


# A fetch's bytes per partition (max.partition.fetch.bytes): a small read asks for little
# more than it reads. A broker answers a fetch with what follows the offset asked for, up to
# this much; a read of a small window in the middle of a long partition otherwise took in
# and parsed 4 MiB of later windows' frames per partition (read_table of one window of a
# shuffle of 10,000 was 5x that of one of 10).
SMALL_FETCH_BYTES = 64 * 1024
LARGE_FETCH_BYTES = 4 * 1024 * 1024


def fetch_bytes(planned_bytes: int, reads: int) -> int:
    """The ``max.partition.fetch.bytes`` of a read of ``planned_bytes`` (its commits'
    bytes) over ``reads`` partition reads: twice a read's share, a power of two between
    ``SMALL_FETCH_BYTES`` and ``LARGE_FETCH_BYTES`` (a batch larger than it is still
    fetched whole: Kafka returns at least one)."""
    share = 2 * planned_bytes // max(reads, 1)
    size = SMALL_FETCH_BYTES
    while size < share and size < LARGE_FETCH_BYTES:
        size *= 2
    return size


def in_threads(
    kafka: KafkaClient,
    name: str,
    items: Sequence[T],
    threads: int,
    work: Callable[[Consumer, T], Iterable[R]],
    partition_fetch_bytes: int = LARGE_FETCH_BYTES,
) -> Generator[R, None, None]:
    """What ``work(consumer, item)`` yields for each of ``items``, done by ``threads`` threads
    that each read with a consumer of their own: results as they come (one item's in order),
    at most ``threads`` of them waiting to be taken, so memory stays bounded however much
    is read. The first error of any thread is raised here, and stops the others; so does
    closing the iterator. ``partition_fetch_bytes``: the consumers' fetch size per partition
    (:func:`fetch_bytes`)."""
    if not items:
        return
    todo: queue.SimpleQueue[T] = queue.SimpleQueue()
    for item in items:
        todo.put(item)
    out: queue.Queue = queue.Queue(maxsize=threads)
    stop = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            # librdkafka does not check the CRC of what it fetches unless asked (Kafka's Java
            # consumer does): a record batch damaged on a broker's disk or on the way is
            # then refused rather than decoded.
            settings = {"check.crcs": True, "max.partition.fetch.bytes": partition_fetch_bytes}
            with kafka.consumer(**settings) as c:
                while not stop.is_set():
                    try:
                        item = todo.get_nowait()
                    except queue.Empty:
                        return
                    results = iter(work(c, item))
                    try:
                        for result in results:
                            if not _put(out, result, stop):
                                return
                    finally:
                        # Closed while the consumer is open: a fetch stopped half-way
                        # unassigns its partition before the consumer goes.
                        close = getattr(results, "close", None)
                        if close is not None:
                            close()
        except BaseException as exc:  # noqa: BLE001 - raised in the reading thread
            failed.append(exc)
            stop.set()
        finally:
            _put(out, _DONE, stop)

    workers = [
        threading.Thread(target=run, name=f"{name}-{i}", daemon=True) for i in range(threads)
    ]
    for w in workers:
        w.start()
    try:
        running = len(workers)
        while running and not failed:
            try:
                got = out.get(timeout=0.05)
            except queue.Empty:
                continue
            if got is _DONE:
                running -= 1
            else:
                yield got
        if failed:
            raise failed[0]
    finally:
        stop.set()
        for w in workers:
            w.join()
