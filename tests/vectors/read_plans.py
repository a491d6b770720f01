"""The read-plan vectors both planners are tested against: commit-log records in, plan out.

``read_plans.json`` holds, per case, a shuffle's commit-log records (``[key, value]``, value
null for a delete; a record's offset is its index), a read's string options, and what the
Python planner (:func:`orchestration.shuffle.core.planner.plan_read` through
``ReadOptions.parse``) makes of them: the splits as ``SplitPlan.to_json`` writes them, or the
error's class and message; and, when the log skipped records, ``bad_records``: each as
``[offset, key, window_known, window]``.
``tests/unit/test_read_plan_vectors.py`` checks the Python planner against the file and the
file against :func:`cases`; ``tests/integration/test_jvm_read.py`` checks the JVM planner
(``io.kafkashuffle.spark.ReadPlanner``) against the same file.

After a deliberate change of the read rules, write the file again and review its diff::

    .venv/bin/python -m tests.vectors.read_plans --write
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

from orchestration.shuffle import Commit, Layout, ShuffleError, ShuffleLog
from orchestration.shuffle.core.commitlog import (
    COMMIT_PREFIX,
    EXPIRED_PREFIX,
    LAYOUT_KEY,
    Expired,
    PartitionRange,
    version_to_json,
)
from orchestration.shuffle.core.evolution import LayoutVersion, change_key
from orchestration.shuffle.core.options import Options
from orchestration.shuffle.core.planner import ReadOptions

FILE = Path(__file__).with_name("read_plans.json")
TOPIC = "vectors.events"
OWNER = "kafka-shuffle-jvm"
DAY = 86_400_000_000  # a day in microseconds
T0 = 1_356_998_400_000_000  # 2013-01-01T00:00:00Z in microseconds


def ms(micros: int) -> str:
    """An instant as the options give it: epoch milliseconds."""
    return str(micros // 1000)


Record = tuple[str | None, str | None]


def layout(*, event_time: str | None = "ts", partitions: int = 4, max_par: int = 16) -> Record:
    schema = pa.schema([("k", pa.string()), ("ts", pa.timestamp("us", "UTC")), ("v", pa.int64())])
    return (
        LAYOUT_KEY,
        Layout(TOPIC, ("k",), partitions, max_par, schema, event_time=event_time).to_json(),
    )


def commit(
    run: str,
    window: str | None,
    parts: dict[int, tuple[int, int, int]],
    *,
    tasks: tuple[tuple[int, int], ...] = ((0, 0), (1, 0)),
    day: int | None = 0,
    version: int = 1,
) -> Record:
    """A commit of ``run``: per partition (first offset, last offset, rows)."""
    ranges = {p: PartitionRange(a, b, rows, 1) for p, (a, b, rows) in parts.items()}
    rows = sum(r.rows for r in ranges.values())
    c = Commit(
        run_id=run,
        window=window,
        committed_at="2013-01-02T00:00:00+00:00",
        tasks=tasks,
        partitions=ranges,
        rows=rows,
        bytes=rows * 40,
        frames=len(ranges),
        event_time_min=None if day is None else T0 + day * DAY,
        event_time_max=None if day is None else T0 + day * DAY + DAY - 1,
        watermark=None if day is None else T0 + day * DAY + DAY - 1,
        layout_version=version,
    )
    return (COMMIT_PREFIX + run, c.to_json())


def grown(partitions: int, version: int = 2) -> Record:
    """A change record growing the layout() shuffle to ``partitions`` (schema unchanged)."""
    first = Layout.from_json(layout()[1] or "")
    v = LayoutVersion(
        version,
        first.schema,
        tuple(range(1, len(first.schema) + 1)),
        len(first.schema),
        partitions,
        (f"grew the partitions to {partitions}",),
        change_id=f"grow{partitions}",
    )
    return (change_key(version, f"grow{partitions}"), version_to_json(v))


def expired(run: str, window: str | None, parts: dict[int, tuple[int, int]]) -> Record:
    e = Expired(
        run_id=run,
        window=window,
        expired_at="2013-02-01T03:00:00+00:00",
        reason="not among the 30 most recent windows",
        partitions={p: PartitionRange(a, b) for p, (a, b) in parts.items()},
    )
    return (EXPIRED_PREFIX + run, e.to_json())


def delete(key: str) -> Record:
    return (key, None)


# A log with windowed runs (one superseded, one re-committed), runs without a window, an
# expired window and a run with no event times.
HISTORY: list[Record] = [
    layout(),
    commit("d1-a", "2013-01-01", {0: (0, 3, 400), 1: (4, 5, 200), 3: (6, 9, 900)}),
    commit("d2-a", "2013-01-02", {0: (10, 12, 300), 2: (13, 15, 300)}, day=1),
    commit("d1-b", "2013-01-01", {0: (16, 18, 350), 1: (19, 20, 150), 2: (21, 22, 120)}),
    commit("free-1", None, {1: (23, 24, 10), 3: (25, 26, 20)}, tasks=((0, 1),), day=None),
    commit("d0-a", "2012-12-31", {2: (27, 28, 5)}, day=-1),
    expired("d0-a", "2012-12-31", {2: (27, 28)}),
    delete(COMMIT_PREFIX + "d0-a"),
    commit("d3-a", "2013-01-03", {3: (29, 31, 70)}, day=2),
    commit("free-2", None, {0: (32, 33, 40)}, day=3),
    # d2 committed again under the same run id: the later record wins and moves to the end.
    commit(
        "d2-a", "2013-01-02", {0: (34, 36, 310), 2: (37, 39, 290)}, tasks=((0, 1), (1, 0)), day=1
    ),
    expired("gone", "2012-12-30", {1: (0, 0)}),
    delete(EXPIRED_PREFIX + "gone"),
]


def cases() -> list[dict[str, Any]]:
    """Every case: its name, the records and the read's string options."""
    w = json.dumps
    out: list[dict[str, Any]] = [
        {"name": "all visible, one split per partition", "options": {}},
        {"name": "windows", "options": {"windows": w(["2013-01-02", "2013-01-01"])}},
        {"name": "a superseded run by name", "options": {"runs": w(["d1-a", "free-1"])}},
        {
            "name": "runs and windows together",
            "options": {"runs": w(["d1-a", "d1-b"]), "windows": w(["2013-01-01"])},
        },
        {
            "name": "a window never committed",
            "options": {"windows": w(["2013-01-09", "2013-01-01"])},
        },
        {"name": "an expired window", "options": {"windows": w(["2012-12-31", "2013-01-08"])}},
        {"name": "an expired run", "options": {"runs": w(["d0-a"])}},
        {"name": "a missing run", "options": {"runs": w(["nope", "d1-b"])}},
        {
            "name": "a marker deleted again is not an expiry",
            "options": {"windows": w(["2012-12-30"])},
        },
        {
            "name": "event-time range",
            "options": {"event_time_start_ms": ms(T0 + DAY), "event_time_end_ms": ms(T0 + 2 * DAY)},
        },
        {"name": "event-time start only", "options": {"event_time_start_ms": ms(T0 + 2 * DAY)}},
        {"name": "event-time end only", "options": {"event_time_end_ms": ms(T0 + DAY)}},
        {
            "name": "event-time range outside every run",
            "options": {"event_time_start_ms": ms(T0 + 50 * DAY)},
        },
        {
            "name": "event-time start with microseconds",
            "options": {"event_time_start_ms": f" {(T0 + DAY) // 1000 - 1}.250 "},
        },
        {"name": "event time not milliseconds", "options": {"event_time_end_ms": "1e3"}},
        {"name": "event time with 4 decimals", "options": {"event_time_end_ms": "1.2345"}},
        {
            "name": "event time beyond a long's microseconds",
            "options": {"event_time_start_ms": "9223372036854775.808"},
        },
        {
            "name": "the least event time a long holds",
            "options": {"event_time_start_ms": "-9223372036854775.808"},
        },
        {
            "name": "the old microsecond option",
            "options": {"event_time_start": str(T0 + DAY)},
        },
        {"name": "a misspelled option", "options": {"window": w(["2013-01-01"])}},
        {
            "name": "options of Spark's kafka source and a path",
            "options": {"endingOffsets": "latest", "MinPartitions": "4", "path": "/x"},
        },
        {"name": "a setting without its prefix", "options": {"bootstrap.servers": "h:1"}},
        {"name": "an unknown option far from any", "options": {"zzz": "1"}},
        {"name": "a kafka setting is not checked", "options": {"kafka.anything": "1"}},
        {"name": "parallelism 1", "options": {"parallelism": "1"}},
        {"name": "parallelism 3 of 4 partitions", "options": {"parallelism": "3"}},
        {"name": "parallelism 7 of 4 partitions", "options": {"parallelism": "7"}},
        {"name": "parallelism 16 of 4 partitions", "options": {"parallelism": "16"}},
        {"name": "parallelism auto (small read)", "options": {"parallelism": "auto"}},
        {
            "name": "parallelism AUTO with a window",
            "options": {"parallelism": "AUTO", "windows": w(["2013-01-03"])},
        },
    ]
    for c in out:
        c["records"] = HISTORY
    big = [
        layout(event_time=None, partitions=3, max_par=10),
        commit("big", None, {0: (0, 9, 900_000), 1: (10, 19, 600_000), 2: (20, 29, 10)}, day=None),
    ]
    out += [
        {"name": "auto on a large read", "records": big, "options": {"parallelism": "auto"}},
        {
            "name": "uneven key groups, parallelism 5",
            "records": big,
            "options": {"parallelism": "5"},
        },
        {
            "name": "event time on a shuffle without it",
            "records": big,
            "options": {"event_time_end_ms": "5"},
        },
        {
            "name": "auto without row counts",
            "records": [big[0], commit("norows", None, {1: (0, 0, 0)}, day=None)],
            "options": {"parallelism": "auto"},
        },
        {"name": "no commits", "records": [layout()], "options": {}},
        {"name": "no layout", "records": [HISTORY[1]], "options": {}},
        {
            "name": "a commit outside the partitions",
            "records": [big[0], commit("far", None, {5: (0, 1, 3)})],
            "options": {},
        },
        {
            "name": "an unknown record key",
            "records": [layout(), ("compacted/x", "{}")],
            "options": {},
        },
        {"name": "a record without a key", "records": [layout(), (None, "{}")], "options": {}},
        *bad_record_cases(w),
        {
            "name": "a layout record deleted keeps the layout",
            "records": [layout(), delete(LAYOUT_KEY), HISTORY[1]],
            "options": {},
        },
        *growth_cases(w),
    ]
    return out


