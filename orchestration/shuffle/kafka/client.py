"""Kafka clients of the engine, and the one place where Kafka's errors become ours.

Every call into confluent-kafka that can fail goes through :func:`kafka_errors`, which turns
a ``KafkaException`` into the :class:`~orchestration.shuffle.errors.ShuffleError` subclass
that fits and names what was being done (topic, partition, offset). Clients are used in
``with`` blocks so they are closed whatever happens.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Union, cast

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from orchestration.shuffle.core.kafka_config import CONSUMER_ONLY, librdkafka_config, redact
from orchestration.shuffle.errors import (
    ShuffleAuthorizationError,
    ShuffleConnectionError,
    ShuffleError,
    ShuffleFormatError,
    ShuffleLayoutError,
    ShuffleOptionError,
    ShuffleTopicNotFoundError,
)

# How long a metadata request may take before an unreachable cluster is reported. Short on
# purpose: a wrong address must fail in seconds, not hang a Spark job.
CONNECT_TIMEOUT_S = 8.0

# How long a partition's offsets are asked for again while the cluster answers but the
# partition's leader does not: a broker killed outright keeps its partitions until the
# controller fences it (broker.session.timeout.ms, 9 s by default) and elects new leaders.
FAILOVER_S = 30.0

# What asking a partition's leader gives when that node has just died: the question times
# out, or the client drops its handle of the node as the cluster stops listing it.
_LEADER_GONE = {KafkaError._TIMED_OUT, KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT}

# Errors a partition gives while its leadership moves: no leader yet, another one now, or
# a new leader that does not know the partition's high watermark yet.
_MOVING = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.OFFSET_NOT_AVAILABLE,
}
# Errors a just-created or just-moved partition gives for a moment; worth a retry.
_TRANSIENT = _MOVING | {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION}
_NOT_FOUND = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC}
# Refused for want of an ACL: waiting or reconnecting cannot change it.
_DENIED = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
_AUTH = {KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._AUTHENTICATION}


KafkaConfig = Union["KafkaClient", Mapping[str, Any]]
"""What a public function's ``kafka=`` accepts: a :class:`KafkaClient`, or a dict of Kafka
settings by their dotted names (``{"bootstrap.servers": "host:9092"}``): librdkafka's, or the
Java client's as a Spark ``format("kafka")`` job has them without the ``kafka.`` prefix
(:mod:`orchestration.shuffle.core.kafka_config` says which are translated and which refused)."""


# Idle consumers lent by KafkaClient.lent_consumer, by process and settings.
_IDLE: dict[tuple[int, tuple[tuple[str, str], ...]], list[tuple[Consumer, float]]] = {}
_IDLE_LOCK = threading.Lock()
IDLE_CONSUMER_S = 60.0
# How long end_offsets' first ask of a partition's offsets waits, before the careful one.
QUICK_OFFSETS_S = 2.0


@atexit.register
def close_idle_consumers() -> None:
    """Closes this process's idle lent consumers when it exits (a forked child leaves its
    parent's alone)."""
    pid = os.getpid()
    with _IDLE_LOCK:
        mine = [c for (p, _), idle in _IDLE.items() if p == pid for c, _ in idle]
        for key in [k for k in _IDLE if k[0] == pid]:
            del _IDLE[key]
    for c in mine:
        with contextlib.suppress(Exception):
            c.close()


_REAPER: threading.Thread | None = None


def _close_expired(now: float) -> list[Consumer]:
    """Takes this process's lent consumers idle for more than :data:`IDLE_CONSUMER_S` out
    of the pool (under the lock) and returns them, to be closed."""
    pid = os.getpid()
    expired: list[Consumer] = []
    with _IDLE_LOCK:
        for (p, _), idle in _IDLE.items():
            if p == pid:
                expired += [c for c, since in idle if now - since > IDLE_CONSUMER_S]
                idle[:] = [(c, since) for c, since in idle if now - since <= IDLE_CONSUMER_S]
    return expired


def _reap_idle_consumers() -> None:
    """Closes idle lent consumers once they expire, while any are idle: a consumer left idle
    would otherwise keep its connections (and, when the cluster goes away, log every
    reconnection) until the process exits."""
    global _REAPER
    while True:
        time.sleep(min(IDLE_CONSUMER_S / 4, 5.0))
        for c in _close_expired(time.monotonic()):
            with contextlib.suppress(Exception):
                c.close()
        with _IDLE_LOCK:
            if not any(idle for (p, _), idle in _IDLE.items() if p == os.getpid()):
                _REAPER = None
                return


