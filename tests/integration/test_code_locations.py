"""A shuffle consumed from another code location: the producer team's definitions write it,
a consumer team's own definitions declare it as an ``AssetSpec`` (``shuffle_metadata`` and
the shuffle IO manager's key) and use the library's commit sensor, asset checks and IO
manager on it, on the real broker, Spark and a Dagster instance the two share."""

import uuid

import pandas as pd
import pytest
from dagster import (
    AssetKey,
    AssetSpec,
    DailyPartitionsDefinition,
    Definitions,
    asset,
    build_sensor_context,
    define_asset_job,
    instance_for_test,
)
from pyspark.sql import DataFrame, SparkSession

from orchestration import (
    KafkaResource,
    KafkaShuffleIOManager,
    shuffle_asset_checks,
    shuffle_asset_spec,
    shuffle_commit_sensor,
    shuffle_metadata,
)

pytestmark = pytest.mark.integration

D1, D2 = "2024-06-01", "2024-06-02"
ROWS = {D1: 50, D2: 70}


def test_a_consumer_location_declares_the_shuffle_as_an_asset_spec(bootstrap, spark):
    topic = f"locations.events-{uuid.uuid4().hex[:8]}"
    daily = DailyPartitionsDefinition(start_date=D1, end_date="2024-06-10")
    layout = shuffle_metadata(key="user_id", num_partitions=2, event_time="ts", topic=topic)
    io = {"shuffle_io": KafkaShuffleIOManager(kafka=KafkaResource(bootstrap_servers=bootstrap))}

    # The producer team's location.
    @asset(name="events", partitions_def=daily, io_manager_key="shuffle_io", metadata=layout)
    def events(context) -> DataFrame:
        day, n = context.partition_key, ROWS[context.partition_key]
        start = pd.Timestamp(day, tz="UTC")
        rows = pd.DataFrame(
            {
                "user_id": [f"u{i % 7}" for i in range(n)],
                "ts": [start + pd.Timedelta(minutes=i) for i in range(n)],
                "clicks": [i % 3 for i in range(n)],
            }
        )
        return SparkSession.getActiveSession().createDataFrame(rows)

    producer = Definitions(
        assets=[events], jobs=[define_asset_job("events_job", [events])], resources=io
    )

    # The consumer team's location: the shuffle as an AssetSpec, not the producer's code.
    spec = AssetSpec("events", partitions_def=daily, metadata=layout).with_io_manager_key(
        "shuffle_io"
    )
    totals: dict[str, dict] = {}

    @asset(name="user_totals", partitions_def=daily)
    def user_totals(context, events: DataFrame) -> None:
        got = events.groupBy("user_id").sum("clicks").collect()
        totals[context.partition_key] = {r[0]: r[1] for r in got}

    consumer_job = define_asset_job("totals_job", selection=[user_totals])
    consumer = Definitions(
        assets=[spec, user_totals],
        asset_checks=shuffle_asset_checks(spec),
        jobs=[consumer_job],
        sensors=[shuffle_commit_sensor("events_commits", asset=spec, jobs=[consumer_job])],
        resources=io,
    )

    with instance_for_test() as instance:
        for day in (D1, D2):
            done = producer.resolve_job_def("events_job").execute_in_process(
                instance=instance, partition_key=day
            )
            assert done.success
        # The same spec, made from the commit log instead of typed again.
        made = shuffle_asset_spec(
            "events", kafka=KafkaResource(bootstrap_servers=bootstrap), topic=topic,
            partitions_def=daily,
        )  # fmt: skip
        assert made.metadata == spec.metadata and made.partitions_def == daily
        with build_sensor_context(
            instance=instance, resources=consumer.resources, definitions=consumer
        ) as ctx:
            result = consumer.resolve_sensor_def("events_commits")(ctx)
        requests = sorted(result.run_requests, key=lambda r: r.partition_key)
        assert [(r.job_name, r.partition_key) for r in requests] == [
            ("totals_job", D1),
            ("totals_job", D2),
        ]
        # A repeated tick from the cursor it returned requests nothing again.
        with build_sensor_context(
            instance=instance,
            resources=consumer.resources,
            definitions=consumer,
            cursor=result.cursor,
        ) as ctx:
            assert consumer.resolve_sensor_def("events_commits")(ctx).run_requests == []
        for r in requests:
            run = consumer.resolve_job_def("totals_job").execute_in_process(
                instance=instance, partition_key=r.partition_key, tags=r.tags
            )
            assert run.success
        for day, n in ROWS.items():
            want = pd.Series([i % 3 for i in range(n)]).groupby([f"u{i % 7}" for i in range(n)])
            assert totals[day] == {k: int(v) for k, v in want.sum().items()}
        # The checks the consumer's location defines are on the spec's key.
        checks = consumer.resolve_asset_graph().asset_check_keys
        assert {c.asset_key for c in checks} == {AssetKey("events")}
        assert {c.name for c in checks} >= {"shuffle_layout"}
