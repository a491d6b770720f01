"""Pure logic of queue mode: work items, narrowing a failing batch, settling each record,
choosing the rows to keep and the dead-letter headers, the delivery policy and the share
group's configs. Runs wherever it is called (driver or Spark task).

Nothing here talks to Kafka or Spark: :mod:`orchestration.shuffle.queue.driver` (on the Spark
driver) and :mod:`orchestration.shuffle.queue.executor` (inside Spark tasks) do, and call these
functions to decide what they do.
"""

from __future__ import annotations

import enum
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Generic, TypeVar

import numpy as np
import pyarrow as pa

from orchestration.shuffle.core.commitlog import Commit, ShuffleLog
from orchestration.shuffle.errors import (
    QueueGroupError,
    QueueSchemaError,
    ShuffleAuthorizationError,
    ShuffleConnectionError,
    ShuffleError,
    ShuffleOptionError,
    ShuffleSchemaError,
    ShuffleTopicNotFoundError,
    ShuffleWriteError,
)

WORK_TOPIC_SUFFIX = ".queue"
# Keys of the records in a work topic: a work item's key is its run id; the record that
# closes a run's feeding transaction is keyed ``fed/<run id>``. A plain topic's feeding
# transaction ends with one ``fed/@<partition>`` record per source partition, whose value
# is the next offset to feed.
FED_PREFIX = "fed/"
PLAIN_FED_PREFIX = FED_PREFIX + "@"

T = TypeVar("T")

# Every unit given to fn, and every output row, names its source record with these.
SOURCE_FIELDS = [
    pa.field("_topic", pa.string()),
    pa.field("_partition", pa.int32()),
    pa.field("_offset", pa.int64()),
]
SOURCE_NAMES = [f.name for f in SOURCE_FIELDS]
# The delivery count of the record a unit (and an output row) comes from: given to fn, and
# written with each row so that a reader keeps each record's last delivery only.
DELIVERY_FIELD = pa.field("_delivery", pa.int32())
# Columns a queue adds to the user's schema; the schema may not have them.
RESERVED_COLUMNS = frozenset([*SOURCE_NAMES, DELIVERY_FIELD.name])

# A record's place in its topic: (topic, partition, offset).
Coords = tuple[str, int, int]


def output_schema(schema: pa.Schema) -> pa.Schema:
    """The schema of a queue's output files: ``schema``, the source columns, ``_delivery``."""
    return pa.schema([*schema, *SOURCE_FIELDS, DELIVERY_FIELD])


def check_positive_ints(owner: str, **values: Any) -> None:
    """Raises :class:`ShuffleOptionError` naming the first of ``values`` that is not an
    int >= 1."""
    for name, value in values.items():
        if not isinstance(value, int) or value < 1:
            raise ShuffleOptionError(f"{owner}: {name} must be a positive int, got {value!r}")


def work_topic(topic: str) -> str:
    """The work topic that feeds ``topic`` to share groups: a shuffle's committed frames, or
    a plain topic's records, one work item each."""
    return topic + WORK_TOPIC_SUFFIX


# Where a queue's consumers record the work items they settled: ``<topic>.queue.done``.
DONE_TOPIC_SUFFIX = WORK_TOPIC_SUFFIX + ".done"


def done_topic(topic: str) -> str:
    """The topic where the consumers of ``topic``'s queue record, per share group, the work
    items they settled (one record per batch, written before the batch is acknowledged)."""
    return topic + DONE_TOPIC_SUFFIX


def done_value(offsets: Iterable[int]) -> bytes:
    """A done record's value: the work-topic offsets a batch settled, as ``[start, end)``
    ranges."""
    return json.dumps({"o": [list(r) for r in contiguous(list(offsets))]}).encode()


def done_ranges(value: bytes | None) -> list[tuple[int, int]]:
    """The ``[start, end)`` ranges of work-topic offsets a done record names; none for a
    record that is not one."""
    try:
        return [(int(a), int(b)) for a, b in json.loads(value or b"")["o"]]
    except (ValueError, KeyError, TypeError):
        return []


# The feeder's transactional id is this and its work topic's name, so that a grant on a
# topic prefix can cover the feeders of every work topic under it.
FEEDER_ID_PREFIX = "kafka-shuffle-feeder."


def feeder_id(work: str) -> str:
    """The ``transactional.id`` of the feeder of work topic ``work`` (one per work topic: a
    newer feeder fences an older one)."""
    return FEEDER_ID_PREFIX + work


