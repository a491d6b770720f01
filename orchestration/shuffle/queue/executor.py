"""Queue mode's executor side, run inside Spark tasks: the share consumers of a task.

Each Spark task of :func:`~orchestration.shuffle.queue.driver.process_queue` runs
:class:`QueueTask`, which starts ``consumers_per_task`` :class:`QueueConsumer` threads: each
polls its share group, runs the user's function over a batch (narrowed down around failing
units), writes the kept rows durably, dead-letters what failed its last delivery, then
acknowledges every record. A shuffle's work items become rows of committed frames through
:class:`ShuffleSource`. The decisions are pure functions of :mod:`orchestration.shuffle.core.queue`;
the design is explained in :mod:`orchestration.shuffle.queue.driver`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from confluent_kafka import (
    AcknowledgeType,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    ShareConsumer,
    TopicPartition,
)

from orchestration.shuffle.core import frames as fr
from orchestration.shuffle.core.commitlog import Commit, ShuffleLog, schema_from_b64
from orchestration.shuffle.core.evolution import read_as
from orchestration.shuffle.core.paths import atomic_write, open_filesystem, parse_location
from orchestration.shuffle.core.queue import (
    DELIVERY_FIELD,
    SOURCE_FIELDS,
    SOURCE_NAMES,
    DeadLetterId,
    DeliveryPolicy,
    Outcome,
    QueueCounts,
    QueueStopError,
    WorkItem,
    conform,
    contiguous,
    dead_letter_headers,
    dead_letter_id,
    done_topic,
    done_value,
    fed_run,
    may_be_dead_lettered,
    missing_offsets,
    narrow,
    record_coords,
    row_json,
    rows_to_keep,
    settle,
    work_topic,
)
from orchestration.shuffle.errors import (
    QueueGroupError,
    QueueSchemaError,
    ShuffleConnectionError,
    ShuffleOptionError,
    ShuffleWriteError,
)
from orchestration.shuffle.kafka.client import (
    KafkaClient,
    error_code,
    kafka_errors,
    read_chunks,
    translate,
)
from orchestration.shuffle.kafka.commitlog import read_log
from orchestration.shuffle.spark.records import arrow_schema as records_arrow_schema
from orchestration.shuffle.spark.records import records_batch

log = logging.getLogger(__name__)

# Before its first record a consumer waits at least this long: joining a share group and
# getting an assignment takes a heartbeat or two.
JOIN_GRACE_S = 10.0

# What a task returns, one row per consumer (all long): its place and its counts, and the
# wall-clock (epoch ms) of its first records polled and of its last batch settled.
TASK_COLUMNS = ["task", "consumer", *QueueCounts.names(), "first_ms", "last_ms"]


@dataclass(frozen=True)
class TaskSpec:
    """Everything a Spark task needs to run its share consumers; pickled into each task.

    Attributes:
        topic: the topic processed (a shuffle's data topic when ``shuffle``).
        group: the share group.
        kafka: the cluster.
        fn: the user's function (Spark pickles it with cloudpickle).
        schema: the output Arrow schema, base64 IPC (``schema_to_b64``).
        output: the output directory: an absolute path, or its URI as the caller wrote it
            (see :func:`output_filesystem`).
        consumers_per_task: share consumers (threads) per task.
        delivery: deliveries per record and the dead-letter topic.
        idle_timeout: seconds without records after which a consumer stops.
        max_seconds: seconds after which a consumer stops, records left or not; None: no
            limit.
        data: ``"arrow"`` or ``"pandas"``: what fn is given.
        batch_size: records per poll (``max.poll.records``).
        shuffle: the topic is a shuffle's, read through its work topic.
        runs: for a shuffle, the only runs that are work; None: every committed run.
    """

    topic: str
    group: str
    kafka: KafkaClient
    fn: Callable[[Any], Any]
    schema: str
    output: str
    consumers_per_task: int
    delivery: DeliveryPolicy
    idle_timeout: float
    max_seconds: float | None
    data: str
    batch_size: int
    shuffle: bool
    runs: tuple[str, ...] | None

    @property
    def what(self) -> str:
        """Names the consumers in errors."""
        return f"share group {self.group!r} on topic {self.topic!r}"


def output_filesystem(output: str) -> tuple[pafs.FileSystem, str]:
    """The ``pyarrow.fs`` file system of an output directory (a plain path or a URI, see
    :func:`~orchestration.shuffle.core.paths.parse_location`) and the directory's path on
    it. S3's credentials, endpoint and region come from the environment (``AWS_*``), as
    pyarrow reads them, on the driver and on each executor."""
    location = parse_location(output)
    try:
        fs, path = open_filesystem(location)
    except ShuffleOptionError as exc:
        raise ShuffleOptionError(f"output {exc}") from None
    try:
        atomic_write(fs.type_name)  # refuses, before any write, a file system not known
    except ShuffleOptionError as exc:
        raise ShuffleOptionError(f"output {location.given!r}: {exc}") from None
    return fs, path


def write_whole(fs: pafs.FileSystem, path: str, data: bytes | pa.Buffer) -> None:
    """Writes ``data`` to file ``path`` of ``fs`` so that a reader never lists it
    half-written, even after a crash: how is the file system's
    (:func:`~orchestration.shuffle.core.paths.atomic_write`)."""
    how = atomic_write(fs.type_name)
    if not how.rename:
        # One stream holding the whole payload: the store publishes the object when the
        # stream closes, and an upload that fails publishes nothing.
        with fs.open_output_stream(path) as out:
            out.write(data)
        return
    parent, _, name = path.rpartition("/")
    tmp = f"{parent}/.{name}.tmp"
    try:
        with fs.open_output_stream(tmp) as out:
            out.write(data)
        if how.fsync:
            _fsync(tmp)
        fs.move(tmp, path)
        if how.fsync:
            _fsync(parent or "/")
    except BaseException:
        with contextlib.suppress(OSError):
            fs.delete_file(tmp)
        raise


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def parquet_bytes(table: pa.Table) -> pa.Buffer:
    """``table`` as the bytes of one Parquet file."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue()


# Pauses before a source record a read did not reach is read again (then its item is
# released): a partition's end lags briefly behind its records after a leader change.
LATER_RETRY_S = (0.5, 1.0, 2.0)


def fetch_offsets(
    reader: Any,
    topic: str,
    partition: int,
    offsets: list[int],
    *,
    gap: int = 0,
    max_batch: int = 1000,
) -> tuple[dict[int, Message], set[int]]:
    """The messages at ``offsets`` of ``topic``/``partition``, by offset, and the offsets
    not readable yet (:func:`~orchestration.shuffle.core.queue.missing_offsets`): read in
    one ranged fetch per run of offsets at most ``gap`` apart, and those it did not return
    read once more before they are judged, against the partition's bounds as its leader
    reports them then."""
    wanted = set(offsets)
    got: dict[int, Message] = {}
    reached = -1

    def bounds() -> tuple[int, int]:
        with kafka_errors(f"reading the offsets of topic {topic!r} partition {partition}"):
            return reader.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=30, cached=False
            )

    def read_range(start: int, end: int) -> None:
        nonlocal reached
        for chunk in read_chunks(reader, topic, partition, start, end, max_batch=max_batch):
            for m in chunk:
                o = m.offset()
                reached = max(reached, o)
                if o in wanted:
                    got[o] = m

    def read(ranges: list[tuple[int, int]]) -> None:
        for start, end in ranges:
            try:
                read_range(start, end)
            except ShuffleConnectionError:
                # A range reaching past the partition's end (or below its start) is refused
                # whole by the broker: read what the partition holds of it, if that differs.
                low, high = bounds()
                clipped = (max(start, low), min(end, high))
                if clipped == (start, end):
                    raise
                if clipped[0] < clipped[1]:
                    read_range(*clipped)

    read(contiguous(sorted(wanted), gap=gap))
    later: set[int] = set()
    # A read that stopped short (a new leader's end not caught up yet) is tried again for a
    # few seconds, well inside the records' lock, before their items go back to the group.
    for pause in (0.0, *LATER_RETRY_S):
        if len(got) == len(wanted):
            return got, set()
        time.sleep(pause)
        read(contiguous(sorted(wanted - set(got)), gap=gap))
        low, high = bounds()
        _gone, later = missing_offsets(wanted - set(got), low, high, reached)
        if not later:
            break
    if later:
        log.warning(
            "topic %r partition %d: %d record(s) from offset %d not readable yet (the partition "
            "ends at %d as its leader reports it); their work items are released",
            topic,
            partition,
            len(later),
            min(later),
            high,
        )
    return got, later


