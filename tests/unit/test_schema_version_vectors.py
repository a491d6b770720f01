"""The checked-in schema-version vectors (``tests/vectors/schema_versions.json``) are what the
Python commit log and resolution make of their records (what ``tests/vectors/schema_versions.py``
writes). The JVM is checked against the same file by ``SchemaVersionsTest.java``."""

import json

from tests.vectors import schema_versions

VECTORS = json.loads(schema_versions.FILE.read_text())


def test_the_file_is_what_the_cases_make():
    # A change of the rules shows as a diff of the file (written again with --write).
    assert VECTORS == json.loads(json.dumps(schema_versions.vectors()))


def test_the_vectors_cover_each_kind_of_change_and_record():
    text = json.dumps(VECTORS["logs"])
    for words in (
        "renamed column",
        "dropped column",
        "added column",
        "widened column",
        "grew the partitions",
        "follows a missing version",
    ):
        assert words in text, words
    assert len(VECTORS["casts"]) >= 10
    assert any(c.get("problem") is None for c in VECTORS["casts"])
    assert any(c.get("problem") for c in VECTORS["casts"])
