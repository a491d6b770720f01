"""Options a data source does not take are refused by name on the real broker and Spark:
misspelled ones (naming the nearest), Spark's kafka source's that a source does not
implement, the renamed microsecond ones, batch options on streams and stream options on
batches, for kafka-shuffle and kafka-records, batch and stream, on the Python sources and
on the JVM ones (``kafka-shuffle-jvm``, the catalog's tables, ``kafka-records-jvm``). Each
source, kind of read and path also reads without the bad option, so a refusal is the
option's doing."""

import json

import pytest

from orchestration.shuffle import (
    ShuffleOptionError,
    aggregate_shuffle,
    plan_shuffle_read,
    read_records,
    read_shuffle,
    register_data_sources,
    write_shuffle,
)
from tests.conftest import jvm_read_off, jvm_read_on
from tests.integration.test_records import make_topic, produce
from tests.integration.test_shuffle import rows_df, spec_for

pytestmark = pytest.mark.integration

SHUFFLE, RECORDS = "kafka-shuffle", "kafka-records"
BATCH, STREAM = "batch", "stream"

# (source, kind of read, the bad options, what the error says besides the option's name).
# The JVM sources' errors name the JVM source; their sentences are the Python ones.
CASES = [
    (SHUFFLE, BATCH, {"window": '["d1"]'}, "unknown option 'window', did you mean 'windows'?"),
    (SHUFFLE, BATCH, {"Paralelism": "2"}, "did you mean 'parallelism'?"),
    (
        SHUFFLE,
        BATCH,
        {"event_time_start": "1356998400000000"},
        "option 'event_time_start' was renamed 'event_time_start_ms'",
    ),
    (
        SHUFFLE,
        BATCH,
        {"endingOffsets": "latest"},
        "option 'endingOffsets' of Spark's kafka source is not supported: a batch read reads "
        "the runs committed when it is planned",
    ),
    (
        SHUFFLE,
        BATCH,
        {"failOnDataLoss": "false"},
        "option 'failOnDataLoss' of Spark's kafka source is not supported",
    ),
    (
        SHUFFLE,
        BATCH,
        {"maxRunsPerTrigger": "1"},
        "option 'maxRunsPerTrigger' applies to streaming reads only, not to a batch read",
    ),
    (
        SHUFFLE,
        STREAM,
        {"minOffsetsPerTrigger": "10"},
        "option 'minOffsetsPerTrigger' of Spark's kafka source is not supported: a micro-batch "
        "admits whole runs",
    ),
    (
        SHUFFLE,
        STREAM,
        {"maxOffsetsPerTrigger": "10"},
        "bound it with 'maxRunsPerTrigger' or 'maxRowsPerTrigger'",
    ),
    (SHUFFLE, STREAM, {"maxRunPerTrigger": "1"}, "did you mean 'maxRunsPerTrigger'?"),
    (
        SHUFFLE,
        STREAM,
        {"windows": '["d1"]'},
        "option 'windows' applies to batch reads only, not to a streaming read",
    ),
    (
        RECORDS,
        BATCH,
        {"startingOffset": "earliest"},
        "unknown option 'startingOffset', did you mean 'startingOffsets'?",
    ),
    (
        RECORDS,
        BATCH,
        {"kafkaConsumer.pollTimeoutMs": "512"},
        "option 'kafkaConsumer.pollTimeoutMs' of Spark's kafka source is not supported",
    ),
    (
        RECORDS,
        BATCH,
        {"maxOffsetsPerTrigger": "10"},
        "option 'maxOffsetsPerTrigger' applies to streaming reads only, not to a batch read",
    ),
    (
        RECORDS,
        STREAM,
        {"maxTriggerDelay": "5m"},
        "option 'maxTriggerDelay' of Spark's kafka source is not supported",
    ),
    (
        RECORDS,
        STREAM,
        {"groupIdPrefix": "spark-kafka"},
        "option 'groupIdPrefix' of Spark's kafka source is not supported",
    ),
    (
        RECORDS,
        STREAM,
        {"endingOffsets": "latest"},
        "option 'endingOffsets' applies to batch reads only, not to a streaming read",
    ),
]


