"""Credentials given in the Kafka settings pass through and are never printed."""

import contextlib
import io

import pytest

from orchestration import KafkaResource
from orchestration.shuffle import (
    ShuffleError,
    ShuffleSpec,
    plan_shuffle_read,
    read_shuffle,
    read_shuffle_stream,
    register_data_sources,
    write_shuffle,
)

pytestmark = pytest.mark.integration

SECRET = "pw-7f3c91d2"


def explained(df) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain(True)
    return out.getvalue()


def test_a_password_is_never_printed(spark, kafka_conf, unique):
    # librdkafka ignores SASL settings on a PLAINTEXT listener, so they pass through here.
    conf = {**kafka_conf, "sasl.username": "someone", "sasl.password": SECRET}
    topic = unique("secret")
    spec = ShuffleSpec(topic=topic, key="k", num_partitions=2, max_parallelism=8)
    write_shuffle(spark.range(30).selectExpr("cast(id as string) k", "id"), spec, kafka=conf)
    read = plan_shuffle_read(spark, topic, kafka=conf)
    assert read.dataframe().count() == 30
    register_data_sources(spark)
    records = (
        spark.read.format("kafka-records")
        .option("subscribe", topic)
        .options(**{f"kafka.{k}": v for k, v in conf.items()})
        .load()
    )
    for df in (
        read_shuffle(spark, topic, kafka=conf),
        read.aggregate({"n": ("*", "count")}),
        read_shuffle_stream(spark, topic, kafka=conf),
        records,
    ):
        assert SECRET not in explained(df)
    assert SECRET not in repr(read)
    assert SECRET not in repr(KafkaResource(bootstrap_servers="h:1", sasl_password=SECRET))
    # Errors name the address, never the credentials.
    bad = {"bootstrap.servers": "127.0.0.1:1", "sasl.password": SECRET}
    with pytest.raises(ShuffleError) as failure:
        read_shuffle(spark, topic, kafka=bad)
    assert "127.0.0.1:1" in str(failure.value) and SECRET not in str(failure.value)
