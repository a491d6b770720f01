"""Kafka ACLs for a shuffle: who may write it, who may only read it.

A shuffle is its data topic and its commit log (``<topic>__commits``) and, once the log is
long, the log's index (``<topic>__commits.index``), which writers keep. A writer creates them
(the index when the log first needs one), reads the commit log (layout, earlier commits) and
appends to them; a reader only reads them. Readers plan by offsets and never join a group;
the client still looks up the coordinator of its group id (``kafka-shuffle-reader``), so both
get READ on it.

A writer is the shuffle's owner, so it also gets what the rest of its life takes:

- expiry (:func:`~orchestration.shuffle.expire_shuffle`, the expiry job): DELETE on the data
  topic, to delete the records of expired runs. Kafka's DELETE on a topic also allows
  deleting the topic itself; there is no narrower right for deleting records.
- queue mode (:func:`~orchestration.shuffle.process_queue`): the work topic
  (``<topic>.queue``) and its done topic (``<topic>.queue.done``), the feeder's
  transactional id (``kafka-shuffle-feeder.<topic>.queue``: WRITE, DESCRIBE), the share
  groups of ``groups`` (READ to join and fetch, DESCRIBE for the check that no classic
  group holds the id, ALTER_CONFIGS and DESCRIBE_CONFIGS for the group's delivery settings)
  and the dead-letter topics of ``dead_letter_topics``, which readers may read.

A deployment whose Kafka resource has a ``topic_prefix`` is granted its shuffles as a whole:
``prefixed=True`` makes every right one PREFIXED binding on the prefix per principal and
operation, which covers every shuffle topic, commit log and work topic a run of it creates
later, every share group and dead-letter topic named under the prefix, and the feeders of its
work topics. End the prefix with a separator (``staging.``): a PREFIXED ACL on ``staging``
also grants ``staging2.events``. A principal granted one prefix is refused, by a
:class:`~orchestration.shuffle.errors.ShuffleAuthorizationError` naming the topic or group,
everything under another.

Example (as a cluster administrator)::

    grant_shuffle_access("flights.by_tailnum", kafka=admin_conf,
                         writers=["User:producer"], readers=["User:consumer"],
                         groups=["flights.scorers"], dead_letter_topics=["flights.dlq"])
    grant_shuffle_access("staging.", kafka=admin_conf, prefixed=True,
                         writers=["User:staging"])
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from orchestration.shuffle.core.commitlog import commit_topic
from orchestration.shuffle.core.logindex import index_topic
from orchestration.shuffle.core.queue import FEEDER_ID_PREFIX, done_topic, feeder_id, work_topic
from orchestration.shuffle.errors import ShuffleAuthorizationError, ShuffleOptionError
from orchestration.shuffle.kafka.client import (
    READER_GROUP,
    KafkaClient,
    KafkaConfig,
    error_code,
    translate,
)

WRITER_OPERATIONS = (
    AclOperation.CREATE,
    AclOperation.DESCRIBE,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.WRITE,
    AclOperation.READ,
    # expire_shuffle deletes the records of expired runs (DeleteRecords).
    AclOperation.DELETE,
)
READER_OPERATIONS = (AclOperation.DESCRIBE, AclOperation.READ)
# A writer's share groups: join and fetch (READ), describe (process_queue refuses an id a
# classic group holds), set and read the group's configs (its delivery policy).
SHARE_GROUP_OPERATIONS = (
    AclOperation.READ,
    AclOperation.DESCRIBE,
    AclOperation.ALTER_CONFIGS,
    AclOperation.DESCRIBE_CONFIGS,
)
# The feeder of a work topic writes it in transactions.
FEEDER_OPERATIONS = (AclOperation.WRITE, AclOperation.DESCRIBE)


def _binding(
    restype: ResourceType,
    name: str,
    pattern: ResourcePatternType,
    principal: str,
    op: AclOperation,
) -> AclBinding:
    return AclBinding(restype, name, pattern, principal, "*", op, AclPermissionType.ALLOW)


def shuffle_acls(
    topic: str,
    *,
    writers: Sequence[str] = (),
    readers: Sequence[str] = (),
    prefixed: bool = False,
    groups: Sequence[str] = (),
    dead_letter_topics: Sequence[str] = (),
) -> list[AclBinding]:
    """The ACL bindings that let ``writers`` write shuffle ``topic`` (and expire it and run
    its queue) and ``readers`` read it (principals as ``User:<name>``). With ``prefixed``,
    ``topic`` is a topic prefix (a Kafka resource's ``topic_prefix``) and the rights are on
    every shuffle, share group, dead-letter topic and feeder under it. ``groups`` (share
    groups) and ``dead_letter_topics`` are granted by their exact names, for those the
    prefix does not cover."""
    if prefixed and not topic:
        # An empty PREFIXED pattern would grant every topic of the cluster.
        raise ShuffleOptionError("shuffle_acls: prefixed=True needs a non-empty topic prefix")
    if prefixed:
        # A prefix covers commit logs and work topics too: theirs are the data topic's name
        # and a suffix.
        shuffle_topics = [(topic, ResourcePatternType.PREFIXED)]
        share_groups = [(topic, ResourcePatternType.PREFIXED)]
        feeders = [(FEEDER_ID_PREFIX + topic, ResourcePatternType.PREFIXED)]
    else:
        names = (
            topic,
            commit_topic(topic),
            index_topic(topic),
            work_topic(topic),
            done_topic(topic),
        )
        shuffle_topics = [(t, ResourcePatternType.LITERAL) for t in names]
        share_groups = []
        feeders = [(feeder_id(work_topic(topic)), ResourcePatternType.LITERAL)]
    share_groups += [(g, ResourcePatternType.LITERAL) for g in dict.fromkeys(groups)]
    dead_letters = [(t, ResourcePatternType.LITERAL) for t in dict.fromkeys(dead_letter_topics)]
    rights: list[tuple[ResourceType, list[tuple[str, ResourcePatternType]], Sequence[str], tuple]]
    rights = [
        (ResourceType.TOPIC, shuffle_topics + dead_letters, writers, WRITER_OPERATIONS),
        (ResourceType.TOPIC, shuffle_topics + dead_letters, readers, READER_OPERATIONS),
        (ResourceType.GROUP, share_groups, writers, SHARE_GROUP_OPERATIONS),
        (ResourceType.TRANSACTIONAL_ID, feeders, writers, FEEDER_OPERATIONS),
    ]
    bindings = []
    for restype, resources, principals, operations in rights:
        for name, pattern in resources:
            for principal in principals:
                for op in operations:
                    bindings.append(_binding(restype, name, pattern, principal, op))
    for principal in dict.fromkeys([*writers, *readers]):
        bindings.append(
            _binding(
                ResourceType.GROUP,
                READER_GROUP,
                ResourcePatternType.LITERAL,
                principal,
                AclOperation.READ,
            )
        )
    return bindings


def grant_shuffle_access(
    topic: str,
    *,
    kafka: KafkaConfig,
    writers: Sequence[str] = (),
    readers: Sequence[str] = (),
    prefixed: bool = False,
    groups: Sequence[str] = (),
    dead_letter_topics: Sequence[str] = (),
) -> int:
    """Creates the ACLs of :func:`shuffle_acls` (idempotent) and returns once a broker
    lists them (they are in force for the next request); returns how many bindings."""
    bindings = shuffle_acls(
        topic,
        writers=writers,
        readers=readers,
        prefixed=prefixed,
        groups=groups,
        dead_letter_topics=dead_letter_topics,
    )
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
    _wait_until_in_force(admin, bindings, topic)
    return len(bindings)


def _wait_until_in_force(admin: AdminClient, bindings: list[AclBinding], topic: str) -> None:
    """Returns once a broker lists every one of ``bindings``: the controller has committed
    them when ``create_acls`` answers, but a broker applies them a moment later, and a
    request made at once could still be refused."""
    # One filter per resource and principal: any operation, either permission.
    keys = {(b.restype, b.name, b.resource_pattern_type, b.principal, b.host) for b in bindings}
    filters = [AclBindingFilter(*key, AclOperation.ANY, AclPermissionType.ANY) for key in keys]
    wanted = set(bindings)
    deadline = time.monotonic() + 30
    while True:
        listed: set[AclBinding] = set()
        for flt in filters:
            try:
                listed.update(admin.describe_acls(flt, request_timeout=30).result(35))
            except KafkaException as exc:
                if error_code(exc) == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
                    # An administrator who may create ACLs but not list them: no wait.
                    return
                raise translate(exc, f"listing the ACLs granted on {topic!r}") from None
        missing = wanted - listed
        if not missing:
            return
        if time.monotonic() > deadline:
            raise ShuffleAuthorizationError(
                f"granting access to {topic!r}: {len(missing)} of {len(wanted)} ACLs were "
                "created but no broker lists them after 30 s"
            )
        time.sleep(0.2)