class ShuffleSource:
    """Turns work items into rows of committed DATA frames (one consumer thread's view)."""

    def __init__(self, spec: TaskSpec):
        self.spec = spec
        self.log: ShuffleLog = read_log(spec.kafka, spec.topic)
        self.layout = self.log.require_layout()
        self.names = self.layout.schema.names
        self.reader = spec.kafka.consumer(**{"group.id": f"{spec.group}.frames"})
        # Items of the last call whose frame is not readable yet: released, not acknowledged.
        self.later: set[int] = set()

    def _commit(self, run_id: str) -> Commit | None:
        c = self.log.commit(run_id)
        if c is None and run_id not in self.log.expired:
            # Committed after this consumer read the log: the feeder saw it, so read again.
            self.log = read_log(self.spec.kafka, self.spec.topic)
            c = self.log.commit(run_id)
        return None if run_id in self.log.expired else c

    def empty(self) -> pa.Table:
        """No units: the shuffle's columns and the source columns."""
        return pa.Table.from_batches([], schema=pa.schema([*self.layout.schema, *SOURCE_FIELDS]))

    def tables(self, items: dict[int, WorkItem]) -> dict[int, pa.Table]:
        """The rows of each work item's frame, by message index; items that are not work
        are absent, and so are those whose frame is not readable yet (:attr:`later`)."""
        wanted: dict[int, dict[int, list[int]]] = {}
        commits: dict[str, Commit] = {}
        for idx, item in items.items():
            if self.spec.runs is not None and item.run_id not in self.spec.runs:
                continue
            commit = self._commit(item.run_id)
            if commit is None:
                continue
            commits[item.run_id] = commit
            wanted.setdefault(item.partition, {}).setdefault(item.offset, []).append(idx)
        out: dict[int, pa.Table] = {}
        topic = self.spec.topic
        self.later = set()
        for p, by_offset in wanted.items():
            got, later = fetch_offsets(self.reader, topic, p, list(by_offset), max_batch=1)
            self.later |= {idx for o in later for idx in by_offset[o]}
            for offset, m in got.items():
                for idx in by_offset[offset]:
                    rows = self._rows(m, items[idx], commits[items[idx].run_id])
                    if rows is not None:
                        out[idx] = rows
        return out

    def _rows(self, m: Message, item: WorkItem, commit: Commit) -> pa.Table | None:
        """The rows of the frame in ``m`` with their source columns, if it is a DATA frame of
        the item's run written by a winning attempt; else None (not work)."""
        topic, p, offset = self.spec.topic, m.partition(), m.offset()
        # A record without a value is no frame: decoding it names the record in the error.
        frame = fr.decode(m.value() or b"", f"topic {topic!r} partition {p} offset {offset}")
        h = frame.header
        if (
            h.type is not fr.FrameType.DATA
            or h.run_id != item.run_id
            or (h.subtask, h.attempt) not in set(commit.tasks)
        ):
            return None
        # The log may have been read again since (a later commit): the run's version from
        # it, the queue's columns from the layout it started with.
        run = self.log.require_layout().layout_version(commit.layout_version)
        rows = read_as(frame.batch(), run, self.layout.layout_version())
        n = rows.num_rows
        return (
            rows.append_column(SOURCE_FIELDS[0], pa.array([topic] * n, pa.string()))
            .append_column(SOURCE_FIELDS[1], pa.array(np.full(n, p, np.int32)))
            .append_column(SOURCE_FIELDS[2], pa.array(np.full(n, offset, np.int64)))
        )

    def close(self) -> None:
        self.reader.close()