@dataclass(frozen=True)
class WorkItem:
    """One record of the source topic: of a shuffle's data topic, fed once its run committed
    (``run_id`` is the run's), or of a plain topic (``run_id`` is empty)."""

    partition: int
    offset: int
    run_id: str

    def to_json(self) -> str:
        return json.dumps({"p": self.partition, "o": self.offset, "run": self.run_id})

    @classmethod
    def from_json(cls, text: str | bytes) -> WorkItem:
        d = json.loads(text)
        return cls(int(d["p"]), int(d["o"]), str(d["run"]))


def fed_run(key: bytes | None) -> str | None:
    """The run id a work-topic record with ``key`` closes the feeding of; None for a work
    item (or any other record)."""
    text = (key or b"").decode(errors="replace")
    return text[len(FED_PREFIX) :] if text.startswith(FED_PREFIX) else None


def work_items(commit: Commit) -> list[WorkItem]:
    """Every offset a committed run occupies, partition by partition.

    The offsets between a run's first and last frame in a partition also hold its WATERMARK
    and END frames and the frames of attempts that lost; consumers recognise and skip those
    (their frame headers say so), so the feeder needs only the commit record, never the data.
    """
    return [
        WorkItem(p, o, commit.run_id)
        for p, r in sorted(commit.partitions.items())
        for o in range(r.first, r.last + 1)
    ]


def record_items(partition: int, start: int, end: int) -> list[WorkItem]:
    """One work item per offset of a plain topic's ``partition`` in ``[start, end)``.

    An offset that holds no record (a transaction marker, a compacted record) is fed too;
    the consumer finds nothing there and acknowledges the item as skipped.
    """
    return [WorkItem(partition, o, "") for o in range(start, end)]


def fed_positions(markers: Iterable[tuple[bytes | None, bytes | None]]) -> dict[int, int]:
    """The next offset to feed per source partition, from a work topic's records (key,
    value) in offset order: the last ``fed/@<partition>`` record of each partition wins."""
    out: dict[int, int] = {}
    prefix = PLAIN_FED_PREFIX.encode()
    for key, value in markers:
        if key is not None and key.startswith(prefix) and value is not None:
            out[int(key[len(prefix) :])] = int(value)
    return out


def feed_range(fed: int | None, low: int, high: int, start: str, limit: int) -> tuple[int, int]:
    """The offsets ``[first, end)`` of one source partition to feed now.

    ``fed`` is the partition's next offset to feed (None before its first feeding, which
    begins at the partition's ``low`` end for ``start="earliest"`` or its ``high`` end for
    ``"latest"``); records already deleted by retention are skipped; at most ``limit``.
    """
    first = fed if fed is not None else (low if start == "earliest" else high)
    first = min(max(first, low), high)
    return first, min(high, first + limit)


def unfed(log: ShuffleLog, fed: set[str]) -> list[Commit]:
    """The committed runs, in log order, that are not in the work topic yet (nor expired)."""
    return [c for c in log.commits if c.run_id not in fed and c.run_id not in log.expired]


@dataclass(frozen=True)
class QueueBacklog:
    """What a queue has left to do for one share group, from the queue's own bookkeeping:
    the work topic (what was fed), its done topic (what the group's consumers settled) and,
    for a shuffle, its commit log.

    Two stages, each in runs, rows and records:

    - *unfed*: committed runs of a shuffle not in the work topic yet (a ``process_queue`` or
      ``feed_queue`` feeds them), in runs, their rows and the records (offsets) they
      occupy; for a plain topic, its records not fed yet (a record is a row; no runs).
    - *pending*: work items in the work topic the group has not settled (accepted,
      rejected or skipped): records are items; runs are the runs with an item not settled,
      and rows all the rows of those runs (a run's rows are not counted item by item).

    A record the group released stays pending until a later delivery settles it; one whose
    settling is recorded but whose acknowledgement the broker then refused (its lock had
    expired) counts as settled, since it is delivered again and settled then. Items that
    retention removed from the work topic are not counted.

    Example::

        backlog = queue_backlog("events.by_user", "scorers", kafka=conf)
        backlog.records, backlog.pending_records, backlog.unfed_runs
    """

    topic: str
    group: str
    unfed_runs: int = 0
    unfed_rows: int = 0
    unfed_records: int = 0
    pending_runs: int = 0
    pending_rows: int = 0
    pending_records: int = 0
    fed_records: int = 0  # work items the work topic holds, settled or not

    @property
    def runs(self) -> int:
        """Runs not processed yet: unfed and pending."""
        return self.unfed_runs + self.pending_runs

    @property
    def rows(self) -> int:
        """Rows not processed yet: unfed and pending."""
        return self.unfed_rows + self.pending_rows

    @property
    def records(self) -> int:
        """Records (work items) not processed yet: unfed and pending."""
        return self.unfed_records + self.pending_records


