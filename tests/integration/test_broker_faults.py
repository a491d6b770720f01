"""Broker faults on real brokers: a 3-node cluster losing a node mid-write, and a single
node restarted mid-write. Each stack here is its own, on its own ports and folders."""

import threading
import time

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType

from devstack import localstack
from orchestration.shuffle import (
    KafkaClient,
    ShuffleError,
    ShuffleSpec,
    read_shuffle,
    shuffle_commits_since,
    shuffle_log,
    write_shuffle,
)
from orchestration.shuffle.core.commitlog import commit_topic
from tests.integration.stacks import own_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def stack_env(nodes: int, port: int):
    return own_stack(f"test-kafka-{nodes}n", port, nodes=nodes)


@pytest.fixture(scope="module")
def three_nodes():
    with stack_env(3, 29292):
        conf = {"bootstrap.servers": localstack.start()}
    yield conf
    with stack_env(3, 29292):
        localstack.stop()


@pytest.fixture(scope="module")
def one_node():
    with stack_env(1, 29092):
        conf = {"bootstrap.servers": localstack.start()}
    yield conf
    with stack_env(1, 29092):
        localstack.stop()


def rows_df(spark, n, offset=0):
    return spark.range(offset, offset + n, numPartitions=4).selectExpr(
        "concat('k', cast(id % 997 as string)) as k",
        "id",
        "repeat(md5(cast(id as string)), 8) as payload",
    )


def spec_for(topic):
    return ShuffleSpec(topic=topic, key="k", num_partitions=6, max_parallelism=60)


def write_in_background(spark, spec, conf, **kw):
    box: dict = {}

    def run():
        try:
            box["result"] = write_shuffle(rows_df(spark, 400_000), spec, kafka=conf, **kw)
        except Exception as exc:  # noqa: BLE001 - examined by the test
            box["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    return t, box


def topic_configs(conf, topic):
    admin = KafkaClient(conf).admin()
    res = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([res])[res].result(30)
    md = admin.list_topics(topic=topic, timeout=30).topics[topic]
    return {k: v.value for k, v in entries.items()}, {
        len(p.replicas) for p in md.partitions.values()
    }


def test_a_node_killed_mid_write_loses_no_committed_row(spark, three_nodes, unique):
    conf = three_nodes
    topic = unique("faults-3n")
    spec = spec_for(topic)
    before = write_shuffle(
        rows_df(spark, 20_000, offset=10_000_000),
        spec,
        kafka=conf,
        window="before",
        frame_rows=2000,
    )
    # Replicated three times, two in sync needed, for both topics.
    for t in (topic, commit_topic(topic)):
        configs, replicas = topic_configs(conf, t)
        assert replicas == {3} and configs["min.insync.replicas"] == "2"

    started = time.monotonic()
    thread, box = write_in_background(spark, spec, conf, window="during", frame_rows=2000)
    time.sleep(3)
    with stack_env(3, 29292):
        assert localstack.stop(node=2, kill=True)
    try:
        node_down(spark, conf, topic, before, thread, box, started)
    finally:
        with stack_env(3, 29292):
            localstack.start(node=2)  # a failure here must not leave the next test 2 nodes
    again = write_shuffle(
        rows_df(spark, 400_000), spec, kafka=conf, window="during", frame_rows=2000
    )
    assert again.rows == 400_000
    got = read_shuffle(spark, topic, kafka=conf, windows=["during"])
    assert got.count() == 400_000
    assert got.selectExpr("count(distinct id)").first()[0] == 400_000
    assert read_shuffle(spark, topic, kafka=conf, windows=["before"]).count() == 20_000


def node_down(spark, conf, topic, before, thread, box, started) -> None:
    """The checks of the node-killed test while node 2 is down."""
    thread.join(300)
    elapsed = time.monotonic() - started
    log = shuffle_log(topic, kafka=conf)
    if "error" in box:
        # A clear error, and nothing of the run is visible.
        assert isinstance(box["error"], ShuffleError), repr(box["error"])
        assert [c.window for c in log.commits] == ["before"]
    else:
        assert box["result"].rows == 400_000
        assert sorted(c.window for c in log.commits) == ["before", "during"]
    print(
        f"write with a node killed after 3 s: {elapsed:.1f} s, "
        f"{'failed: ' + str(box['error'])[:200] if 'error' in box else 'committed'}"
    )

    # While the node is down, reads and the commit sensor's query keep working.
    assert read_shuffle(spark, topic, kafka=conf, windows=["before"]).count() == 20_000
    assert [c.run_id for c in shuffle_commits_since(topic, kafka=conf)[0]][:1] == [before.run_id]


def test_offsets_are_read_from_the_new_leader_of_a_partition_whose_leader_was_killed(
    three_nodes, unique
):
    """A read's plan asks every partition's end offset. Asked right after the leader of a
    partition is killed (before the controller has fenced it), the answer comes from the new
    leader once one is elected, within FAILOVER_S, not an error after it: a consumer keeps
    asking the leader it was first told of, so the question goes to a new consumer."""
    conf = three_nodes
    topic = unique("faults-leader")
    client = KafkaClient(conf)
    client.ensure_topic(topic, 3, config={"min.insync.replicas": "2"})
    producer = client.producer(acks="all")
    for p in range(3):
        for _ in range(5 + p):
            producer.produce(topic, value=b"x", partition=p)
    assert producer.flush(30) == 0
    leader = client.admin().list_topics(topic=topic, timeout=30).topics[topic].partitions[1].leader
    with stack_env(3, 29292):
        assert localstack.stop(node=leader, kill=True)
    try:
        started = time.monotonic()
        assert client.end_offsets(topic, 3) == [(0, 5), (0, 6), (0, 7)]
        print(f"offsets with partition 1's leader (node {leader}) killed: "
              f"{time.monotonic() - started:.1f} s")  # fmt: skip
    finally:
        with stack_env(3, 29292):
            localstack.start(node=leader)


def test_a_single_broker_restarted_mid_write_never_commits_a_partial_run(spark, one_node, unique):
    conf = one_node
    topic = unique("faults-1n")
    spec = spec_for(topic)
    thread, box = write_in_background(spark, spec, conf, window="w", frame_rows=2000)
    time.sleep(3)
    with stack_env(1, 29092):
        assert localstack.stop()
        localstack.start()
    thread.join(300)
    log = shuffle_log(topic, kafka=conf)
    print(
        f"write with the broker restarted after 3 s: "
        f"{'failed: ' + str(box['error'])[:200] if 'error' in box else 'committed'}"
    )
    if "error" in box:
        assert isinstance(box["error"], ShuffleError), repr(box["error"])
        assert all(c.window != "w" for c in log.commits)
    else:
        (commit,) = log.commits
        assert commit.rows == 400_000
        assert read_shuffle(spark, topic, kafka=conf).count() == 400_000
    # Either way a re-run commits all of it.
    write_shuffle(rows_df(spark, 400_000), spec, kafka=conf, window="w", frame_rows=2000)
    got = read_shuffle(spark, topic, kafka=conf, windows=["w"])
    assert got.count() == 400_000 == got.selectExpr("count(distinct id)").first()[0]
