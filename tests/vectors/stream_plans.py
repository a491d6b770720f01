"""The stream-plan vectors both streaming readers are tested against: commit-log records in,
micro-batches out.

``stream_plans.json`` holds, per case, a shuffle's commit-log records (``[key, value]``; the
record at index *i* sits at offset *i*), the stream's string options, ``first`` (how many
records the log holds when the query first starts) and what the Python stream reader
(:class:`orchestration.shuffle.spark.stream.ShuffleStreamReader`, its log read from the
case instead of Kafka) makes of them: the initial offset, then each micro-batch of two
``Trigger.AvailableNow`` runs, the first over the log's first ``first`` records and the second
(the query restarted from its last offset) over all of them. A micro-batch is its end offset,
the runs ``latestOffset`` admitted and the splits ``partitions`` planned; an option error
is its class and message. ``tests/unit/test_stream_plan_vectors.py`` checks the Python reader
against the file and ``tests/integration/test_jvm_read.py`` the JVM one
(``io.kafkashuffle.spark.ShuffleStream``).

After a deliberate change of the streaming rules, write the file again and review its diff::

    .venv/bin/python -m tests.vectors.stream_plans --write
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from orchestration.shuffle import ShuffleError, ShuffleLog
from orchestration.shuffle.core.commitlog import COMMIT_PREFIX
from orchestration.shuffle.core.stream import LogRecord
from orchestration.shuffle.spark.reader import SourceOptions
from orchestration.shuffle.spark.stream import ShuffleStreamReader
from tests.vectors.read_plans import TOPIC, Record, commit, delete, layout

FILE = Path(__file__).with_name("stream_plans.json")
SOURCE = "kafka-shuffle"  # the owner both readers name in option errors here


class CaseReader(ShuffleStreamReader):
    """The Python stream reader over a case's records: the log holds the first ``visible``."""

    def __init__(self, opts: SourceOptions, records: list[Record]):
        super().__init__(opts)
        self.records = [
            LogRecord(i, None if k is None else k.encode(), None if v is None else v.encode())
            for i, (k, v) in enumerate(records)
        ]
        self.visible = len(records)

    def _read_log(self, first: int) -> tuple[list[LogRecord], int]:
        return self.records[first : self.visible], max(self.visible, first)

    def _log_end(self) -> int:
        return self.visible


def python_stream(records: list[Record], options: dict[str, str], first: int) -> dict[str, Any]:
    """What the Python stream reader makes of a case, in the file's form."""
    try:
        log = ShuffleLog.from_records(TOPIC, records)
        opts = SourceOptions(
            {
                "topic": TOPIC,
                "kafka.bootstrap.servers": "unused:9092",
                "layout": log.require_layout().to_json(),
                "plan": "[]",
                **options,
            }
        )
        reader = CaseReader(opts, records)
        reader.visible = first
        start = reader.initialOffset()
        out: dict[str, Any] = {"initial": start, "batches": []}
        for visible in (first, len(records)):
            if visible != first:
                reader = CaseReader(opts, records)  # the query restarted from its checkpoint
            reader.visible = visible
            reader.prepareForTriggerAvailableNow()
            limit = reader.getDefaultReadLimit()
            for _ in range(len(records) + 2):
                end = reader.latestOffset(start, limit)
                if end == start:
                    break
                metrics = reader.reportLatestOffset()["@metrics"]
                splits = [json.loads(p.value) for p in reader.partitions(start, end)]
                out["batches"].append(
                    {
                        "end": end,
                        "runs": metrics["runs"],
                        "skipped": [b["offset"] for b in metrics["skipped_records"]],
                        "splits": splits,
                    }
                )
                start = end
    except ShuffleError as exc:
        return {"error": {"kind": type(exc).__name__, "message": str(exc)}}
    return out


# A log where runs arrive over time: windows superseded before and after the query starts,
# a run without a window, a commit deleted again, and a layout record written again.
HISTORY: list[Record] = [
    layout(partitions=3, max_par=12),
    commit("d1-a", "2013-01-01", {0: (0, 3, 40), 1: (4, 5, 20)}),
    commit("d2-a", "2013-01-02", {0: (6, 8, 30), 2: (9, 11, 30)}, day=1),
    commit("d1-b", "2013-01-01", {0: (12, 14, 35), 1: (15, 16, 15), 2: (17, 18, 12)}),
    commit("free-1", None, {1: (19, 20, 10)}, day=None),
    # ---- the query first starts here (first = 5)
    commit("d3-a", "2013-01-03", {2: (21, 23, 70)}, day=2),
    commit("d2-b", "2013-01-02", {0: (24, 25, 25), 1: (26, 27, 25)}, day=1),
    layout(partitions=3, max_par=12),
    commit("gone", None, {0: (28, 29, 5)}, day=None),
    delete(COMMIT_PREFIX + "gone"),
    commit("d4-a", "2013-01-04", {0: (30, 31, 8), 1: (32, 33, 8), 2: (34, 35, 8)}, day=3),
]
FIRST = 5

