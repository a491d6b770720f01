"""Two writers of one window at the same moment, with nothing between them (a retry and a
user's re-run of the same day, say), on the real broker and Spark: both commit; the run
whose commit record comes last supersedes the other, and readers see exactly that run,
never a mix of the two, whichever finishes its frames first. (Which of the two Dagster shows
as the window's latest materialization is the order they reached its event log, which
nothing ties to the order of their commit records: the instance's pool limit,
``shuffle_pool`` in docs/guides/dagster.md, runs such writers one after the other.)"""

import threading
import uuid

import pytest

from orchestration.shuffle import ShuffleSpec, read_shuffle, shuffle_log, write_shuffle

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
