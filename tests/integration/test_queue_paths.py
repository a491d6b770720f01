"""Queue output through pyarrow.fs on the real broker and SparkSession: a ``file:`` URI and a
plain path hold the same rows, each record once, and only whole files."""

import os

import pytest

from orchestration.shuffle import (
    KafkaClient,
    QueueScale,
    QueueStop,
    ShuffleTopicNotFoundError,
    process_queue,
    read_queue_output,
)
from tests.integration.test_queue import IDS, doubled, produce

pytestmark = pytest.mark.integration


def test_a_file_uri_and_a_plain_path_give_the_same_rows(spark, kafka_conf, unique, tmp_path):
    topic = unique("q-paths")
    KafkaClient(kafka_conf).ensure_topic(topic, partitions=2)
    ids = list(range(24))
    produce(kafka_conf, topic, ids)
    outputs = {"uri": f"file://{tmp_path}/by-uri", "plain": str(tmp_path / "by-path")}
    rows = {}
    for name, output in outputs.items():
        res = process_queue(
            spark,
            topic,
            unique("qg"),
            doubled,
            IDS,
            kafka=kafka_conf,
            output=output,
            scale=QueueScale(tasks=1, batch_size=8),
            stop=QueueStop(idle_timeout=3),
        )
        assert res.accepted == len(ids) and res.rejected == 0 and res.output == output
        rows[name] = sorted(tuple(r) for r in read_queue_output(spark, output).collect())
    assert rows["uri"] == rows["plain"]
    # Each record once, with its own output.
    assert [r[0] for r in rows["uri"]] == ids
    assert all(r[1] == 2 * r[0] and r[2] == topic and r[3] == r[0] % 2 for r in rows["uri"])
    # Whole files only: no hidden name left behind, and the metadata file.
    for folder in ("by-uri", "by-path"):
        names = os.listdir(tmp_path / folder)
        assert "_queue.json" in names
        assert all(n == "_queue.json" or n.startswith("part-") for n in names), names
    # Either spelling of the same folder reads it.
    by_uri = read_queue_output(spark, f"file://{tmp_path}/by-path").collect()
    assert sorted(tuple(r) for r in by_uri) == rows["plain"]
    missing = f"file://{tmp_path}/none"
    with pytest.raises(ShuffleTopicNotFoundError, match=f"'{missing}' is not a queue output"):
        read_queue_output(spark, missing)
