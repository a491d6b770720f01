"""A long write or read shows its progress in the Dagster run's log while it runs: a Spark
write its stages' tasks, a write and reads without Spark their partitions, rows and bytes, a
Spark input the stages of the jobs the asset's own code runs, until the step ends."""

import re
import uuid

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pytest
from dagster import (
    DagsterEventType,
    DailyPartitionsDefinition,
    EventLogEntry,
    asset,
    instance_for_test,
    materialize,
)
from pyspark.sql import DataFrame, SparkSession

from orchestration import KafkaResource, KafkaShuffleIOManager, RecordBatches, shuffle_metadata

pytestmark = pytest.mark.integration

# Slow enough to be seen working: each row sleeps a little in the JVM (no Python UDF).
PAUSE = "reflect('java.lang.Thread', 'sleep', cast({ms} as bigint)) as pause"


def _run_log(assets: list, bootstrap: str, every: float) -> list[EventLogEntry]:
    """The log of a run that materializes ``assets`` for 2024-07-01, their shuffles kept by
    an IO manager that logs progress every ``every`` seconds."""
    io = KafkaShuffleIOManager(
        kafka=KafkaResource(bootstrap_servers=bootstrap), progress_every_s=every
    )
    with instance_for_test() as instance:
        result = materialize(
            assets, partition_key="2024-07-01", instance=instance, resources={"shuffle_io": io}
        )
        assert result.success
        return list(instance.all_logs(result.run_id))


def test_a_spark_write_logs_its_progress_while_it_runs(spark, bootstrap):
    topic = f"progress.events-{uuid.uuid4().hex[:8]}"
    daily = DailyPartitionsDefinition(start_date="2024-07-01", end_date="2024-07-05")

    @asset(
        partitions_def=daily,
        io_manager_key="shuffle_io",
        metadata=shuffle_metadata(key="k", num_partitions=4, topic=topic),
    )
    def events() -> DataFrame:
        session = SparkSession.getActiveSession()
        # Slow enough to be seen working: each task sleeps a little per row.
        return session.range(0, 1600, 1, 4).selectExpr(
            "concat('k', cast(id % 97 as string)) as k", "id", PAUSE.format(ms=1)
        )

    for every, expect in ((0.3, True),):
        logged = [e.user_message for e in _run_log([events], bootstrap, every)]
        progress = [m for m in logged if "writing for" in m]
        if expect:
            assert progress, logged
            assert any("tasks" in m for m in progress), progress
            assert all(f"{topic}: window '2024-07-01'" in m for m in progress)
        else:
            assert not progress


def test_a_write_and_reads_without_spark_log_their_progress_while_they_run(bootstrap):
    topic = f"progress.table-{uuid.uuid4().hex[:8]}"
    daily = DailyPartitionsDefinition(start_date="2024-07-01", end_date="2024-07-05")
    n = 400_000  # a frame holds 65,536 rows: several frames per partition

    @asset(
        partitions_def=daily,
        io_manager_key="shuffle_io",
        metadata=shuffle_metadata(key="k", num_partitions=4, topic=topic),
    )
    def events() -> pa.Table:
        ids = pa.array(range(n), pa.int64())
        keys = pa.compute.binary_join_element_wise("k", pa.compute.cast(ids, pa.string()), "")
        return pa.table({"k": keys, "id": ids})

    seen: dict = {}

    @asset(partitions_def=daily)
    def as_table(events: pa.Table) -> None:
        seen["table"] = events.num_rows

    @asset(partitions_def=daily)
    def as_batches(events: RecordBatches) -> None:
        seen["batches"] = sum(b.num_rows for b in events)

    for every, expect in ((0.001, True), (0, False)):
        logs = _run_log([events, as_table, as_batches], bootstrap, every)
        assert seen == {"table": n, "batches": n}
        logged = [e.user_message for e in logs]
        writing = [m for m in logged if m.startswith(f"{topic}: window '2024-07-01': writing")]
        reading = [m for m in logged if m.startswith(f"{topic}: reading for")]
        if not expect:
            assert not writing and not reading, logged
            continue
        assert len(writing) >= 2, logged
        counts = [int(re.search(r"; (\d+)/400000 rows", m).group(1)) for m in writing]
        assert counts == sorted(counts) and counts[0] < n, writing
        assert "frames" in writing[0] and "/4 partitions" in writing[0]
        assert writing[-1].endswith("all delivered, committing"), writing
        # Both inputs: the table's read and the batches' read, as the asset took them.
        assert len(reading) >= 4, logged
        assert all("of 400000 rows" in m and "1 run(s) of 1 window(s)" in m for m in reading)
        assert any(re.search(r" [1-3]/4 partitions", m) for m in reading), reading
        assert any(re.search(r", [1-9]\d* of 400000 rows", m) for m in reading), reading


