"""The checked-in read-plan vectors (``tests/vectors/read_plans.json``) are what the Python
planner makes of their records and options, and what ``tests/vectors/read_plans.py`` writes.
The JVM planner is checked against the same file by ``PlanVectorsTest.java`` (jvm/src/test)."""

import json

import pytest

from tests.vectors import read_plans

VECTORS = json.loads(read_plans.FILE.read_text())


def test_the_file_is_what_the_cases_make():
    # A change of the read rules shows as a diff of the file (written again with --write).
    assert VECTORS == json.loads(json.dumps(read_plans.vectors()))


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_python_planner_matches_the_vector(vector):
    records = [tuple(r) for r in vector["records"]]
    got = read_plans.python_plan(vector["topic"], records, vector["options"])
    assert json.loads(json.dumps(got)) == vector["expected"]


def test_the_vectors_cover_plans_and_every_error_kind():
    kinds = {v["expected"]["error"]["kind"] for v in VECTORS if "error" in v["expected"]}
    assert kinds == {
        "ShuffleWindowNotFoundError",
        "ShuffleOptionError",
        "ShuffleLayoutError",
        "ShuffleFormatError",
    }
    split_counts = {len(v["expected"]["splits"]) for v in VECTORS if "splits" in v["expected"]}
    assert {1, 3, 4, 5, 7, 16} <= split_counts
