"""Queue mode: record-level work over Kafka share groups, with nothing lost.

:func:`process_queue` runs ``fn`` over the records of a topic with a Kafka share group
(KIP-932): many consumers share a topic's records without a partition assignment, so the
number of workers is not capped by the number of partitions, and each record is
acknowledged on its own.

How a batch is handled (one consumer thread, explicit acknowledgement):

1. ``poll`` acquires a batch of records (at most ``batch_size``) under a lock that lasts
   ``lock_seconds``.
2. ``fn`` runs over the batch. If it raises, the batch is halved until the failing units
   stand alone (:func:`queueplan.narrow`), so one bad record never fails its neighbours.
3. Each record is settled (:func:`queueplan.settle`): all its units succeeded -> ACCEPT;
   a unit failed and the record has deliveries left -> RELEASE (delivered again later);
   a unit failed on its ``max_deliveries``-th delivery -> its failing units are written to
   the dead-letter topic (original key, value and headers plus ``queue.*`` headers naming
   the error, source topic, partition, offset, delivery count and group), then REJECT.
4. The output rows of accepted and dead-lettered records go to one Parquet file, written
   to a hidden name, flushed to disk and renamed: only whole files are ever visible. Then
   the dead-letter messages are flushed (``acks=all``). Only then are the records
   acknowledged. Rows of released records are dropped: their next delivery writes them.

So every record ends accepted with its output written, or dead-lettered. A consumer that
dies mid-batch loses nothing: its records' locks expire and the broker delivers them again,
with a higher delivery count. Output is at least once: after a crash between writing a file
and acknowledging, a record's rows exist from two deliveries. Every output row carries
``_topic``, ``_partition``, ``_offset`` (its source record) and ``_delivery``;
:func:`read_queue_output` keeps, for each source record, the rows of its last delivery
(one file), so it reads each record's rows exactly once. The share group's own delivery
limit is set one above ``max_deliveries``, so a crash during the last attempt still leaves
one more delivery to dead-letter the record instead of the broker archiving it silently.

Shuffle topics. A share group knows nothing of the shuffle's commit log: reading the data
topic directly would hand out frames of runs still being written (too early), of failed or
losing attempts (never to be processed) and WATERMARK / END frames (not work). So a shuffle
is queued through a *work topic*, ``<topic>.queue``: a feeder appends, for each committed run,
one work item per offset the run occupies, in one Kafka transaction that ends with a
``fed/<run>`` record. Share groups read the work topic with ``share.isolation.level =
read_committed``, so they see a run's items only once all of them are there, and only after
the run committed. A consumer fetches each item's frame from the data topic, checks its
header against the commit (run, winning attempt, DATA) and skips anything else, so skipped
items are acknowledged but are not work. The feeder is idempotent: it holds a fixed
``transactional.id`` per work topic (a second feeder fences the first) and reads the ``fed/``
records before feeding, so a run is fed once. :func:`process_queue` feeds what is missing
when it starts and keeps feeding while it runs, so a run committed meanwhile is picked up;
a run still being written is not in the work topic yet, so it is neither processed early nor
lost: it is fed when it commits. :func:`feed_queue` feeds on its own (e.g. right after a
write). For a shuffle the unit of work is a row: a failing row is dead-lettered as JSON,
and the frame's other rows are written.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import (
    AcknowledgeType,
    KafkaError,
    KafkaException,
    Message,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from orchestration.shuffle.core import frames as fr
from orchestration.shuffle.core.commitlog import (
    ShuffleLog,
    commit_topic,
    schema_from_b64,
    schema_to_b64,
)
from orchestration.shuffle.core.queue import (
    FED_PREFIX,
    SOURCE_FIELDS,
    Outcome,
    QueueCounts,
    WorkItem,
    conform,
    contiguous,
    error_text,
    narrow,
    row_json,
    settle,
    unfed,
    work_items,
    work_topic,
)
from orchestration.shuffle.errors import (
    QueueGroupError,
    QueueSchemaError,
    ShuffleConnectionError,
    ShuffleError,
    ShuffleOptionError,
    ShuffleSchemaError,
    ShuffleTopicNotFoundError,
)
from orchestration.shuffle.kafka.client import (
    admin_client,
    check_reachable,
    client_config,
    consumer,
    ensure_topic,
    error_code,
    kafka_errors,
    producer,
    read_chunks,
    read_range,
    translate,
)
from orchestration.shuffle.kafka.commitlog import read_log
from orchestration.shuffle.spark.records import arrow_schema as records_arrow_schema
from orchestration.shuffle.spark.records import records_batch

log = logging.getLogger(__name__)

DELIVERY_FIELD = pa.field("_delivery", pa.int32())
META_FILE = "_queue.json"
# Before its first record a consumer waits at least this long: joining a share group and
# getting an assignment takes a heartbeat or two.
JOIN_GRACE_S = 10.0


@dataclass
class QueueResult:
    """What :func:`process_queue` did: exact counts, summed and per consumer."""

    topic: str
    group: str
    output: str
    accepted: int = 0
    released: int = 0
    rejected: int = 0
    dead_lettered: int = 0
    skipped: int = 0
    lock_lost: int = 0
    rows_in: int = 0
    rows_out: int = 0
    batches: int = 0
    fed_runs: int = 0
    seconds: float = 0.0
    # From the first records polled to the last batch settled, over every consumer: the
    # time spent working, without start-up (joining the group) and the final idle wait.
    active_seconds: float = 0.0
    per_task: list[dict[str, int]] = field(default_factory=list)


# --------------------------------------------------------------------------- the consumer


@dataclass(frozen=True)
class _Spec:
    """Everything a Spark task needs to run its consumers (picklable)."""

    topic: str
    group: str
    kafka: dict[str, Any]
    fn: Callable[[Any], Any]  # Spark pickles it (with cloudpickle) into the tasks
    schema: str  # the output Arrow schema, base64 IPC
    output: str
    consumers_per_task: int
    dead_letter_topic: str | None
    max_deliveries: int
    idle_timeout: float
    max_seconds: float | None
    data: str
    batch_size: int
    shuffle: bool
    runs: tuple[str, ...] | None


class _Fatal(Exception):
    """Stops every consumer of a task; the records in hand are released first."""


def _write_durably(path: Path, table: pa.Table) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class _ShuffleSource:
    """Turns work items into rows of committed DATA frames (one consumer thread's view)."""

    def __init__(self, spec: _Spec):
        self.spec = spec
        self.log: ShuffleLog = read_log(spec.kafka, spec.topic)
        self.layout = self.log.require_layout()
        self.names = self.layout.schema.names
        self.reader = consumer(spec.kafka, **{"group.id": f"{spec.group}.frames"})

    def _commit(self, run_id: str):
        c = self.log.commit(run_id)
        if c is None and run_id not in self.log.expired:
            self.log = read_log(self.spec.kafka, self.spec.topic)
            c = self.log.commit(run_id)
        return None if run_id in self.log.expired else c

    def tables(self, items: dict[int, WorkItem]) -> dict[int, pa.Table]:
        """The rows of each work item's frame, by message index; items that are not work
        are absent."""
        wanted: dict[int, dict[int, list[int]]] = {}
        commits = {}
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
        for p, by_offset in wanted.items():
            for start, end in contiguous(list(by_offset)):
                for chunk in read_chunks(self.reader, topic, p, start, end, max_batch=1):
                    for m in chunk:
                        for idx in by_offset.get(m.offset(), ()):
                            item = items[idx]
                            where = f"topic {topic!r} partition {p} offset {m.offset()}"
                            frame = fr.decode(m.value(), where)
                            h = frame.header
                            winners = set(commits[item.run_id].tasks)
                            if (
                                h.type is not fr.FrameType.DATA
                                or h.run_id != item.run_id
                                or (h.subtask, h.attempt) not in winners
                            ):
                                continue
                            batch = frame.batch()
                            rows = pa.Table.from_batches([batch]).select(self.names)
                            n = rows.num_rows
                            out[idx] = (
                                rows.append_column(
                                    SOURCE_FIELDS[0], pa.array([topic] * n, pa.string())
                                )
                                .append_column(SOURCE_FIELDS[1], pa.array(np.full(n, p, np.int32)))
                                .append_column(
                                    SOURCE_FIELDS[2], pa.array(np.full(n, m.offset(), np.int64))
                                )
                            )
        return out

    def close(self) -> None:
        self.reader.close()


class _Consumer:
    """One share consumer: poll, run, write, dead-letter, acknowledge; until idle."""

    def __init__(self, spec: _Spec, task: int, index: int, stop: threading.Event):
        self.spec = spec
        self.task = task
        self.index = index
        self.stop = stop
        self.fn = spec.fn
        self.schema = schema_from_b64(spec.schema)
        self.out_schema = pa.schema(list(self.schema) + SOURCE_FIELDS + [DELIVERY_FIELD])
        self.counts = QueueCounts()
        # Wall-clock (epoch ms) of the first records polled and of the last batch settled.
        self.first_ms = 0
        self.last_ms = 0
        self.dlq = None
        self.source: _ShuffleSource | None = None
        self.records_schema = records_arrow_schema(include_headers=True)
        self.fatal_types: tuple[type[BaseException], ...] = (QueueSchemaError, _Fatal)

    def run(self) -> QueueCounts:
        spec = self.spec
        queue_topic = work_topic(spec.topic) if spec.shuffle else spec.topic
        conf = client_config(
            spec.kafka,
            **{
                "group.id": spec.group,
                "share.acknowledgement.mode": "explicit",
                "max.poll.records": spec.batch_size,
            },
        )
        sc = ShareConsumer(conf)
        started = last = time.monotonic()
        got_any = False
        try:
            if spec.shuffle:
                self.source = _ShuffleSource(spec)
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
                if self.dlq is not None:
                    self.dlq.flush(30)
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
            raise _Fatal(str(translate(KafkaException(err), what, self.spec.kafka)))
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

    def _inputs(self, msgs: list[Message]) -> tuple[pa.Table, np.ndarray, set[int]]:
        """The units fn runs over (with ``_delivery``, the delivery count of each unit's
        record), the message index of each unit, and the skipped messages."""
        table, owner, skipped = self._units(msgs)
        counts = np.fromiter((m.delivery_count() or 1 for m in msgs), np.int32, len(msgs))
        return table.append_column(DELIVERY_FIELD, pa.array(counts[owner])), owner, skipped

    def _units(self, msgs: list[Message]) -> tuple[pa.Table, np.ndarray, set[int]]:
        spec = self.spec
        if not spec.shuffle:
            batch = records_batch(self.records_schema, msgs, None, include_headers=True)
            table = pa.Table.from_batches([batch])
            table = (
                table.append_column(SOURCE_FIELDS[0], table.column("topic"))
                .append_column(SOURCE_FIELDS[1], table.column("partition"))
                .append_column(SOURCE_FIELDS[2], table.column("offset"))
            )
            return table, np.arange(len(msgs), dtype=np.int64), set()
        items: dict[int, WorkItem] = {}
        skipped: set[int] = set()
        for i, m in enumerate(msgs):
            key = (m.key() or b"").decode(errors="replace")
            if key.startswith(FED_PREFIX):
                skipped.add(i)
                continue
            try:
                items[i] = WorkItem.from_json(m.value())
            except (ValueError, KeyError, TypeError):
                log.warning(
                    "skipping a record of %r at partition %d offset %d: not a work item",
                    m.topic(),
                    m.partition(),
                    m.offset(),
                )
                skipped.add(i)
        assert self.source is not None
        tables = self.source.tables(items)
        skipped |= set(items) - set(tables)
        order = sorted(tables)
        if not order:
            empty = pa.schema(list(self.source.layout.schema) + SOURCE_FIELDS)
            return pa.Table.from_batches([], schema=empty), np.zeros(0, np.int64), skipped
        table = pa.concat_tables([tables[i] for i in order])
        owner = np.concatenate([np.full(tables[i].num_rows, i, np.int64) for i in order])
        return table, owner, skipped

    def _call(self, table: pa.Table, start: int, end: int) -> pa.Table:
        part = table.slice(start, end - start)
        given = part.to_pandas() if self.spec.data == "pandas" else part
        what = f"share group {self.spec.group!r} on topic {self.spec.topic!r}"
        return conform(self.fn(given), self.schema, part, what)

    def _process(self, sc: ShareConsumer, msgs: list[Message]) -> None:
        spec = self.spec
        table, owner, skipped = self._inputs(msgs)
        self.counts.rows_in += table.num_rows
        found = narrow(table.num_rows, lambda s, e: self._call(table, s, e), fatal=self.fatal_types)
        failures: dict[int, list[tuple[int, BaseException]]] = {}
        for unit, exc in found.failures:
            failures.setdefault(int(owner[unit]), []).append((unit, exc))
        outcome = {
            i: settle(m.delivery_count(), i in failures, spec.max_deliveries)
            for i, m in enumerate(msgs)
            if i not in skipped
        }
        # Rows of records that are kept: accepted, or dead-lettered (their good units).
        by_coord = {(m.topic(), m.partition(), m.offset()): i for i, m in enumerate(msgs)}
        if spec.shuffle:
            by_coord = {}
            for i in set(owner.tolist()):
                row = int(np.flatnonzero(owner == i)[0])
                key = (
                    table.column("_topic")[row].as_py(),
                    table.column("_partition")[row].as_py(),
                    table.column("_offset")[row].as_py(),
                )
                by_coord[key] = i
        kept = []
        for _, _, out in found.results:
            if out.num_rows == 0:
                continue
            coords = zip(
                out.column("_topic").to_pylist(),
                out.column("_partition").to_pylist(),
                out.column("_offset").to_pylist(),
                strict=True,
            )
            owners = []
            for c in coords:
                i = by_coord.get(c)
                if i is None:
                    raise QueueSchemaError(
                        f"share group {spec.group!r}: fn returned a row for topic {c[0]!r} "
                        f"partition {c[1]} offset {c[2]}, which is not in its input"
                    )
                owners.append(i)
            owners_np = np.asarray(owners, np.int64)
            keep = np.array([outcome[i] is not Outcome.RELEASE for i in owners], dtype=bool)
            if not keep.any():
                continue
            deliveries = np.array(
                [msgs[i].delivery_count() or 1 for i in owners_np[keep]], np.int32
            )
            chosen = out.filter(pa.array(keep))
            kept.append(chosen.append_column(DELIVERY_FIELD, pa.array(deliveries, pa.int32())))
        if kept:
            rows = pa.concat_tables(kept).cast(self.out_schema)
            name = f"part-{self.task:05d}-{self.index:03d}-{uuid.uuid4().hex}.parquet"
            _write_durably(Path(spec.output) / name, rows)
            self.counts.rows_out += rows.num_rows
        dead = {i: f for i, f in failures.items() if outcome[i] is Outcome.DEAD_LETTER}
        if dead:
            self._dead_letter(msgs, table, dead)
        for i, m in enumerate(msgs):
            if i in skipped:
                ack = AcknowledgeType.ACCEPT
            else:
                ack = {
                    Outcome.ACCEPT: AcknowledgeType.ACCEPT,
                    Outcome.RELEASE: AcknowledgeType.RELEASE,
                    Outcome.DEAD_LETTER: AcknowledgeType.REJECT,
                }[outcome[i]]
            sc.acknowledge(m, ack)
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
                if not (m.key() or b"").startswith(FED_PREFIX.encode()):
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
                "raise lock_seconds if fn is slow); those records are delivered again",
                spec.group,
                sorted(refused),
            )

    def _dead_letter(
        self,
        msgs: list[Message],
        table: pa.Table,
        dead: dict[int, list[tuple[int, BaseException]]],
    ) -> None:
        spec = self.spec
        if spec.dead_letter_topic is None:
            raise _Fatal(
                f"share group {spec.group!r}: a record failed {spec.max_deliveries} times "
                "and no dead_letter_topic is set"
            )
        if self.dlq is None:
            self.dlq = producer(spec.kafka, **{"acks": "all", "enable.idempotence": True})
        errors: list[str] = []

        def on_delivery(err, _msg) -> None:
            if err is not None:
                errors.append(str(err))

        sent = 0
        for i, units in dead.items():
            m = msgs[i]
            for unit, exc in units:
                src_topic, src_part, src_off = (
                    table.column(n)[unit].as_py() for n in ("_topic", "_partition", "_offset")
                )
                headers = [
                    ("queue.error", error_text(exc).encode()),
                    ("queue.source.topic", str(src_topic).encode()),
                    ("queue.source.partition", str(src_part).encode()),
                    ("queue.source.offset", str(src_off).encode()),
                    ("queue.delivery.count", str(m.delivery_count() or 1).encode()),
                    ("queue.group", spec.group.encode()),
                ]
                if spec.shuffle:
                    row = table.slice(unit, 1).drop_columns([f.name for f in SOURCE_FIELDS])
                    record = row.to_pylist()[0]
                    key = None
                    value = row_json(record)
                    headers.append(("queue.format", b"json"))
                else:
                    key, value = m.key(), m.value()
                    headers = list(m.headers() or []) + headers
                self.dlq.produce(
                    spec.dead_letter_topic,
                    key=key,
                    value=value,
                    headers=headers,
                    on_delivery=on_delivery,
                )
                sent += 1
        remaining = self.dlq.flush(60)
        if errors or remaining:
            raise _Fatal(
                f"writing {sent} records to dead-letter topic {spec.dead_letter_topic!r} "
                f"failed ({remaining} not delivered): {errors[:3]}; the records are released"
            )
        self.counts.dead_lettered += sent


