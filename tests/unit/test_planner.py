import pyarrow as pa
import pytest

from orchestration.shuffle import Commit, Layout, ShuffleOptionError, key_group_range
from orchestration.shuffle.core.commitlog import PartitionRange
from orchestration.shuffle.core.planner import (
    AUTO_TASK_ROWS,
    Segment,
    SplitPlan,
    balance_splits,
    merged_intervals,
    overlaps,
    plan_splits,
    split_passes,
)

LAYOUT = Layout("t", ("k",), 4, 16, pa.schema([("k", pa.string())]))


def commit(run, parts, emin=None, emax=None):
    return Commit(
        run,
        None,
        "x",
        ((0, 0),),
        {p: PartitionRange(a, b) for p, (a, b) in parts.items()},
        0,
        0,
        0,
        emin,
        emax,
    )


COMMITS = [commit("a", {0: (0, 9), 2: (0, 4)}), commit("b", {0: (10, 19), 3: (5, 5)})]


def test_default_parallelism_is_one_split_per_partition():
    plans = plan_splits(LAYOUT, COMMITS)
    assert [len(p.reads) for p in plans] == [1, 1, 1, 1]
    assert [p.reads[0].partition for p in plans] == [0, 1, 2, 3]
    assert all(r.full for p in plans for r in p.reads)
    assert [s.run_id for s in plans[0].reads[0].segments] == ["a", "b"]
    assert plans[1].reads[0].segments == ()


def test_smaller_parallelism_keeps_whole_partitions():
    plans = plan_splits(LAYOUT, COMMITS, parallelism=3)
    parts = [[r.partition for r in p.reads] for p in plans]
    assert sorted(x for ps in parts for x in ps) == [0, 1, 2, 3]
    assert parts == [[0], [1], [2, 3]]


def test_larger_parallelism_splits_key_groups_never_groups():
    plans = plan_splits(LAYOUT, COMMITS, parallelism=10)
    assert [p.index for p in plans] == list(range(10))
    groups = []
    for p in plans:
        (r,) = p.reads
        assert set(range(r.key_group_start, r.key_group_end)) <= set(
            key_group_range(r.partition, 16, 4)
        )
        groups.extend(range(r.key_group_start, r.key_group_end))
    assert sorted(groups) == list(range(16))  # every group exactly once


def test_plan_json_round_trip():
    for plan in plan_splits(LAYOUT, COMMITS, parallelism=6):
        assert SplitPlan.from_json(plan.to_json()) == plan


def test_bad_parallelism_and_partition():
    with pytest.raises(ShuffleOptionError, match="parallelism"):
        plan_splits(LAYOUT, COMMITS, parallelism=0)
    with pytest.raises(ShuffleOptionError, match="partition 7"):
        plan_splits(LAYOUT, [commit("x", {7: (0, 1)})])


def test_overlaps():
    c = commit("a", {}, emin=100, emax=200)
    assert overlaps(c, None, None)
    assert overlaps(c, 150, 160) and overlaps(c, 200, 300) and overlaps(c, 0, 101)
    assert not overlaps(c, 201, None) and not overlaps(c, None, 100)
    assert not overlaps(commit("e", {}), 0, 10)  # an empty run holds no rows


def test_merged_intervals():
    segs = [
        Segment("a", 10, 20, ()),
        Segment("b", 0, 4, ()),
        Segment("c", 5, 12, ()),
        Segment("d", 30, 31, ()),
    ]
    assert merged_intervals(segs) == [(0, 20), (30, 31)]


def test_passes_cut_a_partition_into_key_group_ranges_of_bounded_rows():
    big = Commit(
        "r", None, "x", ((0, 0),),
        {0: PartitionRange(0, 99, rows=1000, frames=10), 1: PartitionRange(0, 9, rows=10)},
        1010, 0, 10,
    )  # fmt: skip
    (p0, p1, _, _) = plan_splits(LAYOUT, [big])
    assert p0.reads[0].segments[0].rows == 1000
    assert SplitPlan.from_json(p0.to_json()) == p0
    passes = split_passes(p0.reads[0], 16, 4, max_rows=300)
    assert len(passes) == 4  # 1000 rows over 4 key groups, at most 300 a pass: one group each
    ranges = [(r.key_group_start, r.key_group_end) for r in passes]
    assert ranges == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert not any(r.full for r in passes)
    assert all(r.segments == p0.reads[0].segments for r in passes)
    # Fewer rows than the bound: one pass, the read itself.
    assert split_passes(p1.reads[0], 16, 4, max_rows=300) == [p1.reads[0]]
    # A bound below one key group's rows: never more passes than key groups.
    assert len(split_passes(p0.reads[0], 16, 4, max_rows=1)) == 4
    halves = split_passes(p0.reads[0], 16, 4, max_rows=500)
    assert [(r.key_group_start, r.key_group_end) for r in halves] == [(0, 2), (2, 4)]
    with pytest.raises(ShuffleOptionError):
        split_passes(p0.reads[0], 16, 4, max_rows=0)


