"""The pure parts of reading without Spark: key-group narrowing, column selection, the rows a
partition read keeps from its frames (shared with the Spark reader), the fetching threads,
and that none of it imports pyspark."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pyarrow as pa
import pytest

from orchestration.shuffle import (
    Layout,
    ShuffleFormatError,
    ShuffleOptionError,
    key_group_range,
)
from orchestration.shuffle.core import frames as fr
from orchestration.shuffle.core.planner import (
    PartitionRead,
    ReadOptions,
    Segment,
    check_key_groups,
    narrow_reads,
    plan_splits,
)
from orchestration.shuffle.kafka.reader import (
    RowReader,
    in_threads,
    output_schema,
    selected_schema,
)

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))])
LAYOUT = Layout("t", ("k",), 4, 16, SCHEMA, event_time="ts")


# Key groups.


@pytest.mark.parametrize("given", [(0, 0), (0, 16), (3, 9), [2, 5], (16, 16)])
def test_key_groups_in_range_are_taken(given):
    assert check_key_groups("t", given, 16) == tuple(given)


@pytest.mark.parametrize(
    "given", [(5, 4), (-1, 3), (0, 17), (1,), (1, 2, 3), ("0", "4"), (True, 3), 7, None, (1.0, 2)]
)
def test_bad_key_groups_are_refused_naming_the_shuffle_and_the_bound(given):
    with pytest.raises(ShuffleOptionError, match=r"shuffle 't': key_groups must be \(start, end\)"):
        check_key_groups("t", given, 16)


@pytest.mark.parametrize("seed", range(40))
def test_narrowed_reads_hold_exactly_the_key_groups_asked(seed):
    """Over random layouts and ranges: the narrowed reads cover exactly the key groups in
    ``[start, end)``, each in its own partition, only partitions holding one of them are
    read, and a read is ``full`` exactly when it still covers its whole partition."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 9))
    m = n * int(rng.integers(1, 9)) + int(rng.integers(0, n))
    start = int(rng.integers(0, m + 1))
    end = int(rng.integers(start, m + 1))
    layout = Layout("t", ("k",), n, m, SCHEMA)
    reads = [r for s in plan_splits(layout, []) for r in s.reads]
    narrowed = narrow_reads(reads, start, end)
    covered = [g for r in narrowed for g in range(r.key_group_start, r.key_group_end)]
    assert covered == list(range(start, end))
    for r in narrowed:
        whole = key_group_range(r.partition, m, n)
        assert whole.start <= r.key_group_start < r.key_group_end <= whole.stop
        assert r.full == (range(r.key_group_start, r.key_group_end) == whole)
    holding = {p for p in range(n) if set(key_group_range(p, m, n)) & set(range(start, end))}
    assert [r.partition for r in narrowed] == sorted(holding)


def test_narrowing_a_read_already_narrowed_keeps_it_partial():
    r = PartitionRead(0, 0, 2, False, ())
    (got,) = narrow_reads([r], 0, 4)
    assert (got.key_group_start, got.key_group_end, got.full) == (0, 2, False)


# Columns.


def test_columns_come_in_the_order_asked():
    schema = selected_schema("t", LAYOUT, False, ["v", "k"])
    assert schema.names == ["v", "k"]
    assert schema.field("v") == SCHEMA.field("v")
    assert selected_schema("t", LAYOUT, False, None) == output_schema(LAYOUT, False)
    assert selected_schema("t", LAYOUT, True, ["_offset", "k"]).names == ["_offset", "k"]


@pytest.mark.parametrize(
    ("columns", "with_metadata", "match"),
    [
        (["nope"], False, r"shuffle 't' has no column\(s\) \['nope'\]; its columns are"),
        (["_offset"], False, r"\['_offset'\] \(metadata columns need with_metadata=True\)"),
        (["k", "v", "k"], False, r"columns \['k'\] named more than once"),
        ("k", False, r"columns must be a list of column names, not the string 'k'"),
    ],
)
def test_bad_columns_are_refused_by_name(columns, with_metadata, match):
    with pytest.raises(ShuffleOptionError, match=match):
        selected_schema("t", LAYOUT, with_metadata, columns)


# The rows a partition read keeps from its frames.

RUN = str(uuid.uuid4())
T0 = 1_700_000_000_000_000


class Message:
    def __init__(self, offset: int, value: bytes):
        self._offset, self._value = offset, value

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value


def data(seq: int, groups: list[int], run: str = RUN, attempt: int = 0) -> bytes:
    n = len(groups)
    batch = pa.record_batch(
        {
            "k": pa.array([f"k{g}" for g in groups]),
            "v": pa.array(range(seq * 100, seq * 100 + n), pa.int64()),
            "ts": pa.array([T0 + i for i in range(n)], pa.timestamp("us", tz="UTC")),
            fr.KEY_GROUP_COLUMN: pa.array(groups, pa.int32()),
        }
    )
    return fr.encode_data(fr.FrameHeader(fr.FrameType.DATA, run, 0, attempt, seq), batch)


def end(rows: int, frames: int, run: str = RUN, attempt: int = 0) -> bytes:
    return fr.encode_end(fr.FrameHeader(fr.FrameType.END, run, 0, attempt, 99), rows, frames)


def partition_read(key_groups=(0, 4), messages=4, tasks=((0, 0),)) -> PartitionRead:
    seg = Segment(RUN, 0, messages - 1, tasks, "w", 6)
    return PartitionRead(0, *key_groups, key_groups == (0, 4), (seg,))


MESSAGES = [
    Message(0, data(0, [0, 1, 2])),
    # A failed attempt's frame in the committed range: skipped.
    Message(1, data(1, [0, 0], attempt=1)),
    Message(2, data(2, [3, 3, 1])),
    Message(3, end(6, 2)),
]


