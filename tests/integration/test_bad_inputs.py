"""A corpus of bad inputs, one row each: what is put into a shuffle (or done to it), and what a
user gets back: an error of the engine's naming the topic, partition, offset, option or
column at fault, or the rows, readable, with nothing lost.

Rows that write into a shuffle by hand first write a small real run (window ``good``), so
each also checks that what was there before stays readable. Errors raised inside a Spark
task reach the caller wrapped by Spark: the row names the engine's class, and the message
must hold ``<class>: <message>``. Grouping as Spark does (``-0.0``, NaNs, every key type) is
tested at length in ``test_grouping_as_spark.py``; broker faults in ``test_broker_faults.py``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from orchestration.shuffle import (
    Commit,
    KafkaClient,
    ShuffleFormatError,
    ShuffleKeyError,
    ShuffleLayoutError,
    ShuffleOptionError,
    ShuffleSpec,
    ShuffleTopicNotFoundError,
    ShuffleWriteError,
    read_shuffle,
    shuffle_log,
    write_shuffle,
)
from orchestration.shuffle.core import frames as fr
from orchestration.shuffle.core.commitlog import PartitionRange, commit_topic
from orchestration.shuffle.kafka.commitlog import write_commit
from tests.conftest import delete_topics

pytestmark = pytest.mark.integration

START = 1_356_998_400  # 2013-01-01T00:00:00Z
ROWS = 40


@dataclass
class Ctx:
    """One row's world: the session, the broker and a topic of its own."""

    spark: Any
    conf: dict
    topic: str

    @property
    def kafka(self) -> KafkaClient:
        return KafkaClient(self.conf)

    def rows(self, n: int = ROWS, offset: int = 0):
        return self.spark.range(offset, offset + n).selectExpr(
            "concat('k', cast(id % 7 as string)) as k",
            "id",
            f"timestamp_seconds({START} + id) as ts",
        )

    def spec(self, **kw) -> ShuffleSpec:
        base = dict(topic=self.topic, key=("k",), num_partitions=2, max_parallelism=8)
        return ShuffleSpec(**{**base, **kw})

    def write(self, df=None, window: str | None = "good", **kw):
        return write_shuffle(
            self.rows() if df is None else df, self.spec(**kw), kafka=self.conf, window=window
        )

    def read(self, **kw) -> list[tuple]:
        return sorted(
            tuple(r) for r in read_shuffle(self.spark, self.topic, kafka=self.conf, **kw).collect()
        )

    def produce(
        self, topic: str, value: bytes | None, key: bytes | None = None, partition: int = 0
    ) -> int:
        """Produces one record to ``partition`` of ``topic``; its offset."""
        got: list[int] = []
        p = Producer(self.conf)
        p.produce(
            topic,
            value=value,
            key=key,
            partition=partition,
            on_delivery=lambda e, m: got.append(m.offset()),
        )
        assert p.flush(30) == 0
        return got[0]

    def handmade_run(self, frames: Callable[[str], list[bytes]], rows: int, window: str) -> int:
        """Commits a run written here as ``window``: ``frames(run_id)`` (DATA frames, or
        whatever stands in their place) and an END frame counting ``rows`` in partition 0,
        an empty END frame in partition 1. Returns the offset of its first frame."""
        run = str(uuid.uuid4())
        data = frames(run)
        offsets = [self.produce(self.topic, v) for v in data]
        end = fr.FrameHeader(fr.FrameType.END, run, 0, 0, len(data) + 1)
        last = self.produce(self.topic, fr.encode_end(end, rows, len(data)))
        first = offsets[0] if offsets else last
        other = self.produce(self.topic, fr.encode_end(end, 0, 0), partition=1)
        parts = {0: PartitionRange(first, last, rows, len(data)), 1: PartitionRange(other, other)}
        now = dt.datetime.now(dt.UTC).isoformat()
        commit = Commit(run, window, now, ((0, 0),), parts, rows, 0, len(data))
        write_commit(self.kafka, self.topic, commit)
        return first

    def admin(self) -> AdminClient:
        # Kept on the context: an admin client that is collected drops its pending futures.
        self._admin = AdminClient(self.conf)
        return self._admin


