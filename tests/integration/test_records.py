"""kafka-records on the real broker and Spark: positions, group offsets, discovery, data loss."""

import time

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from pyspark.errors import StreamingQueryException

from orchestration.shuffle import (
    KafkaClient,
    ShuffleOptionError,
    group_offsets_behind,
    read_records,
    register_data_sources,
    stream_metrics,
    summarize_stream_metrics,
)
from orchestration.shuffle.spark.compat import ADMISSION_CONTROL
from orchestration.shuffle.spark.records import commit_group_offsets
from orchestration.shuffle.spark.session import explain_text
from tests.conftest import jvm_read_off, jvm_read_on

pytestmark = pytest.mark.integration

BASE_MS = 1_700_000_000_000
N = 100


def make_topic(conf, topic, partitions=2):
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        tmd = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if tmd and tmd.error is None and all(p.leader >= 0 for p in tmd.partitions.values()):
            return
        time.sleep(0.1)


def produce(conf, topic, partition, count, first=0, headers=None):
    p = Producer(conf)
    for i in range(first, first + count):
        p.produce(
            topic,
            key=f"k{i}".encode(),
            value=f"v{partition}-{i}".encode(),
            partition=partition,
            timestamp=BASE_MS + i * 1000,
            headers=headers,
        )
    assert p.flush(30) == 0


@pytest.fixture(scope="module")
def known(kafka_conf, spark):
    """A topic of 2 partitions x 100 records, record i at BASE_MS + i seconds."""
    import uuid

    topic = f"rec-known-{uuid.uuid4().hex[:8]}"
    make_topic(kafka_conf, topic)
    for p in (0, 1):
        produce(kafka_conf, topic, p, N, headers=[("h", b"x")])
    register_data_sources(spark)
    return topic


def read(spark, kafka_conf, engine="python", **options):
    """The ``kafka-records`` source by name, or ``read_records`` on the JVM."""
    if engine == "jvm":
        opts = {"kafka.bootstrap.servers": kafka_conf["bootstrap.servers"], **options}
        df = read_records(spark, opts, engine="jvm")
        assert "kafka-records ranges=" in explain_text(df)
        return df
    reader = spark.read.format("kafka-records").option(
        "kafka.bootstrap.servers", kafka_conf["bootstrap.servers"]
    )
    return reader.options(**options).load()


def spans(df):
    """{partition: (count, first offset, last offset)}"""
    rows = df.groupBy("partition").agg({"offset": "min", "*": "count"}).collect()
    last = {r.partition: r["max(offset)"] for r in df.groupBy("partition").max("offset").collect()}
    return {r.partition: (r["count(1)"], r["min(offset)"], last[r.partition]) for r in rows}


def test_columns_and_types_are_sparks(spark, kafka_conf, known, engine):
    df = read(spark, kafka_conf, engine, subscribe=known)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema] == [
        ("key", "binary"),
        ("value", "binary"),
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("timestamp", "timestamp"),
        ("timestampType", "int"),
    ]
    row = df.filter("partition = 1 and offset = 7").first()
    assert (bytes(row.key), bytes(row.value), row.topic) == (b"k7", b"v1-7", known)
    assert row.timestamp.timestamp() * 1000 == BASE_MS + 7000 and row.timestampType == 0
    with_headers = read(spark, kafka_conf, engine, subscribe=known, includeHeaders="true")
    (h,) = with_headers.select("headers").first().headers
    assert (h.key, bytes(h.value)) == ("h", b"x")


def test_starting_and_ending_positions(spark, kafka_conf, known, engine):
    assert spans(read(spark, kafka_conf, engine, subscribe=known)) == {0: (N, 0, 99), 1: (N, 0, 99)}
    got = read(
        spark,
        kafka_conf,
        engine,
        subscribe=known,
        startingOffsets=f'{{"{known}": {{"0": 10, "1": -2}}}}',
        endingOffsets=f'{{"{known}": {{"0": 20, "1": -1}}}}',
    )
    assert spans(got) == {0: (10, 10, 19), 1: (N, 0, 99)}
    got = read(spark, kafka_conf, engine, subscribe=known, startingTimestamp=str(BASE_MS + 50_000))
    assert spans(got) == {0: (50, 50, 99), 1: (50, 50, 99)}
    got = read(
        spark,
        kafka_conf,
        engine,
        subscribe=known,
        startingOffsetsByTimestamp=f'{{"{known}": {{"0": {BASE_MS + 90_000}}}}}',
    )
    assert spans(got) == {0: (10, 90, 99)}
    got = read(spark, kafka_conf, engine, subscribe=known, endingTimestamp=str(BASE_MS + 30_000))
    assert spans(got) == {0: (30, 0, 29), 1: (30, 0, 29)}
    got = read(spark, kafka_conf, engine, assign=f'{{"{known}": [1]}}', startingOffsets="latest")
    assert got.count() == 0
    split = read(spark, kafka_conf, engine, subscribe=known, minPartitions="6")
    assert split.rdd.getNumPartitions() >= 6 and split.count() == 2 * N
    assert split.select("partition", "offset").distinct().count() == 2 * N


