"""Which runs an expiry removes and where each partition is cut (pure)."""

import datetime as dt

import pytest

from orchestration.shuffle import Commit, ShuffleFormatError, ShuffleLog, ShuffleOptionError
from orchestration.shuffle.core.commitlog import PartitionRange
from orchestration.shuffle.core.retention import bytes_deleted, marker, plan_expiry

NOW = dt.datetime(2024, 1, 10, tzinfo=dt.UTC)


def commit(run, window, day, parts):
    return Commit(
        run_id=run,
        window=window,
        committed_at=dt.datetime(2024, 1, day, tzinfo=dt.UTC).isoformat(),
        tasks=((0, 0),),
        partitions={p: PartitionRange(a, b, 10, 1) for p, (a, b) in parts.items()},
        rows=10 * len(parts),
        bytes=1000,
        frames=len(parts),
    )


def log(*commits):
    return ShuffleLog("t", commits=list(commits))


# d1 run a (offsets 0-9 in p0, 0-4 in p1), d2 run b, d1 again as c (supersedes a).
A = commit("a", "d1", 1, {0: (0, 9), 1: (0, 4)})
B = commit("b", "d2", 2, {0: (10, 19), 1: (5, 9)})
C = commit("c", "d1", 3, {0: (20, 29)})


def test_superseded_runs_only_by_default():
    plan = plan_expiry(log(A, B, C), now=NOW)
    assert plan.runs == ["a"]
    # p0: a ended at 9 and b (kept) starts at 10; p1: a ended at 4, b starts at 5.
    assert plan.cutoffs == {0: 10, 1: 5}


def test_cut_never_passes_a_kept_run():
    # A kept run that starts below an expired run's end bounds the cut.
    early = commit("e", "d3", 1, {0: (3, 5)})
    plan = plan_expiry(log(early, A, B, C), now=NOW)
    assert plan.runs == ["a"] and plan.cutoffs[0] == 3


def test_older_than_and_keep_last():
    plan = plan_expiry(log(A, B, C), now=NOW, older_than=dt.timedelta(days=7, hours=12))
    assert plan.runs == ["a", "b"]  # b was committed on the 2nd, more than 7.5 days before
    assert plan.cutoffs == {0: 20, 1: 10}
    plan = plan_expiry(log(A, B, C), now=NOW, keep_last=1)
    assert plan.runs == ["a", "b"]  # d1 (run c) is the most recently committed window
    assert plan_expiry(log(A, B, C), now=NOW, keep_last=2).runs == ["a"]
    with pytest.raises(ShuffleOptionError, match="keep_last"):
        plan_expiry(log(A), now=NOW, keep_last=0)


def test_young_records_are_protected():
    plan = plan_expiry(log(A, B, C), now=NOW, protect_from={0: 7, 1: 100})
    assert plan.cutoffs == {0: 7, 1: 5}


def test_an_interrupted_expiry_computes_the_same_cuts_again():
    first = plan_expiry(log(A, B, C), now=NOW)
    # After the markers were written and the commit record deleted, before delete_records.
    again = log(B, C)
    again.expired = {"a": marker(A, "superseded", NOW)}
    second = plan_expiry(again, now=NOW)
    assert second.runs == [] and second.cutoffs == first.cutoffs


def test_nothing_to_do():
    plan = plan_expiry(log(B, C), now=NOW)
    assert plan.runs == [] and plan.cutoffs == {}


def test_bytes_deleted_counts_what_the_cut_removes():
    m = marker(A, "superseded", NOW)  # 1000 bytes, 10 rows in p0 (0-9) and 10 in p1 (0-4)
    assert bytes_deleted([m], {0: 0, 1: 0}, {0: 10, 1: 5}) == {0: 500, 1: 500}
    # Half of p0's range cut, p1 not cut.
    assert bytes_deleted([m], {0: 0}, {0: 5}) == {0: 250}
    # Already gone before this call: nothing counted again.
    assert bytes_deleted([m], {0: 10}, {0: 10}) == {}


def test_a_commit_record_that_cannot_be_read_stops_expiry():
    records = [(f"commit/{c.run_id}", c.to_json()) for c in (A, B, C)]
    broken = ShuffleLog.from_records("t", [*records, ("commit/x", '{"run_id": "x", "win')])
    with pytest.raises(ShuffleFormatError, match="'t__commits' partition 0 offset 3: record "):
        plan_expiry(broken, now=NOW)
    # A foreign record does not.
    foreign = ShuffleLog.from_records("t", [*records, ("user-42", "{}")])
    assert plan_expiry(foreign, now=NOW).runs == ["a"]
