"""Reading a shuffle without Spark: its committed rows as a ``pyarrow.Table``
(:func:`read_table`), as record batches (:func:`read_batches`) or key by key
(:func:`iter_keys`), for consumers that pandas, Polars or DuckDB serve (a window of a few
thousand rows costs milliseconds here, against seconds of a Spark session's start).

A read here is planned as every read is (:func:`~orchestration.shuffle.core.planner.plan_read`
through :func:`~orchestration.shuffle.kafka.planner.plan_shuffle`: committed runs only, the
latest run of each window, expired windows refused naming the run, when and why, the data
topic's partitions and offsets checked) and each Kafka partition is read as a Spark task of
the ``kafka-shuffle`` source reads it (:class:`~orchestration.shuffle.kafka.reader.RowReader`:
committed attempts only, END counts checked, a bad frame refused naming its topic,
partition and offset), with the same errors. The rows and their schema are those of
``read_shuffle(spark, ...).toArrow()`` for the same read. Nothing here imports pyspark.

Kafka partitions are fetched in parallel, by threads that each have a consumer of their own
(librdkafka fetches, and Arrow decodes, without holding the GIL).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer

from orchestration.shuffle.core.commitlog import Layout, ShuffleLog, commit_topic
from orchestration.shuffle.core.perkey import sort_by_key
from orchestration.shuffle.core.planner import (
    PartitionRead,
    ReadOptions,
    ReadPlan,
    check_key_groups,
    estimated_rows,
    narrow_reads,
    split_passes,
)
from orchestration.shuffle.errors import ShuffleOptionError
from orchestration.shuffle.kafka.client import KafkaClient, KafkaConfig
from orchestration.shuffle.kafka.planner import plan_shuffle
from orchestration.shuffle.kafka.reader import RowReader, fetch_bytes, in_threads, selected_schema

# Threads (each with a consumer) a read uses at most unless told; fewer for a small read.
MAX_THREADS = 8
# Rows a thread is given at least (by the commit records), so that a small read does not
# pay for consumers it does not need: one consumer reads a 1,000-row window's partitions one
# after the other faster than eight consumers can connect.
THREAD_ROWS = 250_000
# Rows one pass of iter_keys holds (a key group is never split, so one may hold more), and
# the passes it reads at once unless told: it holds about twice as many (those read and
# those waiting), so about 4M rows at most by default.
PASS_ROWS = 500_000
KEY_THREADS = 4


@dataclass(frozen=True)
class _Read:
    """A planned read: the plan, the partition reads to fetch, and how rows are shaped."""

    topic: str
    kafka: KafkaClient
    plan: ReadPlan
    reads: tuple[PartitionRead, ...]
    options: ReadOptions
    schema: pa.Schema  # what the caller gets, in its column order

    @property
    def layout(self) -> Layout:
        return self.plan.layout

    def row_reader(self, decoded: Iterable[str]) -> RowReader:
        """A reader of the rows that decodes the layout's columns among ``decoded`` only."""
        rows = RowReader(self.topic, self.layout, self.options.row_options())
        names = set(decoded)
        if not set(self.layout.schema.names) <= names:
            rows.use_columns(names)
        return rows

    @property
    def fetch_bytes(self) -> int:
        """The consumers' fetch size per partition: small for a small read."""
        return fetch_bytes(sum(c.bytes for c in self.plan.commits), len(self.reads))

    def threads(self, asked: int | None, items: int, most: int = MAX_THREADS) -> int:
        """Threads for ``items`` work items: ``asked``, or by the rows the read holds (one
        per ``THREAD_ROWS``), up to ``most``."""
        if asked is None:
            m, n = self.layout.max_parallelism, self.layout.num_partitions
            rows = sum(estimated_rows(r, m, n) for r in self.reads)
            asked = min(most, max(1, math.ceil(rows / THREAD_ROWS)))
        return max(1, min(asked, items))