def test_committed_offsets_with_each_reset_strategy(spark, kafka_conf, known, engine, unique):
    group = unique("rec-group")
    commit_group_offsets(KafkaClient(kafka_conf), group, {(known, 0): 40})
    opts = {"subscribe": known, "startingOffsets": "committed", "kafka.group.id": group}
    assert spans(read(spark, kafka_conf, engine, **opts)) == {0: (60, 40, 99), 1: (N, 0, 99)}
    got = read(spark, kafka_conf, engine, offsetResetStrategy="latest", **opts)
    assert spans(got) == {0: (60, 40, 99)}
    with pytest.raises(Exception, match=f"{known}-1"):
        read(spark, kafka_conf, engine, offsetResetStrategy="none", **opts).count()


def group_offsets(conf, group, topic):
    admin = AdminClient(conf)
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0), TopicPartition(topic, 1)])
    result = admin.list_consumer_group_offsets([req])[group].result(30)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def test_commit_offsets_after_a_batch_read(spark, kafka_conf, known, unique):
    group = unique("rec-commit")
    df = read(spark, kafka_conf, subscribe=known, commitOffsets="true", **{"kafka.group.id": group})
    assert df.count() == 2 * N
    assert group_offsets(kafka_conf, group, known) == {0: N, 1: N}


def test_stream_metrics_and_group_offsets_behind(spark, kafka_conf, known, unique, tmp_path):
    group = unique("rec-metrics")
    # Nothing committed yet: the group is behind by every record.
    before = group_offsets_behind(kafka_conf, group, [known])
    assert before["partitions"] == {f"{known}/0": N, f"{known}/1": N}
    assert before["max_offsets_behind_latest"] == N
    register_data_sources(spark)

    def run(checkpoint, **limit):
        query = (
            spark.readStream.format("kafka-records")
            .option("kafka.bootstrap.servers", kafka_conf["bootstrap.servers"])
            .options(subscribe=known, startingOffsets="earliest", **limit)
            .options(commitOffsets="true", **{"kafka.group.id": group})
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(120)
        except StreamingQueryException:
            pass  # the query's own exception(), checked by the caller
        return query

    if not ADMISSION_CONTROL:
        # PySpark 4.0 and 4.1: the limit is refused by name and version; without it, one
        # micro-batch reads every record and Spark's commit() commits the group's position.
        refused = run("refused", maxOffsetsPerTrigger="80").exception()
        assert refused is not None
        assert "['maxOffsetsPerTrigger']" in str(refused) and spark.version in str(refused)
        query = run("chk")
        assert query.exception() is None, query.exception()
        read = [m for m in stream_metrics(query) if m.records]
        assert [m.records for m in read] == [200]
        assert summarize_stream_metrics(stream_metrics(query))["records"] == 200
        # Spark commits a micro-batch to its source when the next one is planned, and a
        # query that stops plans none: the group may stay behind by the last batch, never
        # ahead of what was read (docs/guides/platforms.md).
        behind = group_offsets_behind(kafka_conf, group, [known])
        assert 0 <= behind["max_offsets_behind_latest"] <= N
        return
    query = run("chk", maxOffsetsPerTrigger="80")
    assert query.exception() is None, query.exception()
    check_limited_metrics(query, known)
    # After the query, the group's committed position is the end: nothing behind.
    deadline = time.monotonic() + 30
    while group_offsets_behind(kafka_conf, group, [known])["max_offsets_behind_latest"] != 0:
        assert time.monotonic() < deadline
        time.sleep(0.5)


def check_limited_metrics(query, known):
    read = [m for m in stream_metrics(query) if m.records]
    # 80 records per batch, split by lag: 40 per partition; behind = latest - batch end.
    assert [m.records for m in read] == [80, 80, 40]
    assert [(m.offsets_behind.min, m.offsets_behind.max) for m in read] == [
        (60, 60),
        (20, 20),
        (0, 0),
    ]
    assert [m.topics for m in read] == [(known,)] * 3
    # Offset commits so far, reported with each batch: the position each batch starts at.
    assert [m.offset_commits_succeeded for m in read] == [1, 2, 3]
    assert {m.offset_commits_failed for m in read} == {0}
    assert {m.records_lost for m in read} == {None}  # failOnDataLoss is on: nothing skipped
    summary = summarize_stream_metrics(stream_metrics(query))
    assert summary["micro_batches"] == 3 and summary["records"] == 200
    assert "bytes" not in summary  # not reported by kafka-records (no Spark hook for it)


def stream(spark, kafka_conf, name, **options):
    register_data_sources(spark)
    df = (
        spark.readStream.format("kafka-records")
        .option("kafka.bootstrap.servers", kafka_conf["bootstrap.servers"])
        .options(**options)
        .load()
    )
    return (
        df.selectExpr("topic", "partition", "offset")
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="1 second")
        .start()
    )


