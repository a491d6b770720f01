"""Source metrics from progress reports: the offset arithmetic and what is taken as ours."""

from orchestration.shuffle import summarize_stream_metrics
from orchestration.shuffle.core.metrics import (
    METRICS_KEY,
    OffsetsBehind,
    batch_metrics,
    kind_of,
    offsets_behind,
    progress_metrics,
)


def records_source(end, latest, rows, **metrics):
    return {
        "description": "PythonMicroBatchStream@1",
        "startOffset": None,
        "endOffset": end,
        "latestOffset": {**latest, METRICS_KEY: metrics},
        "numInputRows": rows,
    }


def test_offsets_behind_per_partition_min_max_avg():
    assert offsets_behind({"a": 10, "b": 20}, {"a": 25, "b": 25}) == OffsetsBehind(5, 15, 10.0)
    # A partition the batch has not reached counts from its earliest offset (or 0).
    assert offsets_behind({"a": 10}, {"a": 10, "b": 30}, {"b": 12}) == OffsetsBehind(0, 18, 9.0)
    assert offsets_behind({}, {"a": 7}) == OffsetsBehind(7, 7, 7.0)
    # Never negative (a partition recreated smaller, say); nothing to measure: None.
    assert offsets_behind({"a": 50}, {"a": 40}) == OffsetsBehind(0, 0, 0.0)
    assert offsets_behind({"a": 1}, {}) is None


def test_kind_of_tells_our_offsets_apart():
    assert kind_of({"log": 3, "snapshot": 3}) == "kafka-shuffle"
    assert kind_of({"t": {"0": 5, "1": 7}, METRICS_KEY: {"x": 1}}) == "kafka-records"
    assert kind_of({"t": {"0": 5}, "u": {"2": 1}}) == "kafka-records"
    # Other sources' offsets: a file source, a rate source, nothing.
    assert kind_of({"logOffset": 4}) is None
    assert kind_of({"t": {"zero": 5}}) is None
    assert kind_of(None) is None and kind_of({}) is None


def test_records_batch_metrics_from_a_progress_entry():
    entry = records_source(
        {"t": {"0": 10, "1": 10}},
        {"t": {"0": 25, "1": 25}, "u": {"0": 4}},
        20,
        earliest={"t": {"0": 0, "1": 0}, "u": {"0": 1}},
        offset_commits_succeeded=2,
        offset_commits_failed=1,
    )
    m = batch_metrics(7, entry)
    assert m.batch_id == 7 and m.source == "kafka-records" and m.records == 20
    # t/0 and t/1 are 15 behind; u/0 (not in the batch yet) 3 behind its earliest offset 1.
    assert m.offsets_behind == OffsetsBehind(3, 15, 11.0)
    assert m.topics == ("t", "u")
    assert (m.offset_commits_succeeded, m.offset_commits_failed, m.records_lost) == (2, 1, None)
    assert m.runs is None and m.bytes is None
    d = m.to_dict()
    assert d["max_offsets_behind_latest"] == 15 and d["topics"] == ["t", "u"]


def test_shuffle_batch_metrics_and_others_ignored():
    entry = {
        "endOffset": {"log": 4, "snapshot": 2},
        "latestOffset": {"log": 6, METRICS_KEY: {"topic": "s", "runs": ["r1"], "bytes": 900}},
        "numInputRows": 40,
    }
    m = batch_metrics(0, entry)
    assert m.source == "kafka-shuffle" and m.records == 40
    assert m.offsets_behind == OffsetsBehind(2, 2, 2.0)
    assert (m.topics, m.runs, m.bytes) == (("s",), ("r1",), 900)
    assert batch_metrics(0, {"endOffset": {"logOffset": 1}, "latestOffset": None}) is None


def test_progress_metrics_one_per_batch_in_order_and_summary():
    def report(batch, rows, end, succeeded, failed):
        return {
            "batchId": batch,
            "sources": [
                records_source(
                    {"t": {"0": end}}, {"t": {"0": 100}}, rows,
                    offset_commits_succeeded=succeeded, offset_commits_failed=failed,
                ),
                {"endOffset": {"logOffset": batch}, "latestOffset": None, "numInputRows": 5},
            ],
        }  # fmt: skip

    progress = [
        report(1, 30, 60, 1, 1),
        report(0, 30, 30, 1, 0),
        report(2, 0, 60, 2, 1),  # an idle trigger reported as the next batch
        report(2, 40, 100, 2, 1),
        report(2, 0, 100, 3, 1),  # reported again, idle: the batch with data is kept
    ]
    batches = progress_metrics(progress)
    assert [(b.batch_id, b.records) for b in batches] == [(0, 30), (1, 30), (2, 40)]
    summary = summarize_stream_metrics(batches)
    assert summary == {
        "micro_batches": 3,
        "records": 100,
        "min_offsets_behind_latest": 0,
        "max_offsets_behind_latest": 0,
        "avg_offsets_behind_latest": 0.0,
        "offset_commits_succeeded": 2,
        "offset_commits_failed": 1,
    }
    assert summarize_stream_metrics([]) == {"micro_batches": 0, "records": 0}
