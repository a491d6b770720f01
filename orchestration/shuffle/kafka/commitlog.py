"""Reading and writing a shuffle's commit-log topic and creating its topics."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError

from orchestration.shuffle.core.commitlog import (
    COMMIT_PREFIX,
    EXPIRED_PREFIX,
    LAYOUT_KEY,
    BadRecord,
    Commit,
    Expired,
    Layout,
    LogFold,
    ShuffleLog,
    commit_topic,
    parse_record,
    recover_window,
    version_to_json,
)
from orchestration.shuffle.core.evolution import (
    STRICT,
    LayoutVersion,
    change_key,
    former_names,
    merge_schema,
)
from orchestration.shuffle.core.logindex import (
    LogIndex,
    OpenedIndex,
    build_index,
    decode_index,
    encode_index,
    index_topic,
    record_crc,
)
from orchestration.shuffle.core.stream import LogRecord
from orchestration.shuffle.errors import (
    ShuffleAuthorizationError,
    ShuffleError,
    ShuffleFormatError,
    ShuffleLayoutError,
    ShuffleTopicNotFoundError,
)
from orchestration.shuffle.kafka.client import (
    KafkaClient,
    delivery_failure,
    quick_end_offsets,
    read_range,
)

logger = logging.getLogger(__name__)

# How long a topic missing from one broker's metadata is looked for again (see
# check_partitions and found_within).
CREATE_GRACE_S = 3.0

T = TypeVar("T")


def found_within(grace_s: float, look: Callable[[], T]) -> T:
    """``look()``, asked again for up to ``grace_s`` seconds while it raises
    :class:`ShuffleTopicNotFoundError`: for a topic known to exist (its creation was just
    refused as done, or this client made it) that the broker asked does not know yet. Another
    writer creating the topic at the same moment is still waiting for its leader; on a
    cluster, the broker asked next may not have the new topic in its metadata yet.

    Raises:
        ShuffleTopicNotFoundError: The topic is still missing after ``grace_s`` seconds.
    """
    deadline = time.monotonic() + grace_s
    while True:
        try:
            return look()
        except ShuffleTopicNotFoundError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


# The data topic keeps every frame until the user says otherwise: a shuffle is a
# persisted intermediate, and its commit log points into it.
DATA_TOPIC_CONFIG = {
    "retention.ms": "-1",
    "retention.bytes": "-1",
    # Data frames are compressed Arrow batches of up to a few MiB.
    "max.message.bytes": str(32 * 1024 * 1024),
    # Frames are already compressed; do not pay for it twice.
    "compression.type": "producer",
}
COMMIT_TOPIC_CONFIG = {
    # Keep the latest record per key (layout, commit/<run>) forever.
    "cleanup.policy": "compact",
    "retention.ms": "-1",
    "min.compaction.lag.ms": "0",
}


def read_log_records(
    kafka: KafkaClient, topic: str, offset: int = 0
) -> tuple[list[LogRecord], int]:
    """The commit log's records from ``offset`` on, with their offsets, and its end offset."""
    ctopic = commit_topic(topic)
    try:
        with _deleted_while_read(kafka, topic), _log_consumer(kafka, ctopic) as (c, low, high):
            return _records(c, ctopic, offset, low, high)
    except _AskedAgain:
        pass
    try:
        kafka.partition_count(ctopic)
    except ShuffleAuthorizationError as exc:
        raise ShuffleAuthorizationError(f"shuffle {topic!r}: {exc}") from None
    except ShuffleTopicNotFoundError:
        raise ShuffleTopicNotFoundError(_no_log(kafka, topic)) from None
    c = kafka.consumer()
    try:
        with _deleted_while_read(kafka, topic):
            ((low, high),) = kafka.end_offsets(ctopic, 1)  # exists: waits for its leader
            return _records(c, ctopic, offset, low, high)
    finally:
        c.close()


