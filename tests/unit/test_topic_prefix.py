"""KafkaResource.topic_prefix: every place that derives a shuffle asset's topic puts it first,
and ACLs can be granted on the prefix as a whole."""

import pytest
from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType
from dagster import EnvVar
from pydantic import ValidationError

from orchestration import KafkaResource, shuffle_metadata
from orchestration.definition import shuffle_asset
from orchestration.shuffle import ShuffleOptionError, shuffle_acls
from orchestration.shuffle.kafka.client import READER_GROUP

MD = shuffle_metadata(key="user_id", num_partitions=2)


def test_the_prefix_goes_before_the_default_and_the_declared_topic():
    kafka = KafkaResource(bootstrap_servers="b:9092", topic_prefix="staging.")
    assert shuffle_asset("a", ["grp", "a"], MD).under(kafka).topic == "staging.grp.a"
    declared = shuffle_metadata(key="user_id", num_partitions=2, topic="events.by_user")
    assert shuffle_asset("a", ["a"], declared).under(kafka).topic == "staging.events.by_user"


def test_no_prefix_leaves_the_asset_as_declared():
    parsed = shuffle_asset("a", ["grp", "a"], MD)
    assert parsed.under(KafkaResource(bootstrap_servers="b:9092")) is parsed


def test_the_prefix_keeps_the_rest_of_the_layout():
    parsed = shuffle_asset("a", ["a"], {**MD, "shuffle/window_column": "day"})
    under = parsed.under(KafkaResource(bootstrap_servers="b:9092", topic_prefix="p-"))
    assert under.window_column == "day"
    assert (under.spec.key, under.spec.num_partitions) == (("user_id",), 2)


def test_a_prefix_kafka_would_refuse_in_a_topic_name_is_refused_when_set():
    with pytest.raises(ValidationError, match="topic_prefix 'a/b' may hold only"):
        KafkaResource(bootstrap_servers="b:9092", topic_prefix="a/b")


def test_the_prefix_can_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("SHUFFLE_TOPIC_PREFIX_TEST", "ci-42.")
    kafka = KafkaResource(
        bootstrap_servers="b:9092", topic_prefix=EnvVar("SHUFFLE_TOPIC_PREFIX_TEST")
    )
    # Dagster reads an EnvVar when the resource is set up for a run.
    ready = kafka.process_config_and_initialize()
    assert ready.topic_prefix == "ci-42."
    assert shuffle_asset("a", ["a"], MD).under(ready).topic == "ci-42.a"


def test_prefixed_acls_cover_every_shuffle_under_the_prefix_in_one_binding_each():
    acls = shuffle_acls("staging.", writers=["User:w"], readers=["User:r"], prefixed=True)
    topics = [a for a in acls if a.restype == ResourceType.TOPIC]
    assert {(a.name, a.resource_pattern_type) for a in topics} == {
        ("staging.", ResourcePatternType.PREFIXED)
    }
    rights = {(a.principal, a.operation) for a in topics}
    assert ("User:w", AclOperation.CREATE) in rights and ("User:r", AclOperation.READ) in rights
    assert ("User:r", AclOperation.WRITE) not in rights
    # The reader group stays a literal name: it is not the deployment's. The share groups
    # queue mode runs under the prefix are the deployment's: one prefixed binding each right.
    groups = [a for a in acls if a.restype == ResourceType.GROUP]
    assert {(a.name, a.resource_pattern_type) for a in groups if a.principal == "User:r"} == {
        (READER_GROUP, ResourcePatternType.LITERAL)
    }
    shared = {(a.name, a.resource_pattern_type) for a in groups if a.principal == "User:w"}
    assert ("staging.", ResourcePatternType.PREFIXED) in shared


def test_an_empty_prefix_is_never_granted():
    with pytest.raises(ShuffleOptionError, match="non-empty topic prefix"):
        shuffle_acls("", writers=["User:w"], prefixed=True)