# Offsets of a plain topic one fetch reads past to reach the next wanted record.
RECORD_FETCH_GAP = 2000


class RecordSource:
    """Turns work items into the plain topic's records they name (one consumer thread's
    view); read in one ranged fetch per run of contiguous offsets."""

    def __init__(self, spec: TaskSpec):
        self.spec = spec
        self.reader = spec.kafka.consumer(**{"group.id": f"{spec.group}.records"})
        # Items of the last call whose record is not readable yet: released, not acknowledged.
        self.later: set[int] = set()

    def messages(self, items: dict[int, WorkItem]) -> dict[int, Message]:
        """The source record of each work item, by message index; an item whose record is
        gone (deleted by retention, or an offset without a record) is absent, and so is one
        whose record is not readable yet (:attr:`later`)."""
        wanted: dict[int, dict[int, list[int]]] = {}
        for idx, item in items.items():
            wanted.setdefault(item.partition, {}).setdefault(item.offset, []).append(idx)
        out: dict[int, Message] = {}
        self.later = set()
        for p, by_offset in wanted.items():
            # Consumers share a partition's items, so the offsets of one poll interleave with
            # other consumers'; reading across small gaps saves a fetch per run.
            got, later = fetch_offsets(
                self.reader, self.spec.topic, p, list(by_offset), gap=RECORD_FETCH_GAP
            )
            self.later |= {idx for o in later for idx in by_offset[o]}
            for offset, m in got.items():
                for idx in by_offset[offset]:
                    out[idx] = m
        return out

    def close(self) -> None:
        self.reader.close()