def _no_log(kafka: KafkaClient, topic: str) -> str:
    return (
        f"shuffle {topic!r} does not exist on {kafka.bootstrap_servers!r} "
        f"(no commit-log topic {commit_topic(topic)!r})"
    )


@contextlib.contextmanager
def _deleted_while_read(kafka: KafkaClient, topic: str) -> Iterator[None]:
    """The commit log was listed when asked, then went while it was read (deleted just
    now): says the shuffle does not exist, as when it is missing from the start."""
    try:
        yield
    except ShuffleTopicNotFoundError as exc:
        raise ShuffleTopicNotFoundError(f"{_no_log(kafka, topic)}: {exc}") from None


class _AskedAgain(Exception):
    """A lent consumer's quick ask of the commit log's offsets came back empty."""


@contextlib.contextmanager
def _log_consumer(kafka: KafkaClient, ctopic: str) -> Iterator[tuple[Consumer, int, int]]:
    """A lent consumer and the commit log's (low, high) offsets, asked with it.

    One consumer and one round trip for the offsets in the common case: a metadata request
    from a fresh client (what partition_count makes) took 2 ms or 53 ms at random here, which
    made a sensor tick 6 ms or 58 ms.

    Raises:
        _AskedAgain: The quick ask came back empty; the consumer is closed, not lent again
            (it may still know a node the cluster has dropped).
    """
    with kafka.lent_consumer() as c:
        offsets = quick_end_offsets(c, ctopic, 0, kafka)
        if offsets is None:
            raise _AskedAgain
        yield c, *offsets


def _records(
    c: Consumer, ctopic: str, offset: int, low: int, high: int
) -> tuple[list[LogRecord], int]:
    records = [
        LogRecord(m.offset(), m.key(), m.value())
        for m in read_range(c, ctopic, 0, max(offset, low), high)
    ]
    return records, max(high, offset)


def log_end(kafka: KafkaClient, topic: str) -> int:
    """The commit log's end offset (the offset its next record will get)."""
    ((_, high),) = kafka.end_offsets(commit_topic(topic), 1)
    return high


def read_log(kafka: KafkaClient, topic: str, windows: Sequence[str] | None = None) -> ShuffleLog:
    """Reads a shuffle's commit log (small: one record per run).

    A record that is not the engine's (no key, a key it does not write, a value that is
    not a record of its kind) is skipped, logged as a warning naming the commit log,
    partition and offset, and kept in the log's ``bad_records``.

    ``windows``: the read needs these windows only. A process reading a long log for the
    first time then reads its index and the records after it (see
    :mod:`~orchestration.shuffle.core.logindex`), and the log returned holds, besides the
    layout and every record the engine cannot read, only those windows' runs and expiry
    markers: enough to plan their read, not for anything about other windows.

    Raises:
        ShuffleFormatError: The layout record cannot be read, naming its offset.
    """
    return _read_log(kafka, topic, windows)[0]


# The commit logs this process has read, folded (core.commitlog.LogFold), by cluster
# settings and topic, the most recently read last: a log read again costs the records
# appended since, so planning, checks and writes stay as fast at 10,000 runs as at 10.
FOLDS_KEPT = 64
_FOLDS: OrderedDict[tuple, _Kept] = OrderedDict()
_FOLDS_LOCK = threading.Lock()

# A commit log of at least this many records (offsets) is indexed: its writers keep an
# index of it (refreshed once this many records follow the last one), and a process reading
# it for the first time reads the index and what follows it. Smaller logs are read whole.
INDEX_EVERY = 100
# An index larger than this is written in pieces, each a record (Kafka's default largest
# record is 1 MiB).
INDEX_PIECE_BYTES = 900_000
INDEX_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "retention.ms": "-1",
    "segment.ms": str(24 * 3600 * 1000),
    "min.compaction.lag.ms": "0",
}
# The commit-log offset up to which each index this process read or wrote reaches (by
# cluster settings and topic): a writer refreshes the index when its commit lands this far
# past it.
_INDEXED: dict[tuple, int] = {}
# One refresh at a time per commit log in this process (a writer's threads commit at once).
_REFRESHING: dict[tuple, threading.Lock] = {}