def test_a_spark_read_logs_its_progress_while_the_asset_runs(spark, bootstrap):
    topic = f"progress.read-{uuid.uuid4().hex[:8]}"
    daily = DailyPartitionsDefinition(start_date="2024-07-01", end_date="2024-07-05")
    n = 2000

    @asset(
        partitions_def=daily,
        io_manager_key="shuffle_io",
        metadata=shuffle_metadata(key="k", num_partitions=4, topic=topic),
    )
    def events() -> pa.Table:
        return pa.table({"k": [f"k{i % 97}" for i in range(n)], "id": list(range(n))})

    seen: dict = {}

    @asset(partitions_def=daily)
    def totals(context, events: DataFrame) -> None:
        # The read runs here, after the IO manager has returned: 8 tasks of 0.5 s.
        rows = events.repartition(8).selectExpr("id", PAUSE.format(ms=2)).collect()
        seen["sum"] = sum(r.id for r in rows)
        context.log.info("totals: collected")

    @asset(partitions_def=daily, deps=[totals])
    def later(context) -> None:
        # The next step, on the same thread: its Spark jobs are none of the read's.
        session = SparkSession.getActiveSession()
        seen["tags"] = session.sparkContext.getJobTags()
        session.range(0, 1000, 1, 2).selectExpr("id", PAUSE.format(ms=2)).collect()
        context.log.info("later: collected")

    logs = _run_log([events, totals, later], bootstrap, 0.2)
    assert seen["sum"] == n * (n - 1) // 2
    assert not any(t.startswith("dagster-") for t in seen["tags"]), seen["tags"]

    def at(step: str, kind: DagsterEventType) -> int:
        return next(
            i for i, e in enumerate(logs) if e.step_key == step and e.dagster_event_type == kind
        )

    def said(message: str) -> int:
        return next(i for i, e in enumerate(logs) if e.user_message == message)

    name = f"{topic}: window '2024-07-01': reading for "
    reading = [(i, e) for i, e in enumerate(logs) if e.user_message.startswith(name)]
    messages = [e.user_message for _, e in reading]
    assert reading, [e.user_message for e in logs]
    assert all(e.step_key == "totals" for _, e in reading)
    assert all(" s, in Spark job" in m for m in messages), messages
    assert any(re.search(r"; stage \d+: \d+/\d+ tasks", m) for m in messages), messages
    # Logged while the asset's action ran: after the step started, before the action
    # returned; none after the step's end, while the next step's jobs ran.
    start, collected = at("totals", DagsterEventType.STEP_START), said("totals: collected")
    assert all(start < i < collected for i, _ in reading), messages
    assert said("later: collected") > at("totals", DagsterEventType.STEP_SUCCESS)
    # The 8 tasks after the repartition run on 2 cores, a few at a time: between them, a line
    # tells the tasks done and the rows they read.
    assert any(
        re.search(r": [1-7]/8 tasks(, \d+ running)?, [1-9]\d* rows read", m) for m in messages
    ), messages
