"""Object storage on the real stack: the local S3 server (MinIO), Spark's S3A connector and
pyarrow.fs, with the real broker and SparkSession.

The reference pipeline on S3 (warehouse, queue output and streaming checkpoint under
``s3a://``) is ``tests/integration/test_pipeline.py``, whose warehouse is on this server.
"""

import pyarrow.fs as pafs
import pytest

from orchestration.shuffle import (
    KafkaClient,
    QueueScale,
    QueueStop,
    ShuffleOptionError,
    ShuffleSessionError,
    process_queue,
    read_queue_output,
    write_shuffle,
)
from orchestration.shuffle.core.paths import open_filesystem, parse_location
from tests.integration.test_columnar_write import read_back, spec_for, wide_df
from tests.integration.test_queue import IDS, doubled, produce
from tests.integration.test_streaming import rows, run_available_now, spec

pytestmark = pytest.mark.integration


def listing(uri):
    """Every object under ``uri``, as names relative to it."""
    fs, base = open_filesystem(parse_location(uri))
    found = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    return sorted(i.path[len(base) + 1 :] for i in found if i.type == pafs.FileType.File)


def test_queue_output_on_s3_has_each_record_once(spark, kafka_conf, unique, s3):
    topic = unique("q-s3")
    KafkaClient(kafka_conf).ensure_topic(topic, partitions=2)
    ids = list(range(40))
    produce(kafka_conf, topic, ids)
    output = s3("queue")
    res = process_queue(
        spark,
        topic,
        unique("qg"),
        doubled,
        IDS,
        kafka=kafka_conf,
        output=output,
        scale=QueueScale(tasks=2, batch_size=8),
        stop=QueueStop(idle_timeout=3),
    )
    assert res.accepted == len(ids) and res.rejected == 0 and res.dead_lettered == 0
    got = sorted(tuple(r) for r in read_queue_output(spark, output).collect())
    # Nothing lost, each record once, with its own output.
    assert [r[0] for r in got] == ids
    assert all(r[1] == 2 * r[0] and r[2] == topic and r[3] == r[0] % 2 for r in got)
    # Only whole objects: the metadata and one object per batch, no temporary names (S3
    # publishes an upload whole, so nothing is renamed there).
    names = listing(output)
    assert "_queue.json" in names
    parts = [n for n in names if n != "_queue.json"]
    assert parts and all(n.startswith("part-") and n.endswith(".parquet") for n in parts), names
    # The s3:// spelling of the same prefix reads the same rows.
    again = read_queue_output(spark, output.replace("s3a://", "s3://", 1)).collect()
    assert sorted(tuple(r) for r in again) == got


def test_columnar_write_from_parquet_on_s3_is_the_shuffle_from_local_disk(
    spark, kafka_conf, unique, s3, tmp_path
):
    df = wide_df(spark, 3000).repartition(3)
    df.write.parquet(str(tmp_path / "wide"))
    remote = s3("wide")
    df.write.parquet(remote)
    rows_of = {}
    for name, source in (("local", str(tmp_path / "wide")), ("s3", remote)):
        topic = unique(f"col-{name}")
        res = write_shuffle(
            spark.read.parquet(source), spec_for(topic), kafka=kafka_conf, columnar=True
        )
        assert res.path == "columnar" and res.rows == 3000
        rows_of[name] = read_back(spark, kafka_conf, topic)
    # The same rows, key groups and partitions, whichever disk the files were on.
    assert [repr(r) for r in rows_of["s3"]] == [repr(r) for r in rows_of["local"]]


def test_streaming_query_checkpointed_on_s3_reads_each_run_once(
    engine, spark, kafka_conf, unique, s3
):
    topic = unique("st-s3")
    checkpoint = s3("checkpoint")
    a = write_shuffle(rows(spark, 300), spec(topic), kafka=kafka_conf, window="w1")
    first = run_available_now(engine, spark, topic, kafka_conf, checkpoint)
    assert sorted(r[0] for b in first for r in b) == list(range(300))
    assert {r[1] for b in first for r in b} == {a.run_id}
    # Restarted from the checkpoint on S3: only what was committed since.
    b = write_shuffle(rows(spark, 200, 1000), spec(topic), kafka=kafka_conf, window="w2")
    second = run_available_now(engine, spark, topic, kafka_conf, checkpoint)
    assert sorted(r[0] for batch in second for r in batch) == list(range(1000, 1200))
    assert {r[1] for batch in second for r in batch} == {b.run_id}
    assert run_available_now(engine, spark, topic, kafka_conf, checkpoint) == []
    # The checkpoint is on S3, not on a local disk.
    assert any(n.startswith("offsets/") for n in listing(checkpoint))


def test_endpoints_that_differ_are_refused_in_one_error(spark, kafka_conf, unique, s3, monkeypatch):
    topic = unique("q-s3-mismatch")
    KafkaClient(kafka_conf).ensure_topic(topic, partitions=1)
    output = s3("mismatch")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    with pytest.raises(ShuffleSessionError) as err:
        process_queue(
            spark,
            topic,
            unique("qg"),
            doubled,
            IDS,
            kafka=kafka_conf,
            output=output,
            scale=QueueScale(tasks=1),
        )
    text = str(err.value)
    assert output in text and "http://127.0.0.1:1" in text
    assert spark.conf.get("spark.hadoop.fs.s3a.endpoint") in text
    assert "spark.hadoop.fs.s3a.endpoint" in text and "AWS_ENDPOINT_URL" in text
    # The session was not changed.
    assert spark.conf.get("spark.hadoop.fs.s3a.endpoint") != "http://127.0.0.1:1"


def test_columnar_write_with_differing_endpoints_says_why(
    spark, kafka_conf, unique, s3, monkeypatch
):
    remote = s3("wide-mismatch")
    wide_df(spark, 100).write.parquet(remote)
    df = spark.read.parquet(remote)
    topic = unique("col-mismatch")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    with pytest.raises(ShuffleOptionError, match="both must name the same store") as err:
        write_shuffle(df, spec_for(topic), kafka=kafka_conf, columnar=True)
    assert remote in str(err.value) and "columnar=True" in str(err.value)
    # Left to choose, the write takes the row path (Spark reads the files itself).
    res = write_shuffle(df, spec_for(topic), kafka=kafka_conf)
    assert res.path == "rows" and res.rows == 100


def test_a_scheme_without_a_hadoop_file_system_is_named(spark, kafka_conf, unique):
    topic = unique("q-gs")
    KafkaClient(kafka_conf).ensure_topic(topic, partitions=1)
    with pytest.raises(ShuffleSessionError, match=r"no Hadoop file system for gs://"):
        read_queue_output(spark, "gs://some-bucket/out")


def test_a_replaced_warehouse_folder_reads_new_in_a_session_that_read_the_old(spark, s3):
    import pyarrow as pa

    from assets.warehouse import WarehouseResource

    warehouse = WarehouseResource(path=s3("replace"))
    folder = warehouse.day_path("flights", "2013-01-01")
    first = pa.table({"n": list(range(5000))})
    warehouse.replace_with_table(folder, first)
    assert spark.read.parquet(folder).count() == 5000
    # A smaller file: read under the old file's name, its bytes would not be a Parquet file.
    second_path = warehouse.replace_with_table(folder, first.slice(0, 7))
    assert sorted(r.n for r in spark.read.parquet(folder).collect()) == list(range(7))
    assert listing(folder) == [second_path.rsplit("/", 1)[1]]
