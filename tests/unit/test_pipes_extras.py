"""What travels from Dagster to a producer application launched through Pipes: the shuffle's
layout read back as it was, the cluster's settings without their secrets, and the commit
attribute both sides name the Dagster run with."""

import datetime as dt

from orchestration.definition import DAGSTER_RUN_ATTR
from orchestration.pipes_application import (
    RUN_ATTR,
    public_kafka_settings,
    spec_from_json,
    spec_to_json,
)
from orchestration.shuffle import ShuffleSpec


def test_the_spec_reads_back_as_it_was_written():
    specs = [
        ShuffleSpec(topic="t", key="k", num_partitions=3),
        ShuffleSpec(
            topic="flights.by_tailnum",
            key=("carrier", "tailnum"),
            num_partitions=8,
            max_parallelism=64,
            event_time="sched_dep",
            max_out_of_orderness=dt.timedelta(minutes=5, microseconds=250),
            replication_factor=1,
            sort_by=("carrier", "tailnum", "sched_dep"),
        ),
    ]
    for spec in specs:
        assert spec_from_json(spec_to_json(spec)) == spec


def test_secrets_stay_with_dagster():
    conf = {
        "bootstrap.servers": "b1:9092,b2:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "producer",
        "sasl.password": "hunter2",
        "sasl.jaas.config": "org.apache.kafka... password=hunter2;",
        "ssl.key.password": "k",
        "ssl.key.pem": "-----BEGIN PRIVATE KEY-----",
        "sasl.oauthbearer.client.secret": "s",
        "ssl.ca.location": "/etc/ca.pem",
    }
    assert public_kafka_settings(conf) == {
        "bootstrap.servers": "b1:9092,b2:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "producer",
        "ssl.ca.location": "/etc/ca.pem",
    }


def test_both_sides_name_the_dagster_run_alike():
    # The application side cannot import orchestration.definition (it imports Dagster).
    assert RUN_ATTR == DAGSTER_RUN_ATTR
