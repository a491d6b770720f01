"""Queue mode's driver side, run on the Spark driver: :func:`process_queue`,
:func:`feed_queue` and the feeder, the share group's configuration and checks, the output's
schema and metadata, and :func:`read_queue_output`.

Queue mode is record-level work over Kafka share groups, with nothing lost.
:func:`process_queue` runs ``fn`` over the records of a topic with a Kafka share group
(KIP-932): many consumers share a topic's records without a partition assignment, so the
number of workers is not capped by the number of partitions, and each record is
acknowledged on its own. The consumers run in Spark tasks
(:mod:`orchestration.shuffle.queue.executor`); the decisions they take are pure functions of
:mod:`orchestration.shuffle.core.queue`.

How a batch is handled (one consumer thread, explicit acknowledgement):

1. ``poll`` acquires a batch of records (at most ``batch_size``) under a lock that lasts
   ``lock_seconds`` (``lock_seconds``, ``max_deliveries`` and the dead-letter topic make the
   :class:`~orchestration.shuffle.core.queue.DeliveryPolicy`).
2. ``fn`` runs over the batch. If it raises, the batch is halved until the failing units
   stand alone (:func:`~orchestration.shuffle.core.queue.narrow`), so one bad record never
   fails its neighbours.
3. Each record is settled (:func:`~orchestration.shuffle.core.queue.settle`): all its units
   succeeded -> ACCEPT; a unit failed and the record has deliveries left -> RELEASE
   (delivered again later); a unit failed on its ``max_deliveries``-th delivery -> its
   failing units are written to the dead-letter topic (original key, value and headers
   plus ``queue.*`` headers naming the error, source topic, partition, offset, delivery
   count and group), then REJECT.
4. The output rows of accepted and dead-lettered records go to one Parquet file, visible
   only whole: on a local disk (or HDFS) written to a hidden name, synced and renamed; on
   an object store (S3, GCS), which has no rename, uploaded in one piece under its name
   (an object appears only when its upload completes). Then the dead-letter messages are
   flushed (``acks=all``). Only then are the records acknowledged. Rows of released
   records are dropped: their next delivery writes them.

The output is a directory on any file system ``pyarrow.fs`` resolves, read and written
through it on the driver and in every task: a plain path or ``file:`` URI, ``s3a://`` (or
``s3://``), ``gs://``, ``hdfs://``, ``abfs://``. Spark reads it back under the scheme its
Hadoop connectors know (``s3a://`` for S3). A local path is refused when the session's
executors may run on other hosts (:func:`~orchestration.shuffle.core.paths.check_shared`).

So every record ends accepted with its output written, or dead-lettered. A consumer that
dies mid-batch loses nothing: its records' locks expire and the broker delivers them again,
with a higher delivery count. Output is at least once: after a crash between writing a file
and acknowledging, a record's rows exist from two deliveries. Every output row carries
``_topic``, ``_partition``, ``_offset`` (its source record) and ``_delivery``;
:func:`read_queue_output` keeps, for each source record, the rows of its last delivery
(one file), so it reads each record's rows exactly once. The share group's own delivery
limit is set up to three above ``max_deliveries`` (``delivery_count_limit``), so crashes
during and after the last attempt still leave a delivery to dead-letter the record instead
of the broker archiving it silently.
That delivery, past the last attempt, may also follow a dead-letter write whose REJECT was
lost (a broker died in between): before writing, the consumer reads the dead-letter topic
from the record's time (less an hour of clock skew) and skips the units an earlier delivery
already wrote (``queue.group`` and ``queue.source.*`` headers, ``queue.source.row`` naming
the row of a shuffle's record), so each failed unit is dead-lettered once.

Plain topics. A share group hands out whole producer batches: records written with a
producer's default batching (one batch of thousands of records) would all go to the one
consumer that acquired the batch. So a plain topic is also queued through its work topic
``<topic>.queue``: :class:`RecordFeeder` appends one work item per record, each in a
producer batch of its own, in transactions that end with the next offset to feed per
partition (``fed/@<partition>``), so feeding resumes where it stopped and is done once. A
consumer fetches the records its items name from the topic (one ranged read per run of
contiguous offsets). Item and record are one to one, so a record's acknowledgement,
release, rejection and delivery count are its item's.

Shuffle topics. A share group knows nothing of the shuffle's commit log: reading the data
topic directly would hand out frames of runs still being written (too early), of failed or
losing attempts (never to be processed) and WATERMARK / END frames (not work). So a shuffle
is queued through a *work topic*, ``<topic>.queue``: a feeder appends, for each committed run,
one work item per offset the run occupies, in one Kafka transaction that ends with a
``fed/<run>`` record. Share groups read the work topic with ``share.isolation.level =
read_committed``, so they see a run's items only once all of them are there, and only after
the run committed. A consumer fetches each item's frame from the data topic, checks its
header against the commit (run, winning attempt, DATA) and skips anything else, so skipped
items are acknowledged but are not work. The feeder is idempotent: it holds a fixed
``transactional.id`` per work topic (a second feeder fences the first) and reads the ``fed/``
records before feeding, so a run is fed once. :func:`process_queue` feeds what is missing
when it starts and keeps feeding while it runs, so a run committed meanwhile is picked up;
a run still being written is not in the work topic yet, so it is neither processed early nor
lost: it is fed when it commits. :func:`feed_queue` feeds on its own (e.g. right after a
write). For a shuffle the unit of work is a row: a failing row is dead-lettered as JSON,
and the frame's other rows are written.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pyarrow.fs as pafs
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from orchestration.shuffle.core.commitlog import ShuffleLog, commit_topic, schema_to_b64
from orchestration.shuffle.core.paths import Location, check_shared, parse_location
from orchestration.shuffle.core.queue import (
    FED_PREFIX,
    PLAIN_FED_PREFIX,
    RESERVED_COLUMNS,
    DeliveryPolicy,
    QueueCounts,
    QueueScale,
    QueueStop,
    done_topic,
    fed_positions,
    fed_run,
    feed_range,
    feeder_id,
    job_error,
    record_items,
    share_group_configs,
    unfed,
    work_items,
    work_topic,
)
from orchestration.shuffle.errors import (
    QueueGroupError,
    QueueSchemaError,
    ShuffleError,
    ShuffleLayoutError,
    ShuffleOptionError,
    ShuffleTopicNotFoundError,
    ShuffleWriteError,
)
from orchestration.shuffle.kafka.client import (
    KafkaClient,
    KafkaConfig,
    error_code,
    read_range,
    translate,
)
from orchestration.shuffle.kafka.commitlog import read_log
from orchestration.shuffle.queue.executor import (
    TASK_COLUMNS,
    QueueTask,
    TaskSpec,
    output_filesystem,
    write_whole,
)
from orchestration.shuffle.spark.session import check_storage, is_connect

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

META_FILE = "_queue.json"


@dataclass(kw_only=True)
class QueueResult(QueueCounts):
    """What :func:`process_queue` did: the counts of every consumer summed (the fields of
    :class:`~orchestration.shuffle.core.queue.QueueCounts`: ``accepted``, ``released``,
    ``rejected``, ``dead_lettered``, ...), and each consumer's own in ``per_task``.

    Example::

        result = process_queue(spark, "events", "scorers", score, "id long, score double",
                               kafka=conf, output="/data/scores")
        result.accepted, result.dead_lettered, result.per_task[0]["accepted"]
    """

    topic: str
    group: str
    output: str
    fed_runs: int = 0
    seconds: float = 0.0
    # From the first records polled to the last batch settled, over every consumer: the
    # time spent working, without start-up (joining the group) and the final idle wait.
    active_seconds: float = 0.0
    # One dict per consumer: "task", "consumer", its counts, "first_ms", "last_ms".
    per_task: list[dict[str, int]] = field(default_factory=list)

    @classmethod
    def of_consumers(
        cls,
        per_task: Iterable[Mapping[str, int]],
        *,
        topic: str,
        group: str,
        output: str,
        fed_runs: int,
        seconds: float,
    ) -> QueueResult:
        """The result of consumers that reported ``per_task`` (rows of the task columns)."""
        rows = sorted((dict(r) for r in per_task), key=lambda r: (r["task"], r["consumer"]))
        firsts = [r["first_ms"] for r in rows if r["first_ms"]]
        lasts = [r["last_ms"] for r in rows if r["last_ms"]]
        result = cls(
            topic=topic,
            group=group,
            output=output,
            fed_runs=fed_runs,
            seconds=seconds,
            active_seconds=(max(lasts) - min(firsts)) / 1000 if firsts and lasts else 0.0,
            per_task=rows,
        )
        for r in rows:
            result.add(QueueCounts.of(r))
        return result


# --------------------------------------------------------------------------- the feeder


def _fed_runs(kafka: KafkaClient, topic: str) -> set[str]:
    """Run ids whose feeding transaction committed in work topic ``topic``."""
    with kafka.consumer(**{"isolation.level": "read_committed"}) as c:
        with kafka.errors(f"reading the offsets of work topic {topic!r}"):
            low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        return {
            run for m in read_range(c, topic, 0, low, high) if (run := fed_run(m.key())) is not None
        }


class _WorkTopicFeeder:
    """What both feeders share: the work topic, its transactional producer (one per work
    topic: a newer feeder fences an older one) and a transaction of work-topic records."""

    def __init__(self, topic: str, kafka: KafkaClient):
        self.topic = topic
        self.kafka = kafka
        self.work_topic = work_topic(topic)
        if not kafka.ensure_topic(self.work_topic, partitions=1):
            count = kafka.partition_count(self.work_topic)
            if count != 1:
                # The fed/ records a feeder reads back are on partition 0 only when the topic
                # has one partition: with more, runs or records would be fed again.
                raise ShuffleLayoutError(
                    f"work topic {self.work_topic!r} of topic {topic!r} has {count} "
                    "partitions; queue mode needs exactly 1 (the feeder makes it so). Delete "
                    "the work topic to have it made again: what was fed is then fed again, "
                    "and a share group that processed it processes it again"
                )
        self.producer = kafka.producer(
            **{
                "transactional.id": feeder_id(self.work_topic),
                # One work item per record batch: a share group hands out whole batches, so
                # small batches spread the items over every consumer.
                "batch.num.messages": 1,
                "linger.ms": 0,
            },
        )
        with kafka.errors(f"starting the feeder of work topic {self.work_topic!r}"):
            # Fences any earlier feeder of this work topic and waits out its transaction;
            # what was fed is read after that, so nothing is fed twice.
            self.producer.init_transactions(60)
        self.fenced = False

    def _transaction(self, records: Iterable[tuple[str | None, str]], what: str) -> bool:
        """Appends ``records`` (key, value) in one transaction; False when a newer feeder
        fenced this one (which then stops feeding)."""
        try:
            self.producer.begin_transaction()
            for key, value in records:
                self.producer.produce(self.work_topic, key=key, value=value)
                self.producer.poll(0)
            self.producer.commit_transaction(60)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError._FENCED:
                log.info("feeder of %r fenced by a newer feeder; it stops", self.work_topic)
                self.fenced = True
                return False
            if isinstance(err, KafkaError) and err.txn_requires_abort():
                self.producer.abort_transaction(60)
            raise translate(exc, f"feeding {what} to {self.work_topic!r}") from None
        return True


class Feeder(_WorkTopicFeeder):
    """Appends the work items of committed runs to a shuffle's work topic, once per run.

    Example::

        feeder = Feeder("flights.by_tailnum", KafkaClient(conf))
        feeder.feed()  # the number of runs fed
    """

    def __init__(self, topic: str, kafka: KafkaClient):
        super().__init__(topic, kafka)
        self.fed = _fed_runs(kafka, self.work_topic)

    def feed(self, shuffle_log: ShuffleLog | None = None) -> int:
        """Feeds every committed run not fed yet (of ``shuffle_log``, or of the commit log
        read now); returns how many runs it fed."""
        if self.fenced:
            return 0
        if shuffle_log is None:
            shuffle_log = read_log(self.kafka, self.topic)
        fed = 0
        for commit in unfed(shuffle_log, self.fed):
            run = commit.run_id
            records = [(run, item.to_json()) for item in work_items(commit)]
            records.append((FED_PREFIX + run, run))
            if not self._transaction(records, f"run {run}"):
                return fed
            self.fed.add(run)
            fed += 1
        return fed


# Work items one feeding transaction holds at most; a backlog is fed over several.
FEED_LIMIT = 50_000


def _fed_positions(kafka: KafkaClient, topic: str, partitions: int) -> dict[int, int]:
    """The next offset to feed per source partition, from the last committed feeding
    transaction of plain work topic ``topic`` (each ends with a marker per partition), read
    backwards from the end in growing windows."""
    with kafka.consumer(**{"isolation.level": "read_committed"}) as c:
        with kafka.errors(f"reading the offsets of work topic {topic!r}"):
            low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        span = 4 * (partitions + 1)
        while True:
            begin = max(low, high - span)
            found = fed_positions(
                (m.key(), m.value()) for m in read_range(c, topic, 0, begin, high)
            )
            if len(found) >= partitions or begin == low:
                return found
            span *= 4


class RecordFeeder(_WorkTopicFeeder):
    """Appends one work item per record of a plain topic to its work topic.

    A share group hands out whole producer batches, so two consumers on a partition written
    with a producer's default batching do not share it: one acquires the batch, the other
    waits. Fed through the work topic (one item per producer batch, as for shuffles), the
    records spread over every consumer; each item is one record, so acknowledging,
    releasing and rejecting it, and its delivery count, are the record's. Feeding is
    transactional and idempotent: each transaction ends with the next offset to feed per
    partition, and a newer feeder fences an older one.

    Example::

        RecordFeeder("events", KafkaClient(conf), start="earliest").feed()  # items fed
    """

    def __init__(self, topic: str, kafka: KafkaClient, start: str):
        super().__init__(topic, kafka)
        self.start = start
        self.partitions = kafka.partition_count(topic)
        self.fed = _fed_positions(kafka, self.work_topic, self.partitions)

    def _ends(self) -> dict[int, tuple[int, int]]:
        with self.kafka.consumer() as c:
            with self.kafka.errors(f"reading the offsets of topic {self.topic!r}"):
                return {
                    p: c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=30)
                    for p in range(self.partitions)
                }

    def feed(self) -> int:
        """Feeds the records appended since the last feeding (at most
        :data:`FEED_LIMIT` per partition); returns how many items it fed."""
        if self.fenced:
            return 0
        ends = self._ends()
        ranges = {
            p: feed_range(self.fed.get(p), low, high, self.start, FEED_LIMIT)
            for p, (low, high) in ends.items()
        }
        count = sum(end - first for first, end in ranges.values())
        if count == 0 and set(self.fed) >= set(ranges):
            return 0
        records: list[tuple[str | None, str]] = [
            (None, item.to_json())
            for p, (first, end) in ranges.items()
            for item in record_items(p, first, end)
        ]
        records += [(f"{PLAIN_FED_PREFIX}{p}", str(end)) for p, (_, end) in ranges.items()]
        if not self._transaction(records, f"topic {self.topic!r}"):
            return 0
        self.fed.update({p: end for p, (_, end) in ranges.items()})
        return count


def feed_queue(topic: str, *, kafka: KafkaConfig) -> int:
    """Feeds the committed runs of shuffle ``topic`` that are not queued yet to its work
    topic (``<topic>.queue``); returns the number of runs fed. Safe to call any time."""
    client = KafkaClient.of(kafka)
    client.check_reachable()
    return Feeder(topic, client).feed()


# --------------------------------------------------------------------------- the group


def _topic_exists(kafka: KafkaClient, topic: str) -> bool:
    tmd = kafka.describe_topic(topic, timeout=30)
    return tmd is not None and bool(tmd.partitions)


# A group's coordinator is not there yet (a new cluster creating its group topics) or is
# moving: the request is asked again.
_COORDINATOR_MOVING = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
)


def _while_coordinator_moves(call: Callable[[], Any], seconds: float = 30.0) -> Any:
    """``call()``, asked again for up to ``seconds`` while the group's coordinator is
    moving; any other error, or the last one, is raised."""
    deadline = time.monotonic() + seconds
    wait = 0.2
    while True:
        try:
            return call()
        except KafkaException as exc:
            if error_code(exc) not in _COORDINATOR_MOVING or time.monotonic() > deadline:
                raise
            log.info("group request: %s; asking again", exc)
            time.sleep(wait)
            wait = min(2.0, wait * 2)


def set_group_configs(kafka: KafkaClient, group: str, configs: Mapping[str, str]) -> None:
    """Sets broker-side ``configs`` of share group ``group`` (creating the group's configs if
    it has none yet); a config the broker refuses raises :class:`QueueGroupError`.

    Example::

        set_group_configs(kafka, "scorers", {"share.record.lock.duration.ms": "60000"})
    """
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
    ]
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    # Held until the answer is in: a client dropped earlier cancels its request.
    admin = kafka.admin()
    try:
        _while_coordinator_moves(
            lambda: admin.incremental_alter_configs([res], request_timeout=30)[res].result(30)
        )
    except KafkaException as exc:
        if error_code(exc) == KafkaError.INVALID_CONFIG:
            raise QueueGroupError(
                f"share group {group!r}: the broker refused the group configs "
                f"{dict(configs)}: {exc.args[0].str()}"
            ) from None
        raise translate(exc, f"configuring share group {group!r}", kafka) from None


def _check_group_free(kafka: KafkaClient, group: str) -> None:
    """Refuses a group id a classic (or consumer-protocol) group holds.

    A share group, or an id nobody uses, describes as an empty ("dead") consumer group.
    """
    admin = kafka.admin()  # held until the answer is in (see set_group_configs)
    try:
        found = _while_coordinator_moves(
            lambda: admin.describe_consumer_groups([group], request_timeout=30)[group].result(35)
        )
    except KafkaException as exc:
        if error_code(exc) in (KafkaError.GROUP_ID_NOT_FOUND, KafkaError.INVALID_GROUP_ID):
            return
        raise translate(exc, f"describing group {group!r}", kafka) from None
    state = str(found.state).rsplit(".", 1)[-1].lower()
    if state not in ("dead", "unknown"):
        kind = str(found.type).rsplit(".", 1)[-1].lower()
        raise QueueGroupError(
            f"group {group!r} is a {kind} consumer group ({state}, {len(found.members)} "
            "members); a share group needs a group id of its own"
        )


# --------------------------------------------------------------------------- the output


def _output_schema(spark: SparkSession, schema: StructType | str) -> tuple[str, pa.Schema]:
    """The output schema as Spark's JSON (kept in the output's metadata) and as Arrow."""
    from pyspark.sql import types as T

    from orchestration.shuffle.spark.compat import to_arrow_schema_utc

    if isinstance(schema, str):
        parsed = spark.createDataFrame([], schema).schema
    elif isinstance(schema, T.StructType):
        parsed = schema
    else:
        raise ShuffleOptionError(
            f"process_queue: schema must be a DDL string or StructType, got {schema!r}"
        )
    reserved = [f.name for f in parsed.fields if f.name in RESERVED_COLUMNS]
    if reserved:
        raise ShuffleOptionError(f"process_queue: schema column(s) {reserved} are reserved")
    return parsed.json(), to_arrow_schema_utc(parsed)


def _location(spark: SparkSession, output: str | os.PathLike[str], what: str) -> Location:
    """``output`` parsed, refused if it is a local path the session's executors may not
    share (see :func:`~orchestration.shuffle.core.paths.check_shared`)."""
    location = parse_location(output)
    if location.is_local:
        if is_connect(spark):
            # A Connect client sees only the server's address, not its master.
            check_shared(location, connect_host=str(cast(Any, spark).client.host), what=what)
        else:
            check_shared(location, master=spark.conf.get("spark.master", None), what=what)
    else:
        check_storage(spark, location, what)
    return location


def _read_meta(
    location: Location, fs: pafs.FileSystem, base: str, what: str
) -> dict[str, Any] | None:
    """The output's metadata file, None if there is none."""
    path = f"{base.rstrip('/')}/{META_FILE}"
    try:
        if fs.get_file_info(path).type != pafs.FileType.File:
            return None
        with fs.open_input_stream(path) as f:
            meta: dict[str, Any] = json.loads(f.read())
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise ShuffleError(
            f"{what}: reading {location.child(META_FILE)!r} of output {location.given!r} "
            f"failed: {exc}"
        ) from None
    return meta