def test_running_query_discovers_partitions_and_topics_and_commits(
    spark, kafka_conf, unique, tmp_path
):
    prefix = unique("recpat").replace("-", "_")
    first, later = f"{prefix}-a", f"{prefix}-b"
    make_topic(kafka_conf, first, partitions=1)
    produce(kafka_conf, first, 0, 10)
    group = unique("rec-stream")
    query = stream(
        spark,
        kafka_conf,
        prefix,
        subscribePattern=f"{prefix}-.*",
        startingOffsets="earliest",
        commitOffsets="true",
        **{"kafka.group.id": group},
    )
    try:
        query.processAllAvailable()
        assert spark.table(prefix).count() == 10
        # A partition added under the running query is read from its earliest offset.
        admin = AdminClient(kafka_conf)  # kept referenced until its future resolves
        admin.create_partitions([NewPartitions(first, 2)])[first].result(30)
        time.sleep(1)
        produce(kafka_conf, first, 1, 5)
        # A topic created later that matches the pattern is read too.
        make_topic(kafka_conf, later, partitions=1)
        produce(kafka_conf, later, 0, 7)
        deadline = time.monotonic() + 60
        while spark.table(prefix).count() < 22 and time.monotonic() < deadline:
            query.processAllAvailable()
            time.sleep(0.5)
        rows = {(r.topic, r.partition) for r in spark.table(prefix).collect()}
        assert spark.table(prefix).count() == 22
        assert rows == {(first, 0), (first, 1), (later, 0)}
        # The group's offsets show the query's position (for monitoring).
        deadline = time.monotonic() + 30
        while group_offsets(kafka_conf, group, first) != {0: 10, 1: 5}:
            assert time.monotonic() < deadline, group_offsets(kafka_conf, group, first)
            time.sleep(1)
    finally:
        query.stop()


@pytest.mark.parametrize("fail", [True, False])
def test_records_deleted_under_a_query(spark, kafka_conf, unique, tmp_path, fail):
    topic = unique("rec-loss")
    make_topic(kafka_conf, topic, partitions=1)
    produce(kafka_conf, topic, 0, 100)
    chk = str(tmp_path / "chk")
    seen: list[int] = []

    def run_once():
        register_data_sources(spark)
        df = (
            spark.readStream.format("kafka-records")
            .option("kafka.bootstrap.servers", kafka_conf["bootstrap.servers"])
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("failOnDataLoss", str(fail).lower())
            .load()
        )
        seen.clear()
        q = (
            df.selectExpr("offset")
            .writeStream.foreachBatch(lambda b, _: seen.extend(r.offset for r in b.collect()))
            .option("checkpointLocation", chk)
            .trigger(availableNow=True)
            .start()
        )
        try:
            q.awaitTermination(120)
        except StreamingQueryException:
            pass  # inspected through q.exception()
        return q

    assert run_once().exception() is None
    assert sorted(seen) == list(range(100))
    produce(kafka_conf, topic, 0, 100, first=100)
    admin = AdminClient(kafka_conf)
    for fut in admin.delete_records([TopicPartition(topic, 0, 150)]).values():
        fut.result(30)
    q = run_once()
    if fail:
        assert q.exception() is not None
        text = str(q.exception())
        assert topic in text and "partition 0" in text and "[100, 150)" in text
    else:
        assert q.exception() is None
        assert sorted(seen) == list(range(150, 200))