@dataclass
class _Kept:
    fold: LogFold
    # The last record folded (offset, key, value): read again first, to tell that the log
    # is still the one folded (not deleted and made again, nor compacted past it).
    last: tuple[int, bytes | str | None, bytes | None] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def _read_log(
    kafka: KafkaClient, topic: str, windows: Sequence[str] | None = None
) -> tuple[ShuffleLog, bytes | str | None]:
    """:func:`read_log`, and the value of the first layout record it holds."""
    key = (kafka._pool_key(), topic)
    with _FOLDS_LOCK:
        kept = _FOLDS.get(key)
        if kept is None:
            kept = _FOLDS[key] = _Kept(LogFold(topic))
        _FOLDS.move_to_end(key)
        while len(_FOLDS) > FOLDS_KEPT:
            _FOLDS.popitem(last=False)
    with kept.lock:
        last = kept.last
        if last is None:
            cold = _read_cold(kafka, topic, windows)
            if cold is not None and cold[1] is not None:
                # Only some windows' records: folded for this read, not kept.
                shuffle = LogFold(topic).add(*_pairs(cold[0])).log()
                _warn_bad(shuffle, topic)
                return shuffle, None
            records = cold[0] if cold is not None else read_log_records(kafka, topic)[0]
        else:
            records, _ = read_log_records(kafka, topic, last[0])
            head = records[0] if records else None
            if head is not None and (head.offset, head.key, head.value) == last:
                records = records[1:]
            else:
                # Not the log folded: read it whole, as if for the first time.
                kept.fold, kept.last = LogFold(topic), None
                records, _ = read_log_records(kafka, topic)
        kept.fold.add(*_pairs(records))
        if records:
            kept.last = (records[-1].offset, records[-1].key, records[-1].value)
        shuffle = kept.fold.log()
        first_layout = kept.fold.first_layout
    _warn_bad(shuffle, topic)
    return shuffle, first_layout


def forget_logs() -> None:
    """Forgets the commit logs this process has read and the indexes it knows of: the next
    read of each reads it as a new process would (its index, or every record)."""
    with _FOLDS_LOCK:
        _FOLDS.clear()
    _INDEXED.clear()


def open_index(kafka: KafkaClient, topic: str) -> OpenedIndex | None:
    """The latest index written of ``topic``'s commit log (None: none that can be read)."""
    with kafka.lent_consumer() as c:
        return _open_index(c, kafka, topic)


def _pairs(records: Sequence[LogRecord]) -> tuple[list, list[int]]:
    return [(r.key, r.value) for r in records], [r.offset for r in records]


def _warn_bad(shuffle: ShuffleLog, topic: str) -> None:
    for bad in shuffle.bad_records:
        logger.warning("%s", bad.describe(topic))


def _read_cold(
    kafka: KafkaClient, topic: str, windows: Sequence[str] | None
) -> tuple[list[LogRecord], Sequence[str] | None] | None:
    """A first read of the log in this process: its records from its index and the tail
    after it when the log is long and its index can be read and is this log's, else every
    record. With the records, the windows they were narrowed to (None: all). None when the
    log's offsets could not be asked quickly (the caller reads it the slow way)."""
    ctopic = commit_topic(topic)
    try:
        with _deleted_while_read(kafka, topic), _log_consumer(kafka, ctopic) as (c, low, high):
            if high - low >= INDEX_EVERY:
                found = _indexed(c, kafka, topic, low, high, windows)
                if found is not None:
                    return found[0], windows
            return _records(c, ctopic, 0, low, high)[0], None
    except _AskedAgain:
        return None