def _planned(
    topic: str,
    kafka: KafkaConfig,
    *,
    windows: Iterable[str] | None,
    runs: Iterable[str] | None,
    event_time_range: tuple[dt.datetime | None, dt.datetime | None] | None,
    key_groups: tuple[int, int] | None,
    columns: Sequence[str] | None,
    with_metadata: bool,
    log: ShuffleLog | None,
    threads: int | None,
) -> _Read:
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, int) or threads <= 0
    ):
        raise ShuffleOptionError(
            f"shuffle {topic!r}: threads must be a positive integer or None, got {threads!r}"
        )
    client = KafkaClient.of(kafka)
    # One split per Kafka partition: each is fetched whole, by one thread.
    options = ReadOptions.select(
        windows=windows, runs=runs, event_time_range=event_time_range, parallelism=None
    )
    options = replace(options, with_metadata=bool(with_metadata))
    if log is None:
        # A refused client (authentication, TLS) is told so at once, not after a timeout.
        client.check_reachable(commit_topic(topic))
    plan = plan_shuffle(client, topic, options, log)
    schema = selected_schema(topic, plan.layout, options.with_metadata, columns)
    reads: list[PartitionRead] = [r for s in plan.splits for r in s.reads]
    if key_groups is not None:
        start, end = check_key_groups(topic, key_groups, plan.layout.max_parallelism)
        reads = narrow_reads(reads, start, end)
    # A partition no run of the read wrote to holds nothing to fetch.
    reads = [r for r in reads if r.segments]
    return _Read(topic, client, plan, tuple(reads), options, schema)


@dataclass(frozen=True)
class ReadProgress:
    """How far a read without Spark has got: what :func:`read_table` and
    :func:`read_batches` hand their ``progress`` callback after each batch decoded and each
    Kafka partition finished, in the caller's thread.

    Attributes:
        topic: the shuffle read.
        windows: the windows of the runs read.
        runs: the committed runs read.
        partitions: the Kafka partitions to fetch (those the runs wrote to).
        rows_committed: the rows the runs committed (a ``key_groups`` or event-time
            selection reads fewer).
        partitions_done: the partitions fetched whole so far.
        rows: the rows decoded so far.
        bytes: the Arrow size of those rows.

    Example::

        read_table("events.by_user", kafka=conf, progress=lambda p: print(
            f"{p.partitions_done}/{p.partitions} partitions, {p.rows} rows"))
    """

    topic: str
    windows: int
    runs: int
    partitions: int
    rows_committed: int
    partitions_done: int = 0
    rows: int = 0
    bytes: int = 0


def _partition_batches(
    read: _Read,
    threads: int | None,
    progress: Callable[[ReadProgress], None] | None = None,
) -> Generator[tuple[int, pa.RecordBatch], None, None]:
    """Each Kafka partition's rows as ``(partition, batch)``, partitions fetched at once;
    ``progress`` is told after each batch and each partition done."""
    rows = read.row_reader(read.schema.names)
    names = read.schema.names
    reshape = rows.schema.names != names  # columns reordered, or event time only filtered

    def work(c: Consumer, pr: PartitionRead) -> Iterator[tuple[int, pa.RecordBatch | None]]:
        for batch in rows.read_partition(c, pr):
            yield pr.partition, batch.select(names) if reshape else batch
        yield pr.partition, None  # the partition is done

    n = read.threads(threads, len(read.reads))
    pairs = in_threads(read.kafka, f"read-{read.topic}", read.reads, n, work, read.fetch_bytes)
    commits = read.plan.commits
    state = ReadProgress(
        read.topic,
        windows=len({c.window for c in commits}),
        runs=len(commits),
        partitions=len(read.reads),
        rows_committed=sum(c.rows for c in commits),
    )
    with contextlib.closing(pairs):
        for partition, batch in pairs:
            if batch is None:
                state = replace(state, partitions_done=state.partitions_done + 1)
            else:
                state = replace(state, rows=state.rows + batch.num_rows)
                state = replace(state, bytes=state.bytes + batch.nbytes)
            if progress is not None:
                progress(state)
            if batch is not None:
                yield partition, batch