def growth_cases(w: Any) -> list[dict[str, Any]]:
    """Runs written before and after the partitions grew (4 to 8, and 4 to 6), read
    together and keyed: each split keeps its key groups of the older runs' partitions."""
    doubled = [
        layout(),
        commit(
            "old", "2013-01-01", {0: (0, 1, 100), 1: (2, 3, 100), 2: (4, 5, 100), 3: (6, 7, 100)}
        ),
        grown(8),
        commit(
            "new",
            "2013-01-02",
            {p: (10 + 2 * p, 11 + 2 * p, 50) for p in range(8)},
            day=1,
            version=2,
        ),
    ]
    uneven = [
        layout(),
        commit(
            "old", "2013-01-01", {0: (0, 1, 100), 1: (2, 3, 100), 2: (4, 5, 100), 3: (6, 7, 100)}
        ),
        grown(6),
        commit("new", "2013-01-02", {p: (10 + p, 10 + p, 60) for p in range(6)}, day=1, version=2),
    ]
    return [
        {"name": "grown 4 to 8, both runs", "records": doubled, "options": {}},
        {
            "name": "grown 4 to 8, the old window alone",
            "records": doubled,
            "options": {"windows": w(["2013-01-01"])},
        },
        {
            "name": "grown 4 to 8, parallelism 3",
            "records": doubled,
            "options": {"parallelism": "3"},
        },
        {
            "name": "grown 4 to 8, parallelism 16",
            "records": doubled,
            "options": {"parallelism": "16"},
        },
        {"name": "grown 4 to 6, both runs", "records": uneven, "options": {}},
        {"name": "grown 4 to 6, parallelism 4", "records": uneven, "options": {"parallelism": "4"}},
    ]