def test_a_partition_read_keeps_committed_attempts_and_its_key_groups():
    rows = RowReader("t", LAYOUT, ReadOptions())
    got = pa.Table.from_batches(list(rows.rows_of_messages(partition_read(), MESSAGES)))
    assert got.schema == SCHEMA
    assert got.column("v").to_pylist() == [0, 1, 2, 200, 201, 202]
    narrowed = rows.rows_of_messages(partition_read((1, 3)), MESSAGES)
    assert pa.Table.from_batches(list(narrowed)).column("k").to_pylist() == ["k1", "k2", "k1"]


def test_a_partition_read_filters_event_time_and_adds_metadata():
    options = ReadOptions(event_time_start_us=T0 + 1, event_time_end_us=T0 + 2, with_metadata=True)
    rows = RowReader("t", LAYOUT, options)
    rows.use_columns(["v", "_offset", "_window"])
    got = pa.Table.from_batches(list(rows.rows_of_messages(partition_read(), MESSAGES)))
    # The event-time column is decoded to filter on: it stays, in the layout's order.
    assert got.schema.names == ["v", "ts", "_offset", "_window"]
    assert got.to_pydict() == {
        "v": [1, 201],
        "ts": got.column("ts").to_pylist(),
        "_offset": [0, 2],
        "_window": ["w", "w"],
    }


def test_a_partition_read_refuses_a_changed_frame_naming_its_offset():
    bad = bytearray(MESSAGES[2].value())
    bad[-20] ^= 0x01
    messages = [*MESSAGES[:2], Message(2, bytes(bad)), MESSAGES[3]]
    rows = RowReader("t", LAYOUT, ReadOptions())
    with pytest.raises(
        ShuffleFormatError, match=r"DATA frame at topic 't' partition 0 offset 2 .* checksum"
    ):
        list(rows.rows_of_messages(partition_read(), messages))


def test_a_partition_read_refuses_counts_that_differ_from_the_end_frame():
    rows = RowReader("t", LAYOUT, ReadOptions())
    lost = [m for m in MESSAGES if m.offset() != 2]
    with pytest.raises(
        ShuffleFormatError,
        match=r"topic 't' partition 0, run .* subtask 0: read 3 rows in 1 frames, the "
        r"producer wrote 6 rows in 2 frames",
    ):
        list(rows.rows_of_messages(partition_read(), lost))
    with pytest.raises(ShuffleFormatError, match=r"attempt 0: no END frame within committed"):
        list(rows.rows_of_messages(partition_read(), MESSAGES[:3]))


# The fetching threads.


class FakeKafka:
    """Stands in for a KafkaClient: counts the consumers made and closed."""

    def __init__(self) -> None:
        self.open = 0
        self.made = 0
        self.lock = threading.Lock()

    @contextlib.contextmanager
    def consumer(self, **_):
        with self.lock:
            self.open += 1
            self.made += 1
        try:
            yield object()
        finally:
            with self.lock:
                self.open -= 1


def test_threads_give_every_result_once_each_item_in_order():
    kafka = FakeKafka()
    got = list(in_threads(kafka, "t", range(20), 4, lambda c, i: ((i, j) for j in range(5))))
    assert sorted(got) == [(i, j) for i in range(20) for j in range(5)]
    for i in range(20):
        assert [j for k, j in got if k == i] == list(range(5))
    assert kafka.made == 4 and kafka.open == 0


def test_a_thread_error_is_raised_to_the_reader_and_stops_the_others():
    kafka = FakeKafka()

    def work(c, i):
        if i == 3:
            raise ShuffleFormatError(f"frame {i} is bad")
        for j in range(1000):
            time.sleep(0.001)
            yield j

    with pytest.raises(ShuffleFormatError, match="frame 3 is bad"):
        list(in_threads(kafka, "t", range(8), 3, work))
    assert kafka.open == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("t-")]


def test_closing_the_iterator_stops_the_threads_and_holds_few_results():
    kafka = FakeKafka()
    made = []

    def work(c, i):
        for j in range(10_000):
            made.append(j)
            yield j

    results = in_threads(kafka, "t", range(4), 2, work)
    assert len([next(results) for _ in range(3)]) == 3
    time.sleep(0.2)
    # Results wait for the reader: a couple per thread, not the items' 40,000.
    assert len(made) <= 3 + 2 * 2 + 2
    results.close()
    assert kafka.open == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("t-")]


# No Spark.


def test_reading_without_spark_imports_no_pyspark():
    """The public functions and their modules load without pyspark (checked in a fresh
    interpreter: this one may have loaded it for other tests)."""
    code = (
        "import sys\n"
        "from orchestration.shuffle import iter_keys, read_batches, read_table\n"
        "import orchestration.shuffle.table_read, orchestration.shuffle.kafka.reader\n"
        "bad = [m for m in sys.modules if m == 'pyspark' or m.startswith('pyspark.')]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_a_small_read_fetches_little_past_what_it_reads():
    from orchestration.shuffle.kafka.reader import LARGE_FETCH_BYTES, SMALL_FETCH_BYTES, fetch_bytes

    assert fetch_bytes(0, 4) == SMALL_FETCH_BYTES
    assert fetch_bytes(40_000, 4) == SMALL_FETCH_BYTES
    assert fetch_bytes(4 * 100_000, 4) == 256 * 1024  # twice a read's share, a power of two
    assert fetch_bytes(10**10, 4) == LARGE_FETCH_BYTES
    assert fetch_bytes(10**6, 0) == LARGE_FETCH_BYTES // 2
