"""``kafka-records``: any Kafka topic as a Spark data source, batch and streaming, on Arrow.

A drop-in for Spark's own ``kafka`` source (same columns, same option names where Spark has
them; see :mod:`orchestration.shuffle.core.records`), plus what it lacks: starting from a
consumer group's committed offsets, committing each micro-batch's end offsets back to the
group (for monitoring: Kafka's own tools then show the query's position and lag; the
checkpoint stays the source of truth), discovery of partitions and of topics that start
matching ``subscribePattern``, and records decoded straight into Arrow batches.

Example::

    register_data_sources(spark)
    df = (spark.read.format("kafka-records")
          .option("subscribe", "events")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("startingOffsets", "earliest")
          .load())   # key, value, topic, partition, offset, timestamp, timestampType

Data loss (offsets removed by retention or ``delete_records`` before they were read) fails
the read with ``failOnDataLoss=true`` (the default), naming the topic, partition and missing
offsets; with ``false`` it is skipped, counted and logged.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from confluent_kafka import Message, TopicPartition
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from orchestration.shuffle.core.metrics import METRICS_KEY
from orchestration.shuffle.core.optiondefs import RECORDS
from orchestration.shuffle.core.options import Options
from orchestration.shuffle.core.records import (
    OWNER,
    Range,
    RecordsOptions,
    Subscription,
    offsets_from_json,
    offsets_to_json,
    parse_options,
    rate_limit,
    resolve,
    split,
)
from orchestration.shuffle.errors import (
    ShuffleConnectionError,
    ShuffleOptionError,
    ShuffleTopicNotFoundError,
)
from orchestration.shuffle.kafka.client import (
    CONNECT_TIMEOUT_S,
    KafkaClient,
    KafkaConfig,
    read_chunks,
)
from orchestration.shuffle.spark.compat import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
    require_admission_control,
)

log = logging.getLogger(__name__)

_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
RECORDS_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL = ", headers array<struct<key: string, value: binary>>"
# Records per Arrow batch a reader yields.
BATCH_ROWS = 8192

TP = tuple[str, int]


def arrow_schema(include_headers: bool) -> pa.Schema:
    return pa.schema(_FIELDS + ([pa.field("headers", _HEADERS)] if include_headers else []))


class DataLossError(ShuffleConnectionError):
    """Offsets a read needs are gone from Kafka (retention, ``delete_records``)."""


# --- Kafka look-ups -------------------------------------------------------------------


def discover(kafka: KafkaClient, sub: Subscription) -> list[TP]:
    """The topic partitions a subscription covers now."""
    with kafka.errors("listing topics"):
        md = kafka.admin().list_topics(timeout=CONNECT_TIMEOUT_S)
    if sub.assign:
        missing = sorted({t for t, _ in sub.assign if t not in md.topics})
        # As for subscribe below: a topic this principal may not describe says so.
        missing = [t for t in missing if kafka.describe_topic(t) is None]
        if missing:
            raise ShuffleTopicNotFoundError(f"{OWNER}: assigned topic(s) {missing} do not exist")
        return sorted(sub.assign)
    out = []
    for name, tmd in md.topics.items():
        if name.startswith("__") or tmd.error is not None or not sub.matches(name):
            continue
        out += [(name, p) for p in tmd.partitions]
    if sub.topics:
        missing = []
        for name in sorted(set(sub.topics) - {t for t, _ in out}):
            # Not in the list of every topic: missing, or one this principal may not
            # describe, which asked for by name says so (describe_topic raises).
            found = kafka.describe_topic(name)
            if found is None:
                missing.append(name)
            else:
                out += [(name, p) for p in found.partitions]
        if missing:
            raise ShuffleTopicNotFoundError(
                f"{OWNER}: topic(s) {missing} do not exist on {kafka.bootstrap_servers!r}"
            )
    return sorted(out)


def bounds(kafka: KafkaClient, tps: list[TP]) -> dict[TP, tuple[int, int]]:
    """(low, high) offsets of each partition, from the brokers."""
    out = {}
    with kafka.consumer() as c:
        for t, p in tps:
            with kafka.errors(f"reading the offsets of topic {t!r} partition {p}"):
                out[(t, p)] = c.get_watermark_offsets(
                    TopicPartition(t, p), timeout=CONNECT_TIMEOUT_S, cached=False
                )
    return out


def committed_offsets(kafka: KafkaClient, group: str, tps: list[TP]) -> dict[TP, int]:
    """The offsets ``group`` committed for each partition (negative where it has none)."""
    with (
        kafka.consumer(**{"group.id": group}) as c,
        kafka.errors(f"reading the committed offsets of group {group!r}"),
    ):
        got = c.committed([TopicPartition(t, p) for t, p in tps], timeout=CONNECT_TIMEOUT_S)
    return {(tp.topic, tp.partition): tp.offset for tp in got}


def offsets_for_times(kafka: KafkaClient, times: Mapping[TP, int]) -> dict[TP, int]:
    """The first offset at or after each timestamp (-1 where there is none)."""
    if not times:
        return {}
    with kafka.consumer() as c, kafka.errors("looking up offsets by timestamp"):
        got = c.offsets_for_times(
            [TopicPartition(t, p, ts) for (t, p), ts in times.items()], timeout=CONNECT_TIMEOUT_S
        )
    return {(tp.topic, tp.partition): tp.offset for tp in got}


def commit_group_offsets(kafka: KafkaClient, group: str, offsets: Mapping[TP, int]) -> None:
    """Commits ``offsets`` (the next offset to read, per partition) to consumer group
    ``group``, as a consumer of that group would."""
    with (
        kafka.consumer(**{"group.id": group}) as c,
        kafka.errors(f"committing offsets of group {group!r}"),
    ):
        c.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
            asynchronous=False,
        )


def _times(position, tps: list[TP]) -> dict[TP, int]:
    if position.kind == "timestamp":
        return {tp: position.timestamp for tp in tps}
    if position.kind == "timestamps":
        return {
            (t, p): ts
            for t, parts in position.values.items()
            for p, ts in parts.items()
            if (t, p) in set(tps)
        }
    return {}


def positions(
    kafka: KafkaClient,
    opts: RecordsOptions,
    position,
    tps: list[TP],
    limits: Mapping[TP, tuple[int, int]],
    option,
) -> dict[TP, int]:
    committed = (
        committed_offsets(kafka, opts.require_group(), tps)
        if position.kind == "committed"
        else None
    )
    return resolve(
        position,
        limits,
        committed=committed,
        by_time=offsets_for_times(kafka, _times(position, tps)),
        reset=opts.reset,
        option=option,
        no_match=opts.no_match if option == "startingOffsets" else "latest",
    )


def check_loss(
    opts: RecordsOptions, tp: TP, wanted: int, low: int, counters: dict | None = None
) -> int:
    """Where a read of ``tp`` from ``wanted`` can start, given the partition's lowest offset."""
    if wanted >= low:
        return wanted
    what = (
        f"{OWNER}: topic {tp[0]!r} partition {tp[1]}: offsets [{wanted}, {low}) were removed "
        "(retention or delete_records) before they were read"
    )
    if opts.fail_on_data_loss:
        raise DataLossError(what + "; set failOnDataLoss=false to skip them")
    log.warning("%s; skipped (failOnDataLoss=false)", what)
    if counters is not None:
        counters["records_lost"] = counters.get("records_lost", 0) + (low - wanted)
    return low


