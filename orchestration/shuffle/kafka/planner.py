"""Planning a shuffle read from Kafka: the commit log read, the plan made from it
(:mod:`orchestration.shuffle.core.planner`, pure), and the data topic checked against the
plan before any Spark task runs. No Spark.

Example::

    plan = plan_shuffle(KafkaClient(conf), "events.by_user", ReadOptions(windows=("2024-03-01",)))
    [split.partitions for split in plan.splits]
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestration.shuffle.core.commitlog import Commit, ShuffleLog
from orchestration.shuffle.core.planner import ReadOptions, ReadPlan
from orchestration.shuffle.errors import ShuffleFormatError
from orchestration.shuffle.kafka.client import KafkaClient
from orchestration.shuffle.kafka.commitlog import check_partitions, read_log


def plan_shuffle(
    kafka: KafkaClient, topic: str, options: ReadOptions, log: ShuffleLog | None = None
) -> ReadPlan:
    """Plans the read ``options`` select from the commit log (read here unless given; for
    a read of some windows, only what they need of a long log), and checks that the data
    topic still has the layout's partitions."""
    if log is None:
        only = options.windows if options.runs is None else None
        log = read_log(kafka, topic, only)
    plan = options.plan(log)
    check_partitions(kafka, plan.layout)
    check_offsets(kafka, topic, plan.layout.num_partitions, plan.commits)
    return plan


def check_offsets(
    kafka: KafkaClient, topic: str, num_partitions: int, commits: Sequence[Commit]
) -> None:
    """Refuses a read whose committed offsets the data topic no longer holds: deleted below
    the partition's start (retention, ``delete_records``) or past its end (the topic was
    made again, or lost acknowledged records). Checked on the driver, before any task
    runs, so the error names the run, window and offsets instead of a fetch's failure.

    Raises:
        ShuffleFormatError: Naming the topic, partition, run, window, committed offsets
            and the offsets the partition holds now.
    """
    wanted = [(p, r, c) for c in commits for p, r in c.partitions.items()]
    if not wanted:
        return
    bounds = kafka.end_offsets(topic, num_partitions)
    for p, r, c in wanted:
        if not 0 <= p < num_partitions:
            continue  # the planner refuses it, naming the partition
        low, high = bounds[p]
        if r.first >= low and r.last < high:
            continue
        what = (
            f"topic {topic!r} partition {p}: run {c.run_id} (window {c.window!r}) was "
            f"committed at offsets [{r.first}, {r.last}], but the partition holds "
            f"[{low}, {high})"
        )
        if r.first < low:
            raise ShuffleFormatError(
                f"{what}: offsets below {low} were deleted (retention or delete_records); "
                "expire the run (expire_shuffle) or write its window again"
            )
        raise ShuffleFormatError(
            f"{what}: the commit names offsets past the partition's end; the topic lost "
            "records or was deleted and made again"
        )