def read_table(
    topic: str,
    *,
    kafka: KafkaConfig,
    windows: Iterable[str] | None = None,
    runs: Iterable[str] | None = None,
    event_time_range: tuple[dt.datetime | None, dt.datetime | None] | None = None,
    key_groups: tuple[int, int] | None = None,
    columns: Sequence[str] | None = None,
    with_metadata: bool = False,
    log: ShuffleLog | None = None,
    threads: int | None = None,
    progress: Callable[[ReadProgress], None] | None = None,
) -> pa.Table:
    """Reads committed runs of a shuffle into a ``pyarrow.Table``, without Spark.

    The same read as ``read_shuffle(spark, topic, ...).toArrow()`` (its rows, column names
    and types), by the same rules and with the same errors, in the order a Spark read with
    one split per partition gives them: partition by partition, in offset order.

    Example::

        table = read_table("flights.by_tailnum", kafka=conf, windows=["2013-01-01"])
        frame = table.to_pandas()                     # or polars.from_arrow(table)

    Args:
        topic: The shuffle's data topic.
        kafka: A :class:`~orchestration.shuffle.kafka.client.KafkaClient`, or Kafka
            settings (``bootstrap.servers`` is required).
        windows: Only these windows (the latest committed run of each); each must have one.
        runs: Only these runs (even superseded ones); each must exist.
        event_time_range: ``(start, end)`` datetimes: only rows with an event time in
            ``[start, end)`` (naive is taken as UTC; either may be None).
        key_groups: ``(start, end)``: only the rows of key groups ``start <= g < end``;
            only the partitions that hold them are fetched (see
            :func:`~orchestration.shuffle.key_group_range`).
        columns: Only these columns, in this order (as ``select(*columns)``); by default
            every column. The others are not decompressed.
        with_metadata: Add ``_partition``, ``_key_group``, ``_run_id``, ``_offset``,
            ``_window`` (and allow them in ``columns``).
        log: The shuffle's commit log if the caller has just read it; by default it is read
            here.
        threads: Kafka partitions fetched at once, each by a thread with a consumer of its
            own; by default by the read's rows (from the commit records), up to 8.
        progress: Called with a :class:`ReadProgress` after each batch decoded and each
            partition fetched whole, in this thread (to log how far a long read has got).

    Raises:
        ShuffleTopicNotFoundError: The shuffle does not exist.
        ShuffleWindowNotFoundError: A window or run named has no committed run; for one
            that retention expired, the message says which run, when and why.
        ShuffleFormatError: A frame that cannot be read, or counts that do not match the
            producer's, naming the topic, partition and offset.
        ShuffleOptionError: An unknown column, a bad ``key_groups`` or ``threads``, an
            event-time range on a shuffle without an event-time column.
    """
    read = _planned(
        topic, kafka, windows=windows, runs=runs, event_time_range=event_time_range,
        key_groups=key_groups, columns=columns, with_metadata=with_metadata, log=log,
        threads=threads,
    )  # fmt: skip
    by_partition: dict[int, list[pa.RecordBatch]] = {}
    for partition, batch in _partition_batches(read, threads, progress):
        by_partition.setdefault(partition, []).append(batch)
    batches = [b for p in sorted(by_partition) for b in by_partition[p]]
    table = pa.Table.from_batches(batches, schema=read.schema)
    return with_runs_read(table, read.plan.commits)


# Where a table read here names the committed runs it holds (schema metadata, a JSON object
# of run id -> window and committed rows), and a pandas frame loaded by the IO manager too
# (``DataFrame.attrs``); :func:`runs_read` reads it back.
RUNS_READ_KEY = "kafka_shuffle.runs"


def with_runs_read(table: pa.Table, commits: Iterable[Any]) -> pa.Table:
    """``table`` with the runs of ``commits`` recorded in its schema metadata."""
    runs = {c.run_id: {"window": c.window, "rows": c.rows} for c in commits}
    metadata = dict(table.schema.metadata or {})
    metadata[RUNS_READ_KEY.encode()] = json.dumps(runs).encode()
    return table.replace_schema_metadata(metadata)