# The same log with commit records that cannot be read: one cut short in the history before
# the query starts, one that is not JSON after it, one without a run id. Each is skipped and
# reported with the micro-batch whose range holds it; the runs around them are read.
CUT = [
    *HISTORY[:3],
    (COMMIT_PREFIX + "cut-1", '{"run_id": "cut-1", "window": "2013-01-0'),
    *HISTORY[3:7],
    (COMMIT_PREFIX + "cut-2", "not json"),
    *HISTORY[7:],
    (COMMIT_PREFIX + "cut-3", '{"window": "2013-01-05"}'),
]


def cases() -> list[dict[str, Any]]:
    """Every case: its name, the records, ``first`` and the stream's string options."""
    out: list[dict[str, Any]] = [
        {"name": "earliest, everything per trigger", "options": {}},
        {"name": "latest", "options": {"startingOffsets": "latest"}},
        {"name": "LATEST, upper case", "options": {"startingOffsets": " LATEST "}},
        {"name": "one run per trigger", "options": {"maxRunsPerTrigger": "1"}},
        {"name": "two runs per trigger", "options": {"maxRunsPerTrigger": "2"}},
        {"name": "rows per trigger, whole runs", "options": {"maxRowsPerTrigger": "60"}},
        {"name": "a run larger than the rows allowed", "options": {"maxRowsPerTrigger": "1"}},
        {
            "name": "runs and rows per trigger",
            "options": {"maxRunsPerTrigger": "2", "maxRowsPerTrigger": "45"},
        },
        {"name": "parallelism 2", "options": {"parallelism": "2"}},
        {"name": "parallelism 5 of 3 partitions", "options": {"parallelism": "5"}},
        {"name": "parallelism auto", "options": {"parallelism": "auto"}},
        {"name": "a starting timestamp before every commit", "options": {"startingTimestamp": "0"}},
        {
            "name": "a starting timestamp after every commit",
            "options": {"startingTimestamp": "1735689600000"},
        },
        {"name": "startingOffsets not a choice", "options": {"startingOffsets": "newest"}},
        {"name": "maxRunsPerTrigger zero", "options": {"maxRunsPerTrigger": "0"}},
        {"name": "maxRowsPerTrigger not a number", "options": {"maxRowsPerTrigger": "many"}},
        {"name": "startingTimestamp negative", "options": {"startingTimestamp": "-5"}},
        {"name": "a misspelled option", "options": {"maxRunPerTrigger": "1"}},
        {
            "name": "options of Spark's kafka source",
            "options": {"maxOffsetsPerTrigger": "10", "minOffsetsPerTrigger": "5"},
        },
    ]
    for c in out:
        c.setdefault("records", HISTORY)
        c.setdefault("first", FIRST)
    out += [
        {"name": "an empty log at the start", "records": HISTORY, "first": 1, "options": {}},
        {"name": "no commits at all", "records": [HISTORY[0]], "first": 1, "options": {}},
        {"name": "unreadable commit records", "records": CUT, "first": 6, "options": {}},
        {
            "name": "unreadable commit records, one run per trigger",
            "records": CUT,
            "first": 6,
            "options": {"maxRunsPerTrigger": "1"},
        },
        {
            "name": "unreadable commit records, a starting timestamp",
            "records": CUT,
            "first": 6,
            "options": {"startingTimestamp": "0"},
        },
        {
            "name": "started on the whole log",
            "records": HISTORY,
            "first": len(HISTORY),
            "options": {"maxRunsPerTrigger": "3"},
        },
    ]
    return out


def vectors() -> list[dict[str, Any]]:
    return [
        {
            "name": c["name"],
            "topic": TOPIC,
            "records": [list(r) for r in c["records"]],
            "first": c["first"],
            "options": c["options"],
            "expected": python_stream(c["records"], c["options"], c["first"]),
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