@pytest.fixture(scope="module")
def shuffle_topic(spark, kafka_conf):
    import uuid

    topic = f"opt-refusal-{uuid.uuid4().hex[:10]}"
    write_shuffle(rows_df(spark, n=200), spec_for(topic), kafka=kafka_conf, window="d1")
    return topic


@pytest.fixture(scope="module")
def records_topic(kafka_conf):
    import uuid

    topic = f"opt-refusal-records-{uuid.uuid4().hex[:10]}"
    make_topic(kafka_conf, topic, partitions=1)
    produce(kafka_conf, topic, 0, 20)
    return topic


@pytest.fixture(params=["python", "jvm"])
def path(request, spark, kafka_conf):
    """The read path: the Python sources, then the JVM ones on the same session."""
    register_data_sources(spark)
    if request.param == "python":
        yield "python"
        return
    keys = jvm_read_on(spark, kafka_conf)
    yield "jvm"
    jvm_read_off(spark, keys)


def kafka_options(kafka_conf) -> dict[str, str]:
    return {f"kafka.{k}": str(v) for k, v in kafka_conf.items()}


def run_stream(df, checkpoint) -> None:
    query = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
        error = query.exception()
        if error is not None:
            raise RuntimeError(str(error))
    finally:
        query.stop()


def read(spark, kafka_conf, path, source, mode, topic, options, checkpoint):
    """One read of ``source`` on ``path`` (``mode``: batch or stream) with ``options`` added,
    run to the end; what the JVM path reads is what ``read_shuffle`` / ``read_records`` /
    ``read_shuffle_stream`` read there (the JVM sources and the catalog's tables)."""
    if source == SHUFFLE and mode == BATCH:
        if path == "python":
            reader = spark.read.format(SHUFFLE).options(topic=topic, **kafka_options(kafka_conf))
        else:
            reader = spark.read.format("kafka-shuffle-jvm").option("topic", topic)
        return reader.options(**options).load().count()
    if source == SHUFFLE:
        if path == "python":
            reader = spark.readStream.format(SHUFFLE).options(
                topic=topic, **kafka_options(kafka_conf)
            )
            return run_stream(reader.options(**options).load(), checkpoint)
        quoted = "`" + topic + "`"
        return run_stream(
            spark.readStream.options(**options).table(f"shuffle.{quoted}"), checkpoint
        )
    given = {"subscribe": topic, "startingOffsets": "earliest", **options}
    if mode == BATCH:
        if path == "python":
            reader = spark.read.format(RECORDS).options(**kafka_options(kafka_conf), **given)
            return reader.load().count()
        return read_records(spark, {**kafka_options(kafka_conf), **given}, engine="jvm").count()
    # Streams of records stay on the Python source on either path.
    reader = spark.readStream.format(RECORDS).options(**kafka_options(kafka_conf), **given)
    return run_stream(reader.load(), checkpoint)


@pytest.mark.parametrize(
    ("source", "mode", "options", "says"),
    CASES,
    ids=[f"{s}-{m}-{next(iter(o))}" for s, m, o, _ in CASES],
)
def test_an_option_the_source_does_not_take_is_refused_by_name(
    spark, kafka_conf, shuffle_topic, records_topic, path, tmp_path, source, mode, options, says
):
    topic = shuffle_topic if source == SHUFFLE else records_topic
    with pytest.raises(Exception) as caught:
        read(spark, kafka_conf, path, source, mode, topic, options, tmp_path / "bad")
    message = str(caught.value)
    # Records batches on the JVM are planned by the Python kafka-records parser
    # (read_records): its errors name kafka-records.
    on_jvm = path == "jvm" and source == SHUFFLE
    owner = f"{source}-jvm" if on_jvm else source
    assert f"{owner}: " in message, message
    given = next(iter(options))
    by_read_records = source == RECORDS and mode == BATCH and path == "jvm"
    if not on_jvm and not by_read_records and ("unknown" in says or "renamed" in says):
        # Spark hands a Python source its option names lower-cased: an unknown option can
        # only be named so. (Declared names, suggested or refused, are spelled as declared.)
        says = says.replace(f"'{given}'", f"'{given.lower()}'")
    assert says in message, message
    assert "ShuffleOptionError" in message or isinstance(caught.value, ShuffleOptionError)


