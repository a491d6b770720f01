import datetime as dt

import pyarrow as pa
import pytest

from orchestration.shuffle import Commit, Layout, ShuffleFormatError, ShuffleLayoutError, ShuffleLog
from orchestration.shuffle.core.commitlog import (
    COMMIT_PREFIX,
    LAYOUT_KEY,
    PartitionRange,
    TaskResult,
    build_commit,
    commit_topic,
    from_micros,
    recover_window,
    to_micros,
)

SCHEMA = pa.schema([("tailnum", pa.string()), ("sched_dep", pa.timestamp("us", tz="UTC"))])


def layout(**kw):
    base = dict(
        topic="t",
        key=("tailnum",),
        num_partitions=8,
        max_parallelism=128,
        schema=SCHEMA,
        event_time="sched_dep",
    )
    base.update(kw)
    return Layout(**base)


def commit(run, window, wm=None, until=None, emin=None, emax=None):
    return Commit(
        run,
        window,
        "2013-01-01T00:00:00+00:00",
        ((0, 0), (1, 2)),
        {0: PartitionRange(5, 9, 10, 1)},
        10,
        100,
        1,
        emin,
        emax,
        wm,
        until,
    )


def test_layout_round_trip_and_no_differences():
    lay = layout()
    back = Layout.from_json(lay.to_json())
    assert back == lay
    assert back.schema.equals(SCHEMA)
    assert lay.differences(back) == []


def test_layout_differences_say_what_differs():
    other = layout(
        key=("carrier",),
        num_partitions=4,
        max_parallelism=64,
        schema=pa.schema([("tailnum", pa.int64()), ("x", pa.string())]),
    )
    diffs = " | ".join(layout().differences(other))
    for expected in [
        "key is ['tailnum'], not ['carrier']",
        "num_partitions is 8, not 4",
        "max_parallelism is 128, not 64",
        "column 'sched_dep' is missing",
        "column 'x' is not in",
        "column 'tailnum' has type int64",
    ]:
        assert expected in diffs


def test_commit_round_trip():
    c = commit("r1", "2013-01-01", wm=5, until=9, emin=1, emax=6)
    assert Commit.from_json(c.to_json()) == c
    assert c.effective_watermark == 9
    assert c.subtasks == {0, 1}


def test_commit_watermark_as_time_and_completeness():
    day_end = dt.datetime(2013, 1, 2, tzinfo=dt.UTC)
    c = commit("r1", "2013-01-01", wm=to_micros(day_end) - 1, until=None)
    assert c.watermark_time == day_end - dt.timedelta(microseconds=1)
    assert not c.complete_through(day_end)
    assert c.complete_through(day_end.replace(tzinfo=None) - dt.timedelta(microseconds=1))
    done = commit("r2", "2013-01-01", wm=None, until=to_micros(day_end))
    assert done.complete_through(day_end) and done.watermark_time == day_end
    unknown = commit("r3", "2013-01-01")
    assert unknown.watermark_time is None and not unknown.complete_through(day_end)


def test_a_record_without_a_key_is_skipped_and_reported():
    log = ShuffleLog.from_records("t", [(None, b"{}")], offsets=[7])
    assert [(b.offset, b.key) for b in log.bad_records] == [(7, None)]
    assert "'t__commits' partition 0 offset 7: record without a key" in (
        log.bad_records[0].describe("t")
    )


def records(*items):
    return [(k.encode(), v.encode() if isinstance(v, str) else v) for k, v in items]


def test_later_run_of_a_window_supersedes():
    log = ShuffleLog.from_records(
        "t",
        records(
            (LAYOUT_KEY, layout().to_json()),
            (COMMIT_PREFIX + "a", commit("a", "d1").to_json()),
            (COMMIT_PREFIX + "b", commit("b", "d2").to_json()),
            (COMMIT_PREFIX + "c", commit("c", "d1").to_json()),
            (COMMIT_PREFIX + "n", commit("n", None).to_json()),
        ),
    )
    assert [c.run_id for c in log.visible()] == ["b", "c", "n"]
    assert [c.run_id for c in log.visible(windows=["d1"])] == ["c"]
    # A superseded run stays readable by its id.
    assert [c.run_id for c in log.visible(runs=["a"])] == ["a"]
    assert log.latest_by_window()["d1"].run_id == "c"