def _indexed(
    c: Consumer,
    kafka: KafkaClient,
    topic: str,
    low: int,
    high: int,
    windows: Sequence[str] | None,
) -> tuple[list[LogRecord], LogIndex] | None:
    """The log's records from its index (those ``windows`` need; None: all) and the tail
    after it, with the index; None when there is no index this log's reader can use: none
    yet, refused, unreadable, or of another log (deleted and made again)."""
    opened = _open_index(c, kafka, topic)
    if opened is None or opened.last is None or not low <= opened.last[0] < high:
        return None
    last_offset, crc = opened.last
    tail = _records(c, commit_topic(topic), last_offset, low, high)[0]
    if not tail or tail[0].offset != last_offset or record_crc(tail[0].key, tail[0].value) != crc:
        logger.info("shuffle %r: its commit-log index is not of this log; read whole", topic)
        return None
    index = opened.index(windows)
    _INDEXED[(kafka._pool_key(), topic)] = opened.through
    kept = [LogRecord(r.offset, r.key.encode() if r.key else None, r.value) for r in index.rows]
    return kept + [r for r in tail if r.offset >= opened.through], index


def _open_index(c: Consumer, kafka: KafkaClient, topic: str) -> OpenedIndex | None:
    """The latest index written of ``topic``'s commit log, or None (none, refused, or not
    readable: each is a reason to read the log whole, never to fail a read)."""
    itopic = index_topic(topic)
    try:
        offsets = quick_end_offsets(c, itopic, 0, kafka)
        if offsets is None and (kafka._pool_key(), topic) in _INDEXED:
            # Made by this process a moment ago: a lent consumer may not know it yet.
            ((low, high),) = kafka.end_offsets(itopic, 1)
        elif offsets is None:
            return None
        else:
            low, high = offsets
        if high <= low:
            return None
        (last,) = list(read_range(c, itopic, 0, high - 1, high))
        index_id, piece, pieces = _piece_of(last)
        if piece != pieces - 1 or high - pieces < low:
            return None
        msgs = list(read_range(c, itopic, 0, high - pieces, high - 1)) + [last]
        if [_piece_of(m) for m in msgs] != [(index_id, i, pieces) for i in range(pieces)]:
            return None  # another writer's pieces in between: the next read finds it whole
        return decode_index(b"".join(m.value() for m in msgs))
    except (ShuffleError, ValueError) as exc:
        logger.info("shuffle %r: its commit-log index is not read (%s); read whole", topic, exc)
        return None


def _piece_of(msg) -> tuple[str, int, int]:
    """(index id, piece, pieces) from an index record's header."""
    for k, v in msg.headers() or ():
        if k == "kafka-shuffle-index":
            index_id, piece, pieces = v.decode().split()
            return index_id, int(piece), int(pieces)
    raise ValueError(f"record at offset {msg.offset()} is not an index piece")


def refresh_index(kafka: KafkaClient, topic: str, every: int | None = None) -> int | None:
    """Writes a new index of ``topic``'s commit log unless the latest one reaches within
    ``every`` records of its end; returns the offset the index reaches (None: the log is
    too short to index). The index is built from the last one and the records after it.

    Raises:
        ShuffleError: The index topic cannot be made or written (no right to, a broker
            down): the log itself is untouched.
    """
    every = INDEX_EVERY if every is None else every
    ctopic = commit_topic(topic)
    with kafka.lent_consumer() as c:
        offsets = quick_end_offsets(c, ctopic, 0, kafka)
        if offsets is None:
            ((low, high),) = kafka.end_offsets(ctopic, 1)
        else:
            low, high = offsets
        if high - low < every:
            return None
        found = _indexed(c, kafka, topic, low, high, None)
        previous = None
        if found is not None:
            records, previous = found
            if high - previous.through < every:
                return previous.through
            records = [r for r in records if r.offset >= previous.through]
        else:
            records = _records(c, ctopic, 0, low, high)[0]
    index = build_index(
        previous,
        [(r.offset, r.key.decode(errors="replace") if r.key else None, r.value) for r in records],
        high,
    )
    _write_index(kafka, topic, encode_index(index))
    _INDEXED[(kafka._pool_key(), topic)] = high
    return high