def _group_error(exc: KafkaException, spec: _Spec) -> BaseException:
    if error_code(exc) in (KafkaError.GROUP_ID_NOT_FOUND, KafkaError.INCONSISTENT_GROUP_PROTOCOL):
        return QueueGroupError(
            f"share group {spec.group!r}: the broker refused it ({exc.args[0].str()}); "
            "the id may belong to a classic consumer group: a share group needs its own id"
        )
    return translate(exc, f"share group {spec.group!r} reading topic {spec.topic!r}", spec.kafka)


def run_consumers(spec: _Spec, task: int) -> list[_Consumer]:
    """Runs ``spec.consumers_per_task`` consumers in threads until they are idle."""
    stop = threading.Event()
    consumers = [_Consumer(spec, task, i, stop) for i in range(spec.consumers_per_task)]
    results: dict[int, _Consumer] = {}
    errors: list[BaseException] = []

    def body(c: _Consumer) -> None:
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


_COUNT_COLUMNS = ["task", "consumer", *QueueCounts.names(), "first_ms", "last_ms"]


class _Task:
    """The function Spark runs per task (picklable): task indexes in, counts out."""

    def __init__(self, spec: _Spec):
        self.spec = spec

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            for task in b.column(0).to_pylist():
                done = run_consumers(self.spec, int(task))
                yield pa.RecordBatch.from_pydict(
                    {
                        "task": [task] * len(done),
                        "consumer": [c.index for c in done],
                        **{n: [getattr(c.counts, n) for c in done] for n in QueueCounts.names()},
                        "first_ms": [c.first_ms for c in done],
                        "last_ms": [c.last_ms for c in done],
                    },
                    schema=pa.schema([pa.field(n, pa.int64()) for n in _COUNT_COLUMNS]),
                )


