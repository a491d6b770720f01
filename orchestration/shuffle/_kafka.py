"""Kafka client helpers shared by the writer, the reader and the commit log."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from .errors import ShuffleConnectionError, ShuffleOptionError

# How long a metadata request may take before an unreachable cluster is reported. Short on
# purpose: a wrong address must fail in seconds, not hang a Spark job.
CONNECT_TIMEOUT_S = 8.0


def client_config(kafka: Mapping[str, Any] | None, **overrides: Any) -> dict[str, Any]:
    """Returns a librdkafka config dict from the user's ``kafka`` options plus overrides.

    The user's dict (dotted librdkafka keys, e.g. ``bootstrap.servers``, ``security.protocol``)
    is copied, never mutated. Values are kept as given; librdkafka validates them.
    """
    if not kafka or not kafka.get("bootstrap.servers"):
        raise ShuffleOptionError(
            "kafka option 'bootstrap.servers' is required, e.g. "
            "kafka={'bootstrap.servers': 'localhost:9092'}"
        )
    conf = {str(k): v for k, v in kafka.items()}
    # Without this, librdkafka retries connecting forever and metadata calls block until
    # their own timeout; with it, the first failure surfaces quickly.
    conf.setdefault("socket.connection.setup.timeout.ms", int(CONNECT_TIMEOUT_S * 1000))
    conf.update(overrides)
    return conf


def admin_client(kafka: Mapping[str, Any] | None) -> AdminClient:
    return AdminClient(client_config(kafka))


def check_reachable(kafka: Mapping[str, Any] | None, timeout: float = CONNECT_TIMEOUT_S) -> int:
    """Fails fast with :class:`ShuffleConnectionError` when no broker answers.

    Returns:
        The number of brokers in the cluster's metadata.
    """
    conf = client_config(kafka)
    try:
        md = AdminClient(conf).list_topics(timeout=timeout)
    except KafkaException as exc:
        raise ShuffleConnectionError(
            f"cannot reach Kafka at bootstrap.servers={conf['bootstrap.servers']!r} "
            f"within {timeout:.0f}s: {exc.args[0] if exc.args else exc}"
        ) from None
    return len(md.brokers)


def ensure_topic(
    kafka: Mapping[str, Any],
    topic: str,
    partitions: int,
    config: Mapping[str, str] | None = None,
    replication_factor: int = -1,
    timeout: float = 30.0,
) -> bool:
    """Creates ``topic`` unless it exists. Returns True if this call created it.

    ``replication_factor=-1`` takes the broker's ``default.replication.factor``.
    """
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewTopic

    admin = admin_client(kafka)
    fut = admin.create_topics(
        [NewTopic(topic, partitions, replication_factor, config=dict(config or {}))],
        operation_timeout=timeout,
        request_timeout=timeout,
    )[topic]
    try:
        fut.result(timeout=timeout)
        _wait_for_leaders(admin, topic, timeout)
        return True
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if getattr(err, "code", lambda: None)() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        if getattr(err, "code", lambda: None)() == KafkaError._TRANSPORT:
            raise ShuffleConnectionError(
                f"cannot reach Kafka at {kafka.get('bootstrap.servers')!r} "
                f"to create topic {topic!r}"
            ) from None
        raise


def _wait_for_leaders(admin: AdminClient, topic: str, timeout: float) -> None:
    # A created topic is not writable or readable until each partition has a leader.
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tmd = admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
        if (
            tmd is not None
            and tmd.error is None
            and tmd.partitions
            and all(p.leader >= 0 for p in tmd.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise ShuffleConnectionError(
        f"topic {topic!r} has partitions without a leader after {timeout}s"
    )


def set_share_group_offset_reset(
    kafka: Mapping[str, Any], group: str, reset: str = "earliest", timeout: float = 30.0
) -> None:
    """Sets a share group's ``share.auto.offset.reset`` (``earliest`` or ``latest``).

    A new share group starts at the latest offset by default; a queue over an existing
    topic usually wants its records from the start.
    """
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    if reset not in ("earliest", "latest"):
        raise ShuffleOptionError(
            f"share.auto.offset.reset must be 'earliest' or 'latest', got {reset!r}"
        )
    res = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(
                "share.auto.offset.reset", reset, incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    # Keep the client referenced until the future resolves: destroying it aborts the request.
    admin = admin_client(kafka)
    admin.incremental_alter_configs([res], request_timeout=timeout)[res].result(timeout)