def _write_index(kafka: KafkaClient, topic: str, data: bytes) -> None:
    itopic = index_topic(topic)
    kafka.ensure_topic(itopic, 1, config=INDEX_TOPIC_CONFIG)
    pieces = [data[i : i + INDEX_PIECE_BYTES] for i in range(0, len(data), INDEX_PIECE_BYTES)]
    index_id = uuid.uuid4().hex
    errors: list[KafkaError] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(err)

    with kafka.producer(**{"acks": "all", "linger.ms": 0, "enable.idempotence": True}) as p:
        with kafka.errors(f"writing the index of commit log {commit_topic(topic)!r}"):
            for i, piece in enumerate(pieces):
                header = f"{index_id} {i} {len(pieces)}".encode()
                p.produce(
                    itopic,
                    key=f"index/{i}".encode(),
                    value=piece,
                    headers=[("kafka-shuffle-index", header)],
                    on_delivery=on_delivery,
                )
            remaining = p.flush(60)
    if remaining or errors:
        raise delivery_failure(f"writing the index {itopic!r}", errors, kafka)


def _after_commit(kafka: KafkaClient, topic: str, offset: int) -> None:
    """Refreshes the commit log's index when the commit just written at ``offset`` lands
    :data:`INDEX_EVERY` records past it. Never fails the write (it has landed): a refusal
    or a failure is logged, and readers read the log whole until an index is written."""
    if offset + 1 < INDEX_EVERY:
        return
    key = (kafka._pool_key(), topic)
    known = _INDEXED.get(key)
    if known is not None and offset + 1 - known < INDEX_EVERY:
        return
    lock = _REFRESHING.setdefault(key, threading.Lock())
    if not lock.acquire(blocking=False):
        return  # another thread of this process is refreshing it
    try:
        refresh_index(kafka, topic)
    except Exception as exc:  # noqa: BLE001 - the run is committed; an index only speeds reads
        # Tried again once as many records follow, not on every commit until then.
        _INDEXED[key] = offset + 1
        logger.warning(
            "shuffle %r: the commit log's index %r was not refreshed (%s); reads of it in a "
            "new process read every record until it is",
            topic,
            index_topic(topic),
            exc,
        )
    finally:
        lock.release()


def _produce_one(kafka: KafkaClient, topic: str, key: str, value: str | None) -> int:
    """Writes one record (acks=all); returns its offset."""
    errors: list[KafkaError] = []
    offsets: list[int] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    # One record: idempotence buys nothing (a retried duplicate of a keyed, compacted record
    # is harmless) and its producer-id handshake costs a round trip; acks=all still does.
    with kafka.producer(**{"acks": "all", "linger.ms": 0}) as p:
        with kafka.errors(f"writing {key!r} to commit log {topic!r}"):
            data = None if value is None else value.encode()
            p.produce(topic, key=key.encode(), value=data, on_delivery=on_delivery)
            remaining = p.flush(30)
    if remaining or errors:
        raise delivery_failure(f"writing {key!r} to commit log {topic!r}", errors, kafka)
    return offsets[0]


def write_commit(kafka: KafkaClient, topic: str, commit: Commit) -> None:
    """Makes a run visible: appends its commit record (acks=all) to the commit log (and
    refreshes the log's index when it is due)."""
    ctopic = commit_topic(topic)
    offset = _produce_one(kafka, ctopic, COMMIT_PREFIX + commit.run_id, commit.to_json())
    _after_commit(kafka, topic, offset)