# --- reading --------------------------------------------------------------------------


@dataclass
class RangePartition(InputPartition):
    topic: str
    partition: int
    start: int
    end: int
    last_piece: bool = True  # holds the partition's end (commits it with commitOffsets)


# Small records: a deep prefetch queue keeps the reader busy (shuffle frames use a shallow
# one to bound memory; see KafkaClient.consumer).
_RECORDS_CONSUMER = {
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "queued.max.messages.kbytes": 64 * 1024,
    "queued.min.messages": 200_000,
}


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Keeps Python's cycle collector off while records stream through.

    Each consumed message is a new tracked object, so the collector would run every few
    hundred messages and walk them all: a third of a read's time, for no garbage, since the
    loop makes no reference cycles (reference counting frees everything it drops).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_arrow(
    kafka: KafkaClient, opts: RecordsOptions, part: InputPartition, *, commit: bool
) -> Iterator[pa.RecordBatch]:
    """A range's records as Arrow batches; with ``commit``, its end offset is then committed
    to the group (the task holding a partition's last piece does it)."""
    if not isinstance(part, RangePartition):
        return  # Spark reads one empty partition when a plan has none
    schema = arrow_schema(opts.include_headers)
    tp = (part.topic, part.partition)
    with kafka.consumer(**_RECORDS_CONSUMER) as c, paused_gc():
        low, _ = c.get_watermark_offsets(
            TopicPartition(*tp), timeout=CONNECT_TIMEOUT_S, cached=False
        )
        start = check_loss(opts, tp, part.start, low)
        for chunk in read_chunks(
            c, part.topic, part.partition, start, part.end, max_batch=BATCH_ROWS
        ):
            yield records_batch(schema, chunk, part, opts.include_headers)
    if commit and part.last_piece:
        _commit_quietly(kafka, opts, {tp: part.end})


