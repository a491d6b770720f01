"""Source metrics from Spark Connect's progress reports, whose offsets are JSON text."""

import json

from orchestration.shuffle.core.metrics import (
    METRICS_KEY,
    OffsetsBehind,
    batch_metrics,
    progress_metrics,
)


def test_shuffle_offsets_given_as_json_text():
    entry = {
        "endOffset": json.dumps({"log": 4, "snapshot": 2}),
        "latestOffset": json.dumps(
            {"log": 7, METRICS_KEY: {"topic": "s", "runs": ["r1", "r2"], "bytes": 900}}
        ),
        "numInputRows": 40,
    }
    m = batch_metrics(3, entry)
    assert m is not None and m.source == "kafka-shuffle" and m.records == 40
    assert m.offsets_behind == OffsetsBehind(3, 3, 3.0)
    assert (m.topics, m.runs, m.bytes) == (("s",), ("r1", "r2"), 900)


def test_records_offsets_given_as_json_text_in_a_whole_report():
    source = {
        "startOffset": None,
        "endOffset": json.dumps({"t": {"0": 10, "1": 12}}),
        "latestOffset": json.dumps(
            {"t": {"0": 25, "1": 25}, METRICS_KEY: {"offset_commits_succeeded": 1}}
        ),
        "numInputRows": 22,
    }
    [m] = progress_metrics([{"batchId": 0, "sources": [source]}])
    assert m.source == "kafka-records" and m.topics == ("t",)
    assert m.offsets_behind == OffsetsBehind(13, 15, 14.0)
    assert m.offset_commits_succeeded == 1


def test_text_that_is_no_offset_of_ours_is_ignored():
    assert batch_metrics(0, {"endOffset": "not json", "latestOffset": "{"}) is None
    assert batch_metrics(0, {"endOffset": json.dumps({"logOffset": 1})}) is None
    assert batch_metrics(0, {"endOffset": "12", "latestOffset": "13"}) is None