def create_or_check(
    kafka: KafkaClient,
    layout: Layout,
    replication_factor: int | None = None,
    schema_mode: str = STRICT,
    made_by: str = "a write",
) -> tuple[Layout, bool]:
    """Creates the shuffle's topics and layout record, or checks an existing layout.

    New topics get ``replication_factor`` replicas (None: min(3, brokers)) and
    ``min.insync.replicas`` one less (at least 1).

    An existing shuffle's latest layout version is checked against ``layout``'s schema
    in ``schema_mode`` (:func:`~orchestration.shuffle.core.evolution.merge_schema`); with
    ``"merge"``, a schema that adds or widens columns is recorded as a new version first
    (``made_by`` says who made it). A ``layout`` naming a partition count the shuffle had
    before it grew is written on the latest count.

    Returns:
        The layout in force for the write (its ``version`` is the one the run records) and
        whether this call created the shuffle.

    Raises:
        ShuffleLayoutError: The shuffle exists with a different key, partition count,
            max_parallelism, event-time column or a schema the mode does not take, or its
            data topic has fewer partitions than its layout.
    """
    topic = layout.topic
    rf = kafka.replication_for(replication_factor)  # one look at the cluster for both topics
    first_value: bytes | str | None = None
    if kafka.ensure_topic(
        commit_topic(topic), 1, config=COMMIT_TOPIC_CONFIG, replication_factor=rf
    ):
        # Just created, so empty; and on a cluster, the broker asked next may not know it yet.
        log = ShuffleLog.from_records(topic, [])
    else:
        # It exists, though perhaps only just: made by a first writer racing this one.
        log, first_value = found_within(CREATE_GRACE_S, lambda: _read_log(kafka, topic))
    if log.layout is None:
        if not kafka.ensure_topic(
            topic, layout.num_partitions, config=DATA_TOPIC_CONFIG, replication_factor=rf
        ):
            check_partitions(kafka, layout)  # made by someone else: is it the right one?
            try:
                _refuse_orphaned_records(kafka, layout)
            except ShuffleLayoutError:
                # A first writer racing this one records its layout (acks=all) before its
                # first frame, so the log read after the data topic's offsets holds it.
                log, first_value = _read_log(kafka, topic)
                if log.layout is None:
                    raise
        if log.layout is None:
            _produce_one(kafka, commit_topic(topic), LAYOUT_KEY, layout.to_json())
            return _first_layout(kafka, layout), True
    assert log.layout is not None and log.layout_record is not None
    first = _winning_layout(kafka, first_value, log.layout_record)
    recorded = log.layout if first is log.layout_record else first
    diffs = recorded.fixed_differences(layout)
    problem = recorded.partitions_problem(layout.num_partitions)
    if problem:
        diffs.insert(1 if recorded.key != layout.key else 0, problem)
    if diffs:
        raise ShuffleLayoutError(
            f"shuffle {topic!r} exists with a different layout: " + "; ".join(diffs)
        )
    if layout.num_partitions != recorded.num_partitions:
        logger.warning(
            "shuffle %r: the write names %d partitions, the count before the shuffle grew; "
            "it writes on the %d it has now",
            topic,
            layout.num_partitions,
            recorded.num_partitions,
        )

    def merged(latest: Layout) -> LayoutVersion | None:
        renamed = former_names(latest.versions)
        return merge_schema(
            topic, latest.layout_version(), layout.schema, latest.pinned, schema_mode, renamed
        )

    recorded = write_version(kafka, recorded, merged, made_by)
    check_partitions(kafka, recorded)
    return recorded, False


# How often a change that lost its version to another one made at the same moment is
# worked out again against the winner before the change is refused.
VERSION_ATTEMPTS = 5