_ACK = {
    Outcome.ACCEPT: AcknowledgeType.ACCEPT,
    Outcome.RELEASE: AcknowledgeType.RELEASE,
    Outcome.DEAD_LETTER: AcknowledgeType.REJECT,
}


class QueueConsumer:
    """One share consumer: poll, run, write, dead-letter, acknowledge; until idle.

    ``run`` returns the consumer's counts (also in ``counts``); ``first_ms`` and ``last_ms``
    are the wall-clock (epoch ms) of its first records polled and of its last batch settled.
    Setting ``stop`` ends it after the batch in hand.

    Example::

        QueueConsumer(spec, task=0, index=0, stop=threading.Event()).run()
    """

    def __init__(self, spec: TaskSpec, task: int, index: int, stop: threading.Event):
        self.spec = spec
        self.task = task
        self.index = index
        self.stop = stop
        self.fn = spec.fn
        self.schema = schema_from_b64(spec.schema)
        self.counts = QueueCounts()
        self.first_ms = 0
        self.last_ms = 0
        self.dlq: Producer | None = None
        self.done: Producer | None = None
        self.source: ShuffleSource | None = None
        self.records: RecordSource | None = None
        # The source record of each polled work item of a plain topic, by message index.
        self.sources: dict[int, Message] = {}
        # Message indexes of the batch in hand whose source is not readable yet.
        self.later: set[int] = set()
        # The output's file system and directory, opened at the first write.
        self.out: tuple[pafs.FileSystem, str] | None = None
        self.records_schema = records_arrow_schema(include_headers=True)
        self.fatal_types: tuple[type[BaseException], ...] = (QueueSchemaError, QueueStopError)

    def run(self) -> QueueCounts:
        spec = self.spec
        # Shuffles and plain topics alike are consumed through their work topic.
        queue_topic = work_topic(spec.topic)
        sc = ShareConsumer(
            spec.kafka.config(
                **{
                    "group.id": spec.group,
                    "share.acknowledgement.mode": "explicit",
                    "max.poll.records": spec.batch_size,
                }
            )
        )
        started = last = time.monotonic()
        got_any = False
        try:
            if spec.shuffle:
                self.source = ShuffleSource(spec)
            else:
                self.records = RecordSource(spec)
            sc.subscribe([queue_topic])
            while not self.stop.is_set():
                now = time.monotonic()
                if spec.max_seconds is not None and now - started >= spec.max_seconds:
                    break
                idle_limit = spec.idle_timeout if got_any else max(spec.idle_timeout, JOIN_GRACE_S)
                if now - last >= idle_limit:
                    break
                try:
                    msgs = sc.poll(0.5)
                except KafkaException as exc:
                    raise _group_error(exc, spec) from None
                if not msgs:
                    continue
                got_any = True
                if not self.first_ms:
                    self.first_ms = int(time.time() * 1000)
                self._handle(sc, list(msgs))
                last = time.monotonic()
                self.last_ms = int(time.time() * 1000)
        finally:
            try:
                sc.close()
            except KafkaException as exc:
                log.warning("closing a share consumer of group %r: %s", spec.group, exc)
            finally:
                if self.source is not None:
                    self.source.close()
                if self.records is not None:
                    self.records.close()
                if self.dlq is not None:
                    self.dlq.flush(30)
                if self.done is not None:
                    self.done.flush(30)
        return self.counts

    # ------------------------------------------------------------------ one batch

    def _handle(self, sc: ShareConsumer, msgs: list[Message]) -> None:
        good = []
        for m in msgs:
            err = m.error()
            if err is None:
                good.append(m)
                continue
            if err.code() in (KafkaError._PARTITION_EOF, KafkaError._NO_OFFSET):
                continue
            self._release_all(sc, [x for x in msgs if x.error() is None])
            what = f"share group {self.spec.group!r} polling topic {m.topic() or self.spec.topic!r}"
            raise QueueStopError(str(translate(KafkaException(err), what, self.spec.kafka)))
        if not good:
            return
        self.counts.batches += 1
        try:
            self._process(sc, good)
        except BaseException:
            self._release_all(sc, good)
            raise

    def _release_all(self, sc: ShareConsumer, msgs: list[Message]) -> None:
        """Hands records in hand back to the group (best effort: a failed release still
        comes back when the lock expires)."""
        try:
            for m in msgs:
                sc.acknowledge(m, AcknowledgeType.RELEASE)
            sc.commit_sync(30)
        except Exception as exc:  # noqa: BLE001
            log.warning(
                "releasing %d records of group %r failed: %s", len(msgs), self.spec.group, exc
            )

    def _inputs(
        self, msgs: list[Message], deliveries: np.ndarray
    ) -> tuple[pa.Table, np.ndarray, set[int]]:
        """The units fn runs over (with ``_delivery``, the delivery count of each unit's
        record), the message index of each unit, and the skipped messages."""
        table, owner, skipped = self._units(msgs)
        return table.append_column(DELIVERY_FIELD, pa.array(deliveries[owner])), owner, skipped

    def _units(self, msgs: list[Message]) -> tuple[pa.Table, np.ndarray, set[int]]:
        items: dict[int, WorkItem] = {}
        skipped: set[int] = set()
        for i, m in enumerate(msgs):
            if fed_run(m.key()) is not None:
                skipped.add(i)
                continue
            value = m.value()
            try:
                if value is None:
                    raise ValueError("no value")
                items[i] = WorkItem.from_json(value)
            except (ValueError, KeyError, TypeError):
                log.warning(
                    "skipping a record of %r at partition %d offset %d: not a work item",
                    m.topic(),
                    m.partition(),
                    m.offset(),
                )
                skipped.add(i)
        if not self.spec.shuffle:
            assert self.records is not None
            self.sources = self.records.messages(items)
            self.later = self.records.later
            skipped |= set(items) - set(self.sources) - self.later
            order = sorted(self.sources)
            batch = records_batch(
                self.records_schema, [self.sources[i] for i in order], None, include_headers=True
            )
            table = pa.Table.from_batches([batch])
            table = (
                table.append_column(SOURCE_FIELDS[0], table.column("topic"))
                .append_column(SOURCE_FIELDS[1], table.column("partition"))
                .append_column(SOURCE_FIELDS[2], table.column("offset"))
            )
            return table, np.array(order, dtype=np.int64), skipped
        assert self.source is not None
        tables = self.source.tables(items)
        self.later = self.source.later
        skipped |= set(items) - set(tables) - self.later
        order = sorted(tables)
        if not order:
            return self.source.empty(), np.zeros(0, np.int64), skipped
        table = pa.concat_tables([tables[i] for i in order])
        owner = np.concatenate([np.full(tables[i].num_rows, i, np.int64) for i in order])
        return table, owner, skipped

    def _call(self, table: pa.Table, start: int, end: int) -> pa.Table:
        part = table.slice(start, end - start)
        given = part.to_pandas() if self.spec.data == "pandas" else part
        return conform(self.fn(given), self.schema, part, self.spec.what)

    def _process(self, sc: ShareConsumer, msgs: list[Message]) -> None:
        spec = self.spec
        deliveries = np.fromiter((m.delivery_count() or 1 for m in msgs), np.int32, len(msgs))
        table, owner, skipped = self._inputs(msgs, deliveries)
        self.counts.rows_in += table.num_rows
        found = narrow(table.num_rows, lambda s, e: self._call(table, s, e), fatal=self.fatal_types)
        failures: dict[int, list[tuple[int, BaseException]]] = {}
        for unit, exc in found.failures:
            failures.setdefault(int(owner[unit]), []).append((unit, exc))
        outcome = {
            i: settle(m.delivery_count(), i in failures, spec.delivery.max_deliveries)
            for i, m in enumerate(msgs)
            if i not in skipped
        }
        # An item whose source was not readable yet goes back to the group, whatever its
        # delivery count: it never reached fn.
        outcome.update({i: Outcome.RELEASE for i in self.later})
        # Rows of records that are kept: accepted, or dead-lettered (their good units).
        keep = np.array([outcome.get(i) not in (None, Outcome.RELEASE) for i in range(len(msgs))])
        rows = rows_to_keep(
            (out for _, _, out in found.results),
            record_coords(table, owner),
            keep,
            deliveries,
            self.schema,
            f"share group {spec.group!r}",
        )
        if rows is not None:
            name = f"part-{self.task:05d}-{self.index:03d}-{uuid.uuid4().hex}.parquet"
            self._write(name, rows)
            self.counts.rows_out += rows.num_rows
        dead = {i: f for i, f in failures.items() if outcome[i] is Outcome.DEAD_LETTER}
        if dead:
            self._dead_letter(msgs, table, owner, dead)
        self._record_done(
            o
            for i, m in enumerate(msgs)
            if outcome.get(i) is not Outcome.RELEASE and (o := m.offset()) is not None
        )
        for i, m in enumerate(msgs):
            sc.acknowledge(m, AcknowledgeType.ACCEPT if i in skipped else _ACK[outcome[i]])
        result = sc.commit_sync(60)
        refused = {
            (tp.topic, tp.partition)
            for tp, err in (result or {}).items()
            if err is not None or getattr(tp, "error", None) is not None
        }
        for i, m in enumerate(msgs):
            if (m.topic(), m.partition()) in refused:
                self.counts.lock_lost += 1
            elif i in skipped:
                if fed_run(m.key()) is None:
                    self.counts.skipped += 1
            elif outcome[i] is Outcome.ACCEPT:
                self.counts.accepted += 1
            elif outcome[i] is Outcome.RELEASE:
                self.counts.released += 1
            else:
                self.counts.rejected += 1
        if refused:
            log.warning(
                "group %r: the broker refused acknowledgements for %s (record locks expired; "
                "raise DeliveryPolicy.lock_seconds if fn is slow); those records are delivered "
                "again",
                spec.group,
                sorted(refused),
            )

    def _record_done(self, offsets: Iterable[int]) -> None:
        """Records the work items a batch settles in the done topic, before they are
        acknowledged (as its output is): the queue's backlog counts what is recorded there
        (:func:`~orchestration.shuffle.queue.backlog.queue_backlog`). A crash after this
        and before the acknowledgement delivers the items again, to be recorded again; so
        no settled item is missing from the topic. A failed write stops the consumers, the
        records released."""
        spec = self.spec
        value = done_value(offsets)
        if self.done is None:
            self.done = spec.kafka.producer(**{"acks": "all", "enable.idempotence": True})
        errors: list[str] = []

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(str(err))

        topic = done_topic(spec.topic)
        self.done.produce(topic, key=spec.group, value=value, on_delivery=on_delivery)
        remaining = self.done.flush(60)
        if errors or remaining:
            raise QueueStopError(
                f"recording a batch of share group {spec.group!r} in {topic!r} failed "
                f"({errors[:1] or 'not delivered in 60 s'}); the records are released"
            )

    def _write(self, name: str, rows: pa.Table) -> None:
        """Writes output file ``name``, whole or not at all (see :func:`write_whole`)."""
        if self.out is None:
            self.out = output_filesystem(self.spec.output)
        fs, base = self.out
        try:
            write_whole(fs, f"{base.rstrip('/')}/{name}", parquet_bytes(rows))
        except (OSError, pa.ArrowException) as exc:
            where = parse_location(self.spec.output)
            raise ShuffleWriteError(
                f"{self.spec.what}: writing file {where.child(name)!r} of output "
                f"{where.given!r} failed: {exc}"
            ) from exc

    def _dead_letter(
        self,
        msgs: list[Message],
        table: pa.Table,
        owner: np.ndarray,
        dead: dict[int, list[tuple[int, BaseException]]],
    ) -> None:
        """Writes the failed units of ``dead``'s records to the dead-letter topic, each once:
        a record delivered past its last attempt (that attempt's acknowledgement was lost)
        skips the units an earlier delivery already wrote there."""
        spec = self.spec
        topic = spec.delivery.dead_letter_topic
        if topic is None:
            raise QueueStopError(
                f"share group {spec.group!r}: a record failed {spec.delivery.max_deliveries} "
                "times and no dead_letter_topic is set"
            )
        if self.dlq is None:
            self.dlq = spec.kafka.producer(**{"acks": "all", "enable.idempotence": True})
        errors: list[str] = []

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(str(err))

        again = [
            i
            for i in dead
            if may_be_dead_lettered(msgs[i].delivery_count(), spec.delivery.max_deliveries)
        ]
        written = self._dead_lettered(topic, [msgs[i] for i in again]) if again else set()
        sent = 0
        for i, units in dead.items():
            m = msgs[i]
            first = int(np.flatnonzero(owner == i)[0])
            for unit, exc in units:
                src_topic, src_partition, src_offset = (
                    table.column(n)[unit].as_py() for n in SOURCE_NAMES
                )
                row = unit - first
                if (spec.group, src_topic, src_partition, src_offset, row) in written:
                    self.counts.dead_lettered_before += 1
                    continue
                queue_headers = dead_letter_headers(
                    exc,
                    (src_topic, src_partition, src_offset),
                    m.delivery_count() or 1,
                    spec.group,
                    row,
                )
                key: bytes | None
                value: bytes | None
                headers: list[tuple[str, str | bytes | None]]
                if spec.shuffle:
                    # One row of a frame, not a record: its values as JSON.
                    row = table.slice(unit, 1).drop_columns(SOURCE_NAMES)
                    key, value = None, row_json(row.to_pylist()[0])
                    headers = [*queue_headers, ("queue.format", b"json")]
                else:
                    # The record as it was (key, value, headers), with what failed where.
                    src = self.sources[i]
                    original = src.headers() or []
                    key, value = src.key(), src.value()
                    headers = [
                        *(original.items() if isinstance(original, dict) else original),
                        *queue_headers,
                    ]
                self.dlq.produce(
                    topic, key=key, value=value, headers=headers, on_delivery=on_delivery
                )
                sent += 1
        remaining = self.dlq.flush(60)
        if errors or remaining:
            raise QueueStopError(
                f"writing {sent} records to dead-letter topic {topic!r} failed "
                f"({remaining} not delivered): {errors[:3]}; the records are released"
            )
        self.counts.dead_lettered += sent

    def _dead_lettered(self, topic: str, msgs: list[Message]) -> set[DeadLetterId]:
        """The units already in dead-letter topic ``topic``, read from the earliest time a
        delivery of ``msgs`` can have written one (their records' time, less an hour for
        clocks that differ) to its end."""
        stamps = [m.timestamp()[1] for m in msgs]
        since = min(stamps) - DEAD_LETTER_CLOCK_SKEW_MS if min(stamps) > 0 else 0
        kafka = self.spec.kafka
        found: set[DeadLetterId] = set()
        ends = kafka.end_offsets(topic, kafka.partition_count(topic))
        with kafka.consumer() as c:
            with kafka_errors(f"reading dead-letter topic {topic!r}", kafka):
                starts = c.offsets_for_times(
                    [TopicPartition(topic, p, since) for p in range(len(ends))], timeout=30
                )
            for p, (_, high) in enumerate(ends):
                start = starts[p].offset if starts[p].offset >= 0 else high
                for chunk in read_chunks(c, topic, p, start, high):
                    for m in chunk:
                        found.add(dead_letter_id(m.headers()) or _NOT_OURS)
        return found


