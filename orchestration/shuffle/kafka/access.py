"""Kafka ACLs for a shuffle: who may write it, who may only read it.

A shuffle is two topics, its data topic and its commit log (``<topic>__commits``). A writer
creates both on its first run, reads the commit log (layout, earlier commits) and appends to
both; a reader only reads both. Readers plan by offsets and never join a group; the client still
looks up the coordinator of its group id (``kafka-shuffle-reader``), so both get READ on it.

A deployment whose Kafka resource has a ``topic_prefix`` is granted its shuffles as a whole:
``prefixed=True`` makes the topic rights one PREFIXED binding on the prefix per principal and
operation, which covers every shuffle topic and commit log a run of it creates later. End
the prefix with a separator (``staging.``): a PREFIXED ACL on ``staging`` also grants
``staging2.events``.

Example (as a cluster administrator)::

    grant_shuffle_access("flights.by_tailnum", kafka=admin_conf,
                         writers=["User:producer"], readers=["User:consumer"])
    grant_shuffle_access("staging.", kafka=admin_conf, prefixed=True,
                         writers=["User:staging"])
"""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from orchestration.shuffle.core.commitlog import commit_topic
from orchestration.shuffle.errors import ShuffleOptionError
from orchestration.shuffle.kafka.client import READER_GROUP, KafkaClient, KafkaSettings, translate

WRITER_OPERATIONS = (
    AclOperation.CREATE,
    AclOperation.DESCRIBE,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.WRITE,
    AclOperation.READ,
)
READER_OPERATIONS = (AclOperation.DESCRIBE, AclOperation.READ)


def shuffle_acls(
    topic: str,
    *,
    writers: Sequence[str] = (),
    readers: Sequence[str] = (),
    prefixed: bool = False,
) -> list[AclBinding]:
    """The ACL bindings that let ``writers`` write shuffle ``topic`` and ``readers`` read it
    (principals as ``User:<name>``). With ``prefixed``, ``topic`` is a topic prefix (a Kafka
    resource's ``topic_prefix``) and the rights are on every shuffle under it."""
    if prefixed and not topic:
        # An empty PREFIXED pattern would grant every topic of the cluster.
        raise ShuffleOptionError("shuffle_acls: prefixed=True needs a non-empty topic prefix")
    pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
    bindings = []
    # A prefix covers the commit logs too: theirs is the data topic's name and a suffix.
    for t in (topic,) if prefixed else (topic, commit_topic(topic)):
        for principals, operations in ((writers, WRITER_OPERATIONS), (readers, READER_OPERATIONS)):
            for principal in principals:
                for op in operations:
                    bindings.append(
                        AclBinding(
                            ResourceType.TOPIC,
                            t,
                            pattern,
                            principal,
                            "*",
                            op,
                            AclPermissionType.ALLOW,
                        )
                    )
    for principal in dict.fromkeys([*writers, *readers]):
        bindings.append(
            AclBinding(
                ResourceType.GROUP,
                READER_GROUP,
                ResourcePatternType.LITERAL,
                principal,
                "*",
                AclOperation.READ,
                AclPermissionType.ALLOW,
            )
        )
    return bindings


def grant_shuffle_access(
    topic: str,
    *,
    kafka: KafkaSettings,
    writers: Sequence[str] = (),
    readers: Sequence[str] = (),
    prefixed: bool = False,
) -> int:
    """Creates the ACLs of :func:`shuffle_acls` (idempotent); returns how many bindings."""
    bindings = shuffle_acls(topic, writers=writers, readers=readers, prefixed=prefixed)
    if not bindings:
        return 0
    admin = KafkaClient.of(kafka).admin()
    for binding, fut in admin.create_acls(bindings, request_timeout=30).items():
        try:
            fut.result(35)
        except KafkaException as exc:
            op = binding.operation
            name = op.name if isinstance(op, AclOperation) else op
            raise translate(exc, f"granting {name} on {binding.name!r}") from None
    return len(bindings)
