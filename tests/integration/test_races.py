"""Two writers of one window at the same moment, with nothing between them (a retry and a
user's re-run of the same day, say), on the real broker and Spark: both commit; the run
whose commit record comes last supersedes the other, and readers see exactly that run,
never a mix of the two, whichever finishes its frames first. (Which of the two Dagster shows
as the window's latest materialization is the order they reached its event log, which
nothing ties to the order of their commit records: the instance's pool limit,
``shuffle_pool`` in docs/guides/dagster.md, runs such writers one after the other.)"""

import threading
import time
import uuid

import pyarrow as pa
import pytest

from orchestration.shuffle import (
    ShuffleLayoutError,
    ShuffleSpec,
    read_shuffle,
    read_table,
    shuffle_log,
    write_shuffle,
    write_table,
)
from orchestration.shuffle.core.commitlog import commit_topic
from orchestration.shuffle.errors import ShuffleTopicNotFoundError
from orchestration.shuffle.kafka.client import KafkaClient
from orchestration.shuffle.kafka.commitlog import (
    COMMIT_TOPIC_CONFIG,
    found_within,
    read_log_records,
)

pytestmark = pytest.mark.integration

DAY = "2024-07-01"


@pytest.mark.parametrize("rounds", [3])
def test_two_writers_of_one_window_at_once_leave_readers_exactly_one_run(spark, kafka_conf, rounds):
    topic = f"races.events-{uuid.uuid4().hex[:8]}"
    spec = ShuffleSpec(topic=topic, key="user_id", num_partitions=3, max_parallelism=12)
    for r in range(rounds):
        sizes = (3000 + r, 5000 + r)  # each writer's own number of rows
        start = threading.Barrier(2)
        errors: list[BaseException] = []

        def write(n: int, start=start, errors=errors) -> None:
            df = spark.range(n).selectExpr(
                "concat('u', cast(id % 11 as string)) as user_id", f"{n} as n", "id as i"
            )
            start.wait()
            try:
                write_shuffle(df, spec, kafka=kafka_conf, window=DAY)
            except BaseException as exc:  # noqa: BLE001 - re-raised below, in the test
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(n,)) for n in sizes]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not errors, errors

        # Both committed; the later commit record is the window's run.
        log = shuffle_log(topic, kafka=kafka_conf)
        ours = [c for c in log.commits if c.window == DAY and c.rows in sizes]
        assert sorted(c.rows for c in ours) == sorted(sizes)
        winner = log.latest_by_window()[DAY]
        assert winner.run_id == ours[-1].run_id
        # Readers: exactly the winner's rows, never a mix of the two runs.
        got = read_shuffle(spark, topic, kafka=kafka_conf, windows=[DAY]).toPandas()
        assert set(got["n"]) == {winner.rows}
        assert sorted(got["i"]) == list(range(winner.rows))


def _at_once(jobs: list) -> list[BaseException | None]:
    """Runs ``jobs`` (callables) in threads released together; each one's exception or None."""
    start = threading.Barrier(len(jobs))
    outcome: list[BaseException | None] = [None] * len(jobs)

    def run(i: int) -> None:
        start.wait()
        try:
            jobs[i]()
        except BaseException as exc:  # noqa: BLE001 - returned, asserted on by the test
            outcome[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return outcome


@pytest.mark.parametrize("attempt", range(6))
def test_first_writers_of_a_new_shuffle_at_once_all_commit(kafka_conf, attempt):
    """Four first writers of one new shuffle, released together, without Spark: none is
    refused for the frames the others write while it looks at the new topics (each writer
    records the layout before its first frame), and readers see exactly the last commit's
    rows."""
    topic = f"races.first-{uuid.uuid4().hex[:8]}"
    spec = ShuffleSpec(topic=topic, key="user_id", num_partitions=3)

    def writer(n: int):
        rows = pa.table({"user_id": [f"u{i % 7}" for i in range(n)], "n": [n] * n})
        return lambda: write_table(rows, spec, kafka=kafka_conf, window=DAY)

    sizes = [100 + attempt * 10 + w for w in range(4)]
    assert _at_once([writer(n) for n in sizes]) == [None] * 4

    log = shuffle_log(topic, kafka=kafka_conf)
    assert sorted(c.rows for c in log.commits) == sizes
    winner = log.latest_by_window()[DAY]
    got = read_table(topic, kafka=kafka_conf, windows=[DAY])
    assert set(got.column("n").to_pylist()) == {winner.rows}
    assert got.num_rows == winner.rows


def test_a_commit_log_made_a_moment_later_is_found_within_the_grace(kafka_conf):
    """A first writer told that the commit log exists (another first writer made it a moment
    ago and still waits for its leader) reads it with a grace: the read is asked again while
    the broker does not know the topic, instead of reporting the shuffle missing. A log that
    never appears is still reported missing, naming it, once the grace is over."""
    kafka = KafkaClient(kafka_conf)
    topic = f"races.grace-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ShuffleTopicNotFoundError):
        read_log_records(kafka, topic)  # not made yet: the plain read reports it at once

    maker = threading.Timer(
        0.5, lambda: kafka.ensure_topic(commit_topic(topic), 1, config=COMMIT_TOPIC_CONFIG)
    )
    maker.start()
    try:
        assert found_within(10.0, lambda: read_log_records(kafka, topic)) == ([], 0)
    finally:
        maker.join(30)

    never = f"races.never-{uuid.uuid4().hex[:8]}"
    start = time.monotonic()
    with pytest.raises(ShuffleTopicNotFoundError, match=commit_topic(never)):
        found_within(1.0, lambda: read_log_records(kafka, never))
    assert 1.0 <= time.monotonic() - start < 10.0


@pytest.mark.parametrize("attempt", range(4))
def test_first_writers_of_a_new_shuffle_with_different_layouts_agree_on_one(kafka_conf, attempt):
    """Four first writers of one new shuffle at once, two keyed by one column and two by
    another: the layout recorded first wins; the writers of the other are refused before
    writing a frame, naming the difference; the log's layout stays the winner's, and every
    commit in it was written under that layout."""
    topic = f"races.layouts-{uuid.uuid4().hex[:8]}"
    rows = pa.table({"a": ["x", "y", "z"], "b": ["p", "q", "r"]})

    def writer(key: str):
        spec = ShuffleSpec(topic=topic, key=key, num_partitions=2)
        return lambda: write_table(rows, spec, kafka=kafka_conf, window=DAY)

    keys = ["a", "b", "a", "b"]
    outcome = _at_once([writer(k) for k in keys])

    log = shuffle_log(topic, kafka=kafka_conf)
    won = log.require_layout().key
    for key, exc in zip(keys, outcome, strict=True):
        if key == won[0]:
            assert exc is None, exc
        else:
            assert isinstance(exc, ShuffleLayoutError), exc
            assert f"key is {list(won)}, not {[key]}" in str(exc)
    assert len(log.commits) == keys.count(won[0])
    got = read_table(topic, kafka=kafka_conf, windows=[DAY])
    assert sorted(got.column("a").to_pylist()) == ["x", "y", "z"]