def test_passes_of_a_split_key_group_range_cover_it_exactly():
    big = Commit("r", None, "x", ((0, 0),), {0: PartitionRange(0, 9, rows=900)}, 900, 0, 1)
    for plan in plan_splits(LAYOUT, [big], parallelism=8)[:2]:
        (read,) = plan.reads
        passes = split_passes(read, 16, 4, max_rows=200)
        assert len(passes) == 2  # half the partition's groups: 450 rows estimated
        covered = [g for r in passes for g in range(r.key_group_start, r.key_group_end)]
        assert covered == list(range(read.key_group_start, read.key_group_end))


def test_balanced_tasks_read_whole_partitions_and_share_rows_evenly():
    rows = {0: 100, 1: 900, 2: 300, 3: 600}
    c = Commit(
        "r", None, "x", ((0, 0),),
        {p: PartitionRange(0, 9, rows=n) for p, n in rows.items()}, sum(rows.values()), 0, 4,
    )  # fmt: skip
    splits = plan_splits(LAYOUT, [c])
    two = balance_splits(splits, 2, 16, 4)
    assert [s.index for s in two] == [0, 1]
    assert sorted(r.partition for s in two for r in s.reads) == [0, 1, 2, 3]  # each once, whole
    assert all(r.full for s in two for r in s.reads)
    loads = sorted(sum(rows[r.partition] for r in s.reads) for s in two)
    assert loads == [900, 1000]  # {1} and {3, 2, 0}: largest first onto the least loaded
    assert balance_splits(splits, 4, 16, 4) == splits
    assert balance_splits(splits, 9, 16, 4) == splits
    one = balance_splits(splits, 1, 16, 4)
    assert len(one) == 1 and [r.partition for r in one[0].reads] == [0, 1, 2, 3]


def sized(run, rows_per_partition):
    """A commit with the given rows in each of LAYOUT's partitions that it touches."""
    return Commit(
        run, None, "x", ((0, 0),),
        {p: PartitionRange(10 * p, 10 * p + 1, rows) for p, rows in rows_per_partition.items()},
        0, 0, 0, None, None,
    )  # fmt: skip


def test_auto_parallelism_merges_whole_partitions_of_a_small_read():
    # Under AUTO_TASK_ROWS in all: one task reading all four partitions, in order.
    small = [sized("a", {0: 10, 1: 20, 2: 30, 3: 40})]
    plans = plan_splits(LAYOUT, small, parallelism="auto")
    assert [[r.partition for r in p.reads] for p in plans] == [[0, 1, 2, 3]]
    assert all(r.full for r in plans[0].reads)
    # Enough rows for two tasks: whole contiguous partitions, as parallelism=2 gives.
    two = [sized("a", {0: AUTO_TASK_ROWS, 1: 1, 2: 1, 3: AUTO_TASK_ROWS // 2})]
    assert plan_splits(LAYOUT, two, parallelism="auto") == plan_splits(LAYOUT, two, parallelism=2)
    # A large read keeps one split per partition; never more splits than partitions.
    big = [sized("a", {p: 3 * AUTO_TASK_ROWS for p in range(4)})]
    assert plan_splits(LAYOUT, big, parallelism="auto") == plan_splits(LAYOUT, big)
    # Commits without row counts: one split per partition (nothing to size by).
    assert plan_splits(LAYOUT, COMMITS, parallelism="auto") == plan_splits(LAYOUT, COMMITS)
    # Nothing to read: one empty split.
    assert len(plan_splits(LAYOUT, [], parallelism="auto")) == 1
    with pytest.raises(ShuffleOptionError, match="positive integer or 'auto'"):
        plan_splits(LAYOUT, small, parallelism="fast")
