"""Access that holds: over SASL_SSL with ACLs, a principal granted one deployment's prefix
may do everything with the shuffles under it and nothing with another's.

Two deployments share the cluster, each granted to one user by its topic prefix
(``grant_shuffle_access(prefix, prefixed=True)``): ``producer`` owns ``teamA-<hex>.``,
``consumer`` owns ``teamB-<hex>.``. Each writes its shuffle, runs its queue (a share group
under its prefix, a dead-letter topic under it) and so has a run to expire. Then every
operation of the table runs as ``producer`` on its own deployment (it works) and on the
other (refused within seconds, by a ShuffleAuthorizationError naming what was refused).
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from orchestration.shuffle import (
    DeliveryPolicy,
    KafkaClient,
    QueueScale,
    QueueStop,
    ShuffleAuthorizationError,
    ShuffleSpec,
    expire_shuffle,
    grant_shuffle_access,
    process_queue,
    read_records,
    read_shuffle,
    shuffle_commits_since,
    shuffle_log,
    write_shuffle,
)
from orchestration.shuffle.kafka.commitlog import write_commit
from tests.integration.stacks import secure_users

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROWS = 300
# Rows whose id is a multiple of this fail in the queue's function: dead-lettered.
POISON = 97
QUEUE_SCHEMA = "id long"
# A refusal comes in seconds: nothing waits for a timeout.
PROMPT_S = 5.0


@dataclass(frozen=True)
class Deployment:
    """One deployment's names, all under its prefix."""

    prefix: str
    owner: str

    @property
    def topic(self) -> str:
        return self.prefix + "events"

    @property
    def group(self) -> str:
        return self.prefix + "scorers"

    @property
    def dlq(self) -> str:
        return self.prefix + "events.dlq"


@dataclass
class World:
    spark: Any
    users: dict[str, dict[str, str]]
    own: Deployment
    other: Deployment
    superseded: str  # the run of own.topic that a later run of its window superseded
    tmp: Path

    @property
    def me(self) -> dict[str, str]:
        return self.users[self.own.owner]

    def of(self, side: str) -> Deployment:
        return self.own if side == "own" else self.other


def rows(spark, n=ROWS, offset=0):
    return spark.range(offset, offset + n).selectExpr(
        "concat('k', cast(id % 13 as string)) as k", "id"
    )


def spec_for(topic: str) -> ShuffleSpec:
    return ShuffleSpec(topic=topic, key="k", num_partitions=2, max_parallelism=8)


def score(table: pa.Table) -> pa.Table:
    ids = table.column("id").to_pylist()
    bad = [i for i in ids if i % POISON == 0]
    if bad:
        raise ValueError(f"poison row {bad[0]}")
    return pa.table({"id": pa.array(ids, pa.int64())})


def run_queue(w: World, conf, topic: str, group: str, dlq: str):
    return process_queue(
        w.spark,
        topic,
        group,
        score,
        QUEUE_SCHEMA,
        kafka=conf,
        output=str(w.tmp / f"out-{uuid.uuid4().hex[:8]}"),
        scale=QueueScale(tasks=1, batch_size=50),
        stop=QueueStop(idle_timeout=2),
        delivery=DeliveryPolicy(max_deliveries=1, dead_letter_topic=dlq),
    )


def worked(res) -> None:
    """Every row the queue took was written or dead-lettered; poison rows were."""
    assert res.rows_in > 0 and res.dead_lettered > 0, res
    assert res.rows_out + res.dead_lettered == res.rows_in, res


@pytest.fixture(scope="module")
def users():
    with secure_users() as confs:
        yield confs


@pytest.fixture(scope="module")
def world(spark, users, tmp_path_factory) -> World:
    tag = uuid.uuid4().hex[:8]
    own = Deployment(f"teamA-{tag}.", "producer")
    other = Deployment(f"teamB-{tag}.", "consumer")
    w = World(spark, users, own, other, "", tmp_path_factory.mktemp("access"))
    for d in (own, other):
        conf = users[d.owner]
        grant_shuffle_access(
            d.prefix, kafka=users["admin"], writers=[f"User:{d.owner}"], prefixed=True
        )
        first = write_shuffle(rows(spark), spec_for(d.topic), kafka=conf, window="d1")
        write_shuffle(rows(spark), spec_for(d.topic), kafka=conf, window="d1")
        if d is own:
            w.superseded = first.run_id
        # Each deployment has run its queue: its share group and dead letters exist.
        worked(run_queue(w, conf, d.topic, d.group, d.dlq))
    return w


