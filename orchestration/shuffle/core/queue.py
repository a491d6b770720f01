"""Pure logic of queue mode: work items, narrowing a failing batch, settling each record.

Nothing here talks to Kafka or Spark; :mod:`orchestration.shuffle.queue.driver` does, and calls
these functions to decide what it does.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Generic, TypeVar

import pyarrow as pa

from orchestration.shuffle.core.commitlog import Commit, ShuffleLog
from orchestration.shuffle.errors import QueueSchemaError

WORK_TOPIC_SUFFIX = ".queue"
# Keys of the records in a work topic: a work item's key is its run id; the record that
# closes a run's feeding transaction is keyed ``fed/<run id>``.
FED_PREFIX = "fed/"

T = TypeVar("T")

# Every unit given to fn, and every output row, names its source record with these.
SOURCE_FIELDS = [
    pa.field("_topic", pa.string()),
    pa.field("_partition", pa.int32()),
    pa.field("_offset", pa.int64()),
]


def work_topic(topic: str) -> str:
    """The work topic that feeds the committed frames of shuffle ``topic`` to share groups."""
    return topic + WORK_TOPIC_SUFFIX


@dataclass(frozen=True)
class WorkItem:
    """One record of a shuffle's data topic, fed to the queue once its run committed."""

    partition: int
    offset: int
    run_id: str

    def to_json(self) -> str:
        return json.dumps({"p": self.partition, "o": self.offset, "run": self.run_id})

    @classmethod
    def from_json(cls, text: str | bytes) -> WorkItem:
        d = json.loads(text)
        return cls(int(d["p"]), int(d["o"]), str(d["run"]))


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


def unfed(log: ShuffleLog, fed: set[str]) -> list[Commit]:
    """The committed runs, in log order, that are not in the work topic yet (nor expired)."""
    return [c for c in log.commits if c.run_id not in fed and c.run_id not in log.expired]


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
    """What one consumer (or a sum of consumers) did with the records it received."""

    accepted: int = 0  # records whose output is written, acknowledged ACCEPT
    released: int = 0  # records handed back for another delivery after a failure
    rejected: int = 0  # records acknowledged REJECT after their failures were dead-lettered
    dead_lettered: int = 0  # messages written to the dead-letter topic
    skipped: int = 0  # records that are not work (see the queue module), acknowledged
    lock_lost: int = 0  # acknowledgements the broker refused: the record's lock had expired
    rows_in: int = 0  # rows given to the function (records, or rows of shuffle frames)
    rows_out: int = 0  # output rows written
    batches: int = 0  # polls that returned records

    def add(self, other: QueueCounts) -> QueueCounts:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


def error_text(exc: BaseException, limit: int = 2000) -> str:
    """``Type: message`` of an error, cut to ``limit`` characters for a Kafka header."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def contiguous(offsets: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted, distinct offsets as ``[start, end)`` ranges of consecutive values."""
    out: list[tuple[int, int]] = []
    for o in sorted(set(offsets)):
        if out and out[-1][1] == o:
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
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a dependency
        pd = None
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