def data_frame(run: str, n: int = 3, compression: str | None = "lz4") -> bytes:
    """A DATA frame of ``n`` rows of the rows' schema, all in key group 0 (partition 0)."""
    batch = pa.record_batch(
        {
            "k": pa.array([f"h{i}" for i in range(n)]),
            "id": pa.array(range(1000, 1000 + n), pa.int64()),
            "ts": pa.array([START * 1_000_000] * n, pa.timestamp("us", tz="UTC")),
            fr.KEY_GROUP_COLUMN: pa.array([0] * n, pa.int32()),
        }
    )
    return fr.encode_data(fr.FrameHeader(fr.FrameType.DATA, run, 0, 0, 0), batch, compression)


def as_version_1(value: bytes) -> bytes:
    """A frame as a writer of format version 1 wrote it: a 40-byte header, no checksum."""
    return value[:4] + bytes([1]) + value[5 : fr.HEADER_SIZE_V1] + value[fr.HEADER_SIZE :]


def flipped(value: bytes, at: int) -> bytes:
    out = bytearray(value)
    out[at] ^= 0x01
    return bytes(out)


HANDMADE = sorted(
    (f"h{i}", 1000 + i, dt.datetime.fromtimestamp(START, dt.UTC).replace(tzinfo=None))
    for i in range(3)
)
GOOD = sorted(
    (f"k{i % 7}", i, dt.datetime.fromtimestamp(START + i, dt.UTC).replace(tzinfo=None))
    for i in range(ROWS)
)


@dataclass(frozen=True)
class Raises:
    """The engine's ``error``, its message matching ``match``. ``in_task``: raised inside a
    Spark task, so it arrives wrapped by Spark, with ``<class>: <message>`` in its text."""

    error: type[BaseException]
    match: str
    in_task: bool = False


@dataclass(frozen=True)
class Reads:
    """The action returns what ``check`` accepts (``what`` says it in words)."""

    what: str
    check: Callable[[Any], bool]


# The actions: each sets its row's input up, then does to the shuffle what the row says.


def json_after_run(c: Ctx):
    c.produce(c.topic, JSON)
    return c.read(windows=["good"], parallelism=1)


json_after_run.shared = True  # type: ignore[attr-defined]


def good_window_stays_whole(c: Ctx):
    return c.read(windows=["good"])


good_window_stays_whole.shared = True  # type: ignore[attr-defined]


JSON = b'{"event": "click", "user": 42, "note": "a record of another application"}'


def handmade(frames: Callable[[str], list[bytes]], rows: int = 3):
    """A run committed by hand into the shared shuffle as a window of its own, then read.
    The shared shuffle's window ``good`` is read again by the last row."""

    def act(c: Ctx):
        window = f"bad-{uuid.uuid4().hex[:8]}"
        c.handmade_run(frames, rows, window)
        return c.read(windows=[window], parallelism=1)

    handmade_act = act
    handmade_act.shared = True  # type: ignore[attr-defined]
    return handmade_act


def data_with(mutate: Callable[[bytes], bytes], compression: str | None = "lz4"):
    return handmade(lambda run: [mutate(data_frame(run, compression=compression))])


def watermark_of_wrong_length(run: str) -> list[bytes]:
    header = fr.FrameHeader(fr.FrameType.WATERMARK, run, 0, 0, 0)
    return [fr.encode_watermark(header, START * 1_000_000)[:-3], data_frame(run)]


def arrow_offset(value: bytes, part: str) -> int:
    """Where in a DATA frame a byte of ``part`` lies: ``"metadata"`` (the batch's
    message header, which gives lengths and buffer offsets) or ``"values"`` (the last
    buffer of an uncompressed body: the timestamps)."""
    body = value[fr.HEADER_SIZE :]
    reader = pa.ipc.open_stream(pa.BufferReader(body))
    schema_len = len(reader.schema.serialize())
    if part == "metadata":
        return fr.HEADER_SIZE + schema_len + 16
    return len(value) - 12