def write_version(
    kafka: KafkaClient,
    layout: Layout,
    make: Callable[[Layout], LayoutVersion | None],
    made_by: str,
) -> Layout:
    """Records the version ``make`` makes of the latest layout (None: nothing to change),
    and returns the layout with it as its latest.

    Versions are numbered and the first record of a number in the log is the version: after
    writing its record, the log is read again; a record that came second is deleted, and
    the change is worked out again against the version that won (``make`` may then find
    nothing to change, or refuse). So a write never runs under a version another change
    replaced, and two changes at once are never both half applied.

    Raises:
        ShuffleLayoutError: ``make`` refused the change, or it lost its version
            ``VERSION_ATTEMPTS`` times running.
    """
    topic = layout.topic
    ctopic = commit_topic(topic)
    for _ in range(VERSION_ATTEMPTS):
        new = make(layout)
        if new is None:
            return layout
        change_id = uuid.uuid4().hex
        new = LayoutVersion(
            layout.version + 1,
            new.schema,
            new.field_ids,
            new.last_field_id,
            new.num_partitions,
            new.changes,
            made_at=dt.datetime.now(dt.UTC).isoformat(),
            made_by=made_by,
            change_id=change_id,
        )
        key = change_key(new.version, change_id)
        _produce_one(kafka, ctopic, key, version_to_json(new))
        log = read_log(kafka, topic)
        if log.version_keys.get(new.version) == key:
            logger.info(
                "shuffle %r: layout version %d recorded (%s): %s",
                topic,
                new.version,
                made_by,
                "; ".join(new.changes),
            )
            return layout.evolved(new)
        _produce_one(kafka, ctopic, key, None)
        layout = log.require_layout()
    raise ShuffleLayoutError(
        f"shuffle {topic!r}: a new layout version could not be recorded: other changes took "
        f"its number {VERSION_ATTEMPTS} times running; try again"
    )


def _layout_of(value: bytes | str | None) -> Layout | None:
    """The layout of a layout record's value (None: none, or unreadable)."""
    if not value:
        return None
    try:
        return Layout.from_json(value)
    except Exception:  # noqa: BLE001 - read_log reported it; the latest record stands
        return None


def _winning_layout(kafka: KafkaClient, first_value: bytes | str | None, latest: Layout) -> Layout:
    """The shuffle's layout: the first layout record of its log (``first_value``; ``latest``
    when it has none).

    The latest layout record is what readers take and what compaction keeps. It differs
    from the first only while a first writer that lost a race has not yet written the
    winner's again (or if it stopped before it could): the winner's is then written again
    here, and the caller is held to it."""
    first = _layout_of(first_value)
    if first is None or first.to_json() == latest.to_json():
        return latest
    _produce_one(kafka, commit_topic(latest.topic), LAYOUT_KEY, first.to_json())
    return first


def _first_layout(kafka: KafkaClient, ours: Layout) -> Layout:
    """Settles which of the layout records written by first writers at once is the shuffle's.

    The first in the log wins: every writer reads the log after its own record, so all see
    the same first one (:func:`_winning_layout`, which writes the winner's again when ours
    came later). A writer whose layout differs from it is refused before it writes anything.

    Raises:
        ShuffleLayoutError: Another writer created the shuffle at the same moment with a
            layout that differs from ``ours``.
    """
    _, first_value = found_within(CREATE_GRACE_S, lambda: _read_log(kafka, ours.topic))
    winner = _winning_layout(kafka, first_value, ours)
    diffs = winner.differences(ours)
    if diffs:
        raise ShuffleLayoutError(
            f"shuffle {ours.topic!r} was created at the same moment by another writer, whose "
            f"layout (the first in commit log {commit_topic(ours.topic)!r}) differs from this "
            "run's: " + "; ".join(diffs)
        )
    return winner


def _refuse_orphaned_records(kafka: KafkaClient, layout: Layout) -> None:
    """Refuses to start a shuffle on a data topic that already holds records: its commit log
    was deleted (or the topic is another application's), and a new layout over the old
    frames would hide what they were without a word."""
    held = [
        (p, low, high)
        for p, (low, high) in enumerate(kafka.end_offsets(layout.topic, layout.num_partitions))
        if high > low
    ]
    if held:
        p, low, high = held[0]
        raise ShuffleLayoutError(
            f"data topic {layout.topic!r} holds records (partition {p}: offsets [{low}, {high})"
            f", {len(held)} partition(s) in all) but its commit log "
            f"{commit_topic(layout.topic)!r} has no layout record: the commit log was deleted "
            "or the topic is not a shuffle's. Its runs cannot be read again; delete the data "
            "topic (or choose another topic) to start the shuffle anew."
        )


