"""Kafka ACLs for a shuffle: who may write it, who may only read it.

A shuffle is two topics, its data topic and its commit log (``<topic>__commits``). A writer
creates both on its first run, reads the commit log (layout, earlier commits) and appends to
both; a reader only reads both. Readers plan by offsets and never join a group; the client still
looks up the coordinator of its group id (``kafka-shuffle-reader``), so both get READ on it.

Example (as a cluster administrator)::

    grant_shuffle_access("flights.by_tailnum", kafka=admin_conf,
                         writers=["User:producer"], readers=["User:consumer"])
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
    topic: str, *, writers: Sequence[str] = (), readers: Sequence[str] = ()
) -> list[AclBinding]:
    """The ACL bindings that let ``writers`` write shuffle ``topic`` and ``readers`` read it
    (principals as ``User:<name>``)."""
    bindings = []
    for t in (topic, commit_topic(topic)):
        for principals, operations in ((writers, WRITER_OPERATIONS), (readers, READER_OPERATIONS)):
            for principal in principals:
                for op in operations:
                    bindings.append(
                        AclBinding(
                            ResourceType.TOPIC,
                            t,
                            ResourcePatternType.LITERAL,
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
) -> int:
    """Creates the ACLs of :func:`shuffle_acls` (idempotent); returns how many bindings."""
    bindings = shuffle_acls(topic, writers=writers, readers=readers)
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