# --------------------------------------------------------------------------- the feeder


def _fed_runs(kafka: Mapping[str, Any], topic: str) -> set[str]:
    """Run ids whose feeding transaction committed in work topic ``topic``."""
    c = consumer(kafka, **{"isolation.level": "read_committed"})
    try:
        with kafka_errors(f"reading the offsets of work topic {topic!r}", kafka):
            low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        fed = set()
        for m in read_range(c, topic, 0, low, high):
            key = (m.key() or b"").decode(errors="replace")
            if key.startswith(FED_PREFIX):
                fed.add(key[len(FED_PREFIX) :])
        return fed
    finally:
        c.close()


class Feeder:
    """Appends the work items of committed runs to a shuffle's work topic, once per run."""

    def __init__(self, topic: str, kafka: Mapping[str, Any]):
        self.topic = topic
        self.kafka = dict(kafka)
        self.work_topic = work_topic(topic)
        ensure_topic(self.kafka, self.work_topic, partitions=1)
        self.producer = producer(
            self.kafka,
            **{
                "transactional.id": f"kafka-shuffle-feeder.{self.work_topic}",
                # One work item per record batch: a share group hands out whole batches, so
                # small batches spread the items over every consumer.
                "batch.num.messages": 1,
                "linger.ms": 0,
            },
        )
        with kafka_errors(f"starting the feeder of work topic {self.work_topic!r}", self.kafka):
            # Fences any earlier feeder of this work topic and waits out its transaction;
            # the fed runs are read after that, so none is fed twice.
            self.producer.init_transactions(60)
        self.fed = _fed_runs(self.kafka, self.work_topic)
        self.fenced = False

    def feed(self, log: ShuffleLog | None = None) -> int:
        """Feeds every committed run not fed yet; returns how many runs it fed."""
        if self.fenced:
            return 0
        log = log if log is not None else read_log(self.kafka, self.topic)
        fed = 0
        for commit in unfed(log, self.fed):
            try:
                self.producer.begin_transaction()
                for item in work_items(commit):
                    self.producer.produce(self.work_topic, key=commit.run_id, value=item.to_json())
                    self.producer.poll(0)
                self.producer.produce(
                    self.work_topic, key=FED_PREFIX + commit.run_id, value=commit.run_id
                )
                self.producer.commit_transaction(60)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if isinstance(err, KafkaError) and err.code() == KafkaError._FENCED:
                    log.info("feeder of %r fenced by a newer feeder; it stops", self.work_topic)
                    self.fenced = True
                    return fed
                if isinstance(err, KafkaError) and err.txn_requires_abort():
                    self.producer.abort_transaction(60)
                raise translate(
                    exc, f"feeding run {commit.run_id} to {self.work_topic!r}"
                ) from None
            self.fed.add(commit.run_id)
            fed += 1
        return fed