def _ensure_reaper() -> None:
    """Starts the reaper of idle consumers of this process unless it runs (called under
    ``_IDLE_LOCK``)."""
    global _REAPER
    if _REAPER is None or not _REAPER.is_alive():  # a forked child's copy is not alive
        _REAPER = threading.Thread(
            target=_reap_idle_consumers, name=f"idle-consumers-{os.getpid()}", daemon=True
        )
        _REAPER.start()


class KafkaClient:
    """One Kafka cluster as the engine talks to it: its settings, checked and completed once,
    and every cluster-level operation the engine needs (metadata, topics, offsets, clients).

    Holds settings only, never a connection: it pickles into Spark tasks, and the clients it
    makes are closed by whoever asked for them (``with kafka.consumer() as c:``). Errors are
    the engine's (:class:`~orchestration.shuffle.errors.ShuffleError` subclasses) and name
    the cluster, topic and partition.

    ``settings`` are kept as given, in librdkafka's names or the Java client's (Spark's
    ``kafka.*`` options without the prefix): the JVM read path hands them to the Java
    client unchanged, and the clients made here get them translated for librdkafka
    (:func:`~orchestration.shuffle.core.kafka_config.librdkafka_config`), which also refuses
    at once what librdkafka cannot use.

    Example::

        kafka = KafkaClient({"bootstrap.servers": "127.0.0.1:19092"})
        kafka.check_reachable()                      # brokers, or an error within seconds
        kafka.ensure_topic("events", partitions=4)
        low, high = kafka.end_offsets("events", 4)[0]
        with kafka.consumer() as c:
            for message in read_range(c, "events", 0, low, high):
                ...
    """

    __slots__ = ("settings", "_rdkafka")

    def __init__(self, settings: Mapping[str, Any]) -> None:
        if isinstance(settings, KafkaClient):
            settings = settings.settings
        if not settings or not settings.get("bootstrap.servers"):
            raise ShuffleOptionError(
                "kafka option 'bootstrap.servers' is required, e.g. "
                "kafka={'bootstrap.servers': 'localhost:9092'}"
            )
        conf = {str(k): v for k, v in settings.items()}
        # Without this, librdkafka retries connecting forever and metadata calls block until
        # their own timeout; with it, the first failure surfaces quickly.
        conf.setdefault("socket.connection.setup.timeout.ms", int(CONNECT_TIMEOUT_S * 1000))
        self.settings: dict[str, Any] = conf
        self._rdkafka = librdkafka_config(conf)

    @classmethod
    def of(cls, kafka: KafkaConfig | None) -> KafkaClient:
        """``kafka`` itself when it is a client, else a client of those settings."""
        if isinstance(kafka, KafkaClient):
            return kafka
        return cls(kafka or {})

    @property
    def bootstrap_servers(self) -> str:
        """The cluster's address as given (``host:port[,host:port]``)."""
        return str(self.settings["bootstrap.servers"])

    def __repr__(self) -> str:
        # Settings may hold a password: only the address is shown.
        return f"KafkaClient(bootstrap.servers={self.bootstrap_servers!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KafkaClient) and other.settings == self.settings

    def __hash__(self) -> int:
        return hash(tuple(sorted((k, repr(v)) for k, v in self.settings.items())))

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.settings = state["settings"]
        self._rdkafka = librdkafka_config(self.settings)

    def config(self, **overrides: Any) -> dict[str, Any]:
        """The settings in librdkafka's names with ``overrides`` applied (librdkafka validates
        them)."""
        return {**self._rdkafka, **overrides}

    def producer(self, **overrides: Any) -> Producer:
        """A producer of this cluster with ``overrides`` applied; the caller flushes it."""
        return self._make(Producer, _not_consuming(self.config(**overrides), overrides))

    def admin(self) -> AdminClient:
        """A new admin client of this cluster (metadata requests reuse a kept one)."""
        return self._make(AdminClient, _not_consuming(self.config(), {}))

    def _make(self, kind: Any, conf: dict[str, Any]) -> Any:
        """A librdkafka client of ``kind``; settings it refuses become an option error."""
        try:
            return kind(conf)
        except KafkaException as exc:
            if error_code(exc) != KafkaError._INVALID_ARG:
                raise
            reason = redact(exc.args[0].str(), self.settings)
            if "No such configuration property" in reason:
                reason += (
                    ": a Java client setting without a librdkafka equivalent cannot be used on "
                    "the Python path (see orchestration.shuffle.core.kafka_config)"
                )
            raise ShuffleOptionError(
                f"kafka settings refused by librdkafka, the Python path's Kafka client: {reason}"
            ) from None

    def consumer(self, **overrides: Any) -> Consumer:
        """A consumer for assigned (not subscribed) reads: no group offsets are committed.

        Its group is the settings' ``group.id`` (Spark's ``kafka.group.id``) when given:
        librdkafka looks the group's coordinator up even for assigned reads, and a cluster
        with ACLs may let a user READ that group only."""
        return self._make(
            Consumer,
            self.config(
                **{
                    # Reads are planned by offsets, never by a group's position.
                    "group.id": overrides.pop(
                        "group.id", self._rdkafka.get("group.id") or READER_GROUP
                    ),
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "auto.offset.reset": "error",
                    "enable.partition.eof": True,
                    # A fetch holds a few frames (a frame is cut at 4 MiB before compression).
                    # The prefetch queue is what a reader holds beyond the frame it decodes:
                    # kept small, memory stays flat however much is read.
                    "fetch.max.bytes": 4 * 1024 * 1024,
                    "max.partition.fetch.bytes": 4 * 1024 * 1024,
                    "queued.max.messages.kbytes": 4 * 1024,
                    # With a small queue the queue is often full; librdkafka then postpones the
                    # next fetch by this much (1 s by default), which made a reader wait more
                    # than it read.
                    "fetch.queue.backoff.ms": 5,
                    # A read ends at a committed offset, often the partition's end, where the
                    # broker holds a fetch until this passes (500 ms by default). The next
                    # range read with the same consumer (another partition, another pass)
                    # waits behind it: at 10 ms, a task reading one 1,000-row window over 8
                    # partitions took 90 ms, against 29 ms at 1 ms. A fetch with data waiting
                    # returns at once whatever this is.
                    "fetch.wait.max.ms": 1,
                    **overrides,
                }
            ),
        )

    @contextlib.contextmanager
    def lent_consumer(self) -> Iterator[Consumer]:
        """A consumer of :meth:`consumer`'s settings for a short read on the driver (the
        commit log, partitions' offsets), lent from the idle ones of this process and taken
        back after the block, unassigned (closed instead when the block raised).

        A new consumer's first request waits for a connection and the cluster's metadata
        (about 10 ms on the local broker), which was most of the time a small read spent
        planning. A consumer idle for more than :data:`IDLE_CONSUMER_S` is closed, by a
        thread of this process that runs while any are idle, or the next time one is lent."""
        key = (os.getpid(), self._pool_key())
        lent = None
        for c in _close_expired(time.monotonic()):
            c.close()
        with _IDLE_LOCK:
            mine = _IDLE.get(key)
            if mine:
                lent = mine.pop()[0]
        c = lent if lent is not None else self.consumer()
        try:
            yield c
            c.unassign()
        except BaseException:
            c.close()
            raise
        with _IDLE_LOCK:
            _IDLE.setdefault(key, []).append((c, time.monotonic()))
            _ensure_reaper()

    def _pool_key(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, repr(v)) for k, v in self._rdkafka.items()))

    def errors(self, what: str) -> contextlib.AbstractContextManager[None]:
        """Translates any ``KafkaException`` raised inside into the engine's error for
        ``what`` (see :func:`translate`)."""
        return kafka_errors(what, self)

    def check_reachable(
        self, topic: str | None = None, *, timeout: float = CONNECT_TIMEOUT_S
    ) -> int:
        """Fails fast with :class:`ShuffleConnectionError` when no broker answers.

        With ``topic``, only that topic's metadata is asked for (whether it exists or not),
        not every topic's: the answer's size then does not grow with the cluster.

        The error says why when the client knows: authentication refused (wrong user or
        password), a TLS handshake that failed (e.g. no ``ssl.ca.location``), a PLAINTEXT
        client at a TLS listener, or nothing listening.

        Returns:
            The number of brokers in the cluster's metadata.
        """
        return len(self.metadata(topic, timeout=timeout).brokers)

    def metadata(
        self, topic: str | None = None, *, timeout: float = CONNECT_TIMEOUT_S, what: str = ""
    ) -> Any:
        """The cluster's metadata (of one topic, if given), or an error that says why not."""
        admin = _admin(self)
        conf = self.settings
        with admin.lock:
            admin.errors.clear()
            admin.log.lines.clear()
            deadline = time.monotonic() + timeout
            # Asked in short steps: a refusal that waiting cannot cure (authentication, TLS, a
            # PLAINTEXT client at a TLS listener) is reported at once rather than at the
            # timeout.
            while True:
                try:
                    return admin.client.list_topics(
                        topic=topic, timeout=max(0.05, min(1.0, deadline - time.monotonic()))
                    )
                except KafkaException as exc:
                    admin.client.poll(0)  # serves the error and log callbacks: why it failed
                    fatal = connection_refusal(admin.errors, admin.log.lines, conf)
                    if fatal is None and time.monotonic() < deadline:
                        continue
                    with _ADMINS_LOCK:
                        _ADMINS.pop(admin.key, None)  # the next call starts with a fresh client
                    why = (
                        fatal
                        or _why(admin.errors, admin.log.lines, conf)
                        or (exc.args[0] if exc.args else exc)
                    )
                    waited = "" if fatal else f" within {timeout:.0f}s"
                    raise ShuffleConnectionError(
                        f"cannot reach Kafka at bootstrap.servers={self.bootstrap_servers!r}"
                        f"{what}{waited}: {why}"
                    ) from None

    def describe_topic(self, topic: str, *, timeout: float = CONNECT_TIMEOUT_S) -> Any | None:
        """``topic``'s metadata (``confluent_kafka.admin.TopicMetadata``), None when it does
        not exist.

        Raises:
            ShuffleAuthorizationError: this principal may not describe the topic. Kafka
                says so whether or not the topic exists, so it is not reported missing.
        """
        md = self.metadata(topic, timeout=timeout, what=f" to describe topic {topic!r}")
        tmd = md.topics.get(topic)
        if tmd is None or tmd.error is None:
            return tmd
        if tmd.error.code() in _DENIED:
            raise ShuffleAuthorizationError(
                f"describing topic {topic!r}: not authorized at "
                f"bootstrap.servers={self.bootstrap_servers!r}: {tmd.error.str()} (no ACL "
                "lets this principal use it)"
            )
        return None

    def partition_count(self, topic: str, *, timeout: float = CONNECT_TIMEOUT_S) -> int:
        """The number of partitions of ``topic``; errors name the topic and the cluster."""
        tmd = self.describe_topic(topic, timeout=timeout)
        if tmd is None:
            raise ShuffleTopicNotFoundError(
                f"topic {topic!r} does not exist on {self.bootstrap_servers!r}"
            )
        return len(tmd.partitions)

    def end_offsets(self, topic: str, partitions: int) -> list[tuple[int, int]]:
        """(low, high) offsets of each partition, read from the brokers (not a cache).

        A partition whose leader does not answer while the cluster does (a broker that just
        died) is asked again until a new leader answers, for up to :data:`FAILOVER_S`; an
        unreachable cluster is reported by :meth:`metadata`, within its timeout.

        The offsets are those a reader of these settings sees (``read_committed`` unless
        they say otherwise: the end of a partition with an open transaction is its last
        stable offset). They are asked partition by partition through a consumer: the admin
        client's ``list_offsets``, which asks them all at once, can crash the process (a
        segmentation fault seen with confluent-kafka 2.16.1), so it is not used.

        They are asked first through a consumer lent from the idle ones (:meth:`lent_consumer`),
        up to :data:`QUICK_OFFSETS_S` each; any error there, and the partitions are asked again
        as above."""
        try:
            with self.lent_consumer() as lent:
                return [
                    lent.get_watermark_offsets(
                        TopicPartition(topic, p), timeout=QUICK_OFFSETS_S, cached=False
                    )
                    for p in range(partitions)
                ]
        except KafkaException:
            pass  # the lent consumer is closed; asked again, with retries and named errors
        c: Consumer | None = self.consumer()
        try:
            out = []
            for p in range(partitions):
                deadline = time.monotonic() + CONNECT_TIMEOUT_S
                failover = time.monotonic() + FAILOVER_S
                leader_lost = False
                while True:
                    try:
                        tp = TopicPartition(topic, p)
                        if c is None:
                            c = self.consumer()
                        out.append(
                            c.get_watermark_offsets(tp, timeout=CONNECT_TIMEOUT_S, cached=False)
                        )
                        break
                    except KafkaException as exc:
                        step = offsets_retry(
                            error_code(exc),
                            time.monotonic(),
                            deadline=deadline,
                            failover=failover,
                            leader_lost=leader_lost,
                        )
                        if step == "wait":
                            time.sleep(0.2)
                            continue
                        if step == "reconnect":
                            self.metadata(topic)  # raises when the cluster itself is gone
                            # The consumer keeps asking the leader it was first told of, dead
                            # or not; a new one asks the cluster which node leads now.
                            if c is not None:
                                c.close()
                                c = None
                            leader_lost = True
                            continue
                        what = f"reading the offsets of topic {topic!r} partition {p}"
                        raise translate(exc, what, self) from None
            return out
        finally:
            if c is not None:
                c.close()

    def replication_for(self, requested: int | None = None) -> int:
        """The replication factor a new topic gets: ``requested`` (the broker refuses one
        larger than the cluster), or min(3, brokers), which asks the cluster for its size."""
        if requested is not None:
            if requested < 1:
                raise ShuffleOptionError(f"replication_factor must be >= 1, got {requested}")
            return requested
        return max(1, min(3, self.check_reachable()))

    def ensure_topic(
        self,
        topic: str,
        partitions: int,
        *,
        config: Mapping[str, str] | None = None,
        replication_factor: int | None = None,
        timeout: float = 30.0,
    ) -> bool:
        """Creates ``topic`` unless it exists. Returns True if this call created it.

        ``replication_factor`` None: min(3, brokers). ``min.insync.replicas`` is set to one
        less than the replication factor (at least 1) unless ``config`` says otherwise, so with
        ``acks=all`` a write survives one broker down and is on two replicas when acknowledged.
        """
        rf = self.replication_for(replication_factor)
        conf = {"min.insync.replicas": str(max(1, rf - 1)), **dict(config or {})}
        admin = self.admin()
        fut = admin.create_topics(
            [NewTopic(topic, partitions, rf, config=conf)],
            operation_timeout=timeout,
            request_timeout=timeout,
        )[topic]
        try:
            fut.result(timeout=timeout)
        except KafkaException as exc:
            if error_code(exc) == KafkaError.TOPIC_ALREADY_EXISTS:
                return False
            raise translate(exc, f"creating topic {topic!r}", self) from None
        _wait_for_leaders(admin, topic, timeout)
        return True

    def grow_topic(self, topic: str, partitions: int, *, timeout: float = 30.0) -> bool:
        """Gives ``topic`` ``partitions`` partitions in all, unless it has them already (a
        change retried after it added them). Returns True if this call added them.

        Raises:
            ShuffleLayoutError: The topic has more partitions than that already.
        """
        have = self.partition_count(topic)
        if have == partitions:
            return False
        if have > partitions:
            raise ShuffleLayoutError(
                f"topic {topic!r} has {have} partitions already, more than {partitions}"
            )
        admin = self.admin()
        fut = admin.create_partitions(
            [NewPartitions(topic, partitions)],
            operation_timeout=timeout,
            request_timeout=timeout,
        )[topic]
        try:
            fut.result(timeout=timeout)
        except KafkaException as exc:
            raise translate(exc, f"adding partitions to topic {topic!r}", self) from None
        _wait_for_leaders(admin, topic, timeout)
        # Every broker asked next must know the new partitions before a writer uses them.
        deadline = time.monotonic() + timeout
        while self.partition_count(topic) < partitions and time.monotonic() < deadline:
            time.sleep(0.1)
        return True