def test_rewritten_and_deleted_commit_records():
    log = ShuffleLog.from_records(
        "t",
        records(
            (COMMIT_PREFIX + "a", commit("a", "d1").to_json()),
            (COMMIT_PREFIX + "b", commit("b", "d2").to_json()),
            (COMMIT_PREFIX + "a", None),
        ),
    )
    assert [c.run_id for c in log.commits] == ["b"]
    with pytest.raises(ShuffleLayoutError, match="no layout record in 't__commits'"):
        log.require_layout()


def test_unknown_record_key_is_skipped_and_reported():
    log = ShuffleLog.from_records("t", records(("junk", "{}")))
    assert [(b.offset, b.key, b.is_commit) for b in log.bad_records] == [(0, "junk", False)]
    log.require_readable()  # a foreign record hides no run


def test_an_unreadable_layout_record_is_a_format_error():
    with pytest.raises(ShuffleFormatError, match="record 'layout' at partition 0 offset 3 is"):
        ShuffleLog.from_records("t", records((LAYOUT_KEY, '{"topic": "t"')), offsets=[3])
    # One written again after it is the layout.
    log = ShuffleLog.from_records(
        "t", records((LAYOUT_KEY, '{"topic": "t"'), (LAYOUT_KEY, layout().to_json()))
    )
    assert log.layout == layout() and log.bad_records == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"run_id": "r", "window": "2013-01-01", "tas', (True, "2013-01-01")),
        ('{"window":"caf\\u00e9 \\"x\\"", "run_id": ', (True, 'café "x"')),
        ('{"window": null, "run_id": ', (True, None)),
        ('{"run_id": "r", "window": "2013-01', (False, None)),
        ('{"attrs": {"window": "a"}, "window": "b"', (False, None)),
        ("not json at all", (False, None)),
    ],
)
def test_recover_window_from_a_record_cut_short(text, expected):
    assert recover_window(text) == expected
    assert recover_window(text.encode()) == expected


def test_watermark_is_the_furthest_visible():
    log = ShuffleLog(
        "t",
        layout(),
        [commit("a", "d1", wm=10), commit("b", "d2", until=50), commit("c", "d1", wm=5)],
    )
    assert log.watermark() == 50  # a is superseded by c
    assert ShuffleLog("t").watermark() is None


def test_build_commit_merges_task_results():
    r0 = TaskResult(
        0,
        1,
        {0: PartitionRange(10, 20, 5, 1), 1: PartitionRange(3, 4, 0, 0)},
        5,
        50,
        1,
        100,
        200,
        190,
    )
    r1 = TaskResult(1, 0, {0: PartitionRange(8, 15, 7, 2)}, 7, 70, 2, 50, 300, 290)
    empty = TaskResult(2, 0, {0: PartitionRange(30, 30)}, 0, 0, 0, None, None, None)
    c = build_commit("run", "w", [r0, r1, empty], complete_until=None)
    assert c.tasks == ((0, 1), (1, 0), (2, 0))
    assert c.partitions[0] == PartitionRange(8, 30, 12, 3)
    assert (c.rows, c.bytes, c.frames) == (12, 120, 3)
    assert (c.event_time_min, c.event_time_max, c.watermark) == (50, 300, 190)
    assert build_commit("run", "w", [r0, r1], complete_until=1000).watermark == 1000
    with pytest.raises(ShuffleLayoutError, match="more than one attempt"):
        build_commit("run", "w", [r0, r0], None)


def test_empty_run_commits():
    c = build_commit("run", "w", [], complete_until=None)
    assert (c.rows, c.partitions, c.watermark) == (0, {}, None)


def test_micros_round_trip_and_topic_name():
    t = dt.datetime(2013, 1, 1, 5, 15, 7, 123456, tzinfo=dt.UTC)
    assert from_micros(to_micros(t)) == t
    assert to_micros(dt.datetime(1970, 1, 1)) == 0
    assert commit_topic("flights.by_tailnum") == "flights.by_tailnum__commits"