def feed_queue(topic: str, *, kafka: Mapping[str, Any]) -> int:
    """Feeds the committed runs of shuffle ``topic`` that are not queued yet to its work
    topic (``<topic>.queue``); returns the number of runs fed. Safe to call any time."""
    check_reachable(kafka)
    return Feeder(topic, kafka).feed()


# --------------------------------------------------------------------------- the driver


def _topic_exists(kafka: Mapping[str, Any], topic: str) -> bool:
    with kafka_errors(f"describing topic {topic!r}", kafka):
        md = admin_client(kafka).list_topics(topic=topic, timeout=30)
    tmd = md.topics.get(topic)
    return tmd is not None and tmd.error is None and bool(tmd.partitions)


def _set_group_configs(kafka: Mapping[str, Any], group: str, configs: Mapping[str, str]) -> None:
    admin = admin_client(kafka)
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
    ]
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    try:
        admin.incremental_alter_configs([res], request_timeout=30)[res].result(30)
    except KafkaException as exc:
        if error_code(exc) == KafkaError.INVALID_CONFIG:
            raise QueueGroupError(
                f"share group {group!r}: the broker refused the group configs "
                f"{dict(configs)}: {exc.args[0].str()}"
            ) from None
        raise translate(exc, f"configuring share group {group!r}", kafka) from None