def records_batch(
    schema: pa.Schema, msgs: list, part: RangePartition | None, include_headers: bool
) -> pa.RecordBatch:
    """Messages as a record batch of ``schema``; with ``part`` None they may come from any
    topics and partitions (a share consumer's poll), else all are from ``part``."""
    # One pass of C calls per field (map over the unbound methods), then numpy: the Python
    # work per record is what bounds this reader.
    n = len(msgs)
    if part is None:
        topics = pa.array(list(map(Message.topic, msgs)), pa.string())
        partitions = pa.array(list(map(Message.partition, msgs)), pa.int32())
    else:
        topics = pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(n, dtype=np.int32)), pa.array([part.topic], pa.string())
        ).cast(pa.string())
        partitions = pa.array(np.full(n, part.partition, dtype=np.int32))
    stamps = np.fromiter(
        itertools.chain.from_iterable(map(Message.timestamp, msgs)), dtype=np.int64, count=2 * n
    ).reshape(n, 2)
    kinds, millis = stamps[:, 0], stamps[:, 1]
    columns = [
        pa.array(list(map(Message.key, msgs)), pa.binary()),
        pa.array(list(map(Message.value, msgs)), pa.binary()),
        topics,
        partitions,
        pa.array(np.fromiter(map(Message.offset, msgs), dtype=np.int64, count=n)),
        pa.array(millis * 1000, mask=millis < 0).cast(schema.field("timestamp").type),
        # librdkafka: 1 create time, 2 log append time; Spark: 0 and 1.
        pa.array((kinds - 1).astype(np.int32), mask=kinds <= 0),
    ]
    if include_headers:
        columns.append(
            pa.array(
                [[{"key": k, "value": v} for k, v in (m.headers() or [])] for m in msgs],
                schema.field("headers").type,
            )
        )
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _commit_quietly(
    kafka: KafkaClient, opts: RecordsOptions, offsets: Mapping[TP, int], counters=None
) -> bool:
    """Commits offsets to the group for monitoring; a failure is logged, never fatal."""
    try:
        commit_group_offsets(kafka, opts.require_group(), offsets)
    except Exception as exc:  # noqa: BLE001 - monitoring only: count and log
        log.warning("%s: committing offsets to group %r failed: %s", OWNER, opts.group, exc)
        if counters is not None:
            counters["offset_commits_failed"] = counters.get("offset_commits_failed", 0) + 1
        return False
    if counters is not None:
        counters["offset_commits_succeeded"] = counters.get("offset_commits_succeeded", 0) + 1
    return True


