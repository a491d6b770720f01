"""``expire_shuffle``: retention of superseded and expired runs (see
:mod:`orchestration.shuffle.core.retention` for what is removed and why it is safe)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from confluent_kafka import TopicPartition

from orchestration.shuffle.core.retention import bytes_deleted, marker, plan_expiry
from orchestration.shuffle.kafka.client import CONNECT_TIMEOUT_S, KafkaClient, KafkaConfig
from orchestration.shuffle.kafka.commitlog import check_partitions, read_log, write_expired


@dataclass(frozen=True)
class ExpiryResult:
    """What an expiry removed."""

    topic: str
    runs_expired: list[str]
    windows_expired: list[str | None]
    # Records deleted per partition (offsets below the new start).
    records_deleted: dict[int, int]
    # Bytes of expired runs' committed frames that this call deleted, per partition (each
    # run's bytes shared among its partitions by rows); frames of failed attempts deleted
    # with them are not counted. Records are deleted from the start of a partition only: a
    # superseded run above a live one waits until that one expires too.
    bytes_freed: dict[int, int]
    reasons: dict[str, str] = field(default_factory=dict)


def _protect_from(
    kafka: KafkaClient, topic: str, partitions: int, since: dt.datetime, highs: list[int]
) -> dict[int, int]:
    """Per partition, the first offset written at or after ``since`` (the end if none)."""
    ms = int(since.timestamp() * 1000)
    with kafka.consumer() as c, kafka.errors(f"looking up offsets of {topic!r} by time"):
        found = c.offsets_for_times(
            [TopicPartition(topic, p, ms) for p in range(partitions)], timeout=CONNECT_TIMEOUT_S
        )
    return {tp.partition: (tp.offset if tp.offset >= 0 else highs[tp.partition]) for tp in found}


def expire_shuffle(
    topic: str,
    *,
    kafka: KafkaConfig,
    older_than: dt.timedelta | None = None,
    keep_last: int | None = None,
    min_age: dt.timedelta = dt.timedelta(hours=1),
    now: dt.datetime | None = None,
) -> ExpiryResult:
    """Removes runs no reader needs: superseded runs always; with ``older_than``, runs
    committed before ``now - older_than``; with ``keep_last``, all but the runs of the
    ``keep_last`` most recently committed windows. Their commit records are replaced by
    ``expired`` markers, and each partition's records below the lowest offset a remaining run
    needs are deleted (``AdminClient.delete_records``). Records younger than ``min_age`` are
    never deleted, so a run still being written keeps its frames.

    Example::

        result = expire_shuffle("flights.by_tailnum", kafka=conf, keep_last=90)
        result.runs_expired, result.records_deleted

    Reads of the remaining runs and the watermark are unaffected; a read of an expired run
    by id is refused with an error saying when and why it expired. Safe to run again after
    an interruption.
    """
    client = KafkaClient.of(kafka)
    now = now or dt.datetime.now(dt.UTC)
    log = read_log(client, topic)
    layout = log.require_layout()
    check_partitions(client, layout)
    n = layout.num_partitions
    before = client.end_offsets(topic, n)
    protect = None
    if min_age > dt.timedelta(0):
        protect = _protect_from(client, topic, n, now - min_age, [h for _, h in before])
    plan = plan_expiry(
        log, now=now, older_than=older_than, keep_last=keep_last, protect_from=protect
    )
    markers = [marker(c, reason, now) for c, reason in plan.expire]
    write_expired(client, topic, markers)
    deleted: dict[int, int] = {}
    wanted = [
        TopicPartition(topic, p, off) for p, off in plan.cutoffs.items() if off > before[p][0]
    ]
    if wanted:
        admin = client.admin()
        with client.errors(f"deleting records of topic {topic!r}"):
            for tp, fut in admin.delete_records(wanted, request_timeout=60).items():
                fut.result(60)
                deleted[tp.partition] = tp.offset - before[tp.partition][0]
    return ExpiryResult(
        topic=topic,
        runs_expired=plan.runs,
        windows_expired=[c.window for c, _ in plan.expire],
        records_deleted=deleted,
        bytes_freed=bytes_deleted(
            [*markers, *log.expired.values()],
            {p: low for p, (low, _) in enumerate(before)},
            {p: before[p][0] + n for p, n in deleted.items()},
        ),
        reasons={c.run_id: reason for c, reason in plan.expire},
    )