def _check_group_free(kafka: Mapping[str, Any], group: str) -> None:
    """Refuses a group id a classic (or consumer-protocol) group holds.

    A share group, or an id nobody uses, describes as an empty ("dead") consumer group.
    """
    admin = admin_client(kafka)  # held until the answer is in: the request is its own
    try:
        found = admin.describe_consumer_groups([group], request_timeout=30)[group].result(35)
    except KafkaException as exc:
        if error_code(exc) in (KafkaError.GROUP_ID_NOT_FOUND, KafkaError.INVALID_GROUP_ID):
            return
        raise translate(exc, f"describing group {group!r}", kafka) from None
    state = str(found.state).rsplit(".", 1)[-1].lower()
    if state not in ("dead", "unknown"):
        kind = str(found.type).rsplit(".", 1)[-1].lower()
        raise QueueGroupError(
            f"group {group!r} is a {kind} consumer group ({state}, {len(found.members)} "
            "members); a share group needs a group id of its own"
        )


def _output_schema(spark: Any, schema: Any) -> tuple[str, pa.Schema]:
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    if isinstance(schema, str):
        parsed = spark.createDataFrame([], schema).schema
    elif isinstance(schema, T.StructType):
        parsed = schema
    else:
        raise ShuffleOptionError(
            f"process_queue: schema must be a DDL string or StructType, got {schema!r}"
        )
    reserved = [
        f.name for f in parsed.fields if f.name in {*(s.name for s in SOURCE_FIELDS), "_delivery"}
    ]
    if reserved:
        raise ShuffleOptionError(f"process_queue: schema column(s) {reserved} are reserved")
    return parsed.json(), to_arrow_schema(parsed, timezone="UTC")


