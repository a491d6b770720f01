"""The checked-in stream-plan vectors (``tests/vectors/stream_plans.json``) are what the
Python stream reader makes of their records and options, and what
``tests/vectors/stream_plans.py`` writes. The JVM stream (``ShuffleStream.java``) is checked
against the same file by ``jvm/src/test/java/io/kafkashuffle/spark/PlanVectorsTest.java``."""

import json

import pyspark
import pytest

from orchestration.shuffle.spark.compat import ADMISSION_CONTROL
from orchestration.shuffle.spark.reader import SourceOptions
from tests.vectors import stream_plans

VECTORS = json.loads(stream_plans.FILE.read_text())
LIMITS = ("maxRunsPerTrigger", "maxRowsPerTrigger")


def _limited(vector) -> bool:
    """A case whose options limit micro-batches (and are valid: the case expects batches)."""
    return any(k in vector["options"] for k in LIMITS) and "error" not in vector["expected"]


@pytest.mark.skipif(
    not ADMISSION_CONTROL,
    reason=f"PySpark {pyspark.__version__} has no admission control for Python streaming "
    "sources: the limited cases are refused (checked below), so the file is not made here",
)
def test_the_file_is_what_the_cases_make():
    # A change of the streaming rules shows as a diff of the file (written again with --write).
    assert VECTORS == json.loads(json.dumps(stream_plans.vectors()))


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_python_stream_reader_matches_the_vector(vector):
    records = [tuple(r) for r in vector["records"]]
    got = stream_plans.python_stream(records, vector["options"], vector["first"])
    if _limited(vector) and not ADMISSION_CONTROL:
        # PySpark 4.0 and 4.1: the limit is refused with the version, never ignored.
        assert got["error"]["kind"] == "ShuffleOptionError", got
        message = got["error"]["message"]
        assert pyspark.__version__ in message and "Spark 4.2" in message, message
        assert "engine='jvm'" in message, message
        return
    assert json.loads(json.dumps(got)) == vector["expected"]


@pytest.mark.parametrize(
    "vector",
    [v for v in VECTORS if "batches" in v["expected"] and not _limited(v)],
    ids=lambda v: v["name"],
)
def test_the_call_without_admission_control_reads_the_same_runs(vector):
    # PySpark 4.0 and 4.1 call latestOffset() with no start and no limit, on every line the
    # reader answers it: the query reads the runs the 4.2 call reads, in one micro-batch per
    # trigger, and a restart from the last end offset reads none of them again.
    records = [tuple(r) for r in vector["records"]]
    log = stream_plans.ShuffleLog.from_records(stream_plans.TOPIC, records)
    opts = SourceOptions(
        {
            "topic": stream_plans.TOPIC,
            "kafka.bootstrap.servers": "unused:9092",
            "layout": log.require_layout().to_json(),
            "plan": "[]",
            **vector["options"],
        }
    )
    expected = [r for b in vector["expected"]["batches"] for r in b["runs"]]
    reader = stream_plans.CaseReader(opts, records)
    reader.visible = vector["first"]
    start = reader.initialOffset()
    got = []
    for visible in (vector["first"], len(records)):
        reader = stream_plans.CaseReader(opts, records)  # restarted from its checkpoint
        reader.visible = visible
        end = reader.latestOffset()
        if end != start:
            splits = [json.loads(p.value) for p in reader.partitions(start, end)]
            got += sorted(
                {s["run_id"] for sp in splits for r in sp["reads"] for s in r["segments"]}
            )
        assert reader.latestOffset() == end  # nothing new: the same offset, no empty batch
        start = end
    assert sorted(got) == sorted(expected)


def test_the_vectors_cover_limits_restarts_and_errors():
    batches = [v["expected"]["batches"] for v in VECTORS if "batches" in v["expected"]]
    # One run per micro-batch, several per micro-batch, and an empty micro-batch.
    sizes = {len(b["runs"]) for bs in batches for b in bs}
    assert {0, 1, 2, 3, 4} <= sizes
    # A run superseded before the query started is skipped; after it, it arrives as new data.
    earliest = next(v for v in VECTORS if v["name"] == "earliest, everything per trigger")
    runs = [r for b in earliest["expected"]["batches"] for r in b["runs"]]
    assert "d1-a" not in runs and runs.index("d2-a") < runs.index("d2-b")
    errors = {next(iter(v["options"])) for v in VECTORS if "error" in v["expected"]}
    assert errors == {
        "startingOffsets",
        "startingTimestamp",
        "maxRunsPerTrigger",
        "maxRowsPerTrigger",
        "maxRunPerTrigger",  # misspelled
        "maxOffsetsPerTrigger",  # Spark's kafka source's
    }
