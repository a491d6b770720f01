"""The checked-in stream-plan vectors (``tests/vectors/stream_plans.json``) are what the
Python stream reader makes of their records and options, and what
``tests/vectors/stream_plans.py`` writes. The JVM stream (``ShuffleStream.java``) is checked
against the same file by ``jvm/src/test/java/io/kafkashuffle/spark/PlanVectorsTest.java``."""

import json

import pytest

from tests.vectors import stream_plans

VECTORS = json.loads(stream_plans.FILE.read_text())


def test_the_file_is_what_the_cases_make():
    # A change of the streaming rules shows as a diff of the file (written again with --write).
    assert VECTORS == json.loads(json.dumps(stream_plans.vectors()))


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_python_stream_reader_matches_the_vector(vector):
    records = [tuple(r) for r in vector["records"]]
    got = stream_plans.python_stream(records, vector["options"], vector["first"])
    assert json.loads(json.dumps(got)) == vector["expected"]


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