def _not_consuming(conf: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` for a producer or an admin client: without the consumer's settings a user's
    ``kafka.group.id`` brings (librdkafka warns of each on every such client), unless asked
    for."""
    return {k: v for k, v in conf.items() if k not in CONSUMER_ONLY or k in overrides}


def offsets_retry(
    code: int | None, now: float, *, deadline: float, failover: float, leader_lost: bool
) -> str:
    """What :meth:`KafkaClient.end_offsets` does after asking a partition's offsets failed with
    error ``code`` at time ``now``: ``"wait"`` and ask again, ``"reconnect"`` (a new consumer,
    once the cluster answers) or ``"raise"``.

    ``deadline`` ends the retries of errors a just-created or just-moved partition gives for a
    moment; ``failover`` (later) those of a leadership that moves, or of a leader that died.
    ``leader_lost``: this partition's leader stopped answering and the consumer was replaced.
    A new consumer does not know the partition until it has the topic's metadata, and the
    dead leader's timeout may have used up ``deadline``, so its transient errors are retried
    up to ``failover``."""
    if code in _TRANSIENT and now < deadline:
        return "wait"
    if code in _MOVING and now < failover:
        # A new leader is being elected, or has just been: the time a dead one took to
        # answer may have used the shorter deadline.
        return "wait"
    if code in _LEADER_GONE and now < failover:
        return "reconnect"
    if leader_lost and code in _TRANSIENT and now < failover:
        return "wait"
    return "raise"


def error_code(exc: BaseException) -> int | None:
    """The ``KafkaError`` code that ``exc`` carries, or None when it carries none."""
    err = exc.args[0] if exc.args else None
    return err.code() if isinstance(err, KafkaError) else None


def translate(exc: KafkaException, what: str, kafka: KafkaConfig | None = None) -> ShuffleError:
    """The engine's error for a Kafka error raised while doing ``what`` (on the cluster of
    ``kafka``, when known: an unreachable one is then asked why)."""
    kafka = KafkaClient.of(kafka) if kafka else None
    code = error_code(exc)
    err = exc.args[0] if exc.args else exc
    reason = err.str() if isinstance(err, KafkaError) else str(err)
    if isinstance(err, KafkaError) and (not reason.strip() or reason.rstrip().endswith(":")):
        # Some answers carry only the request's name ("ConsumerGroupDescribe: "): the
        # error's own name says what it was.
        reason = f"{reason.rstrip()} {err.name()}".strip()
    where = f" at bootstrap.servers={kafka.bootstrap_servers!r}" if kafka else ""
    if code in _NOT_FOUND:
        return ShuffleTopicNotFoundError(f"{what}: {reason}")
    if code in _DENIED:
        return ShuffleAuthorizationError(f"{what}: not authorized{where}: {reason}")
    if code in _AUTH:
        return ShuffleConnectionError(f"{what}: not authorized{where}: {reason}")
    if code in _UNREACHABLE and kafka:
        # "All broker connections are down" says nothing of why: ask a fresh client, whose
        # error names a refused password, a failed TLS handshake or a wrong protocol.
        try:
            kafka.check_reachable()
        except ShuffleConnectionError as diagnosed:
            return ShuffleConnectionError(f"{what}: {diagnosed}")
    return ShuffleConnectionError(f"{what}{where}: {reason}")


_UNREACHABLE = {KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT}


def delivery_failure(
    what: str, errors: list[KafkaError], kafka: KafkaConfig | None = None
) -> ShuffleError:
    """The engine's error for records a producer did not deliver while doing ``what``
    (``errors`` from its delivery callbacks; none: the flush timed out). A refusal for want
    of an ACL is a :class:`ShuffleAuthorizationError`."""
    for err in errors:
        if err.code() in _DENIED:
            return translate(KafkaException(err), what, kafka)
    return ShuffleConnectionError(f"{what} failed: {[str(e) for e in errors] or 'timed out'}")


@contextlib.contextmanager
def kafka_errors(what: str, kafka: KafkaConfig | None = None) -> Iterator[None]:
    """Translates any ``KafkaException`` raised inside into the engine's error for ``what``."""
    try:
        yield
    except KafkaException as exc:
        raise translate(exc, what, kafka) from None


# librdkafka needs a group id even for assigned reads; no group API is ever used with it, but
# the client looks its coordinator up, so a cluster with ACLs should let readers READ it.
READER_GROUP = "kafka-shuffle-reader"
# Errors a reader of assigned partitions may see and ignore: they concern the group only.
_GROUP_ONLY = {KafkaError.GROUP_AUTHORIZATION_FAILED}


@dataclass
class _Admin:
    """An admin client kept for metadata requests, with what it reported during the call
    in progress (errors, log lines)."""

    key: tuple
    client: AdminClient
    errors: list[KafkaError]
    log: _ClientLog
    lock: threading.Lock


# Admin clients by configuration (and process: a forked child makes its own). A fresh
# client's first metadata request took either ~2 ms or ~53 ms here, at random; a kept one
# answers in well under a millisecond, so a read's planning does not pay that twice.
_ADMINS: OrderedDict[tuple, _Admin] = OrderedDict()
_ADMINS_LOCK = threading.Lock()
_ADMINS_KEPT = 8


def _admin_key(kafka: KafkaClient) -> tuple:
    return (os.getpid(), tuple(sorted((k, repr(v)) for k, v in kafka.settings.items())))


def kept_admin(kafka: KafkaConfig) -> AdminClient | None:
    """The admin client this process keeps for metadata requests to ``kafka``'s cluster, or
    None: no request made yet, or the last one failed and dropped it (the next starts afresh).

    For tests and diagnostics of that reuse; the engine's own requests go through
    :meth:`KafkaClient.metadata`.
    """
    key = _admin_key(KafkaClient.of(kafka))
    with _ADMINS_LOCK:
        admin = _ADMINS.get(key)
    return admin.client if admin is not None else None


def _admin(kafka: KafkaClient) -> _Admin:
    key = _admin_key(kafka)
    with _ADMINS_LOCK:
        admin = _ADMINS.get(key)
        if admin is None:
            errors: list[KafkaError] = []
            log = _ClientLog()
            # Asking for a topic that does not exist must not create it, whatever the
            # brokers' auto.create.topics.enable says (an admin client's default allows it).
            conf = kafka.config(
                error_cb=errors.append, logger=log.logger, **{"allow.auto.create.topics": False}
            )
            client = kafka._make(AdminClient, _not_consuming(conf, {}))
            admin = _Admin(key, client, errors, log, threading.Lock())
            _ADMINS[key] = admin
            while len(_ADMINS) > _ADMINS_KEPT:
                _ADMINS.popitem(last=False)
        _ADMINS.move_to_end(key)
    return admin


class _ClientLog(logging.Handler):
    """Keeps a client's log lines (they name a wrong ``security.protocol``, for one)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.logger = logging.getLogger(f"{__name__}.client.{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def connection_refusal(
    errors: list[KafkaError], lines: list[str], conf: Mapping[str, Any]
) -> str | None:
    """Why the brokers refuse this client, when waiting cannot change it: authentication,
    TLS, or a PLAINTEXT client at a TLS listener."""
    for err in errors:
        if err.code() == KafkaError._AUTHENTICATION:
            return f"authentication failed: {err.str()}"
    for err in errors:
        if err.code() == KafkaError._SSL or "SSL" in err.str():
            return f"TLS failed: {err.str()}"
    protocol = str(conf.get("security.protocol", "plaintext")).lower()
    closed = [
        line
        for line in [*(e.str() for e in errors), *lines]
        if "security.protocol" in line
        or (protocol == "plaintext" and "in state APIVERSION_QUERY" in line)
    ]
    # A broker that is stopping or starting closes connections at the first request too: a
    # wrong protocol is told apart by every bootstrap server doing so.
    servers = [s.strip() for s in str(conf.get("bootstrap.servers", "")).split(",") if s.strip()]
    if not closed or (
        len(servers) > 1 and not all(any(s in line for line in closed) for s in servers)
    ):
        return None
    return (
        "the broker closed the connection at its first request: the listener probably "
        "needs security.protocol SSL or SASL_SSL (this client speaks PLAINTEXT)"
        if protocol == "plaintext"
        else closed[0]
    )


def _why(errors: list[KafkaError], lines: list[str], conf: Mapping[str, Any]) -> str | None:
    """The most telling of the errors the client reported while connecting."""
    refusal = connection_refusal(errors, lines, conf)
    if refusal is not None:
        return refusal
    telling = [e for e in errors if e.code() != KafkaError._ALL_BROKERS_DOWN]
    return (telling or errors)[-1].str() if errors else None


def quick_end_offsets(
    c: Consumer, topic: str, partition: int, kafka: KafkaConfig | None = None
) -> tuple[int, int] | None:
    """(low, high) offsets of one partition with ``c``, in one round trip; None when the
    topic is unknown, the partition has no leader yet (missing, or just created) or its
    leader did not answer (a broker that just died, or that the cluster just dropped while
    ``c`` asked it), so the caller can find out which with
    :meth:`KafkaClient.partition_count` and wait with :meth:`KafkaClient.end_offsets`."""
    try:
        tp = TopicPartition(topic, partition)
        return c.get_watermark_offsets(tp, timeout=CONNECT_TIMEOUT_S, cached=False)
    except KafkaException as exc:
        # A timeout too: the caller's partition_count tells a dead leader (the cluster still
        # answers) from a cluster out of reach (it raises, naming the servers).
        if error_code(exc) in _TRANSIENT | _NOT_FOUND | _LEADER_GONE:
            return None
        what = f"reading the offsets of topic {topic!r} partition {partition}"
        raise translate(exc, what, kafka) from None


def read_chunks(
    c: Consumer,
    topic: str,
    partition: int,
    start: int,
    end: int,
    poll_timeout: float = 30.0,
    max_batch: int = 1000,
) -> Iterator[list[Any]]:
    """Yields the messages of ``topic``/``partition`` with offsets in ``[start, end)``, in
    lists of at most ``max_batch`` (as the client hands them over).

    Stops at ``end`` or at the end of the partition, whichever comes first (offsets may
    have gaps, e.g. transaction markers, so the last offset is not always a record).
    For large messages (shuffle frames) keep ``max_batch`` at 1, so that a taken list does
    not hold the whole prefetch queue while the client fills the queue again.
    """
    if end <= start:
        return
    c.assign([TopicPartition(topic, partition, start)])
    idle_since = time.monotonic()
    # Seconds idle when the topic was last looked at: the first poll that brings nothing
    # looks at once (a deleted topic is then reported within about a second, in each
    # attempt of a task), then every GONE_CHECK_S idle.
    checked_at = -GONE_CHECK_S
    next_offset = start
    try:
        while True:
            # consume() waits until it has num_messages or its timeout passes, even when the
            # end of the partition has been reached: keep its timeout short and track idleness.
            # Ask for no more than the range holds, so the last call returns at once.
            with kafka_errors(f"reading topic {topic!r} partition {partition}"):
                msgs = c.consume(
                    num_messages=max(1, min(max_batch, end - next_offset)), timeout=0.2
                )
            if not msgs:
                idle = time.monotonic() - idle_since
                if idle > checked_at + GONE_CHECK_S:
                    # Waiting out poll_timeout on a topic that is gone only delays the error
                    # (and every retry of the task): look at the topic every few seconds idle.
                    checked_at = idle
                    _refuse_gone(c, topic, partition, start, end, next_offset)
                if idle > poll_timeout:
                    raise ShuffleConnectionError(
                        f"no data from topic {topic!r} partition {partition} for "
                        f"{poll_timeout:.0f}s while reading offsets [{start}, {end})"
                    )
                continue
            # The common case, no error and not at the end, costs no Python loop per message
            # (map over the unbound method is a C-level pass).
            has_errors = any(map(Message.error, msgs))
            if has_errors:
                msgs = [m for m in msgs if (e := m.error()) is None or e.code() not in _GROUP_ONLY]
                if not msgs:
                    continue
            idle_since = time.monotonic()
            good, done = msgs, False
            if has_errors or _offset(msgs[-1]) >= end - 1:
                good = []
                for m in msgs:
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            done = True
                            break
                        what = f"reading topic {topic!r} partition {partition} near offset"
                        raise translate(KafkaException(err), f"{what} {next_offset}")
                    offset = _offset(m)
                    if offset >= end:
                        done = True
                        break
                    good.append(m)
                    if offset >= end - 1:
                        done = True
                        break
            if good:
                next_offset = max(next_offset, _offset(good[-1]) + 1)
                yield good
            if done:
                return
    finally:
        c.unassign()


# How long a read waits without data before it looks whether its topic is still there.
GONE_CHECK_S = 2.0


def _refuse_gone(
    c: Consumer, topic: str, partition: int, start: int, end: int, next_offset: int
) -> None:
    """Raises when the partition being read no longer holds ``next_offset``: the topic was
    deleted (asked twice, a second apart, so a broker's stale answer is not taken for it),
    created again (its end is below ``next_offset``): ShuffleTopicNotFoundError; or its
    records up to past ``next_offset`` were deleted: ShuffleFormatError. Says nothing when
    the metadata cannot be had: the read's own timeout still applies."""
    for attempt in range(2):
        try:
            md = c.list_topics(topic=topic, timeout=CONNECT_TIMEOUT_S)
        except KafkaException:
            return
        tmd = md.topics.get(topic)
        missing = (
            tmd is None
            or (tmd.error is not None and tmd.error.code() in _NOT_FOUND)
            or partition not in tmd.partitions
        )
        if not missing:
            break
        if attempt == 0:
            time.sleep(1.0)
            continue
        raise ShuffleTopicNotFoundError(
            f"topic {topic!r} was deleted while reading partition {partition} offsets "
            f"[{start}, {end})"
        )
    try:
        low, high = c.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=CONNECT_TIMEOUT_S, cached=False
        )
    except KafkaException:
        return
    if high < next_offset:
        raise ShuffleTopicNotFoundError(
            f"topic {topic!r} was deleted while reading partition {partition} offsets "
            f"[{start}, {end}) (and created again: it ends at offset {high}, the read was at "
            f"{next_offset})"
        )
    if low > next_offset:
        raise ShuffleFormatError(
            f"topic {topic!r} partition {partition}: the records at offsets [{next_offset}, "
            f"{low}) were deleted while reading offsets [{start}, {end}) (the partition now "
            f"starts at {low})"
        )


def _offset(m: Message) -> int:
    # Only a message that reports an error has no offset; callers check error() first.
    return cast(int, m.offset())


def read_range(
    c: Consumer,
    topic: str,
    partition: int,
    start: int,
    end: int,
    poll_timeout: float = 30.0,
    max_batch: int = 1000,
) -> Iterator[Any]:
    """Yields the messages of ``topic``/``partition`` with offsets in ``[start, end)``, one
    at a time (see :func:`read_chunks`)."""
    for chunk in read_chunks(c, topic, partition, start, end, poll_timeout, max_batch):
        yield from chunk


def _wait_for_leaders(admin: AdminClient, topic: str, timeout: float) -> None:
    # A created topic is not writable or readable until each partition has a leader.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with kafka_errors(f"describing topic {topic!r}"):
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
