"""The commit sensor's cursor stays bounded however many windows it launches for."""

import datetime as dt
import json
import uuid

from orchestration.sensors import KEPT_LAUNCHES, CommitCursor, commit_launches
from orchestration.shuffle import Commit

# What a cursor may weigh, whatever the number of windows: KEPT_LAUNCHES launches of a
# 10-character window and a 36-character run id, and the offset.
BOUND = 64 * KEPT_LAUNCHES + 64


def window(i: int) -> str:
    return (dt.date(2020, 1, 1) + dt.timedelta(days=i)).isoformat()


def commit(w: str, *, complete: bool = True) -> Commit:
    return Commit(
        run_id=str(uuid.uuid4()),
        window=w,
        committed_at="2024-01-01T00:00:00+00:00",
        tasks=((0, 0),),
        partitions={},
        rows=1,
        bytes=1,
        frames=1,
        attrs={"complete": "yes" if complete else "no"},
    )


def complete(c: Commit) -> bool:
    return c.attrs["complete"] == "yes"


def run_ticks(n_windows: int, cursor: CommitCursor | None = None) -> tuple[CommitCursor, list]:
    """One tick per new commit (the commit log grows by one record between ticks)."""
    cursor = cursor or CommitCursor()
    launched = []
    for i in range(n_windows):
        c = commit(window(i))
        out, cursor = commit_launches(cursor, [c], cursor.offset + 1, complete)
        launched.extend(out)
    return cursor, launched


def size(cursor: CommitCursor) -> int:
    return len(cursor.to_json().encode())


def test_cursor_size_is_bounded_from_10_to_400_windows():
    small, launched_small = run_ticks(10)
    large, launched_large = run_ticks(400)
    assert len(launched_small) == 10 and len(launched_large) == 400
    assert large.offset == 400 and len(large.launched) == KEPT_LAUNCHES
    # What a cursor holding every launched window would weigh, for comparison.
    unbounded = len(
        json.dumps(
            {"offset": 400, "launched": {c.window: c.run_id for c in launched_large}}
        ).encode()
    )
    print(f"cursor bytes: 10 windows {size(small)}, 400 windows {size(large)} "
          f"(every window kept: {unbounded})")  # fmt: skip
    assert size(small) < size(large) <= BOUND < unbounded
    # The same holds when one tick reads all 400 commits at once.
    _, at_once = commit_launches(
        CommitCursor(), [commit(window(i)) for i in range(400)], 400, complete
    )
    assert size(at_once) <= BOUND


def test_a_superseding_rerun_of_an_old_window_launches_again():
    cursor, launched = run_ticks(400)
    oldest = launched[0]
    assert (oldest.window, oldest.run_id) not in cursor.launched  # pruned long ago
    rerun = commit(oldest.window)
    out, after = commit_launches(cursor, [rerun], cursor.offset + 1, complete)
    assert out == [rerun]
    assert after.launched[-1] == (oldest.window, rerun.run_id)
    assert size(after) <= BOUND


def test_a_repeated_tick_is_a_no_op_and_a_record_read_twice_launches_once():
    cursor, launched = run_ticks(40)
    # The same cursor again: the same commits read, the same launches, the same next cursor
    # (so the same run keys, which the daemon runs once).
    c = commit(window(41))
    first, after = commit_launches(cursor, [c], cursor.offset + 1, complete)
    again, after_again = commit_launches(cursor, [c], cursor.offset + 1, complete)
    assert first == again == [c] and after == after_again
    # The next tick reads nothing new and launches nothing.
    assert commit_launches(after, [], after.offset, complete) == ([], after)
    # The same commit record read again at a later offset (a retried produce) is not
    # launched twice, nor is a recent one.
    assert commit_launches(after, [c, launched[-1]], after.offset + 2, complete)[0] == []


def test_only_the_latest_complete_run_of_a_window_launches():
    old, new = commit(window(0)), commit(window(0))
    pending = commit(window(1), complete=False)
    out, cursor = commit_launches(CommitCursor(), [old, pending, new], 3, complete)
    assert out == [new]
    assert cursor == CommitCursor(3, ((window(0), new.run_id),))


def test_cursor_round_trips_and_reads_the_unbounded_format():
    cursor = CommitCursor(7, (("2024-01-01", "r1"), ("2024-01-02", "r2")))
    assert CommitCursor.parse(cursor.to_json()) == cursor
    assert CommitCursor.parse(None) == CommitCursor()
    # A cursor of the earlier format, every window kept: read, and cut to the bound.
    earlier = {"offset": 900, "launched": {window(i): f"run-{i}" for i in range(300)}}
    parsed = CommitCursor.parse(json.dumps(earlier))
    assert parsed.offset == 900 and len(parsed.launched) == KEPT_LAUNCHES
    assert parsed.launched[-1] == (window(299), "run-299")