# Dead-letter messages are looked for from this long before a record's own time: its
# producer's clock and the dead-letter writer's may differ.
DEAD_LETTER_CLOCK_SKEW_MS = 3_600_000
_NOT_OURS: DeadLetterId = ("", "", -1, -1, -1)


def _group_error(exc: KafkaException, spec: TaskSpec) -> BaseException:
    if error_code(exc) in (KafkaError.GROUP_ID_NOT_FOUND, KafkaError.INCONSISTENT_GROUP_PROTOCOL):
        return QueueGroupError(
            f"share group {spec.group!r}: the broker refused it ({exc.args[0].str()}); "
            "the id may belong to a classic consumer group: a share group needs its own id"
        )
    return translate(exc, f"share group {spec.group!r} reading topic {spec.topic!r}", spec.kafka)


def run_consumers(spec: TaskSpec, task: int) -> list[QueueConsumer]:
    """Runs ``spec.consumers_per_task`` consumers in threads until they are idle; the first
    error of any stops them all and is raised."""
    stop = threading.Event()
    consumers = [QueueConsumer(spec, task, i, stop) for i in range(spec.consumers_per_task)]
    results: dict[int, QueueConsumer] = {}
    errors: list[BaseException] = []

    def body(c: QueueConsumer) -> None:
        try:
            c.run()
            results[c.index] = c
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=body, args=(c,), daemon=True) for c in consumers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [results[i] for i in sorted(results)]


class QueueTask:
    """The function Spark runs per task (picklable): task indexes in, one row of
    :data:`TASK_COLUMNS` per consumer out."""

    def __init__(self, spec: TaskSpec):
        self.spec = spec

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = pa.schema([pa.field(n, pa.int64()) for n in TASK_COLUMNS])
        for b in batches:
            for task in b.column(0).to_pylist():
                done = run_consumers(self.spec, int(task))
                rows = [
                    {
                        "task": task,
                        "consumer": c.index,
                        **c.counts.as_dict(),
                        "first_ms": c.first_ms,
                        "last_ms": c.last_ms,
                    }
                    for c in done
                ]
                yield pa.RecordBatch.from_pylist(rows, schema=schema)