def _write_meta(location: Location, topic: str, group: str, schema_json: str) -> None:
    """Records the output's schema, or refuses an output that holds rows of another."""
    fs, base = output_filesystem(_task_output(location))
    old = _read_meta(location, fs, base, "process_queue")
    if old is not None:
        if old.get("schema") != schema_json:
            raise QueueSchemaError(
                f"output {location.given!r} holds rows of schema {old.get('schema')!r}; "
                f"this run's schema is {schema_json!r}: use another output directory"
            )
        return
    text = json.dumps({"schema": schema_json, "topic": topic, "group": group}, indent=1)
    try:
        fs.create_dir(base, recursive=True)
        write_whole(fs, f"{base.rstrip('/')}/{META_FILE}", text.encode())
    except (OSError, pa.ArrowException) as exc:
        raise ShuffleWriteError(
            f"process_queue: writing {location.child(META_FILE)!r} of output "
            f"{location.given!r} failed: {exc}"
        ) from None


def _task_output(location: Location) -> str:
    """The output as the tasks get it: a local path made absolute here (the tasks' working
    directory may differ), any URI as the caller wrote it (errors show it so)."""
    return location.arrow if location.is_local else location.given


# --------------------------------------------------------------------------- the driver


def process_queue(
    spark: SparkSession,
    topic: str,
    group: str,
    fn: Callable[[Any], Any],
    schema: StructType | str,
    *,
    kafka: KafkaConfig,
    output: str | os.PathLike[str],
    scale: QueueScale | None = None,
    stop: QueueStop | None = None,
    delivery: DeliveryPolicy | None = None,
    data: str = "arrow",
    start: str = "earliest",
    runs: Sequence[str] | None = None,
    feed_interval: float = 1.0,
) -> QueueResult:
    """Runs ``fn`` over the records of ``topic`` with share group ``group``; see the module
    docstring for the guarantees.

    Args:
        spark: Any SparkSession; the consumers run in ``scale.tasks`` Spark tasks.
        topic: A plain topic, or a shuffle's data topic (queued through ``<topic>.queue``).
        group: The share group. A new group starts at ``start``; an existing one goes on.
        fn: A batch of units -> rows of ``schema`` (a pyarrow Table, a pandas DataFrame or
            None). Units are records (``kafka-records`` columns, with headers) of a plain
            topic, or rows of a shuffle's committed frames; both come with ``_topic``,
            ``_partition``, ``_offset``. Raising fails the batch (it is narrowed down).
        schema: The output schema (DDL string or StructType).
        kafka: The cluster: a :class:`~orchestration.shuffle.kafka.client.KafkaClient` or
            librdkafka settings, ``bootstrap.servers`` at least.
        output: A Parquet directory every task and the driver share: a path, a ``file:``
            URI, or a URI of a file system ``pyarrow.fs`` resolves (``s3a://bucket/prefix``
            or ``s3://``, ``gs://``, ``hdfs://``, ``abfs://``; S3 settings from ``AWS_*``
            environment variables, on the driver and the executors). A local path is
            refused when the executors may run on other hosts. Read it with
            :func:`read_queue_output`.
        scale: How many consumers run and how much each polls
            (:class:`~orchestration.shuffle.core.queue.QueueScale`: by default 2 tasks of one
            consumer each, 100 records per poll).
        stop: When the consumers stop (:class:`~orchestration.shuffle.core.queue.QueueStop`:
            by default after 5 s without records, with no time limit).
        delivery: How a failing record is retried and where it goes after its last
            delivery (:class:`~orchestration.shuffle.core.queue.DeliveryPolicy`: by default 3
            deliveries, no dead-letter topic, a 30 s record lock).
        data: ``"arrow"`` (fn gets a pyarrow Table) or ``"pandas"`` (a DataFrame).
        start: ``"earliest"`` or ``"latest"``: where a new group starts.
        runs: for a shuffle topic, only these run ids are work (others are acknowledged
            and counted as skipped): give such a group its own id.
        feed_interval: seconds between checks of a shuffle's commit log while running.

    Example::

        result = process_queue(
            spark, "events", "scorers", score, "id long, score double",
            kafka={"bootstrap.servers": "127.0.0.1:19092"}, output="/data/scores",
            scale=QueueScale(tasks=2, consumers_per_task=4),
            stop=QueueStop(idle_timeout=10),
            delivery=DeliveryPolicy(max_deliveries=3, dead_letter_topic="events.dlq"),
        )
    """
    scale = QueueScale() if scale is None else scale
    stop = QueueStop() if stop is None else stop
    delivery = DeliveryPolicy() if delivery is None else delivery
    for name, given, kind in (
        ("scale", scale, QueueScale),
        ("stop", stop, QueueStop),
        ("delivery", delivery, DeliveryPolicy),
    ):
        if not isinstance(given, kind):
            raise ShuffleOptionError(
                f"process_queue: {name} must be a {kind.__name__}, got {given!r}"
            )
    if data not in ("arrow", "pandas"):
        raise ShuffleOptionError(f"process_queue: data must be 'arrow' or 'pandas', got {data!r}")
    if start not in ("earliest", "latest"):
        raise ShuffleOptionError(
            f"process_queue: start must be 'earliest' or 'latest', got {start!r}"
        )
    client = KafkaClient.of(kafka)
    client.check_reachable()
    if not _topic_exists(client, topic):
        raise ShuffleTopicNotFoundError(f"process_queue: topic {topic!r} does not exist")
    shuffle = _topic_exists(client, commit_topic(topic))
    _check_group_free(client, group)
    location = _location(spark, output, "process_queue: output")
    schema_json, arrow = _output_schema(spark, schema)
    _write_meta(location, topic, group, schema_json)
    if delivery.dead_letter_topic is not None:
        client.ensure_topic(delivery.dead_letter_topic, partitions=1)
    # Where the consumers record what they settled, for the queue's backlog.
    client.ensure_topic(done_topic(topic), partitions=1)
    feeder: Feeder | RecordFeeder
    fed_runs = 0
    if shuffle:
        feeder = Feeder(topic, client)
        fed_runs += feeder.feed()
    else:
        feeder = RecordFeeder(topic, client, start)
        feeder.feed()
    set_group_configs(client, group, share_group_configs(start, delivery))
    spec = TaskSpec(
        topic=topic,
        group=group,
        kafka=client,
        fn=fn,
        schema=schema_to_b64(arrow),
        output=_task_output(location),
        consumers_per_task=scale.consumers_per_task,
        delivery=delivery,
        idle_timeout=float(stop.idle_timeout),
        max_seconds=None if stop.max_seconds is None else float(stop.max_seconds),
        data=data,
        batch_size=scale.batch_size,
        shuffle=shuffle,
        runs=None if runs is None else tuple(runs),
    )
    job = spark.range(0, scale.tasks, 1, scale.tasks).mapInArrow(
        QueueTask(spec), ", ".join(f"{c} long" for c in TASK_COLUMNS)
    )
    rows: list[Row] = []
    failure: list[BaseException] = []

    def collect() -> None:
        try:
            rows.extend(job.collect())
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            failure.append(exc)

    started = time.monotonic()
    if not is_connect(spark):  # a Connect session has no SparkContext (nor job descriptions)
        spark.sparkContext.setJobDescription(f"process_queue {topic} group {group}")
    runner = threading.Thread(target=collect, daemon=True)
    runner.start()
    while runner.is_alive():
        runner.join(feed_interval)
        if runner.is_alive():
            try:
                fed = feeder.feed()
                fed_runs += fed if shuffle else 0
            except ShuffleError as exc:
                log.warning("feeding %r failed (retried): %s", feeder.work_topic, exc)
    seconds = time.monotonic() - started
    if failure:
        raise job_error(failure[0], topic, group) from failure[0]
    result = QueueResult.of_consumers(
        (r.asDict() for r in rows),
        topic=topic,
        group=group,
        output=location.given,
        fed_runs=fed_runs,
        seconds=seconds,
    )
    log.info(
        "process_queue %s group %s: %d accepted, %d released, %d rejected, %d dead-lettered, "
        "%d skipped in %.1fs",
        topic,
        group,
        result.accepted,
        result.released,
        result.rejected,
        result.dead_lettered,
        result.skipped,
        seconds,
    )
    return result