def _partitions(opts: RecordsOptions, start: Mapping[TP, int], end: Mapping[TP, int]) -> list:
    ranges = [Range(t, p, start.get((t, p), 0), e) for (t, p), e in sorted(end.items())]
    pieces = split(ranges, opts.min_partitions, opts.max_records_per_partition)
    last = {(r.topic, r.partition): r.end for r in ranges}
    return [
        RangePartition(r.topic, r.partition, r.start, r.end, last[(r.topic, r.partition)] == r.end)
        for r in pieces
    ]


class KafkaRecordsReader(DataSourceReader):
    def __init__(self, opts: RecordsOptions):
        self.opts = opts
        self.kafka = KafkaClient(opts.kafka)

    def partitions(self) -> list[RangePartition]:
        opts, kafka = self.opts, self.kafka
        tps = discover(kafka, opts.subscription)
        limits = bounds(kafka, tps)
        start = positions(kafka, opts, opts.starting, tps, limits, "startingOffsets")
        end = positions(kafka, opts, opts.ending, tps, limits, "endingOffsets")
        if opts.starting.kind == "offsets":
            for tp, (low, _) in limits.items():
                given = opts.starting.values.get(tp[0], {}).get(tp[1])
                if given is not None and given >= 0:
                    start[tp] = check_loss(opts, tp, given, low)
        return _partitions(opts, start, {tp: max(e, start[tp]) for tp, e in end.items()})

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_arrow(self.kafka, self.opts, partition, commit=self.opts.commit_offsets)


class KafkaRecordsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of new records. Offsets: ``{"topic": {"partition": next offset}}``."""

    def __init__(self, opts: RecordsOptions):
        require_admission_control(
            "kafka-records stream",
            ["maxOffsetsPerTrigger"] if opts.max_offsets_per_trigger is not None else [],
        )
        self.opts = opts
        self.kafka = KafkaClient(opts.kafka)
        self._target: dict[TP, int] | None = None
        self._committed: dict[TP, int] = {}
        self.counters: dict[str, int] = {}
        # (earliest, latest) as latestOffset() last found them, for reportLatestOffset().
        self._bounds: tuple[dict[TP, int], dict[TP, int]] | None = None

    def initialOffset(self) -> dict:
        tps = discover(self.kafka, self.opts.subscription)
        limits = bounds(self.kafka, tps)
        return offsets_to_json(
            positions(self.kafka, self.opts, self.opts.starting, tps, limits, "startingOffsets")
        )

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = discover(self.kafka, self.opts.subscription)
        self._target = {tp: high for tp, (_, high) in bounds(self.kafka, tps).items()}

    def _latest(self) -> tuple[dict[TP, int], dict[TP, int]]:
        tps = discover(self.kafka, self.opts.subscription)
        limits = bounds(self.kafka, tps)
        return {tp: low for tp, (low, _) in limits.items()}, {
            tp: high for tp, (_, high) in limits.items()
        }

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        # PySpark 4.0 and 4.1 call latestOffset() with neither (no admission control): the
        # micro-batch reads up to the latest offsets, and Spark's commit() commits them.
        begin = offsets_from_json(start) if start is not None else {}
        if start is not None:
            # ``start`` is where the last completed micro-batch ended; Spark's own commit()
            # for a batch comes only when the next one starts, so it is committed here.
            self._commit(begin)
        lows, latest = self._bounds = self._latest()
        if self._target is not None:
            # Trigger.AvailableNow: what existed when the query started, nothing later.
            latest = {tp: min(h, self._target.get(tp, lows[tp])) for tp, h in latest.items()}
        # A partition or topic that appeared since starts at its earliest offset.
        begin = {tp: begin.get(tp, lows[tp]) for tp in latest}
        latest = {tp: max(h, begin[tp]) for tp, h in latest.items()}
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        return offsets_to_json(latest)

    def reportLatestOffset(self) -> dict | None:
        # Shown in the query's progress as ``latestOffset``; the source's own metrics ride
        # along (see orchestration.shuffle.core.metrics).
        # Spark asks right after latestOffset(): what it just read from the brokers.
        lows, latest = self._bounds or self._latest()
        metrics: dict = {"earliest": offsets_to_json(lows)}
        if self.opts.commit_offsets:
            metrics["offset_commits_succeeded"] = self.counters.get("offset_commits_succeeded", 0)
            metrics["offset_commits_failed"] = self.counters.get("offset_commits_failed", 0)
        if not self.opts.fail_on_data_loss:
            metrics["records_lost"] = self.counters.get("records_lost", 0)
        return {**offsets_to_json(latest), METRICS_KEY: metrics}

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        begin, stop = offsets_from_json(start), offsets_from_json(end)
        lows, _ = self._latest()
        checked = {}
        for tp, e in stop.items():
            low = lows.get(tp, 0)
            checked[tp] = check_loss(self.opts, tp, begin.get(tp, low), low, self.counters)
            stop[tp] = max(e, checked[tp])
        return _partitions(self.opts, checked, stop)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Offsets are committed by the driver after the micro-batch, not by the tasks.
        return read_arrow(self.kafka, self.opts, partition, commit=False)

    def _commit(self, offsets: dict[TP, int]) -> None:
        if self.opts.commit_offsets and offsets and offsets != self._committed:
            if _commit_quietly(self.kafka, self.opts, offsets, self.counters):
                self._committed = dict(offsets)

    def commit(self, end: dict) -> None:
        self._commit(offsets_from_json(end))


class KafkaRecordsDataSource(DataSource):
    """``kafka-records``: a Kafka topic's records, batch or streaming (see module doc)."""

    @classmethod
    def name(cls) -> str:
        return "kafka-records"

    def schema(self) -> str:
        include = Options(self.options, RECORDS).flag("includeHeaders")
        return RECORDS_SCHEMA + (HEADERS_DDL if include else "")

    def reader(self, schema) -> KafkaRecordsReader:
        return KafkaRecordsReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema) -> KafkaRecordsStreamReader:
        return KafkaRecordsStreamReader(parse_options(self.options, streaming=True))


