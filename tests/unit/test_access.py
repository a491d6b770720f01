"""The ACLs that let principals write or only read a shuffle, expire it and run its queue."""

import pytest
from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

from orchestration.shuffle import ShuffleOptionError, shuffle_acls

LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
WRITES = (AclOperation.WRITE, AclOperation.CREATE, AclOperation.ALTER, AclOperation.DELETE)


def rights_of(acls):
    return {(a.restype, a.name, a.resource_pattern_type, a.principal, a.operation) for a in acls}


def test_writers_and_readers_get_rights_on_both_topics_and_the_reader_group():
    acls = shuffle_acls("t", writers=["User:w"], readers=["User:r"])
    rights = {(a.restype, a.name, a.principal, a.operation) for a in acls}
    for topic in ("t", "t__commits"):
        assert (ResourceType.TOPIC, topic, "User:w", AclOperation.WRITE) in rights
        assert (ResourceType.TOPIC, topic, "User:w", AclOperation.CREATE) in rights
        assert (ResourceType.TOPIC, topic, "User:r", AclOperation.READ) in rights
        # A reader may not write, create, alter or delete anything.
        for op in WRITES:
            assert (ResourceType.TOPIC, topic, "User:r", op) not in rights
    groups = {(a.name, a.principal) for a in acls if a.restype == ResourceType.GROUP}
    assert groups == {("kafka-shuffle-reader", "User:w"), ("kafka-shuffle-reader", "User:r")}
    assert all(a.resource_pattern_type == LITERAL for a in acls)
    assert shuffle_acls("t") == []


def test_a_writer_may_expire_and_run_the_queue_of_its_shuffle():
    acls = shuffle_acls(
        "t",
        writers=["User:w"],
        readers=["User:r"],
        groups=["scorers"],
        dead_letter_topics=["t.dlq"],
    )
    rights = rights_of(acls)
    # Expiry deletes the records of expired runs.
    assert (ResourceType.TOPIC, "t", LITERAL, "User:w", AclOperation.DELETE) in rights
    # Queue mode: the work topic, its done topic and its feeder, the share group, the
    # dead-letter topic.
    for op in (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE):
        assert (ResourceType.TOPIC, "t.queue", LITERAL, "User:w", op) in rights
        assert (ResourceType.TOPIC, "t.queue.done", LITERAL, "User:w", op) in rights
        assert (ResourceType.TOPIC, "t.dlq", LITERAL, "User:w", op) in rights
    for op in (AclOperation.WRITE, AclOperation.DESCRIBE):
        feeder = "kafka-shuffle-feeder.t.queue"
        assert (ResourceType.TRANSACTIONAL_ID, feeder, LITERAL, "User:w", op) in rights
    for op in (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.ALTER_CONFIGS,
        AclOperation.DESCRIBE_CONFIGS,
    ):
        assert (ResourceType.GROUP, "scorers", LITERAL, "User:w", op) in rights
    # A reader reads the dead letters, and nothing of the queue beyond them.
    assert (ResourceType.TOPIC, "t.dlq", LITERAL, "User:r", AclOperation.READ) in rights
    assert not {r for r in rights if r[3] == "User:r" and r[0] == ResourceType.TRANSACTIONAL_ID}
    assert {r[1] for r in rights if r[3] == "User:r" and r[0] == ResourceType.GROUP} == {
        "kafka-shuffle-reader"
    }
    for op in WRITES:
        assert (ResourceType.TOPIC, "t.dlq", LITERAL, "User:r", op) not in rights


def test_a_prefix_grant_covers_everything_named_under_the_prefix_and_nothing_else():
    acls = shuffle_acls("teamA.", writers=["User:w"], readers=["User:r"], prefixed=True)
    rights = rights_of(acls)
    # Topics (data, commit log, work topic, dead letters), share groups and feeders under
    # the prefix, each by one PREFIXED binding.
    assert (ResourceType.TOPIC, "teamA.", PREFIXED, "User:w", AclOperation.DELETE) in rights
    assert (ResourceType.GROUP, "teamA.", PREFIXED, "User:w", AclOperation.READ) in rights
    feeders = "kafka-shuffle-feeder.teamA."
    assert (ResourceType.TRANSACTIONAL_ID, feeders, PREFIXED, "User:w", AclOperation.WRITE) in (
        rights
    )
    names = {(r[0], r[1]) for r in rights if r[2] == PREFIXED}
    assert names == {
        (ResourceType.TOPIC, "teamA."),
        (ResourceType.GROUP, "teamA."),
        (ResourceType.TRANSACTIONAL_ID, feeders),
    }
    # Literal bindings: the readers' group only.
    assert {(r[0], r[1]) for r in rights if r[2] == LITERAL} == {
        (ResourceType.GROUP, "kafka-shuffle-reader")
    }
    assert {r[4] for r in rights if r[3] == "User:r" and r[0] == ResourceType.TOPIC} == {
        AclOperation.READ,
        AclOperation.DESCRIBE,
    }
    # An empty prefix would grant the whole cluster.
    with pytest.raises(ShuffleOptionError, match="non-empty"):
        shuffle_acls("", writers=["User:w"], prefixed=True)
