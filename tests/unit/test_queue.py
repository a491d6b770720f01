"""Queue mode's pure logic: narrowing, settling, work items, output conformance, the rows
kept, dead-letter headers, the delivery policy, errors from a failed job, the backlog."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from orchestration.shuffle import (
    Commit,
    DeliveryPolicy,
    QueueCounts,
    QueueScale,
    QueueSchemaError,
    QueueStop,
    ShuffleError,
    ShuffleLog,
    ShuffleOptionError,
    process_queue,
)
from orchestration.shuffle.core.commitlog import Expired, PartitionRange
from orchestration.shuffle.core.queue import (
    Outcome,
    WorkItem,
    conform,
    contiguous,
    dead_letter_headers,
    delivery_count_limit,
    done_ranges,
    done_topic,
    done_value,
    fed_positions,
    fed_run,
    feed_range,
    job_error,
    missing_offsets,
    narrow,
    output_schema,
    queue_backlog_of,
    record_coords,
    record_items,
    row_json,
    rows_to_keep,
    settle,
    share_group_configs,
    unfed,
    work_items,
    work_topic,
)


def _commit(run: str, partitions: dict[int, tuple[int, int]]) -> Commit:
    return Commit(
        run_id=run,
        window=None,
        committed_at="2026-01-01T00:00:00+00:00",
        tasks=((0, 0),),
        partitions={p: PartitionRange(a, b) for p, (a, b) in partitions.items()},
        rows=0,
        bytes=0,
        frames=0,
    )


def test_narrow_isolates_each_failing_unit_and_keeps_every_good_one():
    bad = {3, 17, 18, 63}
    seen: list[tuple[int, int]] = []

    def run(start, end):
        seen.append((start, end))
        if bad & set(range(start, end)):
            raise ValueError(f"bad in [{start}, {end})")
        return list(range(start, end))

    found = narrow(64, run)
    assert [u for u, _ in found.failures] == sorted(bad)
    good = [u for _, _, r in found.results for u in r]
    assert good == [u for u in range(64) if u not in bad]
    # Results come back in unit order and never overlap.
    starts = [s for s, _, _ in found.results]
    assert starts == sorted(starts)
    # Far fewer calls than one per unit.
    assert found.calls == len(seen) < 64


def test_narrow_lets_fatal_errors_through_at_once():
    class Boom(Exception):
        pass

    calls = []

    def run(start, end):
        calls.append((start, end))
        raise Boom("schema")

    with pytest.raises(Boom):
        narrow(10, run, fatal=(Boom,))
    assert calls == [(0, 10)]


def test_narrow_of_nothing_calls_nothing():
    found = narrow(0, lambda s, e: pytest.fail("called"))
    assert found.results == [] and found.failures == [] and found.calls == 0


@pytest.mark.parametrize(
    ("delivery", "failed", "expected"),
    [
        (1, False, Outcome.ACCEPT),
        (3, False, Outcome.ACCEPT),
        (1, True, Outcome.RELEASE),
        (2, True, Outcome.RELEASE),
        (3, True, Outcome.DEAD_LETTER),
        (4, True, Outcome.DEAD_LETTER),  # a crash during the last attempt: one more try
        (None, True, Outcome.RELEASE),
    ],
)
def test_settle(delivery, failed, expected):
    assert settle(delivery, failed, max_deliveries=3) is expected


def test_settle_with_one_delivery_dead_letters_the_first_failure():
    assert settle(1, True, max_deliveries=1) is Outcome.DEAD_LETTER


def test_work_items_cover_every_offset_of_a_run_and_round_trip():
    c = _commit("r1", {0: (5, 7), 2: (10, 10)})
    items = work_items(c)
    assert [(i.partition, i.offset) for i in items] == [(0, 5), (0, 6), (0, 7), (2, 10)]
    assert all(WorkItem.from_json(i.to_json()) == i for i in items)
    assert work_topic("t") == "t.queue"


def test_unfed_skips_fed_and_expired_runs_in_log_order():
    log = ShuffleLog("t")
    log.commits = [_commit(r, {0: (0, 0)}) for r in ("a", "b", "c", "d")]
    log.expired = {"c": Expired("c", None, "2026-01-01T00:00:00+00:00", "test", {})}
    assert [c.run_id for c in unfed(log, {"a"})] == ["b", "d"]


def test_contiguous():
    assert contiguous([5, 3, 4, 9, 9, 11, 10]) == [(3, 6), (9, 12)]
    # Ranges at most `gap` apart are read as one.
    assert contiguous([5, 3, 4, 9, 9, 11, 10, 30], gap=3) == [(3, 12), (30, 31)]
    assert contiguous([1, 3], gap=1) == [(1, 4)]
    assert contiguous([1, 4], gap=1) == [(1, 2), (4, 5)]
    assert contiguous([]) == []


def test_a_record_a_read_did_not_reach_is_not_gone_but_not_readable_yet():
    # The partition holds [10, 20); the reads returned offsets up to 15.
    gone, later = missing_offsets([5, 12, 16, 19, 20, 25], low=10, high=20, reached=15)
    # Below the log start: deleted. Below the end and passed over by the read: a marker.
    assert gone == {5, 12}
    # Past what the read reached (it stopped early), or at or past the end: released.
    assert later == {16, 19, 20, 25}
    # A read that returned nothing proves nothing gone inside the partition.
    assert missing_offsets([11], low=10, high=20, reached=-1) == (set(), {11})


SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("score", pa.float64())])


def _given(n):
    return pa.table(
        {
            "value": list(range(n)),
            "_topic": ["t"] * n,
            "_partition": pa.array([0] * n, pa.int32()),
            "_offset": pa.array(range(100, 100 + n), pa.int64()),
        }
    )


def test_conform_takes_source_columns_from_a_one_to_one_output():
    given = _given(3)
    out = conform(pd.DataFrame({"score": [0.5, 1.5, 2.5], "id": [1, 2, 3]}), SCHEMA, given, "w")
    assert out.column_names == ["id", "score", "_topic", "_partition", "_offset"]
    assert out.column("_offset").to_pylist() == [100, 101, 102]
    assert out.column("id").type == pa.int64()


def test_conform_keeps_source_columns_fn_returns():
    given = _given(3)
    out = pa.table(
        {
            "id": [7, 7],
            "score": [1.0, 2.0],
            "_topic": ["t", "t"],
            "_partition": [0, 0],
            "_offset": [102, 102],
        }
    )
    assert conform(out, SCHEMA, given, "w").column("_offset").to_pylist() == [102, 102]


def test_conform_names_the_missing_column():
    with pytest.raises(QueueSchemaError, match="no column 'score'"):
        conform(pa.table({"id": [1, 2, 3]}), SCHEMA, _given(3), "group g")


def test_conform_names_a_column_of_the_wrong_type():
    bad = pa.table({"id": ["x", "y", "z"], "score": [1.0, 2.0, 3.0]})
    with pytest.raises(QueueSchemaError, match="column 'id' as string"):
        conform(bad, SCHEMA, _given(3), "group g")


def test_conform_refuses_rows_it_cannot_attribute():
    with pytest.raises(QueueSchemaError, match="2 rows for 3 input rows"):
        conform(pa.table({"id": [1, 2], "score": [1.0, 2.0]}), SCHEMA, _given(3), "g")


def test_conform_of_none_is_no_rows():
    out = conform(None, SCHEMA, _given(3), "g")
    assert out.num_rows == 0 and out.column_names[:2] == ["id", "score"]


def test_conform_refuses_other_types():
    with pytest.raises(QueueSchemaError, match="returned list"):
        conform([1, 2, 3], SCHEMA, _given(3), "g")


def test_counts_add_up():
    a = QueueCounts(accepted=2, released=1, rows_in=5)
    a.add(QueueCounts(accepted=3, rejected=1, rows_in=1))
    assert a.as_dict()["accepted"] == 5 and a.rejected == 1 and a.rows_in == 6


def test_row_json_keeps_plain_values_and_strings_the_rest():
    import datetime as dt

    text = row_json({"a": 1, "b": "x", "c": dt.date(2013, 1, 1), "d": None})
    assert text == b'{"a": 1, "b": "x", "c": "2013-01-01", "d": null}'


def test_counts_of_a_row_ignore_other_keys_and_a_subclass_adds_only_counts():
    from dataclasses import dataclass

    @dataclass(kw_only=True)
    class Result(QueueCounts):
        topic: str

    total = Result(topic="t")
    for row in ({"task": 0, **QueueCounts(accepted=2).as_dict()}, QueueCounts(rows_in=3).as_dict()):
        total.add(QueueCounts.of(row))
    assert total.accepted == 2 and total.rows_in == 3 and total.topic == "t"
    assert set(total.as_dict()) == set(QueueCounts.names())


def test_delivery_policy_checks_its_fields_and_sets_the_group_limit_with_spares():
    policy = DeliveryPolicy(max_deliveries=4, dead_letter_topic="t.dlq", lock_seconds=2.5)
    configs = share_group_configs("latest", policy)
    assert configs == {
        "share.auto.offset.reset": "latest",
        "share.isolation.level": "read_committed",
        "share.delivery.count.limit": "7",
        "share.record.lock.duration.ms": "2500",
    }
    # Three spare deliveries within the broker's default bound of 10, never fewer than one.
    assert [delivery_count_limit(m) for m in (1, 3, 7, 8, 9, 10)] == [4, 6, 10, 10, 10, 11]
    with pytest.raises(ShuffleOptionError, match="max_deliveries"):
        DeliveryPolicy(max_deliveries=0)
    with pytest.raises(ShuffleOptionError, match="dead_letter_topic"):
        DeliveryPolicy(dead_letter_topic="")
    with pytest.raises(ShuffleOptionError, match="lock_seconds"):
        DeliveryPolicy(lock_seconds=0)


def test_queue_scale_and_stop_check_their_fields():
    assert QueueScale() == QueueScale(tasks=2, consumers_per_task=1, batch_size=100)
    assert QueueStop() == QueueStop(idle_timeout=5.0, max_seconds=None)
    for bad in ({"tasks": 0}, {"consumers_per_task": -1}, {"batch_size": 2.5}):
        name = next(iter(bad))
        with pytest.raises(ShuffleOptionError, match=f"QueueScale: {name} must be a positive int"):
            QueueScale(**bad)
    with pytest.raises(ShuffleOptionError, match="QueueStop: idle_timeout must be > 0"):
        QueueStop(idle_timeout=0)
    with pytest.raises(ShuffleOptionError, match="QueueStop: max_seconds must be > 0 or None"):
        QueueStop(max_seconds=True)


def test_process_queue_refuses_the_old_keywords_and_the_wrong_types_before_any_work():
    # The options grouped in QueueScale and QueueStop are no longer keywords of their own.
    for old in ("tasks", "consumers_per_task", "batch_size", "idle_timeout", "max_seconds"):
        with pytest.raises(TypeError, match=old):
            process_queue(None, "t", "g", len, "id long", kafka={}, output="o", **{old: 1})
    with pytest.raises(ShuffleOptionError, match="scale must be a QueueScale, got 2"):
        process_queue(None, "t", "g", len, "id long", kafka={}, output="o", scale=2)
    with pytest.raises(ShuffleOptionError, match="stop must be a QueueStop"):
        process_queue(None, "t", "g", len, "id long", kafka={}, output="o", stop=QueueScale())


def test_fed_run_tells_a_feeding_marker_from_a_work_item():
    assert fed_run(b"fed/r1") == "r1"
    assert fed_run(b"r1") is None and fed_run(None) is None


def _outputs():
    # Units of three messages: message 0 (offset 100) has two units, 1 and 2 one each.
    units = pa.table(
        {
            "_topic": ["t"] * 4,
            "_partition": pa.array([0] * 4, pa.int32()),
            "_offset": pa.array([100, 100, 101, 102], pa.int64()),
        }
    )
    owner = np.array([0, 0, 1, 2], np.int64)
    out = pa.table(
        {
            "id": pa.array([1, 2, 3, 4], pa.int64()),
            "score": [0.1, 0.2, 0.3, 0.4],
            "_topic": ["t"] * 4,
            "_partition": pa.array([0] * 4, pa.int32()),
            "_offset": pa.array([100, 100, 101, 102], pa.int64()),
        }
    )
    return units, owner, out


def test_rows_to_keep_drops_released_records_and_stamps_deliveries():
    units, owner, out = _outputs()
    records = record_coords(units, owner)
    assert records == {("t", 0, 100): 0, ("t", 0, 101): 1, ("t", 0, 102): 2}
    keep = np.array([True, False, True])
    deliveries = np.array([1, 2, 3], np.int32)
    rows = rows_to_keep([out.slice(0, 2), out.slice(2)], records, keep, deliveries, SCHEMA, "g")
    assert rows.schema == output_schema(SCHEMA)
    assert rows.column("id").to_pylist() == [1, 2, 4]
    assert rows.column("_delivery").to_pylist() == [1, 1, 3]
    assert rows_to_keep([out], records, np.zeros(3, bool), deliveries, SCHEMA, "g") is None


def test_rows_to_keep_refuses_a_row_of_a_record_not_in_the_input():
    units, owner, out = _outputs()
    records = record_coords(units.slice(0, 2), owner[:2])
    with pytest.raises(QueueSchemaError, match="partition 0 offset 101, which is not"):
        rows_to_keep([out], records, np.ones(3, bool), np.ones(3, np.int32), SCHEMA, "g")


def test_dead_letter_headers_name_the_error_and_the_source():
    headers = dict(dead_letter_headers(ValueError("bad"), ("t", 1, 7), 3, "g"))
    assert headers == {
        "queue.error": b"ValueError: bad",
        "queue.source.topic": b"t",
        "queue.source.partition": b"1",
        "queue.source.offset": b"7",
        "queue.source.row": b"0",
        "queue.delivery.count": b"3",
        "queue.group": b"g",
    }


def test_job_error_finds_the_engine_error_inside_a_spark_error():
    spark_text = (
        "An exception was thrown from the Python worker.\nTraceback (most recent call last):\n"
        '  File "x.py", line 1\norchestration.shuffle.errors.QueueSchemaError: fn returned '
        "no column 'doubled'\n"
    )
    err = job_error(RuntimeError(spark_text), "t", "g")
    assert isinstance(err, QueueSchemaError)
    assert str(err) == "process_queue on topic 't' group 'g': fn returned no column 'doubled'"
    stop = job_error(RuntimeError("x\nqueue.QueueStopError: no dead_letter_topic\n"), "t", "g")
    assert type(stop) is ShuffleError and "no dead_letter_topic" in str(stop)
    other = job_error(RuntimeError("boom\nKeyError: 'k'\nZeroDivisionError: x\n"), "t", "g")
    assert type(other) is ShuffleError and str(other).endswith("failed: ZeroDivisionError: x")


def test_record_items_are_one_per_offset_of_a_plain_partition():
    items = record_items(3, 10, 13)
    assert [(i.partition, i.offset, i.run_id) for i in items] == [
        (3, 10, ""),
        (3, 11, ""),
        (3, 12, ""),
    ]
    assert [WorkItem.from_json(i.to_json()) for i in items] == items
    assert record_items(0, 5, 5) == []


def test_fed_positions_keep_each_partitions_last_marker():
    records = [
        (None, b'{"p": 0, "o": 1, "run": ""}'),
        (b"fed/@0", b"2"),
        (b"fed/@1", b"7"),
        (b"fed/run-1", b"run-1"),  # a shuffle's marker: not a plain position
        (b"fed/@0", b"5"),
    ]
    assert fed_positions(records) == {0: 5, 1: 7}
    # Plain markers are fed markers too: consumers skip them without counting them.
    assert fed_run(b"fed/@0") is not None


@pytest.mark.parametrize(
    ("fed", "low", "high", "start", "limit", "expected"),
    [
        (None, 0, 10, "earliest", 100, (0, 10)),  # first feeding from the start
        (None, 3, 10, "latest", 100, (10, 10)),  # first feeding at the end: nothing yet
        (4, 0, 10, "latest", 100, (4, 10)),  # then from where it stopped, whatever start
        (2, 6, 10, "earliest", 100, (6, 10)),  # records deleted by retention are skipped
        (0, 0, 10, "earliest", 4, (0, 4)),  # at most limit per feeding
        (10, 0, 10, "earliest", 100, (10, 10)),  # nothing new
    ],
)
def test_feed_range(fed, low, high, start, limit, expected):
    assert feed_range(fed, low, high, start, limit) == expected


def test_a_dead_letter_message_names_the_unit_it_stands_for():
    from orchestration.shuffle.core.queue import dead_letter_headers, dead_letter_id

    headers = dead_letter_headers(ValueError("x"), ("t", 2, 41), 3, "g", row=5)
    assert dead_letter_id(headers) == ("g", "t", 2, 41, 5)
    # Written before rows were named: row 0. Not ours, or garbled: None.
    older = [h for h in headers if h[0] != "queue.source.row"]
    assert dead_letter_id(older) == ("g", "t", 2, 41, 0)
    assert dead_letter_id([("origin", b"x")]) is None
    assert dead_letter_id(None) is None
    garbled = [(k, b"x" if k == "queue.source.offset" else v) for k, v in headers]
    assert dead_letter_id(garbled) is None


def test_only_a_delivery_past_the_last_attempt_may_have_been_dead_lettered_already():
    from orchestration.shuffle.core.queue import may_be_dead_lettered

    assert not may_be_dead_lettered(3, 3)
    assert not may_be_dead_lettered(None, 1)
    assert may_be_dead_lettered(4, 3)
    assert may_be_dead_lettered(2, 1)


def test_a_done_record_names_the_settled_offsets_as_ranges():
    assert done_topic("t") == "t.queue.done"
    value = done_value([7, 3, 4, 5, 9])
    assert done_ranges(value) == [(3, 6), (7, 8), (9, 10)]
    assert done_ranges(b"not json") == [] and done_ranges(None) == []


def _rows(commit: Commit, rows: int) -> Commit:
    from dataclasses import replace

    return replace(commit, rows=rows)


def test_a_shuffles_backlog_counts_runs_not_fed_and_items_not_settled():
    log = ShuffleLog("t")
    # a: offsets 0-2 of partition 0 (3 items), b: 3 items over two partitions, c: not fed.
    a = _rows(_commit("a", {0: (0, 2)}), 30)
    b = _rows(_commit("b", {0: (3, 4), 1: (0, 0)}), 20)
    c = _rows(_commit("c", {0: (5, 9)}), 50)
    log.commits = [a, b, c]
    # The work topic: a's items at 0-2, its marker at 3, a transaction marker at 4 (not
    # read), b's items at 5-7 and its marker at 8.
    work = [(o, b"a", b"{}") for o in range(3)] + [(3, b"fed/a", b"a")]
    work += [(o, b"b", b"{}") for o in range(5, 8)] + [(8, b"fed/b", b"b")]
    nothing = queue_backlog_of("t", "g", work, [], log=log)
    assert (nothing.unfed_runs, nothing.unfed_rows, nothing.unfed_records) == (1, 50, 5)
    assert (nothing.pending_runs, nothing.pending_rows, nothing.pending_records) == (2, 50, 6)
    assert (nothing.runs, nothing.rows, nothing.records, nothing.fed_records) == (3, 100, 11, 6)
    # The group settled a's items and one of b's (and the marker, which is no item).
    some = queue_backlog_of("t", "g", work, [(0, 2), (2, 4), (6, 7)], log=log)
    assert (some.pending_runs, some.pending_rows, some.pending_records) == (1, 20, 2)
    assert some.records == 7
    done = queue_backlog_of("t", "g", work, [(0, 9)], log=log)
    assert (done.pending_records, done.pending_runs, done.records) == (0, 0, 5)


def test_a_plain_topics_backlog_counts_records_not_fed_and_items_not_settled():
    # Partition 0 fed up to 4 of [0, 6), partition 1 never fed (from its low end, 2, to 5).
    work = [(o, None, b"{}") for o in range(4)] + [(4, b"fed/@0", b"4")]
    backlog = queue_backlog_of("t", "g", work, [(1, 3)], source_ends={0: (0, 6), 1: (2, 5)})
    assert (backlog.unfed_records, backlog.unfed_rows, backlog.unfed_runs) == (5, 5, 0)
    assert (backlog.pending_records, backlog.pending_rows, backlog.fed_records) == (2, 2, 4)
    assert backlog.records == 7
