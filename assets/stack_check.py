"""A small asset that proves the stack works: Spark writes rows to Kafka and reads them back."""

import json

from dagster import AssetExecutionContext, MaterializeResult, asset
from dagster_pyspark import LazyPySparkResource

from orchestration import KafkaResource
from orchestration.shuffle import read_records, write_records

STACK_CHECK_TOPIC = "shuffle.stack-check"
STACK_CHECK_ROWS = 1000


@asset(group_name="stack", description="Round-trips rows through Kafka with Spark.")
def kafka_stack_check(
    context: AssetExecutionContext, spark: LazyPySparkResource, kafka: KafkaResource
) -> MaterializeResult:
    client = kafka.client()
    client.check_reachable()
    client.ensure_topic(STACK_CHECK_TOPIC, partitions=2)
    before = client.end_offsets(STACK_CHECK_TOPIC, 2)
    session = spark.spark_session
    df = session.range(STACK_CHECK_ROWS).selectExpr(
        "cast(id as string) as key", "concat('row-', id) as value"
    )
    produced = write_records(df, STACK_CHECK_TOPIC, client)
    starting = {str(p): high for p, (_, high) in enumerate(before)}
    # On the JVM when the session has the jar (the pipeline's spark resource does), else
    # with the Python kafka-records source: the same rows either way.
    back = read_records(
        session,
        {
            "subscribe": STACK_CHECK_TOPIC,
            # Every setting, not just the address: a secured cluster needs its credentials.
            **{f"kafka.{k}": str(v) for k, v in client.settings.items()},
            "startingOffsets": json.dumps({STACK_CHECK_TOPIC: starting}),
        },
    )
    read = back.count()
    if read != produced:
        raise RuntimeError(
            f"topic {STACK_CHECK_TOPIC!r}: produced {produced} records but read back {read}"
        )
    context.log.info(f"round-tripped {read} records through {STACK_CHECK_TOPIC}")
    return MaterializeResult(
        metadata={"topic": STACK_CHECK_TOPIC, "produced": produced, "read_back": read}
    )
