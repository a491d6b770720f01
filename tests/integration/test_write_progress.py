"""A long write shows its progress in the Dagster run's log while it runs."""

import uuid

import pytest
from dagster import DailyPartitionsDefinition, asset, instance_for_test, materialize
from pyspark.sql import DataFrame, SparkSession

from orchestration import KafkaResource, KafkaShuffleIOManager, shuffle_metadata

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