# Commit records that cannot be read, each appended to HISTORY (offsets 13 on).
CUT_TOLD = (
    COMMIT_PREFIX + "bad-1",
    '{"run_id": "bad-1", "window": "2013-01-03", "committed_at": "20',
)
CUT_UNTOLD = (COMMIT_PREFIX + "bad-2", '{"attrs": {}, "bytes": 12, "committed_at": "2013-01-0')
NO_WINDOW = (COMMIT_PREFIX + "bad-3", '{"window": null, "run_id": "bad-3", "rows": ')
MISSING_FIELDS = (COMMIT_PREFIX + "bad-4", '{"run_id": "bad-4", "window": "2013-01-01"}')
NOT_JSON = (COMMIT_PREFIX + "bad-5", "\u0000\u0001 not json")
TWO_WINDOWS = (
    COMMIT_PREFIX + "bad-6",
    '{"attrs": {"window": "2013-01-02"}, "window": "2013-01-03", "tasks": [',
)
FOREIGN = ("user-42", '{"event": "click", "user": 42}')
BAD_MARKER = (EXPIRED_PREFIX + "d9-a", '{"run_id": "d9-a"}')


def bad_record_cases(w: Any) -> list[dict[str, Any]]:
    """Records the log skips, and the reads they refuse or leave alone."""
    later_d3 = commit("d3-b", "2013-01-03", {3: (40, 41, 70)}, day=2)
    later_d5 = commit("d5-a", "2013-01-05", {1: (42, 43, 70)}, day=4)
    cases = [
        ("a foreign record and a bad expiry marker are reported only", [FOREIGN, BAD_MARKER], {}),
        ("a cut commit refuses its window", [CUT_TOLD], {"windows": w(["2013-01-03"])}),
        ("a cut commit refuses a read of everything", [CUT_TOLD], {}),
        ("a cut commit leaves other windows", [CUT_TOLD], {"windows": w(["2013-01-01"])}),
        ("a cut commit with a later commit of its window", [CUT_TOLD, later_d3], {}),
        (
            "a commit missing fields refuses its window",
            [MISSING_FIELDS],
            {"windows": w(["2013-01-01"])},
        ),
        (
            "a commit whose window cannot be told refuses earlier windows",
            [CUT_UNTOLD, later_d5],
            {"windows": w(["2013-01-01"])},
        ),
        (
            "a commit whose window cannot be told leaves later windows",
            [CUT_UNTOLD, later_d5],
            {"windows": w(["2013-01-05"])},
        ),
        ("a commit whose window cannot be told refuses everything", [NOT_JSON, later_d5], {}),
        ("two window fields are not guessed at", [TWO_WINDOWS], {"windows": w(["2013-01-02"])}),
        ("a cut commit of a run without a window refuses everything", [NO_WINDOW], {}),
        (
            "a cut commit of a run without a window leaves windows",
            [NO_WINDOW],
            {"windows": w(["2013-01-02"])},
        ),
        ("a read of the unreadable run", [CUT_TOLD], {"runs": w(["bad-1", "d1-a"])}),
        ("a read of other runs", [CUT_TOLD, CUT_UNTOLD], {"runs": w(["d1-a"])}),
        (
            "a commit record written again replaces the unreadable one",
            [CUT_TOLD, commit("bad-1", "2013-01-03", {0: (44, 45, 5)}, day=2)],
            {"windows": w(["2013-01-03"])},
        ),
        ("a tombstone removes the unreadable record", [CUT_UNTOLD, delete(CUT_UNTOLD[0])], {}),
    ]
    return [
        {"name": name, "records": [*HISTORY, *extra], "options": options}
        for name, extra, options in cases
    ]


def python_plan(topic: str, records: list[Record], options: dict[str, str]) -> dict[str, Any]:
    """What the Python planner makes of a case, in the file's form."""
    out: dict[str, Any] = {}
    try:
        log = ShuffleLog.from_records(topic, records)
        bad = [[b.offset, b.key, b.window_known, b.window] for b in log.bad_records]
        if bad:
            out["bad_records"] = bad
        plan = ReadOptions.parse(Options(options, OWNER)).plan(log)
    except ShuffleError as exc:
        return {**out, "error": {"kind": type(exc).__name__, "message": str(exc)}}
    return {**out, "splits": [json.loads(s.to_json()) for s in plan.splits]}


def vectors() -> list[dict[str, Any]]:
    return [
        {
            "name": c["name"],
            "topic": TOPIC,
            "records": [list(r) for r in c["records"]],
            "options": c["options"],
            "expected": python_plan(TOPIC, c["records"], c["options"]),
        }
        for c in cases()
    ]


def main(argv: list[str]) -> int:
    if argv != ["--write"]:
        print(__doc__)
        return 2
    FILE.write_text(json.dumps(vectors(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {FILE} ({len(cases())} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