def check_partitions(kafka: KafkaClient, layout: Layout, grace_s: float = CREATE_GRACE_S) -> None:
    """Refuses a data topic whose partition count is not the layout's.

    On a cluster, a topic just created through one broker can be unknown to another for a
    moment, so a missing topic is looked for again for up to ``grace_s`` seconds.

    Example::

        check_partitions(KafkaClient(conf), shuffle_log(topic, kafka=conf).require_layout())

    Raises:
        ShuffleLayoutError: The data topic's partition count is not the layout's
            (partitions were added behind the shuffle's back).
        ShuffleTopicNotFoundError: The data topic is missing.
    """
    try:
        n = found_within(grace_s, lambda: kafka.partition_count(layout.topic))
    except ShuffleTopicNotFoundError:
        raise ShuffleTopicNotFoundError(
            f"the data topic {layout.topic!r} of the shuffle is missing (its commit log exists)"
        ) from None
    if n != layout.num_partitions:
        raise ShuffleLayoutError(
            f"data topic {layout.topic!r} has {n} partitions but the shuffle was created with "
            f"{layout.num_partitions}; partitions were added behind its back, so key groups "
            "would land in the wrong partitions. Record them with alter_shuffle(topic, "
            f"num_partitions={n}) if they were meant to grow the shuffle, else create a new "
            "shuffle topic."
        )


def read_commits_since(
    kafka: KafkaClient, topic: str, offset: int, skipped: list[BadRecord] | None = None
) -> tuple[list[Commit], int]:
    """The commits appended to the commit log at or after ``offset``, and the next offset.

    What a sensor calls on each tick: its cost depends on what is new, not on the size of
    the shuffle or of its commit log. A commit record that cannot be read raises a
    ``ShuffleFormatError`` naming it, unless ``skipped`` is given: it is then left out and
    added there (as a batch read's ``ShuffleLog.bad_records``), for the caller to report.
    """
    records, next_offset = read_log_records(kafka, topic, offset)
    where = f"commit log {commit_topic(topic)!r}"
    commits = []
    for r in records:
        key = (r.key or b"").decode(errors="replace")
        if r.value is not None and key.startswith(COMMIT_PREFIX):
            at = f" at partition 0 offset {r.offset}"
            try:
                commits.append(parse_record(Commit, r.value, where, key, at))
            except ShuffleFormatError as exc:
                if skipped is None:
                    raise
                known, window = recover_window(r.value)
                skipped.append(BadRecord(r.offset, key, str(exc), window, known))
    return commits, next_offset


def write_expired(kafka: KafkaClient, topic: str, markers: list[Expired]) -> None:
    """Marks runs as expired, then deletes their commit records (markers first, so a reader
    never sees a run vanish without a reason)."""
    if not markers:
        return
    ctopic = commit_topic(topic)
    errors: list[KafkaError] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(err)

    with kafka.producer(**{"acks": "all", "enable.idempotence": True}) as p:
        with kafka.errors(f"writing to commit log {ctopic!r}"):
            for m in markers:
                key = (EXPIRED_PREFIX + m.run_id).encode()
                p.produce(ctopic, key=key, value=m.to_json().encode(), on_delivery=on_delivery)
            for m in markers:
                key = (COMMIT_PREFIX + m.run_id).encode()
                p.produce(ctopic, key=key, value=None, on_delivery=on_delivery)
            remaining = p.flush(30)
    if remaining or errors:
        raise delivery_failure(f"expiring runs in commit log {ctopic!r}", errors, kafka)