@pytest.mark.parametrize(
    ("source", "mode"), [(SHUFFLE, BATCH), (SHUFFLE, STREAM), (RECORDS, BATCH), (RECORDS, STREAM)]
)
def test_the_same_reads_without_a_bad_option_run(
    spark, kafka_conf, shuffle_topic, records_topic, path, tmp_path, source, mode
):
    topic = shuffle_topic if source == SHUFFLE else records_topic
    good = {"parallelism": "2"} if source == SHUFFLE else {"minPartitions": "2"}
    got = read(spark, kafka_conf, path, source, mode, topic, good, tmp_path / "good")
    if mode == BATCH:
        assert got == (200 if source == SHUFFLE else 20)


@pytest.fixture
def jvm(spark, kafka_conf):
    keys = jvm_read_on(spark, kafka_conf)
    yield spark
    jvm_read_off(spark, keys)


def test_the_jvm_sources_refuse_what_they_do_not_take(
    jvm, kafka_conf, shuffle_topic, records_topic
):
    spark = jvm
    # A path given to load() (Spark passes it as option 'path').
    with pytest.raises(Exception, match=r"kafka-shuffle-jvm: option 'path' is not supported"):
        spark.read.format("kafka-shuffle-jvm").option("topic", shuffle_topic).load("/x").count()
    # A misspelled 'topic' is named as such, not reported missing.
    with pytest.raises(Exception, match=r"unknown option 'topci', did you mean 'topic'\?"):
        spark.read.format("kafka-shuffle-jvm").option("topci", shuffle_topic).load().count()
    # What only the Python reader does.
    with pytest.raises(Exception, match=r"kafka-shuffle-jvm: option 'aggregate' is not"):
        reader = spark.read.format("kafka-shuffle-jvm").option("topic", shuffle_topic)
        reader.option("aggregate", "{}").load().count()
    # kafka-records-jvm reads the ranges read_records planned; the planning options are
    # read_records'.
    ranges = json.dumps([[records_topic, 0, 0, 20]])
    reader = spark.read.format("kafka-records-jvm").options(**kafka_options(kafka_conf))
    assert reader.option("ranges", ranges).load().count() == 20
    reader = spark.read.format("kafka-records-jvm").options(**kafka_options(kafka_conf))
    with pytest.raises(
        Exception,
        match=r"kafka-records-jvm: option 'startingOffsets' is not supported: "
        r"read_records\(spark, options\) takes it",
    ):
        reader.options(ranges=ranges, startingOffsets="earliest").load().count()


def test_the_python_sources_refuse_a_path(spark, kafka_conf, shuffle_topic, records_topic):
    register_data_sources(spark)
    reader = spark.read.format(SHUFFLE).options(topic=shuffle_topic, **kafka_options(kafka_conf))
    with pytest.raises(Exception, match=r"kafka-shuffle: option 'path' is not supported"):
        reader.load("/x").count()
    reader = spark.read.format(RECORDS).options(
        subscribe=records_topic, **kafka_options(kafka_conf)
    )
    with pytest.raises(Exception, match=r"kafka-records: option 'paths' is not supported"):
        reader.load(["/x", "/y"]).count()


def test_the_public_functions_refuse_an_unknown_keyword(spark, kafka_conf, shuffle_topic, path):
    # Caught before anything is read, whichever path the session takes.
    for function, extra in (
        (read_shuffle, {}),
        (plan_shuffle_read, {}),
        (aggregate_shuffle, {"aggregations": {"n": ("*", "count")}}),
    ):
        with pytest.raises(
            ShuffleOptionError,
            match=rf"{function.__name__}: unexpected keyword argument 'window', did you mean "
            r"'windows'\?",
        ):
            function(spark, shuffle_topic, kafka=kafka_conf, window=["d1"], **extra)
    with pytest.raises(ShuffleOptionError, match=r"did you mean 'with_metadata'\?"):
        read_shuffle(spark, shuffle_topic, kafka=kafka_conf, with_metdata=True)
    # The same read with the keyword spelled right reads the window.
    assert read_shuffle(spark, shuffle_topic, kafka=kafka_conf, windows=["d1"]).count() == 200
