"""A queue's backlog on the real broker: it goes up with each run committed to the shuffle and
down as a share group's consumers process it, as `queue_backlog` counts it and as
`shuffle_lag_sensor` observes and judges it; the broker's own share-group lag (Kafka's
`kafka-share-groups.sh`) agrees once the group has consumed."""

import datetime as dt
import json
import re
import subprocess
import threading
import time

import pyarrow as pa
import pytest
from dagster import (
    AssetCheckSeverity,
    AssetKey,
    Definitions,
    asset,
    build_sensor_context,
    instance_for_test,
)

from orchestration import (
    KafkaResource,
    KafkaShuffleIOManager,
    shuffle_lag_sensor,
    shuffle_metadata,
    shuffle_queue_checks,
)
from orchestration.shuffle import (
    QueueScale,
    QueueStop,
    ShuffleSpec,
    feed_queue,
    process_queue,
    queue_backlog,
    shuffle_log,
    write_table,
)

pytestmark = pytest.mark.integration

BACKLOG_FOR = dt.timedelta(hours=1)


def rows(n: int, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"k": [f"k{i % 7}" for i in ids], "id": ids})


def offsets(log, run_ids=None) -> int:
    """The records (offsets) the runs occupy: one work item each."""
    return sum(
        r.last - r.first + 1
        for c in log.commits
        if run_ids is None or c.run_id in run_ids
        for r in c.partitions.values()
    )