def test_read_records_on_the_jvm_reads_what_the_python_source_reads(
    spark, kafka_conf, unique, engine
):
    # Null keys and values (tombstones), headers with a null value, an aborted transaction's
    # records (read_committed, the Python client's default, skips them) and two partitions.
    topic = unique("rec-jvm")
    make_topic(kafka_conf, topic)
    p = Producer(kafka_conf)
    for i in range(500):
        p.produce(
            topic,
            key=None if i % 7 == 0 else f"k{i}".encode(),
            value=None if i % 11 == 0 else f"v{i}".encode(),
            partition=i % 2,
            headers=[("h", b"x"), ("n", None)] if i % 3 == 0 else None,
        )
    assert p.flush(30) == 0
    tx = Producer({**kafka_conf, "transactional.id": unique("rec-tx")})
    tx.init_transactions(30)
    tx.begin_transaction()
    tx.produce(topic, key=b"aborted", value=b"aborted", partition=0)
    tx.abort_transaction(30)
    options = {"subscribe": topic, "includeHeaders": "true"}
    got = read(spark, kafka_conf, engine, **options)
    by_name = read(spark, kafka_conf, "python", **options)
    rows = sorted(map(tuple, got.collect()), key=lambda r: (r[3], r[4]))
    assert rows == sorted(map(tuple, by_name.collect()), key=lambda r: (r[3], r[4]))
    assert len(rows) == 500 and all(r[0] != b"aborted" for r in rows)
    assert sum(r[0] is None for r in rows) == len(range(0, 500, 7))
    assert sum(r[1] is None for r in rows) == len(range(0, 500, 11))
    headers = [r[7] for r in rows if r[7]]
    assert len(headers) == len(range(0, 500, 3))
    assert all([(h.key, h.value) for h in hs] == [("h", b"x"), ("n", None)] for hs in headers)


def test_read_records_on_the_jvm_checks_data_loss_when_it_reads(spark, kafka_conf, unique):
    # The JVM read's ranges are fixed when the DataFrame is made; records deleted before it
    # runs are data loss, named, or skipped with failOnDataLoss=false.
    topic = unique("rec-jvm-loss")
    make_topic(kafka_conf, topic, partitions=1)
    produce(kafka_conf, topic, 0, 100)
    keys = jvm_read_on(spark, kafka_conf)
    try:
        strict = read(spark, kafka_conf, "jvm", subscribe=topic)
        lenient = read(spark, kafka_conf, "jvm", subscribe=topic, failOnDataLoss="false")
        admin = AdminClient(kafka_conf)
        for fut in admin.delete_records([TopicPartition(topic, 0, 50)]).values():
            fut.result(30)
        with pytest.raises(Exception) as err:
            strict.collect()
        text = str(err.value)
        assert "DataLossError" in text and f"topic '{topic}' partition 0" in text
        assert "offsets [0, 50) were removed" in text
        assert sorted(r.offset for r in lenient.collect()) == list(range(50, 100))
        # A JVM read commits no group offsets: asked to, it says so.
        with pytest.raises(ShuffleOptionError, match="commitOffsets"):
            read(
                spark,
                kafka_conf,
                "jvm",
                subscribe=topic,
                commitOffsets="true",
                **{"kafka.group.id": unique("g")},
            )
    finally:
        jvm_read_off(spark, keys)


def test_a_topic_deleted_before_the_read_is_reported_within_seconds(
    spark, kafka_conf, unique, engine
):
    # The read's ranges are fixed when the DataFrame is made; the topic goes before it runs.
    # Every attempt of each task looks at the topic at its first empty poll, not after the
    # 30 s idle timeout: the whole job (three attempts a task here) fails in seconds.
    topic = unique("rec-gone")
    make_topic(kafka_conf, topic, partitions=2)
    produce(kafka_conf, topic, 0, 20)
    register_data_sources(spark)
    df = read(spark, kafka_conf, engine, subscribe=topic)
    admin = AdminClient(kafka_conf)
    admin.delete_topics([topic], operation_timeout=30)[topic].result(60)
    began = time.monotonic()
    # The JVM read's tasks find it gone; the Python source plans its tasks when the job
    # starts, and finds it gone then.
    gone = rf"topic '{topic}' was deleted while reading partition 0|\['{topic}'\] do not exist"
    with pytest.raises(Exception, match=gone):
        df.collect()
    took = time.monotonic() - began
    assert took < 8, f"the read took {took:.1f}s to report the deleted topic"