def commit_stretched(past_end: bool):
    def act(c: Ctx):
        res = c.write()
        r = res.commit.partitions[0]
        high = c.kafka.end_offsets(c.topic, 2)[0][1]
        last = high + 5 if past_end else r.last
        parts = {**res.commit.partitions, 0: PartitionRange(r.first, last, r.rows, r.frames)}
        write_commit(c.kafka, c.topic, dataclasses.replace(res.commit, partitions=parts))
        if not past_end:
            c.write(c.rows(offset=100), window="later")
            deleted = c.admin().delete_records(
                [TopicPartition(c.topic, 0, r.last)], request_timeout=30, operation_timeout=30
            )
            for f in deleted.values():
                f.result(60)
            # The window written after stays readable.
            assert len(c.read(windows=["later"])) == ROWS
        return c.read(windows=["good"])

    return act


def same_commit_twice(c: Ctx):
    res = c.write()
    write_commit(c.kafka, c.topic, res.commit)
    assert len(shuffle_log(c.topic, kafka=c.conf).commits) == 1
    return c.read()


def commit_record_cut(value: bytes, read: list[str] | None):
    """Window ``good`` written, then a commit record cut short, then window ``later``: the
    record is reported, ``later`` reads whole, then ``read`` (None: everything) is read."""

    def act(c: Ctx):
        c.write()
        at = c.produce(commit_topic(c.topic), value, key=b"commit/r1")
        c.write(c.rows(offset=100), window="later")
        bad = shuffle_log(c.topic, kafka=c.conf).bad_records
        assert [(b.offset, b.key) for b in bad] == [(at, "commit/r1")], bad
        assert len(c.read(windows=["later"])) == ROWS
        return c.read(windows=read)

    return act


class Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def foreign_commit_log_record(c: Ctx):
    """Another application's record in the commit log: skipped, reported on the log and
    logged as a warning naming the commit log, partition and offset."""
    c.write()
    at = c.produce(commit_topic(c.topic), JSON, key=b"user-42")
    caught = Warnings()
    logger = logging.getLogger("orchestration.shuffle.kafka.commitlog")
    logger.addHandler(caught)
    try:
        bad = shuffle_log(c.topic, kafka=c.conf).bad_records
    finally:
        logger.removeHandler(caught)
    assert [(b.offset, b.key) for b in bad] == [(at, "user-42")], bad
    assert caught.messages == [
        f"commit log '{commit_topic(c.topic)}' partition 0 offset {at}: record 'user-42' "
        "skipped: a key the engine does not write"
    ], caught.messages
    return c.read()


def write_after_bad_commit_record(c: Ctx):
    c.write()
    c.produce(commit_topic(c.topic), b'{"run_id": "r1", "window": "go', key=b"commit/r1")
    c.write(c.rows(offset=100), window="next")
    return c.read(windows=["next"])


def commits_topic_deleted(then: str):
    def act(c: Ctx):
        c.write()
        ctopic = commit_topic(c.topic)
        # "Then": once the broker no longer lists it (a read racing the deletion itself is
        # the case data-topic-deleted-between-plan-and-read covers).
        delete_topics(c.admin(), [ctopic])
        if then == "read":
            return c.read()
        return c.write(c.rows(offset=100), window="next")

    return act


def drift(change: Callable[[Any], Any]):
    def act(c: Ctx):
        c.write()
        return c.write(change(c.rows()), window="good")

    return act


def keys_read_back(select: list[str], key: str):
    """Writes rows keyed by ``key`` and reads them back: the rows' multiset, and per key
    how many rows ``groupBy`` counts, the same on both sides."""

    def act(c: Ctx):
        df = c.spark.range(200).selectExpr(*select)
        c.write(df, key=(key,))
        back = read_shuffle(c.spark, c.topic, kafka=c.conf)
        counts = sorted(
            map(tuple, df.groupBy(key).count().selectExpr("string(" + key + ")", "count").collect())
        )
        got = sorted(
            map(
                tuple,
                back.groupBy(key).count().selectExpr("string(" + key + ")", "count").collect(),
            )
        )
        return counts == got and sorted(map(str, back.collect())) == sorted(map(str, df.collect()))

    return act


