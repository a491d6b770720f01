"""The commit log's index on the real broker: writers keep it, a process reading a long log
for the first time reads it and the log's tail, and what it reads equals the whole log."""

import time

import pyarrow as pa
import pytest

from orchestration.shuffle import ShuffleSpec, read_table, shuffle_log, write_table
from orchestration.shuffle.core.logindex import index_topic
from orchestration.shuffle.kafka import commitlog
from orchestration.shuffle.kafka.client import KafkaClient, close_idle_consumers


def spec(topic):
    return ShuffleSpec(topic=topic, key="k", num_partitions=3, max_parallelism=16)


def rows(i, n=7):
    return pa.table({"k": [f"k{j % 5}" for j in range(n)], "x": [i * 100 + j for j in range(n)]})


def forget(topic):
    """As a new process: nothing of the log folded, no index known."""
    commitlog.forget_logs()
    close_idle_consumers()


@pytest.fixture
def small_index(monkeypatch):
    monkeypatch.setattr(commitlog, "INDEX_EVERY", 10)


def test_writers_keep_the_index_and_a_first_read_uses_it(kafka_conf, unique, small_index):
    topic = unique("idx")
    for i in range(25):
        write_table(rows(i), spec(topic), kafka=kafka_conf, window=f"w{i:02d}")
    client = KafkaClient(kafka_conf)
    whole = shuffle_log(topic, kafka=kafka_conf)
    # Refreshed as the log grew: the last index reaches within 10 records of the end.
    ((low, high),) = client.end_offsets(index_topic(topic), 1)
    assert high > low
    end = commitlog.log_end(client, topic)
    forget(topic)
    opened = commitlog.open_index(client, topic)
    assert opened is not None and end - 10 < opened.through <= end
    assert len(opened.index(None).rows) == opened.through - 0  # one record per offset here
    # A re-run after the index: the tail carries it.
    rerun = write_table(rows(99), spec(topic), kafka=kafka_conf, window="w03")
    now = shuffle_log(topic, kafka=kafka_conf)
    forget(topic)
    part = commitlog.read_log(client, topic, ["w03", "w20"])
    # Of the windows the index holds, only those read were read (the tail is read whole).
    indexed = {f"w{i:02d}" for i in range(10)}
    assert {c.window for c in part.commits} & indexed == {"w03"}
    assert part.visible(["w03"])[0].run_id == rerun.commit.run_id
    forget(topic)
    assert read_table(topic, kafka=kafka_conf, windows=["w03"]).sort_by("x") == rows(99)
    assert read_table(topic, kafka=kafka_conf, windows=["w17"]).sort_by("x") == rows(17)
    # A read of the whole log from the index equals the log read record by record.
    forget(topic)
    again = shuffle_log(topic, kafka=kafka_conf)
    assert again.commits == now.commits and again.commit_offsets == now.commit_offsets
    assert again.layout == whole.layout and len(now.commits) == len(whole.commits) + 1


def test_an_index_of_another_log_is_not_used(kafka_conf, unique, small_index, monkeypatch):
    topic = unique("idx")
    for i in range(14):
        write_table(rows(i), spec(topic), kafka=kafka_conf, window=f"w{i:02d}")
    client = KafkaClient(kafka_conf)
    forget(topic)
    assert commitlog.open_index(client, topic) is not None
    # The shuffle deleted and made again under the same name; its index topic stays behind
    # and no writer refreshes it.
    admin = client.admin()
    for f in admin.delete_topics([topic, topic + "__commits"], operation_timeout=30).values():
        f.result(60)
    monkeypatch.setattr(commitlog, "_after_commit", lambda *a: None)
    forget(topic)
    for i in range(14):
        for _attempt in range(20):
            try:
                write_table(rows(50 + i), spec(topic), kafka=kafka_conf, window=f"w{i:02d}")
                break
            except Exception:  # noqa: BLE001 - the deleted topics may linger a moment
                time.sleep(0.5)
        else:
            raise AssertionError("the shuffle could not be made again")
    forget(topic)
    log = commitlog.read_log(client, topic, ["w05"])
    assert len(log.commits) == 14  # read whole: the index is another log's
    forget(topic)
    assert read_table(topic, kafka=kafka_conf, windows=["w05"]).sort_by("x") == rows(55)