def _merged(ranges: Iterable[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """``[start, end)`` ranges merged into sorted, disjoint ones, as arrays of starts and
    ends."""
    starts: list[int] = []
    ends: list[int] = []
    for a, b in sorted(r for r in ranges if r[1] > r[0]):
        if ends and a <= ends[-1]:
            ends[-1] = max(ends[-1], b)
        else:
            starts.append(a)
            ends.append(b)
    return np.asarray(starts, np.int64), np.asarray(ends, np.int64)


def queue_backlog_of(
    topic: str,
    group: str,
    work: Iterable[tuple[int, bytes | None, bytes | None]],
    settled: Iterable[tuple[int, int]],
    *,
    log: ShuffleLog | None = None,
    source_ends: Mapping[int, tuple[int, int]] | None = None,
) -> QueueBacklog:
    """A queue's :class:`QueueBacklog` for ``group``. Pure.

    Args:
        work: the work topic's records as (offset, key, value), read ``read_committed``.
        settled: the ``[start, end)`` work-topic offsets the group's done records name.
        log: a shuffle's commit log (a shuffle's queue); None for a plain topic.
        source_ends: a plain topic's (low, high) offsets per partition; None for a shuffle.
    """
    fed_runs: set[str] = set()
    positions: dict[int, int] = {}
    offsets: list[int] = []
    owners: list[str] = []
    plain_prefix, prefix = PLAIN_FED_PREFIX.encode(), FED_PREFIX.encode()
    for offset, key, value in work:
        if key is not None and key.startswith(plain_prefix):
            if value is not None:
                positions[int(key[len(plain_prefix) :])] = int(value)
        elif key is not None and key.startswith(prefix):
            fed_runs.add(key[len(prefix) :].decode(errors="replace"))
        else:
            offsets.append(offset)
            owners.append((key or b"").decode(errors="replace"))
    starts, ends = _merged(settled)
    items = np.asarray(offsets, np.int64)
    at = np.searchsorted(starts, items, side="right") - 1
    if len(starts):
        done = (at >= 0) & (items < ends[np.maximum(at, 0)])
    else:
        done = np.zeros(len(items), bool)
    pending = np.flatnonzero(~done)
    backlog: dict[str, int] = {
        "pending_records": len(pending),
        "fed_records": len(items),
    }
    if log is not None:
        by_run = {c.run_id: c for c in log.commits}
        runs = {owners[i] for i in pending.tolist()}
        waiting = unfed(log, fed_runs)
        backlog.update(
            pending_runs=len(runs),
            pending_rows=sum(by_run[r].rows for r in runs if r in by_run),
            unfed_runs=len(waiting),
            unfed_rows=sum(c.rows for c in waiting),
            unfed_records=sum(r.last - r.first + 1 for c in waiting for r in c.partitions.values()),
        )
    else:
        behind = sum(
            high - min(max(positions.get(p, low), low), high)
            for p, (low, high) in (source_ends or {}).items()
        )
        backlog.update(pending_rows=len(pending), unfed_records=behind, unfed_rows=behind)
    return QueueBacklog(topic, group, **backlog)


@dataclass(frozen=True)
class DeliveryPolicy:
    """What happens to a record that fails or stalls: how long a delivery may take, how many
    deliveries it gets, and where it goes after the last one.

    Attributes:
        max_deliveries: deliveries per record; a record whose units still fail on this
            delivery is dead-lettered.
        dead_letter_topic: where such a record goes (created if missing). Without one, such
            a record stops the run instead (it is released, not lost).
        lock_seconds: the share group's record lock (``share.record.lock.duration.ms``): how
            long a batch may take before its records are delivered to another consumer.

    Example::

        DeliveryPolicy(max_deliveries=5, dead_letter_topic="events.dlq", lock_seconds=60)
    """

    max_deliveries: int = 3
    dead_letter_topic: str | None = None
    lock_seconds: float = 30.0

    def __post_init__(self) -> None:
        check_positive_ints("DeliveryPolicy", max_deliveries=self.max_deliveries)
        if self.dead_letter_topic is not None and (
            not isinstance(self.dead_letter_topic, str) or not self.dead_letter_topic
        ):
            raise ShuffleOptionError(
                "DeliveryPolicy: dead_letter_topic must be a topic name or None, got "
                f"{self.dead_letter_topic!r}"
            )
        if not isinstance(self.lock_seconds, (int, float)) or self.lock_seconds <= 0:
            raise ShuffleOptionError(
                f"DeliveryPolicy: lock_seconds must be > 0, got {self.lock_seconds!r}"
            )


@dataclass(frozen=True)
class QueueScale:
    """How many consumers a queue runs, and how much each takes at a time.

    Attributes:
        tasks: Spark tasks; tasks beyond the free cores wait for one.
        consumers_per_task: share consumers (threads) per task, for an I/O-bound ``fn``.
        batch_size: records per poll (``max.poll.records``); a share group acquires whole
            producer batches, so a poll may return more.

    Example::

        QueueScale(tasks=4, consumers_per_task=2, batch_size=500)
    """

    tasks: int = 2
    consumers_per_task: int = 1
    batch_size: int = 100

    def __post_init__(self) -> None:
        check_positive_ints(
            "QueueScale",
            tasks=self.tasks,
            consumers_per_task=self.consumers_per_task,
            batch_size=self.batch_size,
        )


@dataclass(frozen=True)
class QueueStop:
    """When a queue's consumers stop: drained, or out of time.

    Attributes:
        idle_timeout: seconds without records on a consumer before it stops (drained).
        max_seconds: stop after this long even if records remain (they stay queued); None:
            only when drained.

    Example::

        QueueStop(idle_timeout=10, max_seconds=600)
    """

    idle_timeout: float = 5.0
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        if not _is_number(self.idle_timeout) or self.idle_timeout <= 0:
            raise ShuffleOptionError(
                f"QueueStop: idle_timeout must be > 0, got {self.idle_timeout!r}"
            )
        if self.max_seconds is not None and (
            not _is_number(self.max_seconds) or self.max_seconds <= 0
        ):
            raise ShuffleOptionError(
                f"QueueStop: max_seconds must be > 0 or None, got {self.max_seconds!r}"
            )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# Deliveries the broker gives a record beyond ``max_deliveries``: each is one lost to a
# crash (a consumer killed, a broker failing over) at or after the last attempt, and still
# leaves a delivery that dead-letters the record instead of the broker archiving it
# silently. Brokers take a group limit up to ``group.share.max.delivery.count.limit``
# (default 10).
SPARE_DELIVERIES = 3
BROKER_DELIVERY_COUNT_LIMIT = 10


def delivery_count_limit(max_deliveries: int) -> int:
    """The share group's ``share.delivery.count.limit`` for ``max_deliveries``: up to
    :data:`SPARE_DELIVERIES` above it within the broker's default bound, and never less than
    one above it."""
    spare = min(max_deliveries + SPARE_DELIVERIES, BROKER_DELIVERY_COUNT_LIMIT)
    return max(max_deliveries + 1, spare)


def share_group_configs(start: str, delivery: DeliveryPolicy) -> dict[str, str]:
    """The broker-side configs a queue sets on its share group."""
    return {
        "share.auto.offset.reset": start,
        # A shuffle's work topic is fed in transactions: a run's items are seen only once all
        # of them are there and the run committed.
        "share.isolation.level": "read_committed",
        "share.delivery.count.limit": str(delivery_count_limit(delivery.max_deliveries)),
        "share.record.lock.duration.ms": str(int(delivery.lock_seconds * 1000)),
    }


class Outcome(enum.Enum):
    ACCEPT = "accept"  # every unit of the record succeeded: its output is kept
    RELEASE = "release"  # a unit failed and attempts remain: delivered again later
    DEAD_LETTER = "dead_letter"  # a unit failed on the last attempt: to the dead-letter topic


def settle(delivery_count: int | None, failed: bool, max_deliveries: int) -> Outcome:
    """What happens to a record after its units ran.

    A record whose delivery count reached ``max_deliveries`` (or passed it, after a crash
    during its last attempt) and still fails is dead-lettered; an earlier failure releases it
    for another delivery.
    """
    if not failed:
        return Outcome.ACCEPT
    if (delivery_count or 1) >= max_deliveries:
        return Outcome.DEAD_LETTER
    return Outcome.RELEASE


@dataclass
class Narrowed(Generic[T]):
    """What :func:`narrow` found: results of the slices that ran, and the units that failed."""

    results: list[tuple[int, int, T]]  # (start, end, result), in unit order
    failures: list[tuple[int, BaseException]]  # (unit index, error)
    calls: int


def narrow(
    n: int,
    run: Callable[[int, int], T],
    fatal: tuple[type[BaseException], ...] = (),
) -> Narrowed[T]:
    """Runs ``run(start, end)`` over units ``[0, n)``, halving any slice that raises.

    A slice that raises is split in two until the failing units stand alone, so one bad unit
    costs about ``2 * log2(n)`` extra calls and never fails its neighbours. Exceptions of the
    ``fatal`` types are not narrowed: they propagate at once.
    """
    results: list[tuple[int, int, T]] = []
    failures: list[tuple[int, BaseException]] = []
    calls = 0
    stack = [(0, n)] if n > 0 else []
    while stack:
        start, end = stack.pop()
        calls += 1
        try:
            results.append((start, end, run(start, end)))
        except fatal:
            raise
        except Exception as exc:  # noqa: BLE001 - any error of the user's function
            if end - start == 1:
                failures.append((start, exc))
            else:
                mid = (start + end) // 2
                # Pushed right first so the left half runs first: results stay in order.
                stack.append((mid, end))
                stack.append((start, mid))
    results.sort(key=lambda r: r[0])
    failures.sort(key=lambda f: f[0])
    return Narrowed(results, failures, calls)


@dataclass
class QueueCounts:
    """What one consumer (or a sum of consumers) did with the records it received.

    Example::

        total = QueueCounts()
        for row in per_consumer_rows:
            total.add(QueueCounts.of(row))
        total.accepted, total.as_dict()
    """

    accepted: int = 0  # records whose output is written, acknowledged ACCEPT
    released: int = 0  # records handed back for another delivery after a failure
    rejected: int = 0  # records acknowledged REJECT after their failures were dead-lettered
    dead_lettered: int = 0  # messages written to the dead-letter topic
    # failed units an earlier delivery had written there already (its acknowledgement was
    # lost): not written again
    dead_lettered_before: int = 0
    skipped: int = 0  # records that are not work (see the queue module), acknowledged
    lock_lost: int = 0  # acknowledgements the broker refused: the record's lock had expired
    rows_in: int = 0  # rows given to the function (records, or rows of shuffle frames)
    rows_out: int = 0  # output rows written
    batches: int = 0  # polls that returned records

    @staticmethod
    def names() -> list[str]:
        """The counts' names (a subclass's own fields are not counts)."""
        return [f.name for f in fields(QueueCounts)]

    def as_dict(self) -> dict[str, int]:
        """The counts by name."""
        return {n: getattr(self, n) for n in self.names()}

    def add(self, other: QueueCounts) -> QueueCounts:
        """Adds ``other``'s counts to these (in place); returns self."""
        for n in self.names():
            setattr(self, n, getattr(self, n) + getattr(other, n))
        return self

    @staticmethod
    def of(values: Mapping[str, Any]) -> QueueCounts:
        """The counts in ``values`` (e.g. a row of per-consumer results); other keys are
        ignored."""
        return QueueCounts(**{n: int(values[n]) for n in QueueCounts.names()})


def error_text(exc: BaseException, limit: int = 2000) -> str:
    """``Type: message`` of an error, cut to ``limit`` characters for a Kafka header."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def missing_offsets(
    missing: Iterable[int], low: int, high: int, reached: int
) -> tuple[set[int], set[int]]:
    """Work items whose source offset a read did not return: which are gone for good, and
    which are not readable yet. ``low`` and ``high`` are the partition's log start and end
    as its leader reports them after the read; ``reached`` the highest offset the reads
    returned (-1: none).

    Gone: below the log start (deleted by retention), or below the end and passed over by the
    read (a transaction marker, a compacted record). Not readable yet: at or past the end, or
    not reached: a read that stopped early (a new leader whose high watermark has not caught
    up yet reports the partition's end too soon). Those are released, never acknowledged as
    done, so a record is not lost to a read that ended early.
    """
    gone: set[int] = set()
    later: set[int] = set()
    for o in missing:
        if o < low or (o < high and o < reached):
            gone.add(o)
        else:
            later.add(o)
    return gone, later


def contiguous(offsets: Sequence[int], gap: int = 0) -> list[tuple[int, int]]:
    """Sorted, distinct offsets as ``[start, end)`` ranges of consecutive values; with
    ``gap``, ranges at most ``gap`` offsets apart are read as one (one fetch that skips a few
    records costs less than a round trip per range)."""
    out: list[tuple[int, int]] = []
    for o in sorted(set(offsets)):
        if out and out[-1][1] + gap >= o:
            out[-1] = (out[-1][0], o + 1)
        else:
            out.append((o, o + 1))
    return out


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def row_json(row: dict[str, Any]) -> bytes:
    """A row as JSON for a dead-letter message; values JSON cannot hold become strings."""
    return json.dumps({k: _jsonable(v) for k, v in row.items()}, sort_keys=False).encode()


def _to_table(out: Any, what: str) -> pa.Table:
    if out is None:
        return pa.table({})
    if isinstance(out, pa.RecordBatch):
        return pa.Table.from_batches([out])
    if isinstance(out, pa.Table):
        return out
    # A DataFrame can only come from a loaded pandas: no import needed to recognise one.
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(out, pd.DataFrame):
        return pa.Table.from_pandas(out, preserve_index=False)
    raise QueueSchemaError(
        f"{what}: fn returned {type(out).__name__}; expected a pyarrow Table or RecordBatch "
        "or a pandas DataFrame (or None for no rows)"
    )


def conform(out: Any, schema: pa.Schema, given: pa.Table, what: str) -> pa.Table:
    """``fn``'s output as ``schema`` plus the source columns, or a :class:`QueueSchemaError`.

    Rows keep the ``_topic``/``_partition``/``_offset`` they return; when ``fn`` drops those
    columns but returns one row per input row, they are taken from the input in order.
    """
    table = _to_table(out, what)
    if table.num_rows == 0 and table.num_columns == 0:
        return pa.Table.from_batches([], schema=pa.schema(list(schema) + SOURCE_FIELDS))
    columns = []
    for f in schema:
        if f.name not in table.column_names:
            raise QueueSchemaError(
                f"{what}: fn returned no column {f.name!r} (type {f.type}); it returned "
                f"{table.column_names}, the schema is {schema.names}"
            )
        col = table.column(f.name)
        try:
            columns.append(col.cast(f.type) if col.type != f.type else col)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise QueueSchemaError(
                f"{what}: fn returned column {f.name!r} as {col.type}, which cannot be "
                f"cast to the schema's {f.type}: {exc}"
            ) from None
    names = [f.name for f in SOURCE_FIELDS]
    if all(n in table.column_names for n in names):
        for f in SOURCE_FIELDS:
            columns.append(table.column(f.name).cast(f.type))
    elif table.num_rows == given.num_rows:
        columns.extend(given.column(n) for n in names)
    else:
        raise QueueSchemaError(
            f"{what}: fn returned {table.num_rows} rows for {given.num_rows} input rows "
            f"without the columns {names}; return those columns (they are in fn's input) so "
            "each output row names its source record"
        )
    return pa.Table.from_arrays(columns, schema=pa.schema(list(schema) + SOURCE_FIELDS))


def record_coords(table: pa.Table, owner: np.ndarray) -> dict[Coords, int]:
    """Each source record's coordinates -> the message it came in, from the units of a batch
    (``owner``: the message index of each unit, ascending)."""
    if table.num_rows == 0:
        return {}
    messages, first = np.unique(owner, return_index=True)
    picked = table.select(SOURCE_NAMES).take(pa.array(first))
    coords = zip(*(picked.column(n).to_pylist() for n in SOURCE_NAMES), strict=True)
    return {c: int(i) for c, i in zip(coords, messages.tolist(), strict=True)}


def rows_to_keep(
    outputs: Iterable[pa.Table],
    records: Mapping[Coords, int],
    keep: np.ndarray,
    deliveries: np.ndarray,
    schema: pa.Schema,
    what: str,
) -> pa.Table | None:
    """The output rows of a batch to write, as :func:`output_schema` of ``schema``; None if
    there are none.

    Args:
        outputs: fn's conformed outputs (:func:`conform`), each row naming its source record.
        records: source record coordinates -> message index (:func:`record_coords`).
        keep: per message, whether its rows are kept (accepted or dead-lettered records:
            the rows of a released record are written by its next delivery).
        deliveries: per message, its delivery count, written with each row.
        what: names the consumer in errors.
    """
    kept = []
    for out in outputs:
        if out.num_rows == 0:
            continue
        owners = []
        for c in zip(*(out.column(n).to_pylist() for n in SOURCE_NAMES), strict=True):
            i = records.get(c)
            if i is None:
                raise QueueSchemaError(
                    f"{what}: fn returned a row for topic {c[0]!r} partition {c[1]} offset "
                    f"{c[2]}, which is not in its input"
                )
            owners.append(i)
        owners_np = np.asarray(owners, np.int64)
        mask = keep[owners_np]
        if not mask.any():
            continue
        chosen = out.filter(pa.array(mask))
        delivery = pa.array(deliveries[owners_np[mask]].astype(np.int32), pa.int32())
        kept.append(chosen.append_column(DELIVERY_FIELD, delivery))
    return pa.concat_tables(kept).cast(output_schema(schema)) if kept else None


def dead_letter_headers(
    exc: BaseException, source: Coords, delivery: int, group: str, row: int = 0
) -> list[tuple[str, bytes]]:
    """The ``queue.*`` headers of a dead-letter message: what failed, where (the source
    record, and the row of it: a shuffle's record holds many), on which delivery, in which
    group."""
    topic, partition, offset = source
    return [
        ("queue.error", error_text(exc).encode()),
        ("queue.source.topic", str(topic).encode()),
        ("queue.source.partition", str(partition).encode()),
        ("queue.source.offset", str(offset).encode()),
        ("queue.source.row", str(row).encode()),
        ("queue.delivery.count", str(delivery).encode()),
        ("queue.group", group.encode()),
    ]


# What a dead-letter message stands for: (group, topic, partition, offset, row).
DeadLetterId = tuple[str, str, int, int, int]


def dead_letter_id(headers: Iterable[tuple[str, bytes | None]] | None) -> DeadLetterId | None:
    """The unit a dead-letter message stands for, from its ``queue.*`` headers
    (:func:`dead_letter_headers`); None for a message that is not one of ours."""
    h = {k: v for k, v in (headers or []) if k.startswith("queue.") and v is not None}
    try:
        return (
            h["queue.group"].decode(),
            h["queue.source.topic"].decode(),
            int(h["queue.source.partition"]),
            int(h["queue.source.offset"]),
            int(h.get("queue.source.row", b"0")),
        )
    except (KeyError, ValueError, UnicodeDecodeError):
        return None


def may_be_dead_lettered(delivery_count: int | None, max_deliveries: int) -> bool:
    """Whether an earlier delivery of a record may already have dead-lettered it: it is
    delivered past its last attempt, so that attempt's acknowledgement was lost (a broker or
    the consumer died after the dead-letter write)."""
    return (delivery_count or 1) > max_deliveries


class QueueStopError(Exception):
    """Stops every consumer of a task (the records in hand are released first): a record
    failed its last delivery without a dead-letter topic, a dead-letter write failed, or the
    group could not be polled. No retry would help."""


def job_error(exc: BaseException, topic: str, group: str) -> BaseException:
    """The engine's error for a failed queue job, from the Python error inside Spark's."""
    text = str(exc)
    for cls in (
        QueueSchemaError,
        QueueGroupError,
        ShuffleTopicNotFoundError,
        ShuffleAuthorizationError,
        ShuffleConnectionError,
        ShuffleSchemaError,
        ShuffleWriteError,
        ShuffleOptionError,
        QueueStopError,
    ):
        marker = f"{cls.__name__}: "
        if marker in text:
            detail = text.split(marker, 1)[1].strip().splitlines()[0]
            kind = ShuffleError if cls is QueueStopError else cls
            return kind(f"process_queue on topic {topic!r} group {group!r}: {detail}")
    # The Python error inside Spark's: the last "Type: message" line of its traceback.
    lines = [ln for ln in text.splitlines() if re.match(r"^[A-Za-z_][\w.]*(Error|Exception): ", ln)]
    detail = lines[-1] if lines else (text.splitlines()[0] if text else type(exc).__name__)
    return ShuffleError(f"process_queue on topic {topic!r} group {group!r} failed: {detail}")