def event_times(ooo: dt.timedelta, values: list[str]):
    def act(c: Ctx):
        cases = " ".join(f"when {i} then timestamp'{v}'" for i, v in enumerate(values))
        df = c.spark.range(len(values)).selectExpr(
            "concat('k', id) as k", "id", f"case id {cases} end as ts"
        )
        # One task: its watermark is the run's (a run's is the least of its tasks').
        res = c.write(df.coalesce(1), event_time="ts", max_out_of_orderness=ooo)
        log = shuffle_log(c.topic, kafka=c.conf)
        assert log.commit(res.run_id) is not None, "committed"
        # Counted, not collected: PySpark's collect() cannot make a local datetime of 0001-01-01.
        return res.watermark, read_shuffle(c.spark, c.topic, kafka=c.conf).count()

    return act


def oversized_row(c: Ctx):
    c.write()
    res = ConfigResource("topic", c.topic)
    entry = ConfigEntry(
        "max.message.bytes", str(1024 * 1024), incremental_operation=AlterConfigOpType.SET
    )
    res.add_incremental_config(entry)
    for f in c.admin().incremental_alter_configs([res]).values():
        f.result(60)
    # A 1.4 MB key that does not compress: one row, one frame, over the 1 MiB limit.
    big = c.spark.createDataFrame(
        [("k" + os.urandom(700 * 1024).hex(), 1, dt.datetime(2013, 1, 1))],
        "k string, id long, ts timestamp",
    )
    return c.write(big, window="big")


def row_over_the_producers_limit(c: Ctx):
    # A 40 MB value that does not compress: over the 32 MiB a producer sends at most, so
    # the producer refuses it before the broker sees it.
    big = c.spark.createDataFrame(
        [("k1", os.urandom(20 * 1024 * 1024).hex(), dt.datetime(2013, 1, 1))],
        "k string, payload string, ts timestamp",
    )
    return c.write(big, window="huge")


def window_named(window: Any):
    def act(c: Ctx):
        c.write(window=window)
        return c.read(windows=[window])

    return act


def topic_named(name: str):
    def act(c: Ctx):
        return write_shuffle(c.rows(), dataclasses.replace(c.spec(), topic=name), kafka=c.conf)

    return act


def data_topic_deleted_mid_read(c: Ctx):
    c.write()
    df = read_shuffle(c.spark, c.topic, kafka=c.conf)
    c.admin().delete_topics([c.topic], operation_timeout=30)[c.topic].result(60)
    began = time.monotonic()
    try:
        return df.collect()
    finally:
        # Every attempt of the task finds the topic gone within seconds (each waited out a
        # 30 s timeout without data before).
        took = time.monotonic() - began
        assert took < 30, f"the read took {took:.0f}s to fail"


def row(id: str, act, expected, *marks):
    return pytest.param(act, expected, id=id, marks=marks)


OFFSET = r"partition 0 offset \d+"
CHECKSUM = (
    rf"DATA frame at topic '[^']+' {OFFSET} \(run [-0-9a-f]+ subtask 0 attempt 0\) fails its "
    r"checksum: its \d+-byte payload has CRC-32 [0-9a-f]{8}, its header says [0-9a-f]{8}"
)