def broker_lag(group: str, bootstrap: str) -> int | None:
    """The share group's lag as Kafka's own tool reports it (KIP-1226), summed over the
    partitions it shows; None when it shows none."""
    from devstack.localstack import java_executable, kafka_classpath

    proc = subprocess.run(
        [java_executable(), "-cp", kafka_classpath(),
         "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
         "--bootstrap-server", bootstrap, "--describe", "--group", group, "--offsets"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = [ln.split() for ln in proc.stdout.splitlines() if ln.strip()]
    assert lines and "LAG" in lines[0], proc.stdout + proc.stderr
    col = lines[0].index("LAG")
    lags = [int(r[col]) for r in lines[1:] if len(r) > col and re.fullmatch(r"\d+", r[col])]
    return sum(lags) if lags else None


@pytest.fixture
def project(bootstrap, kafka_conf, unique):
    topic, group = unique("q-backlog"), unique("scorers")

    @asset(
        io_manager_key="shuffle_io",
        metadata=shuffle_metadata(key="k", num_partitions=2, max_parallelism=16, topic=topic),
    )
    def events():
        raise AssertionError("never materialized here: the runs are written by write_table")

    @asset(deps=[events])
    def scores() -> None: ...

    share_groups = {scores.key: group}
    defs = Definitions(
        assets=[events, scores],
        asset_checks=shuffle_queue_checks(
            events, share_groups, max_backlog=0, backlog_for=BACKLOG_FOR
        ),
        sensors=[
            shuffle_lag_sensor(
                "lag",
                asset=events,
                consumers=[],
                share_groups=share_groups,
                max_backlog=0,
                backlog_for=BACKLOG_FOR,
            )
        ],
        resources={
            "shuffle_io": KafkaShuffleIOManager(kafka=KafkaResource(bootstrap_servers=bootstrap))
        },
    )
    spec = ShuffleSpec(topic=topic, key=("k",), num_partitions=2, max_parallelism=16)
    with instance_for_test() as instance:
        yield dict(
            defs=defs, instance=instance, topic=topic, group=group, spec=spec, key=scores.key
        )


def tick(project, cursor=None):
    defs = project["defs"]
    with build_sensor_context(
        instance=project["instance"], cursor=cursor, resources=defs.resources, definitions=defs
    ) as ctx:
        return defs.resolve_sensor_def("lag")(ctx)


def observed(result, key: AssetKey) -> dict:
    (seen,) = [e for e in result.asset_events if not hasattr(e, "check_name")]
    assert seen.asset_key == key
    return {k: v.value for k, v in seen.metadata.items()}


def verdict(result):
    (check,) = [e for e in result.asset_events if hasattr(e, "check_name")]
    assert check.check_name == "shuffle_queue_backlog"
    return check


def test_the_backlog_goes_up_with_commits_and_down_as_the_share_group_consumes(
    project, spark, kafka_conf, tmp_path
):
    topic, group, spec, key = project["topic"], project["group"], project["spec"], project["key"]
    write_table(rows(300), spec, kafka=kafka_conf, window="d1", frame_rows=20)
    write_table(rows(200, 1000), spec, kafka=kafka_conf, window="d2", frame_rows=20)
    log = shuffle_log(topic, kafka=kafka_conf)
    total = offsets(log)

    # Committed, not fed yet: all of it is backlog, in runs, rows and records.
    before = queue_backlog(topic, group, kafka=kafka_conf)
    assert (before.unfed_runs, before.unfed_rows, before.unfed_records) == (2, 500, total)
    assert (before.runs, before.rows, before.records, before.pending_records) == (2, 500, total, 0)
    first = tick(project)
    assert observed(first, key) == {
        "queue/share_group": group,
        "queue/backlog_records": total,
        "queue/backlog_rows": 500,
        "queue/backlog_runs": 2,
        "queue/unfed_records": total,
        "queue/unfed_rows": 500,
        "queue/unfed_runs": 2,
    }
    # Above the limit (0) for no time yet: within the hour allowed.
    assert verdict(first).passed
    # The same backlog an hour and a half later (the cursor says since when): WARN.
    cursor = json.loads(first.cursor)
    since = dt.datetime.now(dt.UTC) - 1.5 * BACKLOG_FOR
    cursor["queues"][key.to_user_string()]["above_since"] = since.isoformat()
    stayed = tick(project, json.dumps(cursor))
    assert [e for e in stayed.asset_events if not hasattr(e, "check_name")] == []
    late = verdict(stayed)
    assert (late.passed, late.severity) == (False, AssetCheckSeverity.WARN)
    assert late.metadata["above_for_s"].value >= 1.5 * BACKLOG_FOR.total_seconds() - 1
    assert f"{total} records to process" in late.description

    # Fed: the same backlog, now pending in the work topic.
    assert feed_queue(topic, kafka=kafka_conf) == 2
    fed = queue_backlog(topic, group, kafka=kafka_conf)
    assert (fed.unfed_runs, fed.pending_runs, fed.pending_rows) == (0, 2, 500)
    assert fed.records == fed.pending_records == fed.fed_records == total

    # A share group consumes it, slowly: the backlog falls as it goes, to nothing.
    samples: list[int] = []
    running = threading.Event()
    running.set()

    def sample():
        while running.is_set():
            samples.append(queue_backlog(topic, group, kafka=kafka_conf).records)
            time.sleep(0.2)

    def slow(table):
        time.sleep(0.3)
        return table.select(["id"])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = process_queue(
            spark,
            topic,
            group,
            slow,
            "id long",
            kafka=kafka_conf,
            output=str(tmp_path / "out"),
            scale=QueueScale(tasks=1, batch_size=2),
            stop=QueueStop(idle_timeout=2),
        )
    finally:
        running.clear()
        sampler.join(30)
    assert result.rows_out == 500
    after = queue_backlog(topic, group, kafka=kafka_conf)
    assert (after.records, after.rows, after.runs, after.fed_records) == (0, 0, 0, total)
    assert samples == sorted(samples, reverse=True), samples
    assert any(0 < s < total for s in samples), samples
    # Kafka's own count of what the group has not acknowledged agrees.
    assert broker_lag(group, kafka_conf["bootstrap.servers"]) == 0
    drained = tick(project, stayed.cursor)
    assert observed(drained, key)["queue/backlog_records"] == 0
    assert verdict(drained).passed

    # A new run committed: up again, by that run; consumed: down again.
    write_table(rows(100, 5000), spec, kafka=kafka_conf, window="d3", frame_rows=20)
    new = shuffle_log(topic, kafka=kafka_conf).commits[-1]
    more = queue_backlog(topic, group, kafka=kafka_conf)
    assert (more.runs, more.rows, more.unfed_runs) == (1, 100, 1)
    assert more.records == offsets(shuffle_log(topic, kafka=kafka_conf), {new.run_id})
    up = tick(project, drained.cursor)
    assert observed(up, key)["queue/backlog_rows"] == 100
    process_queue(
        spark,
        topic,
        group,
        lambda t: t.select(["id"]),
        "id long",
        kafka=kafka_conf,
        output=str(tmp_path / "out"),
        scale=QueueScale(tasks=1),
        stop=QueueStop(idle_timeout=2),
    )
    assert queue_backlog(topic, group, kafka=kafka_conf).records == 0
    assert broker_lag(group, kafka_conf["bootstrap.servers"]) == 0