def write_records(
    df, topic: str, kafka: KafkaConfig, key: str = "key", value: str = "value"
) -> int:
    """Produces one record per row of ``df`` (binary or string ``key`` and ``value`` columns).

    This is the per-row path: simple, and slow next to the shuffle's Arrow frames. Records
    are produced idempotently with ``acks=all``; any failed delivery fails the write.

    Example::

        rows = spark.range(10).selectExpr("cast(id as string) as key", "'v' as value")
        write_records(rows, "events", {"bootstrap.servers": "127.0.0.1:19092"})   # 10

    Returns:
        The number of records produced.
    """
    from pyspark.sql import functions as F

    client = KafkaClient.of(kafka)
    missing = [c for c in (key, value) if c not in df.columns]
    if missing:
        raise ShuffleOptionError(f"write_records: column(s) {missing} not in {df.columns}")

    def produce(rows) -> Iterator[int]:
        errors: list[str] = []

        def on_delivery(err, msg) -> None:
            if err is not None:
                errors.append(f"partition {msg.partition()}: {err}")

        n = 0
        with client.producer(**{"enable.idempotence": True, "acks": "all", "linger.ms": 20}) as p:
            with client.errors(f"producing to topic {topic!r}"):
                for row in rows:
                    p.produce(topic, key=row[0], value=row[1], on_delivery=on_delivery)
                    p.poll(0)
                    n += 1
                remaining = p.flush(60)
        if remaining or errors:
            raise ShuffleConnectionError(
                f"producing to topic {topic!r} failed ({remaining} undelivered): {errors[:3]}"
            )
        yield n

    counts = df.select(F.col(key), F.col(value)).rdd.mapPartitions(produce).collect()
    return int(sum(counts))