CASES = [
    # Records in the data topic that are not the engine's.
    row(
        "json-record-after-the-committed-runs",
        json_after_run,
        Reads("every row", lambda r: r == GOOD),
    ),
    row(
        "json-record-inside-a-committed-range",
        handmade(lambda run: [JSON]),
        Raises(
            ShuffleFormatError, rf"{OFFSET} is not a shuffle frame \(magic b'{{\"ev'", in_task=True
        ),
    ),
    row(
        "frame-with-bad-magic",
        data_with(lambda v: b"KSHX" + v[4:]),
        Raises(
            ShuffleFormatError, rf"{OFFSET} is not a shuffle frame \(magic b'KSHX'", in_task=True
        ),
    ),
    row(
        "frame-of-format-version-3",
        data_with(lambda v: v[:4] + bytes([3]) + v[5:]),
        Raises(
            ShuffleFormatError,
            rf"{OFFSET} has format version 3; this reader understands versions 1 and 2",
            in_task=True,
        ),
    ),
    row(
        "frames-of-format-version-1-no-checksum",
        handmade(lambda run: [as_version_1(data_frame(run))]),
        Reads("the rows, as before the checksum", lambda r: r == HANDMADE),
    ),
    row(
        "frame-shorter-than-its-header",
        data_with(lambda v: v[:30]),
        Raises(
            ShuffleFormatError, rf"{OFFSET} is 30 bytes, shorter than a frame header", in_task=True
        ),
    ),
    row(
        "data-frame-cut-in-half",
        data_with(lambda v: v[: len(v) // 2]),
        Raises(ShuffleFormatError, CHECKSUM, in_task=True),
    ),
    row(
        "watermark-frame-of-wrong-length",
        handmade(watermark_of_wrong_length),
        Raises(
            ShuffleFormatError,
            rf"WATERMARK frame at topic '[^']+' {OFFSET} has a 5-byte payload, expected 8",
            in_task=True,
        ),
    ),
    row(
        "flipped-byte-in-the-arrow-batch-header",
        data_with(lambda v: flipped(v, arrow_offset(v, "metadata"))),
        Raises(ShuffleFormatError, CHECKSUM, in_task=True),
    ),
    row(
        "flipped-byte-in-an-uncompressed-value-buffer",
        # Arrow would decode it into another value; Kafka's CRC covers only disk and wire.
        data_with(lambda v: flipped(v, arrow_offset(v, "values")), compression=None),
        Raises(ShuffleFormatError, CHECKSUM, in_task=True),
    ),
    # The commit log.
    row(
        "commit-naming-offsets-past-the-log-end",
        commit_stretched(past_end=True),
        Raises(
            ShuffleFormatError,
            r"partition 0: run [-0-9a-f]+ \(window 'good'\) was committed at offsets "
            r"\[\d+, \d+\], but the partition holds \[0, \d+\): the commit names offsets past",
        ),
    ),
    row(
        "commit-below-the-log-start-after-delete-records",
        commit_stretched(past_end=False),
        Raises(
            ShuffleFormatError,
            r"partition 0: run [-0-9a-f]+ \(window 'good'\) was committed at offsets "
            r"\[0, \d+\], but the partition holds \[\d+, \d+\): offsets below \d+ were deleted",
        ),
    ),
    row(
        "the-same-commit-record-twice",
        same_commit_twice,
        Reads("every row once", lambda r: r == GOOD),
    ),
    row(
        "commit-record-cut-short-after-its-window",
        commit_record_cut(b'{"run_id": "r1", "window": "good", "committed_at": "2013-0', ["good"]),
        # Its window told from its text: that window is refused, never shown older.
        Raises(
            ShuffleFormatError,
            r"shuffle '[^']+': window 'good' cannot be read: record 'commit/r1' at partition 0 "
            r"offset \d+ of '[^']+__commits' is a commit of it that cannot be read, and no "
            r"later commit of the window replaces it",
        ),
    ),
    row(
        "commit-record-cut-short-inside-its-window",
        commit_record_cut(b'{"run_id": "r1", "window": "go', ["good"]),
        # Its window cannot be told: windows last written before it are refused.
        Raises(
            ShuffleFormatError,
            r"window 'good' cannot be read: record 'commit/r1' at partition 0 offset \d+ of "
            r"'[^']+__commits' is a commit that cannot be read nor its window told, and no "
            r"commit of the window comes after it",
        ),
    ),
    row(
        "commit-record-missing-fields-read-whole",
        commit_record_cut(b'{"run_id": "r1"}', None),
        Raises(
            ShuffleFormatError,
            r"a read of every run is refused: record 'commit/r1' at partition 0 offset \d+ of "
            r"'[^']+__commits' is a commit \(of a window it does not tell\) that cannot be read",
        ),
    ),
    row(
        "foreign-json-record-in-the-commit-log",
        foreign_commit_log_record,
        Reads("every row; the record reported and logged", lambda r: r == GOOD),
    ),
    row(
        "write-after-a-commit-record-cut-short",
        write_after_bad_commit_record,
        Reads("the write commits and its window reads", lambda r: len(r) == ROWS),
    ),
    row(
        "commits-topic-deleted-then-read",
        commits_topic_deleted("read"),
        Raises(
            ShuffleTopicNotFoundError,
            r"shuffle '[^']+' does not exist .*\(no commit-log topic '[^']+__commits'\)",
        ),
    ),
    row(
        "commits-topic-deleted-then-write",
        commits_topic_deleted("write"),
        Raises(
            ShuffleLayoutError,
            r"data topic '[^']+' holds records \(partition \d: offsets \[0, \d+\).* "
            r"but its commit log '[^']+__commits' has no layout record",
        ),
    ),
    # Schema drift: a new run of a window.
    row(
        "new-run-with-an-added-column",
        drift(lambda df: df.selectExpr("*", "id * 2 as extra")),
        Raises(ShuffleLayoutError, r"column 'extra' is not in the shuffle's schema"),
    ),
    row(
        "new-run-with-a-removed-column",
        drift(lambda df: df.drop("ts")),
        Raises(ShuffleLayoutError, r"column 'ts' is missing"),
    ),
    row(
        "new-run-with-a-retyped-column",
        drift(lambda df: df.selectExpr("k", "string(id) as id", "ts")),
        Raises(ShuffleLayoutError, r"column 'id' has type string, the shuffle has int64"),
    ),
    # Keys.
    row(
        "double-keys-minus-zero-zero-nan-infinities",
        keys_read_back(
            [
                "element_at(array(double(0.0), double(-0.0), double('NaN'), "
                "double('inf'), double('-inf'), 1.5), int(id % 6) + 1) as d",
                "id",
                f"timestamp_seconds({START} + id) as ts",
            ],
            "d",
        ),
        Reads("grouped as Spark groups them", bool),
    ),
    row(
        "array-keys-with-nulls-inside",
        keys_read_back(
            [
                "element_at(array(array(1, null), array(null), array(), array(null, "
                "1), array(1)), int(id % 5) + 1) as a",
                "id",
                f"timestamp_seconds({START} + id) as ts",
            ],
            "a",
        ),
        Reads("grouped as Spark groups them", bool),
    ),
    row(
        "empty-and-100k-character-string-keys",
        keys_read_back(
            [
                "case when id % 3 = 0 then '' when id % 3 = 1 then repeat('x', "
                "100000) else 'k' end as s",
                "id",
                f"timestamp_seconds({START} + id) as ts",
            ],
            "s",
        ),
        Reads("grouped as Spark groups them", bool),
    ),
    row(
        "binary-keys-that-are-not-utf8",
        keys_read_back(
            [
                "element_at(array(unhex('FF'), unhex('C328'), unhex(''), "
                "unhex('00FF00')), int(id % 4) + 1) as b",
                "id",
                f"timestamp_seconds({START} + id) as ts",
            ],
            "b",
        ),
        Reads("grouped as Spark groups them", bool),
    ),
    row(
        "one-key-holding-most-rows",
        keys_read_back(
            [
                "case when id < 190 then 'hot' else concat('k', id) end as h",
                "id",
                f"timestamp_seconds({START} + id) as ts",
            ],
            "h",
        ),
        Reads("grouped as Spark groups them", bool),
    ),
    row(
        "map-key",
        lambda c: c.write(c.rows().selectExpr("map('k', k) as m", "id", "ts"), key=("m",)),
        Raises(
            ShuffleKeyError, r"key column 'm' has type map<string,string>, which Spark cannot hash"
        ),
    ),
    # Event times at the ends of the range.
    row(
        "event-times-at-0001-and-9999",
        event_times(dt.timedelta(0), ["0001-01-01 00:00:00", "9999-12-31 23:59:59.999999"]),
        Reads(
            "committed, watermark 9999-12-31",
            lambda r: r == (dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC), 2),
        ),
    ),
    row(
        "event-time-0001-with-a-day-out-of-orderness",
        event_times(dt.timedelta(days=1), ["0001-01-01 00:00:00", "0001-01-01 12:00:00"]),
        Reads(
            "committed and reported so, watermark 0001-01-01",
            lambda r: r == (dt.datetime(1, 1, 1, tzinfo=dt.UTC), 2),
        ),
    ),
    # Sizes and names.
    row(
        "row-above-the-topics-max-message-bytes",
        oversized_row,
        Raises(
            ShuffleWriteError,
            r"topic '[^']+' .*a frame of \d{7} bytes is larger than the topic's max.message.bytes",
        ),
    ),
    row(
        "row-above-the-producers-message-max-bytes",
        row_over_the_producers_limit,
        Raises(
            ShuffleWriteError,
            r"run \S+ of shuffle '[^']+' \(window 'huge'\) failed and was not committed: "
            r"ShuffleWriteError: shuffle '[^']+' partition \d+: a frame of [\d,]+ bytes is over "
            r"what Kafka takes \(the producer's message.max.bytes, 33,554,432, .*\): .*A row of "
            r"[\d,]+ bytes \(41,943,040 of them in column 'payload'\) cannot be written",
        ),
    ),
    row(
        "window-that-is-an-int",
        window_named(5),
        Raises(ShuffleOptionError, r"window must be a string or None, got int 5"),
    ),
    row(
        "window-with-slash-newline-nul-and-accents",
        window_named("2013/01/01\n\x00été"),
        Reads("every row, by that window", lambda r: r == GOOD),
    ),
    row(
        "topic-with-a-space-and-a-slash",
        topic_named("events by/user"),
        Raises(
            ShuffleOptionError,
            r"shuffle topic 'events by/user' holds characters Kafka refuses in a topic "
            r"name \(' /'\)",
        ),
    ),
    row(
        "topic-of-241-characters",
        topic_named("t" * 241),
        Raises(
            ShuffleOptionError, r"is 241 characters long; a shuffle's topic may have at most 240"
        ),
    ),
    row(
        "the-shared-shuffle-after-every-bad-frame-above",
        good_window_stays_whole,
        Reads("window 'good' whole", lambda r: r == GOOD),
    ),
    # While it runs.
    row(
        "data-topic-deleted-between-plan-and-read",
        data_topic_deleted_mid_read,
        Raises(
            ShuffleTopicNotFoundError,
            r"topic '[^']+' was deleted while reading partition \d offsets \[\d+, \d+\)",
            in_task=True,
        ),
    ),
]


@pytest.fixture(scope="module")
def shared(spark, kafka_conf) -> str:
    """One shuffle (window ``good`` written) for the rows that only add runs of their own."""
    c = Ctx(spark, kafka_conf, f"bad-shared-{uuid.uuid4().hex[:10]}")
    c.write()
    return c.topic


@pytest.mark.parametrize(("act", "expected"), CASES)
def test_bad_input(spark, kafka_conf, unique, shared, act, expected):
    if getattr(act, "shared", False):
        c = Ctx(spark, kafka_conf, shared)
    else:
        c = Ctx(spark, kafka_conf, unique("bad"))
    if isinstance(expected, Reads):
        got = act(c)
        assert expected.check(got), f"expected {expected.what}, got {got!r}"[:2000]
        return
    if expected.in_task:
        with pytest.raises(Exception) as info:  # noqa: B017,PT011 - Spark wraps it; checked below
            act(c)
        text = str(info.value)
        name = expected.error.__name__
        assert f"{name}: " in text or isinstance(info.value, expected.error), text[:2000]
        assert re.search(expected.match, text), text[:2000]
        return
    with pytest.raises(expected.error, match=expected.match):
        act(c)
