"""The commit log's index: what a process reading a long log for the first time fetches
instead of every record. No Kafka.

A commit log grows by a record per run; a year of hourly windows with re-runs is over 10,000
records, and a process that reads it for the first time (a Dagster run, a Spark job) would
fetch and parse each of them to read one window. The index is the log as compaction would
leave it at an offset (``through``): each key's last record, the first layout record beside
the last, records without a key; tombstones and what they delete left out. It is kept beside
the log, in the compacted topic ``<topic>__commits.index`` (:func:`index_topic`), as one Arrow
IPC file whose record batches group the records by window:

- batch 0: the records every read needs (the layout and its changes, records the engine
  cannot read, keys it does not write);
- batches 1 to ``buckets``: commit and expiry records, by a hash of their window;
- the last batch: runs without a window.

A read of some windows decodes batch 0 and their buckets only, and folds those records and
the log's records from ``through`` on (its tail): the same :class:`ShuffleLog`, for those
windows, as a fold of every record (held to it by ``tests/unit/test_logindex.py``). A read of
everything decodes every batch.

Example::

    index = build_index(previous, tail_records, through=1204)
    data = encode_index(index)
    opened = decode_index(data)
    records = opened.records(["2024-03-01"])      # (offset, key, value), in log order
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from orchestration.shuffle.core.commitlog import (
    _PARSE_ERRORS,
    COMMIT_PREFIX,
    EXPIRED_PREFIX,
    LAYOUT_KEY,
    Commit,
    Expired,
    commit_topic,
)
from orchestration.shuffle.errors import ShuffleFormatError

INDEX_TOPIC_SUFFIX = ".index"
# The index's own format, in its schema's metadata: a reader of another skips the index and
# reads the whole log.
INDEX_FORMAT = 1
# Window records per bucket, on average: a read of one window decodes about this many.
BUCKET_ROWS = 64
MAX_BUCKETS = 1024

_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("key", pa.string()),
        pa.field("value", pa.binary(), nullable=False),
        pa.field("window", pa.string()),
    ]
)
# A row's group: which batch holds it.
ALWAYS, WINDOWED, UNWINDOWED = 0, 1, 2


def index_topic(topic: str) -> str:
    """The index topic of the shuffle whose data topic is ``topic``."""
    return commit_topic(topic) + INDEX_TOPIC_SUFFIX


@dataclass(frozen=True)
class IndexRow:
    """One record the index keeps: where it is in the commit log, and its window (commit and
    expiry records that could be read; ``group`` says which batch holds it)."""

    offset: int
    key: str | None
    value: bytes
    window: str | None
    group: int

    @property
    def record(self) -> tuple[int, str | None, bytes]:
        return self.offset, self.key, self.value


def classify(key: str | None, value: bytes) -> tuple[str | None, int]:
    """A record's window and group: commit and expiry records that can be read go by their
    window; anything else (the layout, its changes, records the engine cannot read) is read
    by every read."""
    if key is None:
        return None, ALWAYS
    kind: type[Commit] | type[Expired] | None = (
        Commit
        if key.startswith(COMMIT_PREFIX)
        else Expired
        if key.startswith(EXPIRED_PREFIX)
        else None
    )
    if kind is None:
        return None, ALWAYS
    try:
        window = kind.from_json(value).window
    except _PARSE_ERRORS:
        return None, ALWAYS
    return window, (UNWINDOWED if window is None else WINDOWED)


@dataclass(frozen=True)
class LogIndex:
    """The records the commit log holds below ``through``, as compaction would leave them,
    in log order."""

    through: int
    rows: tuple[IndexRow, ...]

    @property
    def last(self) -> tuple[int, int] | None:
        """The kept record furthest in the log, as (offset, :func:`record_crc`): a reader
        checks that the log still holds it there (not a log deleted and made again)."""
        if not self.rows:
            return None
        r = self.rows[-1]
        return r.offset, record_crc(r.key, r.value)


def record_crc(key: str | bytes | None, value: bytes | None) -> int:
    """A checksum of a record's key and value (one a reader compares with the log's)."""
    k = key.encode() if isinstance(key, str) else (key or b"")
    return zlib.crc32(value or b"", zlib.crc32(k + b"\0"))


def build_index(
    previous: LogIndex | None,
    records: Iterable[tuple[int, str | None, bytes | None]],
    through: int,
) -> LogIndex:
    """The index of the log ``previous`` indexed followed by ``records`` ((offset, key,
    value) from ``previous.through`` on, in offset order; None values are tombstones), up to
    ``through`` (the offset after the last of them, or the log's end)."""
    keyed: dict[str, IndexRow] = {}
    first_layout: IndexRow | None = None
    unkeyed: list[IndexRow] = []

    def keep(row: IndexRow) -> None:
        nonlocal first_layout
        if row.key is None:
            unkeyed.append(row)
            return
        if row.key == LAYOUT_KEY and first_layout is None:
            first_layout = row
        keyed[row.key] = row

    for row in previous.rows if previous is not None else ():
        keep(row)
    for offset, key, value in records:
        if value is None:
            # A tombstone deletes the key's records; the fold ignores one of the layout.
            if key is not None and key != LAYOUT_KEY:
                keyed.pop(key, None)
            continue
        window, group = classify(key, value)
        keep(IndexRow(offset, key, bytes(value), window, group))
    rows = list(keyed.values()) + unkeyed
    if first_layout is not None and keyed.get(LAYOUT_KEY) is not first_layout:
        rows.append(first_layout)
    rows.sort(key=lambda r: r.offset)
    return LogIndex(through, tuple(rows))


def bucket_of(window: str, buckets: int) -> int:
    """The bucket (1 to ``buckets``) of ``window``: the same in every process."""
    return 1 + zlib.crc32(window.encode()) % buckets


def encode_index(index: LogIndex, compression: str = "zstd") -> bytes:
    """``index`` as an Arrow IPC file: batch 0 the records every read needs, then one batch
    per bucket of windows, then runs without a window."""
    windowed = sum(1 for r in index.rows if r.group == WINDOWED)
    buckets = max(1, min(MAX_BUCKETS, windowed // BUCKET_ROWS))
    groups: list[list[IndexRow]] = [[] for _ in range(buckets + 2)]
    for r in index.rows:
        if r.group == WINDOWED:
            groups[bucket_of(r.window, buckets)].append(r)  # type: ignore[arg-type]
        else:
            groups[0 if r.group == ALWAYS else buckets + 1].append(r)
    last_offset, last_crc = index.last or (-1, 0)
    schema = _SCHEMA.with_metadata(
        {
            "format": str(INDEX_FORMAT),
            "through": str(index.through),
            "buckets": str(buckets),
            "last_offset": str(last_offset),
            "last_crc": str(last_crc),
        }
    )
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_file(sink, schema, options=options) as writer:
        for rows in groups:
            writer.write_batch(
                pa.record_batch(
                    [
                        pa.array([r.offset for r in rows], pa.int64()),
                        pa.array([r.key for r in rows], pa.string()),
                        pa.array([r.value for r in rows], pa.binary()),
                        pa.array([r.window for r in rows], pa.string()),
                    ],
                    schema=schema,
                )
            )
    return sink.getvalue().to_pybytes()


class OpenedIndex:
    """An encoded index, opened: its batches are decoded as a read asks for them."""

    def __init__(self, data: bytes | pa.Buffer):
        try:
            self._file = pa.ipc.open_file(pa.py_buffer(data) if isinstance(data, bytes) else data)
            meta = self._file.schema.metadata or {}
            fmt = int(meta.get(b"format", b"0"))
            if fmt != INDEX_FORMAT:
                raise ShuffleFormatError(f"index format {fmt}; this engine reads {INDEX_FORMAT}")
            self.through = int(meta[b"through"])
            self.buckets = int(meta[b"buckets"])
            last_offset, last_crc = int(meta[b"last_offset"]), int(meta[b"last_crc"])
            self.last: tuple[int, int] | None = None if last_offset < 0 else (last_offset, last_crc)
            if self._file.num_record_batches != self.buckets + 2:
                raise ShuffleFormatError(
                    f"{self._file.num_record_batches} batches for {self.buckets} buckets"
                )
        except (*_PARSE_ERRORS, OSError) as exc:
            raise ShuffleFormatError(
                f"not a commit-log index ({type(exc).__name__}: {exc})"
            ) from None

    def _rows(self, batch: int, windows: set[str] | None) -> list[IndexRow]:
        b = self._file.get_batch(batch)
        offsets = b.column(0).to_pylist()
        keys = b.column(1).to_pylist()
        values = b.column(2).to_pylist()
        wins = b.column(3).to_pylist()
        group = ALWAYS if batch == 0 else UNWINDOWED if batch == self.buckets + 1 else WINDOWED
        return [
            IndexRow(o, k, v, w, group)
            for o, k, v, w in zip(offsets, keys, values, wins, strict=True)
            if windows is None or group == ALWAYS or w in windows
        ]

    def index(self, windows: Sequence[str] | None = None) -> LogIndex:
        """The rows a read of ``windows`` needs (None: every row), in log order."""
        if windows is None:
            batches: Iterable[int] = range(self.buckets + 2)
            wanted = None
        else:
            wanted = set(windows)
            batches = sorted({0} | {bucket_of(w, self.buckets) for w in wanted})
        rows = [r for i in batches for r in self._rows(i, wanted)]
        rows.sort(key=lambda r: r.offset)
        return LogIndex(self.through, tuple(rows))


def decode_index(data: bytes | pa.Buffer) -> OpenedIndex:
    """Opens an encoded index (:func:`encode_index`).

    Raises:
        ShuffleFormatError: It is not one, or of another format.
    """
    return OpenedIndex(data)
