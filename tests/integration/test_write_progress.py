"""A long write or read shows its progress in the Dagster run's log while it runs: a Spark
write its stages' tasks, a write and reads without Spark their partitions, rows and bytes."""

import re
import uuid

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pytest
from dagster import DailyPartitionsDefinition, asset, instance_for_test, materialize
from pyspark.sql import DataFrame, SparkSession

from orchestration import KafkaResource, KafkaShuffleIOManager, RecordBatches, shuffle_metadata

pytestmark = pytest.mark.integration


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
            "concat('k', cast(id % 97 as string)) as k",
            "id",
            "reflect('java.lang.Thread', 'sleep', cast(1 as bigint)) as pause",
        )

    for every, expect in ((0.3, True),):
        io = KafkaShuffleIOManager(
            kafka=KafkaResource(bootstrap_servers=bootstrap), progress_every_s=every
        )
        with instance_for_test() as instance:
            result = materialize(
                [events], partition_key="2024-07-01", instance=instance,
                resources={"shuffle_io": io},
            )  # fmt: skip
            assert result.success
            logged = [e.user_message for e in instance.all_logs(result.run_id)]
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
        io = KafkaShuffleIOManager(
            kafka=KafkaResource(bootstrap_servers=bootstrap), progress_every_s=every
        )
        with instance_for_test() as instance:
            result = materialize(
                [events, as_table, as_batches], partition_key="2024-07-01", instance=instance,
                resources={"shuffle_io": io},
            )  # fmt: skip
            assert result.success
            assert seen == {"table": n, "batches": n}
            logged = [e.user_message for e in instance.all_logs(result.run_id)]
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