def to_pandas(table: pa.Table) -> Any:
    """``table`` (of :func:`read_table`) as a pandas frame that still says which runs it
    holds (``DataFrame.attrs``, for :func:`runs_read`), as the shuffle IO manager loads an
    input annotated ``pandas.DataFrame``."""
    frame = table.to_pandas()
    frame.attrs[RUNS_READ_KEY] = runs_read(table)
    return frame


def runs_read(data: Any) -> dict[str, dict[str, Any]]:
    """The committed runs a table of :func:`read_table` (or a pandas frame the shuffle IO
    manager loaded) was read from: ``{run_id: {"window": ..., "rows": ...}}``, ``rows``
    being what the run committed (before any ``key_groups`` or event-time selection).

    Example::

        runs = runs_read(table)
        assert table.num_rows == sum(r["rows"] for r in runs.values())

    Raises:
        ShuffleOptionError: ``data`` carries no such record (it was not read so, or an
            operation since dropped it: pandas keeps ``attrs`` through some operations only).
    """
    if isinstance(data, pa.Table | pa.RecordBatch):
        raw = (data.schema.metadata or {}).get(RUNS_READ_KEY.encode())
    else:
        raw = getattr(data, "attrs", {}).get(RUNS_READ_KEY)
    if raw is None:
        raise ShuffleOptionError(
            f"this {type(data).__name__} does not say which shuffle runs it holds: "
            "only a table of read_table, or a pandas frame the shuffle IO manager loaded, does"
        )
    return json.loads(raw) if isinstance(raw, bytes | str) else dict(raw)