def read_queue_output(spark: SparkSession, output: str | os.PathLike[str]) -> DataFrame:
    """The rows :func:`process_queue` wrote to ``output``, each source record's rows once.

    A record processed twice (a crash between writing and acknowledging, or a lock that
    expired under a slow ``fn``) has rows from two deliveries; only those of its last
    delivery (one file) are returned. Columns: the schema's, then ``_topic``,
    ``_partition``, ``_offset``.

    Example::

        read_queue_output(spark, "/data/scores").groupBy("_partition").count()
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    location = _location(spark, output, "read_queue_output: output")
    fs, base = output_filesystem(_task_output(location))
    meta = _read_meta(location, fs, base, "read_queue_output")
    if meta is None:
        raise ShuffleTopicNotFoundError(
            f"read_queue_output: {location.given!r} is not a queue output (no {META_FILE})"
        )
    schema = T.StructType.fromJson(json.loads(meta["schema"]))
    for name, kind in (
        ("_topic", T.StringType()),
        ("_partition", T.IntegerType()),
        ("_offset", T.LongType()),
        ("_delivery", T.IntegerType()),
    ):
        schema = schema.add(name, kind)
    df = spark.read.schema(schema).parquet(location.spark)
    df = df.withColumn("_file", F.col("_metadata.file_name"))
    w = Window.partitionBy("_topic", "_partition", "_offset")
    pick = F.struct(F.col("_delivery"), F.col("_file"))
    df = df.withColumn("_pick", F.max(pick).over(w)).where(F.col("_pick") == pick)
    return df.drop("_pick", "_file", "_delivery")