def _write_meta(output: Path, topic: str, group: str, ddl: str, arrow: pa.Schema) -> None:
    meta = output / META_FILE
    mine = {"schema": ddl}
    if meta.exists():
        old = json.loads(meta.read_text())
        if old.get("schema") != ddl:
            raise QueueSchemaError(
                f"output {str(output)!r} holds rows of schema {old.get('schema')!r}; "
                f"this run's schema is {ddl!r}: use another output directory"
            )
        return
    output.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps({**mine, "topic": topic, "group": group}, indent=1))


def process_queue(
    spark: Any,
    topic: str,
    group: str,
    fn: Callable[[Any], Any],
    schema: Any,
    *,
    kafka: Mapping[str, Any],
    output: str | os.PathLike,
    tasks: int = 2,
    consumers_per_task: int = 1,
    dead_letter_topic: str | None = None,
    max_deliveries: int = 3,
    idle_timeout: float = 5.0,
    max_seconds: float | None = None,
    data: str = "arrow",
    start: str = "earliest",
    batch_size: int = 100,
    lock_seconds: float = 30.0,
    runs: Sequence[str] | None = None,
    feed_interval: float = 1.0,
) -> QueueResult:
    """Runs ``fn`` over the records of ``topic`` with share group ``group``; see the module
    docstring for the guarantees.

    Args:
        spark: Any SparkSession; the consumers run in ``tasks`` Spark tasks.
        topic: A plain topic, or a shuffle's data topic (queued through ``<topic>.queue``).
        group: The share group. A new group starts at ``start``; an existing one goes on.
        fn: A batch of units -> rows of ``schema`` (a pyarrow Table, a pandas DataFrame or
            None). Units are records (``kafka-records`` columns, with headers) of a plain
            topic, or rows of a shuffle's committed frames; both come with ``_topic``,
            ``_partition``, ``_offset``. Raising fails the batch (it is narrowed down).
        schema: The output schema (DDL string or StructType).
        kafka: librdkafka options, ``bootstrap.servers`` at least.
        output: A Parquet directory (shared by every task); read it with
            :func:`read_queue_output`.
        tasks: Spark tasks; tasks beyond the free cores wait for one.
        consumers_per_task: share consumers (threads) per task, for an I/O-bound ``fn``.
        dead_letter_topic: where records failing ``max_deliveries`` times go (created if
            missing). Without one such a record stops the run (it is released, not lost).
        max_deliveries: attempts per record before it is dead-lettered.
        idle_timeout: seconds without records on a consumer before it stops (drained).
        max_seconds: stop after this long even if records remain (they stay queued).
        data: ``"arrow"`` (fn gets a pyarrow Table) or ``"pandas"`` (a DataFrame).
        start: ``"earliest"`` or ``"latest"``: where a new group starts.
        batch_size: records per poll (``max.poll.records``); a share group acquires whole
            producer batches, so a poll may return more.
        lock_seconds: the group's record lock (``share.record.lock.duration.ms``): how long
            a batch may take before its records are delivered to someone else.
        runs: for a shuffle topic, only these run ids are work (others are acknowledged
            and counted as skipped): give such a group its own id.
        feed_interval: seconds between checks of a shuffle's commit log while running.
    """
    if data not in ("arrow", "pandas"):
        raise ShuffleOptionError(f"process_queue: data must be 'arrow' or 'pandas', got {data!r}")
    if start not in ("earliest", "latest"):
        raise ShuffleOptionError(
            f"process_queue: start must be 'earliest' or 'latest', got {start!r}"
        )
    for name, value in (
        ("tasks", tasks),
        ("consumers_per_task", consumers_per_task),
        ("max_deliveries", max_deliveries),
        ("batch_size", batch_size),
    ):
        if not isinstance(value, int) or value < 1:
            raise ShuffleOptionError(f"process_queue: {name} must be a positive int, got {value!r}")
    if idle_timeout <= 0:
        raise ShuffleOptionError(f"process_queue: idle_timeout must be > 0, got {idle_timeout!r}")
    check_reachable(kafka)
    if not _topic_exists(kafka, topic):
        raise ShuffleTopicNotFoundError(f"process_queue: topic {topic!r} does not exist")
    shuffle = _topic_exists(kafka, commit_topic(topic))
    _check_group_free(kafka, group)
    ddl, arrow = _output_schema(spark, schema)
    out_dir = Path(output)
    _write_meta(out_dir, topic, group, ddl, arrow)
    if dead_letter_topic is not None:
        ensure_topic(kafka, dead_letter_topic, partitions=1)
    feeder = None
    fed_runs = 0
    if shuffle:
        feeder = Feeder(topic, kafka)
        fed_runs += feeder.feed()
    _set_group_configs(
        kafka,
        group,
        {
            "share.auto.offset.reset": start,
            "share.isolation.level": "read_committed",
            "share.delivery.count.limit": str(max_deliveries + 1),
            "share.record.lock.duration.ms": str(int(lock_seconds * 1000)),
        },
    )
    spec = _Spec(
        topic=topic,
        group=group,
        kafka=dict(kafka),
        fn=fn,
        schema=schema_to_b64(arrow),
        output=str(out_dir.resolve()),
        consumers_per_task=consumers_per_task,
        dead_letter_topic=dead_letter_topic,
        max_deliveries=max_deliveries,
        idle_timeout=float(idle_timeout),
        max_seconds=None if max_seconds is None else float(max_seconds),
        data=data,
        batch_size=batch_size,
        shuffle=shuffle,
        runs=None if runs is None else tuple(runs),
    )
    counts_ddl = ", ".join(f"{c} long" for c in _COUNT_COLUMNS)
    job = spark.range(0, tasks, 1, tasks).mapInArrow(_Task(spec), counts_ddl)
    rows: list[Any] = []
    failure: list[BaseException] = []

    def collect() -> None:
        try:
            rows.extend(job.collect())
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            failure.append(exc)

    started = time.monotonic()
    spark.sparkContext.setJobDescription(f"process_queue {topic} group {group}")
    runner = threading.Thread(target=collect, daemon=True)
    runner.start()
    while runner.is_alive():
        runner.join(feed_interval)
        if feeder is not None and runner.is_alive():
            try:
                fed_runs += feeder.feed()
            except ShuffleError as exc:
                log.warning("feeding %r failed (retried): %s", feeder.work_topic, exc)
    seconds = time.monotonic() - started
    if failure:
        raise _queue_error(failure[0], topic, group) from failure[0]
    result = QueueResult(
        topic=topic, group=group, output=str(out_dir), fed_runs=fed_runs, seconds=seconds
    )
    for r in sorted(rows, key=lambda r: (r["task"], r["consumer"])):
        d = r.asDict()
        result.per_task.append(d)
        for n in QueueCounts.names():
            setattr(result, n, getattr(result, n) + int(d[n]))
    firsts = [d["first_ms"] for d in result.per_task if d["first_ms"]]
    lasts = [d["last_ms"] for d in result.per_task if d["last_ms"]]
    if firsts and lasts:
        result.active_seconds = (max(lasts) - min(firsts)) / 1000
    log.info(
        "process_queue %s group %s: %d accepted, %d released, %d rejected, %d dead-lettered, "
        "%d skipped in %.1fs",
        topic,
        group,
        result.accepted,
        result.released,
        result.rejected,
        result.dead_lettered,
        result.skipped,
        seconds,
    )
    return result


