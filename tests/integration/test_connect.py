"""The engine's public functions on a Spark Connect session (no JVM on this side).

Not in the default run (the Connect server costs 15-30 s to start): ``scripts/dev
test-connect`` runs these, on a local server this process starts, or on the one
``SHUFFLE_TEST_SPARK_REMOTE`` names (``scripts/dev connect start``, then
``SHUFFLE_TEST_SPARK_REMOTE=sc://127.0.0.1:15002``). Functions handed to Spark run in the
server's Python workers, so results are read back through Spark (tables, files), never
through lists in this process.
"""

import datetime as dt
import os
import uuid
from collections import Counter

import pandas as pd
import pyarrow as pa
import pytest
from confluent_kafka import Producer

from orchestration.shuffle import (
    KafkaClient,
    QueueScale,
    QueueStop,
    ShuffleKeyError,
    ShuffleOptionError,
    ShuffleSpec,
    aggregate_shuffle,
    apply_per_key,
    expire_shuffle,
    plan_shuffle_read,
    process_queue,
    read_queue_output,
    read_records,
    read_shuffle,
    read_shuffle_stream,
    register_data_sources,
    stream_metrics,
    write_shuffle,
)
from orchestration.shuffle.spark.perkey import KEY_METADATA
from orchestration.shuffle.spark.session import is_connect, task_slots

pytestmark = [
    pytest.mark.connect,
    pytest.mark.integration,
    pytest.mark.skipif(
        os.environ.get("SHUFFLE_TEST_CONNECT") != "1",
        reason="Spark Connect tests run with `scripts/dev test-connect` (SHUFFLE_TEST_CONNECT=1)",
    ),
]

USERS = 17
ROWS = 600
EXPECTED = Counter({f"u{i}": len(range(i, ROWS, USERS)) for i in range(USERS)})


def rows(spark, n=ROWS, offset=0):
    return spark.range(offset, offset + n).selectExpr(
        f"concat('u', cast(id % {USERS} as string)) as user_id",
        "id",
        "timestamp_micros(1356998400000000 + id * 3600000000) as ts",
    )


def spec(topic):
    return ShuffleSpec(
        topic=topic, key="user_id", num_partitions=3, max_parallelism=12, event_time="ts"
    )


def count_per_user(pdf):
    return pd.DataFrame({"user_id": [pdf["user_id"].iloc[0]], "n": [len(pdf)]})


def count_per_user_arrow(table):
    users = table.column("user_id").to_pylist()
    counts = Counter(users)
    return pa.table({"user_id": list(counts), "n": list(counts.values())})


def counts(df, column="n"):
    return Counter({r.user_id: r[column] for r in df.collect()})


@pytest.fixture(scope="module")
def shuffled(connect_spark, kafka_conf):
    """One shuffle written on the Connect session, read by the tests below."""
    topic = f"cx-{uuid.uuid4().hex[:10]}"
    result = write_shuffle(rows(connect_spark), spec(topic), kafka=kafka_conf, window="d1")
    return topic, result


def test_the_session_is_a_connect_one_with_its_slots(connect_spark):
    assert is_connect(connect_spark)
    assert not hasattr(connect_spark, "_jsparkSession")
    slots = task_slots(connect_spark)
    assert isinstance(slots, int) and slots >= 1
    if not os.environ.get("SHUFFLE_TEST_SPARK_REMOTE"):
        assert slots == 2  # the local[2] server this process started


def test_write_read_plan_and_aggregate(connect_spark, kafka_conf, shuffled, tmp_path):
    topic, result = shuffled
    # No JVM here to plan the columnar path with: the row path, and an explicit request
    # for the columnar one says why it cannot be had.
    assert result.path == "rows" and result.rows == ROWS
    parquet = str(tmp_path / "rows.parquet")
    rows(connect_spark, 60).write.parquet(parquet)
    with pytest.raises(ShuffleOptionError, match="Spark Connect: the Parquet plan cannot be read"):
        write_shuffle(
            connect_spark.read.parquet(parquet), spec(topic + "-pq"), kafka=kafka_conf,
            columnar=True,
        )  # fmt: skip

    back = read_shuffle(connect_spark, topic, kafka=kafka_conf)
    assert back.schema["user_id"].metadata[KEY_METADATA]["key"] == ["user_id"]
    assert Counter(r.user_id for r in back.select("user_id").collect()) == EXPECTED
    assert sorted(r.id for r in back.select("id").collect()) == list(range(ROWS))

    plan = plan_shuffle_read(connect_spark, topic, kafka=kafka_conf)
    assert plan.dataframe().count() == ROWS

    agg = aggregate_shuffle(
        connect_spark, topic, kafka=kafka_conf, aggregations={"n": ("*", "count")}
    )
    assert counts(agg) == EXPECTED


