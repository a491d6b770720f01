"""Queue mode's pure logic: narrowing, settling, work items, output conformance."""

import pandas as pd
import pyarrow as pa
import pytest

from orchestration.shuffle.core.commitlog import Commit, Expired, PartitionRange, ShuffleLog
from orchestration.shuffle.core.queue import (
    Outcome,
    QueueCounts,
    WorkItem,
    conform,
    contiguous,
    narrow,
    row_json,
    settle,
    unfed,
    work_items,
    work_topic,
)
from orchestration.shuffle.errors import QueueSchemaError


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
    assert contiguous([]) == []


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