def read_batches(
    topic: str,
    *,
    kafka: KafkaConfig,
    windows: Iterable[str] | None = None,
    runs: Iterable[str] | None = None,
    event_time_range: tuple[dt.datetime | None, dt.datetime | None] | None = None,
    key_groups: tuple[int, int] | None = None,
    columns: Sequence[str] | None = None,
    with_metadata: bool = False,
    log: ShuffleLog | None = None,
    threads: int | None = None,
    progress: Callable[[ReadProgress], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Reads committed runs of a shuffle as ``pyarrow.RecordBatch``es, without Spark, holding
    about one batch (one frame's rows) per partition being fetched, however large the read.

    The read is planned here, so a window that has no committed run (or any other error of
    :func:`read_table`) is raised by this call; the frames are fetched as the batches are
    taken. Each batch holds rows of one Kafka partition; batches of different partitions
    come in the order they are decoded, those of one partition in offset order. Closing the
    iterator stops the fetching threads. The arguments are :func:`read_table`'s
    (``progress`` is called as the batches are taken).

    Example::

        for batch in read_batches("events.by_user", kafka=conf, windows=["2024-03-01"]):
            sink.write_batch(batch)
    """
    read = _planned(
        topic, kafka, windows=windows, runs=runs, event_time_range=event_time_range,
        key_groups=key_groups, columns=columns, with_metadata=with_metadata, log=log,
        threads=threads,
    )  # fmt: skip
    return _batches(_partition_batches(read, threads, progress))


def _batches(
    pairs: Generator[tuple[int, pa.RecordBatch], None, None],
) -> Iterator[pa.RecordBatch]:
    """The batches of ``pairs``; closing this closes ``pairs`` (which stops its threads)."""
    with contextlib.closing(pairs):
        for _, batch in pairs:
            yield batch


def iter_keys(
    topic: str,
    *,
    kafka: KafkaConfig,
    windows: Iterable[str] | None = None,
    runs: Iterable[str] | None = None,
    event_time_range: tuple[dt.datetime | None, dt.datetime | None] | None = None,
    key_groups: tuple[int, int] | None = None,
    columns: Sequence[str] | None = None,
    with_metadata: bool = False,
    order_by: Sequence[str] = (),
    pass_rows: int | None = None,
    log: ShuffleLog | None = None,
    threads: int | None = None,
) -> Iterator[tuple[tuple[Any, ...], pa.Table]]:
    """Every key of a shuffle read with all of its rows, one key at a time, without Spark:
    ``(key, table)``, ``key`` a tuple of the key columns' values (Python values, of the
    key's first row), ``table`` its rows.

    Keys are grouped exactly as Spark's ``groupBy`` groups them (null keys form one group,
    ``-0.0`` is ``0.0``, every NaN is one NaN: :func:`~orchestration.shuffle.core.perkey.
    group_ids`), as :func:`~orchestration.shuffle.apply_per_key` does. A key's rows are all
    in one Kafka partition, so each partition is read in passes over contiguous ranges of
    its key groups of about ``pass_rows`` rows (from the commit records), and each pass is
    grouped by key once read; a pass holds every row of its key groups, so one key group of
    more rows is held whole. Passes are read in parallel (``threads`` of them at once, 4 at
    most by default, and as many grouped and waiting to be taken); keys come in no
    particular order. The arguments not listed below are :func:`read_table`'s.

    Example::

        for (tailnum,), legs in iter_keys("flights.by_tailnum", kafka=conf,
                                          windows=["2013-01-01"], order_by=["sched_dep"]):
            plan_maintenance(tailnum, legs.to_pandas())

    Args:
        columns: The columns of each key's table, in this order (by default every column;
            the key columns are read whatever they are).
        order_by: Columns that order each key's rows (ascending, nulls first, NaN after
            every number, as Spark sorts); without it a key's rows keep their offset order.
        pass_rows: Rows one pass holds (default 500,000).
    """
    if pass_rows is not None and (
        isinstance(pass_rows, bool) or not isinstance(pass_rows, int) or pass_rows <= 0
    ):
        raise ShuffleOptionError(
            f"shuffle {topic!r}: pass_rows must be a positive integer, got {pass_rows!r}"
        )
    read = _planned(
        topic, kafka, windows=windows, runs=runs, event_time_range=event_time_range,
        key_groups=key_groups, columns=columns, with_metadata=with_metadata, log=log,
        threads=threads,
    )  # fmt: skip
    layout = read.layout
    keys = tuple(layout.key)
    order = tuple(order_by)
    missing = [c for c in order if c not in layout.schema.names]
    if missing or isinstance(order_by, str):
        raise ShuffleOptionError(
            f"shuffle {topic!r}: order_by must name columns of {layout.schema.names}, got "
            f"{order_by!r}"
        )
    rows = read.row_reader([*read.schema.names, *keys, *order])
    limit = PASS_ROWS if pass_rows is None else pass_rows
    passes = [
        piece
        for r in read.reads
        for piece in split_passes(r, layout.max_parallelism, layout.num_partitions, limit)
    ]

    def work(c: Consumer, piece: PartitionRead) -> Iterator[tuple[pa.Table, np.ndarray]]:
        table = pa.Table.from_batches(list(rows.read_partition(c, piece)), schema=rows.schema)
        if table.num_rows:
            yield sort_by_key(table, keys, order)

    n = read.threads(threads, len(passes), KEY_THREADS)
    grouped = in_threads(read.kafka, f"keys-{topic}", passes, n, work, read.fetch_bytes)
    return _keys(grouped, keys, read.schema.names)


def _keys(
    grouped: Iterator[tuple[pa.Table, np.ndarray]], keys: Sequence[str], names: list[str]
) -> Iterator[tuple[tuple[Any, ...], pa.Table]]:
    """Each key of each grouped pass, with its rows in ``names``."""
    for table, starts in grouped:
        firsts = table.select(list(keys)).take(pa.array(starts))
        values = zip(*(firsts.column(k).to_pylist() for k in keys), strict=True)
        rows = table.select(names)
        bounds = np.append(starts, table.num_rows).tolist()
        for key, s, e in zip(values, bounds[:-1], bounds[1:], strict=True):
            yield key, rows.slice(s, e - s)
