"""Offsets and admission control of streaming shuffle reads (pure)."""

import pytest

from orchestration.shuffle import Commit, ShuffleOptionError
from orchestration.shuffle.core.commitlog import PartitionRange
from orchestration.shuffle.core.stream import (
    LogRecord,
    StreamOffset,
    admit,
    starting_offset,
    stream_commits,
)


def commit(run: str, window: str | None, rows: int, at: str = "2024-01-01T00:00:00+00:00"):
    return Commit(
        run_id=run,
        window=window,
        committed_at=at,
        tasks=((0, 0),),
        partitions={0: PartitionRange(0, 1, rows, 1)},
        rows=rows,
        bytes=10,
        frames=1,
    )


def log():
    """layout, r1(d1), r2(d2), r3(d1 again: supersedes r1), a delete, r4(d3)."""
    c = [
        commit("r1", "d1", 10, "2024-01-01T00:00:00+00:00"),
        commit("r2", "d2", 20, "2024-01-02T00:00:00+00:00"),
        commit("r3", "d1", 30, "2024-01-03T00:00:00+00:00"),
        commit("r4", "d3", 40, "2024-01-04T00:00:00+00:00"),
    ]
    return [
        LogRecord(0, b"layout", b"{}"),
        LogRecord(1, b"commit/r1", c[0].to_json().encode()),
        LogRecord(2, b"commit/r2", c[1].to_json().encode()),
        LogRecord(3, b"commit/r3", c[2].to_json().encode()),
        LogRecord(4, b"commit/gone", None),
        LogRecord(5, b"commit/r4", c[3].to_json().encode()),
    ]


def runs(commits):
    return [c.run_id for _, c in commits]


def test_earliest_reads_only_runs_visible_at_the_snapshot():
    records = log()
    start = starting_offset(records, 6, "earliest", None)
    assert start == StreamOffset(0, 6)
    # r1 was superseded by r3 before the query started: not read.
    assert runs(stream_commits("t", records, start)) == ["r2", "r3", "r4"]


def test_runs_after_the_snapshot_are_all_new_data():
    records = log()
    # The query's history ended at offset 2: r3 supersedes r1 afterwards, as new data.
    start = StreamOffset(0, 2)
    assert runs(stream_commits("t", records, start)) == ["r1", "r2", "r3", "r4"]
    assert runs(stream_commits("t", records, StreamOffset(3, 2))) == ["r3", "r4"]
    assert runs(stream_commits("t", records, StreamOffset(1, 2), end=3)) == ["r1", "r2"]


def test_latest_and_timestamp_starts():
    records = log()
    assert starting_offset(records, 6, "latest", None) == StreamOffset(6, 6)
    ms = 1704153600000  # 2024-01-02T00:00:00Z
    assert starting_offset(records, 6, "earliest", ms) == StreamOffset(2, 2)
    assert starting_offset(records, 6, "earliest", ms * 2) == StreamOffset(6, 6)


def test_admit_everything_without_limits():
    records = log()
    start = StreamOffset(0, 6)
    assert admit(stream_commits("t", records, start), start, 6) == StreamOffset(6, 6)
    # Nothing new: the start comes back.
    assert admit([], StreamOffset(6, 6), 6) == StreamOffset(6, 6)


def test_admit_whole_runs_under_limits():
    records = log()
    start = StreamOffset(0, 0)  # every commit is new data: r1 10, r2 20, r3 30, r4 40 rows
    pending = stream_commits("t", records, start)
    assert admit(pending, start, 6, max_runs=1) == StreamOffset(2, 0)
    assert admit(pending, start, 6, max_runs=2) == StreamOffset(3, 0)
    assert admit(pending, start, 6, max_rows=30) == StreamOffset(3, 0)  # r1 + r2
    assert admit(pending, start, 6, max_rows=29) == StreamOffset(2, 0)  # r1 only
    # A run larger than the limit still goes through, alone.
    assert admit(pending, start, 6, max_rows=5) == StreamOffset(2, 0)
    # Both limits: the tighter one wins.
    assert admit(pending, start, 6, max_runs=3, max_rows=30) == StreamOffset(3, 0)
    # The last runs fit: the batch ends at the log's end (past the delete record too).
    later = StreamOffset(3, 0)
    assert admit(stream_commits("t", records, later), later, 6, max_runs=5) == StreamOffset(6, 0)


def test_successive_batches_read_each_run_once():
    records = log()
    start = StreamOffset(0, 0)
    seen = []
    while True:
        end = admit(stream_commits("t", records, start), start, 6, max_runs=1)
        if end == start:
            break
        seen += runs(stream_commits("t", records, start, end.log))
        start = end
    assert seen == ["r1", "r2", "r3", "r4"]


def test_foreign_offsets_are_refused():
    with pytest.raises(ShuffleOptionError, match="not a shuffle stream offset"):
        StreamOffset.from_dict({"0": 5})


def test_an_unreadable_commit_record_is_skipped_and_reported_when_asked():
    records = log()
    records.insert(3, LogRecord(2, b"commit/bad", b'{"run_id": "bad", "window": "d9", "ro'))
    records = [LogRecord(i, r.key, r.value) for i, r in enumerate(records)]
    start = StreamOffset(0, 0)
    # Without a list to report to, the read refuses it (naming its offset).
    from orchestration.shuffle import ShuffleFormatError

    with pytest.raises(ShuffleFormatError, match="'commit/bad' at partition 0 offset 3"):
        stream_commits("t", records, start)
    skipped = []
    got = stream_commits("t", records, start, skipped=skipped)
    assert runs(got) == ["r1", "r2", "r3", "r4"]
    (bad,) = skipped
    assert (bad.offset, bad.key, bad.window_known, bad.window) == (3, "commit/bad", True, "d9")
    assert "not a readable commit record" in bad.reason
