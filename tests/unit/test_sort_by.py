"""Sorted runs in the pure parts: ``sort_by`` checked, recorded in the layout and the commit
record (absent in old records: no order), and carried into the read plan's segments."""

import json

import pyarrow as pa
import pytest

from orchestration.shuffle import Commit, Layout, ShuffleOptionError, ShuffleSpec
from orchestration.shuffle.core.commitlog import PartitionRange, build_commit
from orchestration.shuffle.core.planner import SplitPlan, plan_splits
from orchestration.shuffle.spec import sort_by_problem

SCHEMA = pa.schema([("k", pa.string()), ("j", pa.int64()), ("x", pa.float64())])


def layout(sort_by=()):
    return Layout("t", ("k", "j"), 2, 8, SCHEMA, sort_by=sort_by)


def commit(run, sort_by=()):
    return Commit(
        run_id=run,
        window=None,
        committed_at="2024-01-01T00:00:00+00:00",
        tasks=((0, 0), (1, 0)),
        partitions={0: PartitionRange(0, 4, 10, 2), 1: PartitionRange(0, 3, 5, 1)},
        rows=15,
        bytes=100,
        frames=3,
        sort_by=sort_by,
    )


@pytest.mark.parametrize(
    ("sort_by", "problem"),
    [
        ((), None),
        (("k", "j"), None),
        (("k", "j", "x"), None),
        (("j", "k"), "at position 0 it has column 'j' where key column 'k' belongs"),
        (("k",), "at position 1 it ends where key column 'j' belongs"),
        (("x", "k", "j"), "must start with the key columns ['k', 'j'] in that order"),
        (("k", "j", "x", "x"), "names column 'x' twice"),
        (("k", "j", ""), "not a column name"),
    ],
)
def test_sort_by_must_start_with_the_key(sort_by, problem):
    got = sort_by_problem(("k", "j"), sort_by)
    assert got is None if problem is None else problem in got


def test_spec_refuses_a_sort_by_not_led_by_the_key():
    with pytest.raises(ShuffleOptionError, match=r"shuffle 't': sort_by \['x'\] must start"):
        ShuffleSpec("t", "k", 2, sort_by="x")
    assert ShuffleSpec("t", "k", 2, sort_by="k").sort_by == ("k",)
    assert ShuffleSpec("t", "k", 2, sort_by=["k", "x"]).sort_by == ("k", "x")
    assert ShuffleSpec("t", "k", 2).sort_by == ()


def test_layout_and_commit_record_the_sort_only_when_there_is_one():
    plain = json.loads(layout().to_json())
    assert "sort_by" not in plain
    assert Layout.from_json(layout(("k", "j", "x")).to_json()).sort_by == ("k", "j", "x")
    assert Layout.from_json(json.dumps(plain)).sort_by == ()
    assert layout(("k", "j")).differences(layout()) == ["sort_by is ['k', 'j'], not []"]
    assert "sort_by" not in json.loads(commit("r").to_json())
    assert Commit.from_json(commit("r", ("k", "j")).to_json()).sort_by == ("k", "j")
    built = build_commit("r", None, [], None, sort_by=["k", "j"])
    assert built.sort_by == ("k", "j")


def test_segments_are_sorted_when_the_run_was_written_in_the_layouts_order():
    commits = [commit("a", ("k", "j")), commit("b"), commit("c", ("k", "j", "x"))]
    splits = plan_splits(layout(("k", "j")), commits)
    for s in splits:
        (read,) = s.reads
        assert [g.sorted for g in read.segments] == [True, False, False]
        again = SplitPlan.from_json(s.to_json())
        assert again == s
        segs = json.loads(s.to_json())["reads"][0]["segments"]
        # Written only when true: a plan of unsorted runs is the JSON it always was.
        assert [g.get("sorted") for g in segs] == [True, None, None]
    assert not any(g.sorted for s in plan_splits(layout(), commits) for g in s.reads[0].segments)