# --------------------------------------------------------------------------- operations
# Each takes the world and the deployment acted on, as the owner of ``world.own``; on its own
# deployment it must work (and checks that it did).


def op_read(w: World, d: Deployment) -> None:
    assert read_shuffle(w.spark, d.topic, kafka=w.me, windows=["d1"]).count() == ROWS


def op_follow_commits(w: World, d: Deployment) -> None:
    commits, _ = shuffle_commits_since(d.topic, kafka=w.me)
    assert commits


def op_write(w: World, d: Deployment) -> None:
    res = write_shuffle(rows(w.spark, 20, 10_000), spec_for(d.topic), kafka=w.me, window="d9")
    assert res.rows == 20


def op_commit(w: World, d: Deployment) -> None:
    # Appending a commit record by hand (what makes a run visible): one the admin read.
    commit = shuffle_log(d.topic, kafka=w.users["admin"]).commits[-1]
    write_commit(KafkaClient(w.me), d.topic, commit)
    assert shuffle_log(d.topic, kafka=w.me).commits


def op_expire(w: World, d: Deployment) -> None:
    res = expire_shuffle(d.topic, kafka=w.me, min_age=dt.timedelta(0))
    assert w.superseded in res.runs_expired
    assert sum(res.records_deleted.values()) > 0, res


def op_process_queue(w: World, d: Deployment) -> None:
    # A new share group under the deployment's prefix: it processes every row again.
    group = f"{d.prefix}scorers-{uuid.uuid4().hex[:6]}"
    worked(run_queue(w, w.me, d.topic, group, d.dlq))


def op_join_group(w: World, d: Deployment) -> None:
    # The deployment's existing share group, on a topic of the caller's own.
    res = run_queue(w, w.me, w.own.topic, d.group, w.own.dlq)
    assert res.rejected == 0, res


def op_dead_letter_into(w: World, d: Deployment) -> None:
    group = f"{w.own.prefix}scorers-{uuid.uuid4().hex[:6]}"
    worked(run_queue(w, w.me, w.own.topic, group, d.dlq))


def op_read_dlq(w: World, d: Deployment) -> None:
    options = {"subscribe": d.dlq, **{f"kafka.{k}": v for k, v in w.me.items()}}
    assert read_records(w.spark, options, engine="python").count() > 0


# operation -> (the call, what its refusal must name on the other deployment)
OPERATIONS: dict[str, tuple[Callable[[World, Deployment], None], Callable[[Deployment], str]]] = {
    "read": (op_read, lambda d: d.topic),
    "follow commits": (op_follow_commits, lambda d: d.topic),
    "write": (op_write, lambda d: d.topic),
    "commit": (op_commit, lambda d: d.topic + "__commits"),
    "process its queue": (op_process_queue, lambda d: d.topic),
    "join its share group": (op_join_group, lambda d: d.group),
    "dead-letter into its DLQ": (op_dead_letter_into, lambda d: d.dlq),
    "read its DLQ": (op_read_dlq, lambda d: d.dlq),
    # Last: the queues above read runs that expiry removes.
    "expire": (op_expire, lambda d: d.topic),
}


@pytest.mark.parametrize("side", ["own", "other"])
@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_a_grant_holds_for_its_prefix_only(world, operation, side):
    call, names = OPERATIONS[operation]
    target = world.of(side)
    started = time.monotonic()
    if side == "own":
        call(world, target)
        return
    with pytest.raises(ShuffleAuthorizationError) as failure:
        call(world, target)
    took = time.monotonic() - started
    text = str(failure.value)
    assert took < PROMPT_S, (took, text)
    assert names(target) in text, text
    assert "not authorized" in text, text
    for conf in world.users.values():
        assert conf["sasl.password"] not in text
