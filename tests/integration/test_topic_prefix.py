"""Two deployments of one Dagster project on one broker, told apart only by their Kafka
resource's ``topic_prefix``: each writes, reads, checks and senses its own shuffle."""

import uuid

import pandas as pd
import pytest
from dagster import (
    AssetExecutionContext,
    DailyPartitionsDefinition,
    Definitions,
    MaterializeResult,
    asset,
    build_sensor_context,
    define_asset_job,
    instance_for_test,
    materialize,
)
from pyspark.sql import DataFrame, SparkSession

from orchestration import (
    KafkaResource,
    KafkaShuffleIOManager,
    shuffle_asset_checks,
    shuffle_commit_sensor,
    shuffle_metadata,
)
from orchestration.shuffle import shuffle_log

pytestmark = pytest.mark.integration

DAY = "2024-03-01"
daily = DailyPartitionsDefinition(start_date=DAY, end_date="2024-03-05")


@asset(
    partitions_def=daily,
    io_manager_key="shuffle_io",
    metadata=shuffle_metadata(key="user_id", num_partitions=2, max_parallelism=8),
)
def events_by_user(context: AssetExecutionContext) -> DataFrame:
    # The deployment's name travels in the run's tags, so each writes rows of its own.
    who = context.run.tags["deployment"]
    spark = SparkSession.builder.getOrCreate()
    return spark.createDataFrame(
        pd.DataFrame({"user_id": [f"{who}-{i % 3}" for i in range(12)], "n": list(range(12))})
    )


@asset(partitions_def=daily)
def users(events_by_user: DataFrame) -> MaterializeResult:
    seen = sorted({r.user_id for r in events_by_user.select("user_id").collect()})
    return MaterializeResult(metadata={"users": ",".join(seen)})


def deployment(bootstrap: str, prefix: str) -> Definitions:
    consumers = define_asset_job("users_job", selection=[users])
    return Definitions(
        assets=[events_by_user, users],
        asset_checks=shuffle_asset_checks(events_by_user),
        jobs=[consumers],
        sensors=[shuffle_commit_sensor("commits", asset=events_by_user, jobs=[consumers])],
        resources={
            "shuffle_io": KafkaShuffleIOManager(
                kafka=KafkaResource(bootstrap_servers=bootstrap, topic_prefix=prefix)
            )
        },
    )


def test_two_prefixes_on_one_broker_do_not_see_each_others_shuffles(bootstrap, kafka_conf, spark):
    run = uuid.uuid4().hex[:8]
    prefixes = {"blue": f"blue-{run}.", "green": f"green-{run}."}
    with instance_for_test() as instance:
        for who, prefix in prefixes.items():
            defs = deployment(bootstrap, prefix)
            result = materialize(
                [events_by_user, users, *shuffle_asset_checks(events_by_user)],
                partition_key=DAY,
                resources=defs.resources,
                instance=instance,
                tags={"deployment": who},
            )
            assert result.success
            (mat,) = result.asset_materializations_for_node("events_by_user")
            assert mat.metadata["shuffle/topic"].value == f"{prefix}events_by_user"
            checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
            assert {"shuffle_layout", "shuffle_rows"} <= set(checks) and all(checks.values())
            # The consumer read this deployment's rows only.
            (read,) = result.asset_materializations_for_node("users")
            assert read.metadata["users"].value == ",".join(f"{who}-{i}" for i in range(3))

        for prefix in prefixes.values():
            log = shuffle_log(f"{prefix}events_by_user", kafka=kafka_conf)
            assert [c.window for c in log.commits] == [DAY]
            assert log.commits[0].rows == 12
            # Each deployment's sensor reads its own commit log: one launch, for its one run.
            defs = deployment(bootstrap, prefix)
            with build_sensor_context(
                instance=instance, resources=defs.resources, definitions=defs
            ) as ctx:
                tick = defs.resolve_sensor_def("commits")(ctx)
            assert [r.tags["shuffle/commit"] for r in tick.run_requests] == [log.commits[0].run_id]

    # The two runs made exactly the two shuffles' topics, each under its own prefix.
    topics = KafkaResource(bootstrap_servers=bootstrap).client().admin().list_topics(timeout=30)
    ours = sorted(t for t in topics.topics if run in t)
    assert ours == sorted(
        f"{p}events_by_user{suffix}" for p in prefixes.values() for suffix in ("", "__commits")
    )
