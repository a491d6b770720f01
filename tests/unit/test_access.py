"""The ACLs that let principals write or only read a shuffle."""

from confluent_kafka.admin import AclOperation, ResourceType

from orchestration.shuffle import shuffle_acls


def test_writers_and_readers_get_rights_on_both_topics_and_the_reader_group():
    acls = shuffle_acls("t", writers=["User:w"], readers=["User:r"])
    rights = {(a.restype, a.name, a.principal, a.operation) for a in acls}
    for topic in ("t", "t__commits"):
        assert (ResourceType.TOPIC, topic, "User:w", AclOperation.WRITE) in rights
        assert (ResourceType.TOPIC, topic, "User:w", AclOperation.CREATE) in rights
        assert (ResourceType.TOPIC, topic, "User:r", AclOperation.READ) in rights
        # A reader may not write, create or alter anything.
        for op in (AclOperation.WRITE, AclOperation.CREATE, AclOperation.ALTER):
            assert (ResourceType.TOPIC, topic, "User:r", op) not in rights
    groups = {(a.name, a.principal) for a in acls if a.restype == ResourceType.GROUP}
    assert groups == {("kafka-shuffle-reader", "User:w"), ("kafka-shuffle-reader", "User:r")}
    assert shuffle_acls("t") == []