def _queue_error(exc: BaseException, topic: str, group: str) -> BaseException:
    """The engine's error for a failed queue job, from the Python error inside Spark's."""
    text = str(exc)
    for cls in (
        QueueSchemaError,
        QueueGroupError,
        ShuffleTopicNotFoundError,
        ShuffleConnectionError,
        ShuffleSchemaError,
        _Fatal,
    ):
        marker = f"{cls.__name__}: "
        if marker in text:
            detail = text.split(marker, 1)[1].strip().splitlines()[0]
            kind = ShuffleError if cls is _Fatal else cls
            return kind(f"process_queue on topic {topic!r} group {group!r}: {detail}")
    # The Python error inside Spark's: the last "Type: message" line of its traceback.
    lines = [ln for ln in text.splitlines() if re.match(r"^[A-Za-z_][\w.]*(Error|Exception): ", ln)]
    detail = lines[-1] if lines else (text.splitlines()[0] if text else type(exc).__name__)
    return ShuffleError(f"process_queue on topic {topic!r} group {group!r} failed: {detail}")


def read_queue_output(spark: Any, output: str | os.PathLike) -> Any:
    """The rows :func:`process_queue` wrote to ``output``, each source record's rows once.

    A record processed twice (a crash between writing and acknowledging, or a lock that
    expired under a slow ``fn``) has rows from two deliveries; only those of its last
    delivery (one file) are returned. Columns: the schema's, then ``_topic``,
    ``_partition``, ``_offset``.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    out = Path(output)
    meta_path = out / META_FILE
    if not meta_path.exists():
        raise ShuffleTopicNotFoundError(
            f"read_queue_output: {str(out)!r} is not a queue output (no {META_FILE})"
        )
    from pyspark.sql import types as T

    meta = json.loads(meta_path.read_text())
    schema = T.StructType.fromJson(json.loads(meta["schema"]))
    for name, kind in (
        ("_topic", T.StringType()),
        ("_partition", T.IntegerType()),
        ("_offset", T.LongType()),
        ("_delivery", T.IntegerType()),
    ):
        schema = schema.add(name, kind)
    df = spark.read.schema(schema).parquet(str(out))
    df = df.withColumn("_file", F.col("_metadata.file_name"))
    w = Window.partitionBy("_topic", "_partition", "_offset")
    pick = F.struct(F.col("_delivery"), F.col("_file"))
    df = df.withColumn("_pick", F.max(pick).over(w)).where(F.col("_pick") == pick)
    return df.drop("_pick", "_file", "_delivery")