def test_apply_per_key_every_mode_and_the_key_guard(connect_spark, kafka_conf, shuffled):
    topic, _ = shuffled
    back = read_shuffle(connect_spark, topic, kafka=kafka_conf)
    schema = "user_id string, n long"
    assert counts(apply_per_key(back, "user_id", count_per_user, schema)) == EXPECTED
    per_batch = apply_per_key(back, "user_id", count_per_user_arrow, schema, per="batch",
                              data="arrow")  # fmt: skip
    assert counts(per_batch) == EXPECTED
    filtered = apply_per_key(back.filter("id >= 17"), "user_id", count_per_user, schema,
                             order_by=["ts"])  # fmt: skip
    assert counts(filtered) == EXPECTED - Counter(f"u{i}" for i in range(USERS))
    # The guard reads the server's plan: a re-partitioned read is no longer keyed.
    with pytest.raises(ShuffleKeyError, match="re-partitioned.*Exchange"):
        apply_per_key(back.repartition(5), "user_id", count_per_user, schema)
    with pytest.raises(ShuffleKeyError, match="keyed by"):
        apply_per_key(back, "id", count_per_user, "id long, n long")


def run_available_now(writer, tmp_path):
    """Runs a streaming query to the end of what is committed (AvailableNow), checkpointed
    under ``tmp_path``, and fails on its error."""
    query = (
        writer.option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(180)
        assert query.exception() is None
    finally:
        query.stop()
    return query


def test_stream_available_now_into_a_memory_table(connect_spark, kafka_conf, shuffled, tmp_path):
    topic, _ = shuffled
    name = f"cx_stream_{uuid.uuid4().hex[:8]}"
    stream = read_shuffle_stream(connect_spark, topic, kafka=kafka_conf, with_metadata=True)
    query = run_available_now(stream.writeStream.format("memory").queryName(name), tmp_path)
    table = connect_spark.table(name)
    assert Counter(r.user_id for r in table.select("user_id").collect()) == EXPECTED
    assert {r._run_id for r in table.select("_run_id").distinct().collect()} != set()
    # Connect reports the source's offsets as JSON text; the metrics still read them.
    metrics = stream_metrics(query)
    assert sum(m.records for m in metrics) == ROWS
    assert {m.source for m in metrics} == {"kafka-shuffle"}


def test_per_key_work_inside_foreach_batch(connect_spark, kafka_conf, shuffled, tmp_path):
    # foreachBatch runs in the server's Python process, on a Connect session there too.
    topic, _ = shuffled
    out = str(tmp_path / "per-key")
    stream = read_shuffle_stream(connect_spark, topic, kafka=kafka_conf)
    run_available_now(stream.writeStream.foreachBatch(PerKeyToParquet(out)), tmp_path)
    per_user = connect_spark.read.parquet(out).groupBy("user_id").sum("n")
    assert counts(per_user, "sum(n)") == EXPECTED


class PerKeyToParquet:
    def __init__(self, path):
        self.path = path

    def __call__(self, batch, batch_id):
        counted = apply_per_key(batch, "user_id", count_per_user, "user_id string, n long")
        counted.write.mode("append").parquet(self.path)


def test_sources_by_name_queue_and_expiry(connect_spark, kafka_conf, shuffled, tmp_path):
    topic, first = shuffled
    register_data_sources(connect_spark)
    register_data_sources(connect_spark)  # once per session: a second call changes nothing
    by_name = (
        connect_spark.read.format("kafka-shuffle")
        .option("kafka.bootstrap.servers", kafka_conf["bootstrap.servers"])
        .option("topic", topic)
        .load()
    )
    assert by_name.count() == ROWS

    plain, group = f"cx-q-{uuid.uuid4().hex[:8]}", f"cx-qg-{uuid.uuid4().hex[:8]}"
    KafkaClient(kafka_conf).ensure_topic(plain, partitions=2)
    producer = Producer(kafka_conf)
    for i in range(40):
        producer.produce(plain, key=f"k{i}", value=str(i), partition=i % 2)
    assert producer.flush(30) == 0
    records = (
        connect_spark.read.format("kafka-records")
        .option("kafka.bootstrap.servers", kafka_conf["bootstrap.servers"])
        .option("subscribe", plain)
        .load()
    )
    assert sorted(int(r.value) for r in records.select("value").collect()) == list(range(40))

    out = tmp_path / "queue-out"
    result = process_queue(
        connect_spark,
        plain,
        group,
        doubled,
        "id long, doubled long",
        kafka=kafka_conf,
        output=str(out),
        scale=QueueScale(tasks=2),
        stop=QueueStop(idle_timeout=3),
    )
    assert result.accepted == 40 and result.rejected == 0
    output = read_queue_output(connect_spark, str(out))
    assert sorted((r.id, r.doubled) for r in output.collect()) == [(i, 2 * i) for i in range(40)]

    # A second run of the window supersedes the first, which expiry then removes.
    write_shuffle(rows(connect_spark, 50), spec(topic), kafka=kafka_conf, window="d1")
    expired = expire_shuffle(topic, kafka=kafka_conf, min_age=dt.timedelta(0))
    assert expired.runs_expired == [first.run_id]
    assert read_shuffle(connect_spark, topic, kafka=kafka_conf).count() == 50


def doubled(table):
    ids = [int(v) for v in table.column("value").to_pylist()]
    return pa.table({"id": ids, "doubled": [2 * i for i in ids]})


def test_jvm_read_path_on_a_server_with_the_jar(connect_spark, kafka_conf, tmp_path):
    # A Connect server given the jars at start (the `connect_spark` fixture's local server
    # has them in spark.jars, as `scripts/dev connect start` gives them; the session adds
    # them again with ADD JAR, as a server without them would) and the catalog
    # settings of jvm_spark_conf: "auto" reads and streams on the server's JVM, Spark plans
    # grouping by the key without an Exchange, and SQL over the catalog table needs nothing
    # from this side.
    from orchestration.shuffle import jvm_available
    from orchestration.shuffle.spark.session import explain_text
    from tests.conftest import jvm_read_off, jvm_read_on

    # Its own shuffle: an earlier test supersedes the module's with fewer rows.
    topic = f"cx-jvm-{uuid.uuid4().hex[:10]}"
    write_shuffle(rows(connect_spark), spec(topic), kafka=kafka_conf, window="d1")
    assert not jvm_available(connect_spark)
    keys = jvm_read_on(connect_spark, kafka_conf)
    try:
        assert jvm_available(connect_spark)
        jvm = read_shuffle(connect_spark, topic, kafka=kafka_conf, parallelism=None)
        assert "kafka-shuffle topic=" in explain_text(jvm)
        py = read_shuffle(connect_spark, topic, kafka=kafka_conf, engine="python")
        assert sorted(map(tuple, jvm.collect())) == sorted(map(tuple, py.collect()))
        grouped = jvm.groupBy("user_id").count()
        assert "Exchange" not in explain_text(grouped)
        assert counts(grouped, "count") == EXPECTED
        sql = connect_spark.sql(f"SELECT user_id, count(*) AS n FROM shuffle.`{topic}` GROUP BY 1")
        assert counts(sql) == EXPECTED
        # apply_per_key runs inside the reader on the JVM read too.
        per_key = apply_per_key(jvm, "user_id", count_per_user, "user_id string, n long")
        assert counts(per_key) == EXPECTED
        # Plain records of the shuffle's topic: planned here, read on the server's JVM.
        options = {"subscribe": topic, "kafka.bootstrap.servers": kafka_conf["bootstrap.servers"]}
        records = read_records(connect_spark, options)
        assert "kafka-records ranges=" in explain_text(records)
        by_name = read_records(connect_spark, options, engine="python")
        assert records.count() == by_name.count() > 0
        # A stream on the server's JVM: the rows and metrics the Python source gives.
        name = f"cx_jvm_stream_{uuid.uuid4().hex[:8]}"
        stream = read_shuffle_stream(connect_spark, topic, kafka=kafka_conf)
        query = run_available_now(stream.writeStream.format("memory").queryName(name), tmp_path)
        got = connect_spark.table(name).select("user_id").collect()
        assert Counter(r.user_id for r in got) == EXPECTED
        assert sum(m.records for m in stream_metrics(query)) == ROWS
        sources = {s.description for p in query.recentProgress for s in p.sources}
        assert sources and all("kafka-shuffle-jvm" in d for d in sources)
    finally:
        jvm_read_off(connect_spark, keys)
    assert not jvm_available(connect_spark)
