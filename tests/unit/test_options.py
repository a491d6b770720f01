import datetime as dt
import re

import pytest

from orchestration.shuffle import KafkaClient, ShuffleError, ShuffleOptionError
from orchestration.shuffle.core.optiondefs import (
    BATCH,
    BOOLEAN,
    CHOICE,
    INTEGER,
    JSON_LIST,
    RECORDS,
    RECORDS_JVM,
    SHUFFLE,
    SHUFFLE_JVM,
    STREAM,
    STRING,
    TABLES,
    OptionDef,
    OptionTable,
    check_keywords,
    distance,
    nearest,
)
from orchestration.shuffle.core.options import Options, kafka_to_options
from orchestration.shuffle.core.planner import ReadOptions
from orchestration.shuffle.core.records import parse_options
from orchestration.shuffle.core.stream import StreamOptions

K = {"kafka.bootstrap.servers": "h:1"}

TEST = OptionTable(
    "src",
    (
        OptionDef("topic", STRING, "t", required=True),
        OptionDef("n", INTEGER, "n"),
        OptionDef("neg", INTEGER, "neg", minimum=0),
        OptionDef("x", INTEGER, "x"),
        OptionDef("three", INTEGER, "3", default="3", minimum=1),
        OptionDef("f", BOOLEAN, "f", default="false"),
        OptionDef("l", JSON_LIST, "l"),
        OptionDef("c", CHOICE, "c", default="a", choices=("a", "b"), modes=(STREAM,)),
    ),
)


def test_client_config_requires_bootstrap():
    with pytest.raises(ShuffleOptionError, match="bootstrap.servers"):
        KafkaClient({})
    with pytest.raises(ShuffleError):
        KafkaClient.of(None)


def test_client_config_copies_and_overrides():
    user = {"bootstrap.servers": "h:1", "security.protocol": "SSL"}
    conf = KafkaClient(user).config(**{"group.id": "g"})
    assert conf["group.id"] == "g" and conf["security.protocol"] == "SSL"
    assert "group.id" not in user
    assert conf["socket.connection.setup.timeout.ms"] > 0


def test_kafka_options_strip_prefix_and_round_trip():
    opts = Options(
        {"topic": "t", "kafka.bootstrap.servers": "h:1", "Kafka.sasl.mechanism": "PLAIN"}, TEST
    )
    assert opts.kafka() == {"bootstrap.servers": "h:1", "sasl.mechanism": "PLAIN"}
    conf = {"bootstrap.servers": "h:1", "linger.ms": 5}
    assert Options(kafka_to_options(conf), TEST).kafka() == {
        "bootstrap.servers": "h:1",
        "linger.ms": "5",
    }


def test_kafka_options_require_bootstrap():
    with pytest.raises(ShuffleOptionError, match="src: option 'kafka.bootstrap.servers'"):
        Options({"topic": "t"}, TEST).kafka()


def test_typed_options_name_the_option_and_the_source():
    opts = Options({"n": "12", "neg": "-1", "x": "twelve", "f": "TRUE", "l": '["a", 1]'}, TEST)
    assert opts.integer("n") == 12
    assert opts.integer("three") == 3  # the declared default
    with pytest.raises(ShuffleOptionError, match="src: option 'x' must be an integer"):
        opts.integer("x")
    with pytest.raises(ShuffleOptionError, match="'neg' must be an integer >= 0"):
        opts.integer("neg")
    with pytest.raises(ShuffleOptionError, match="src: option 'topic' is required"):
        opts.require("topic")
    assert opts.flag("f") is True
    assert Options({}, TEST).flag("f") is False
    assert opts.json_list("l") == ["a", "1"]
    assert opts.choice("c") == "a"
    with pytest.raises(ShuffleOptionError, match="'c' must be 'a' or 'b', got 'z'"):
        Options({"C": "Z"}, TEST).choice("c")


def test_the_parsers_read_declared_options_only_as_their_declared_type():
    opts = Options({}, TEST)
    with pytest.raises(KeyError, match="'missing' is not declared"):
        opts.integer("missing")
    with pytest.raises(TypeError, match="'f' is declared boolean"):
        opts.integer("f")


def test_distance_counts_edits_and_swaps_case_insensitively():
    assert distance("window", "windows") == 1
    assert distance("Topci", "topic") == 1  # two letters swapped
    assert distance("withMetadata", "with_metadata") == 1
    assert distance("", "abc") == 3
    assert distance("kitten", "sitting") == 3


def test_nearest_is_within_a_third_of_the_name_and_first_on_a_tie():
    assert nearest("window", ["topic", "windows", "runs"]) == "windows"
    assert nearest("paralelism", ["parallelism"]) == "parallelism"
    assert nearest("rows", ["runs"]) is None  # 2 edits of a 4-letter name
    assert nearest("ab", ["ac", "ad"]) == "ac"
    assert nearest("numPartitions", ["topic", "windows"]) is None


# (table, options, mode, what the error says); every one a ShuffleOptionError.
REFUSED = [
    (
        SHUFFLE,
        {"window": "[]"},
        BATCH,
        "kafka-shuffle: unknown option 'window', did you mean 'windows'?",
    ),
    (
        SHUFFLE,
        {"Paralelism": "2"},
        STREAM,
        "unknown option 'Paralelism', did you mean 'parallelism'?",
    ),
    (
        SHUFFLE,
        {"minOffsetsPerTrigger": "5"},
        STREAM,
        "kafka-shuffle: option 'minOffsetsPerTrigger' of Spark's kafka source is not supported: "
        "a micro-batch admits whole runs: bound it with 'maxRunsPerTrigger' or "
        "'maxRowsPerTrigger'",
    ),
    (SHUFFLE, {"maxoffsetspertrigger": "5"}, None, "'maxOffsetsPerTrigger' of Spark's kafka"),
    (
        SHUFFLE,
        {"subscribe": "t"},
        BATCH,
        "'subscribe' of Spark's kafka source is not supported: a read names one shuffle, with "
        "option 'topic'",
    ),
    (SHUFFLE, {"failOnDataLoss": "false"}, BATCH, "'failOnDataLoss' of Spark's kafka source"),
    (SHUFFLE, {"groupIdPrefix": "g"}, STREAM, "'groupIdPrefix' of Spark's kafka source"),
    (SHUFFLE, {"path": "/x"}, BATCH, "option 'path' is not supported: load() takes no path"),
    (
        SHUFFLE,
        {"windows": "[]"},
        STREAM,
        "option 'windows' applies to batch reads only, not to a streaming read",
    ),
    (SHUFFLE, {"runs": "[]"}, STREAM, "'runs' applies to batch reads only"),
    (
        SHUFFLE,
        {"startingOffsets": "latest"},
        BATCH,
        "option 'startingOffsets' applies to streaming reads only, not to a batch read",
    ),
    (
        SHUFFLE,
        {"maxRowsPerTrigger": "5"},
        BATCH,
        "'maxRowsPerTrigger' applies to streaming reads only",
    ),
    (
        SHUFFLE,
        {"bootstrap.servers": "h:1"},
        BATCH,
        "a Kafka client setting is given as 'kafka.bootstrap.servers'",
    ),
    (SHUFFLE, {"zzz": "1"}, BATCH, "unknown option 'zzz' (options: topic, windows, runs,"),
    (
        RECORDS,
        {"subscribe": "t", "startingOffset": "earliest"},
        BATCH,
        "kafka-records: unknown option 'startingOffset', did you mean 'startingOffsets'?",
    ),
    (
        RECORDS,
        {"subscribe": "t", "maxTriggerDelay": "5m"},
        STREAM,
        "kafka-records: option 'maxTriggerDelay' of Spark's kafka source is not supported",
    ),
    (
        RECORDS,
        {"subscribe": "t", "minOffsetsPerTrigger": "5"},
        STREAM,
        "'minOffsetsPerTrigger' of Spark's kafka source",
    ),
    (
        RECORDS,
        {"subscribe": "t", "kafkaConsumer.pollTimeoutMs": "5"},
        BATCH,
        "'kafkaConsumer.pollTimeoutMs' of Spark's kafka source is not supported: Kafka requests "
        "use the client's own timeouts",
    ),
    (
        RECORDS,
        {"subscribe": "t", "endingTimestamp": "5"},
        STREAM,
        "'endingTimestamp' applies to batch reads only",
    ),
    (RECORDS, {"subscribe": "t", "paths": "[]"}, BATCH, "option 'paths' is not supported"),
    (
        SHUFFLE_JVM,
        {"topic": "t", "per_key": "x"},
        BATCH,
        "kafka-shuffle-jvm: option 'per_key' is not supported: it runs in the Python reader",
    ),
    (
        SHUFFLE_JVM,
        {"windows": "[]"},
        STREAM,
        "kafka-shuffle-jvm: option 'windows' applies to batch reads only",
    ),
    (
        SHUFFLE_JVM,
        {"catalogue": "shuffle"},
        BATCH,
        "unknown option 'catalogue', did you mean 'catalog'?",
    ),
    (
        RECORDS_JVM,
        {"ranges": "[]", "subscribe": "t"},
        BATCH,
        "kafka-records-jvm: option 'subscribe' is not supported: read_records(spark, options) "
        "takes it",
    ),
]


@pytest.mark.parametrize(("table", "options", "mode", "message"), REFUSED)
def test_each_unknown_unsupported_or_misplaced_option_is_refused_by_name(
    table, options, mode, message
):
    with pytest.raises(ShuffleOptionError) as caught:
        table.check(options, mode)
    assert message in str(caught.value)
    # The parser refuses them as it starts, in any case.
    with pytest.raises(ShuffleOptionError, match="(?i)" + re.escape(list(options)[-1])):
        Options({**K, **options}, table, mode)


def test_every_problem_is_named_in_one_error_in_name_order():
    with pytest.raises(ShuffleOptionError) as caught:
        SHUFFLE.check({"window": "[]", "assign": "{}", "topic": "t", "kafka.x": "1"}, BATCH)
    assert str(caught.value) == (
        "kafka-shuffle: option 'assign' of Spark's kafka source is not supported: a read names "
        "one shuffle, with option 'topic'; unknown option 'window', did you mean 'windows'?"
    )


def test_kafka_settings_and_declared_options_pass_in_any_case():
    SHUFFLE.check({"TOPIC": "t", "kafka.anything.at.all": "1", "Windows": "[]"}, BATCH)
    RECORDS.check({"subscribe": "t", "MAXOFFSETSPERTRIGGER": "5"}, STREAM)


def test_what_the_library_writes_is_declared_for_its_mode():
    stream = StreamOptions(starting_offsets="latest", max_runs_per_trigger=2)
    SHUFFLE.check({**stream.to_options(), "parallelism": "auto", "with_metadata": "true"}, STREAM)
    read = ReadOptions(windows=("w",), runs=("r",), event_time_start_us=1, event_time_end_us=2)
    batch = {"topic": "t", "layout": "{}", "plan": "[]", "aggregate": "{}", **read.to_options()}
    SHUFFLE.check({**batch, "per_key": "", "per_key_schema": "", "pass_rows": "1"}, BATCH)
    SHUFFLE_JVM.check({"topic": "t", "catalog": "c", "layout": "{}", "plan": "[]"}, BATCH)
    SHUFFLE_JVM.check({**stream.to_options(), "parallelism": "2"}, STREAM)
    RECORDS_JVM.check({"ranges": "[]", "includeHeaders": "true", "failOnDataLoss": "f"}, BATCH)


def test_every_declared_default_parses_as_its_type():
    for table in TABLES.values():
        opts = Options({}, table)
        for d in table.options:
            if d.default is None:
                continue
            reader = {
                INTEGER: opts.integer,
                BOOLEAN: opts.flag,
                CHOICE: opts.choice,
            }.get(d.type, opts.text)
            assert reader(d.name) is not None, (table.source, d.name)


def test_tables_do_not_declare_and_refuse_one_name():
    for table in TABLES.values():
        names = [d.name.lower() for d in table.options]
        refused = [r.name.lower() for r in (*table.refused, *table.renamed)]
        assert len(set(names)) == len(names), table.source
        assert not set(names) & set(refused), table.source


def test_records_defaults_follow_the_kind_of_read():
    assert parse_options({**K, "subscribe": "t"}, streaming=False).starting.kind == "earliest"
    assert parse_options({**K, "subscribe": "t"}, streaming=True).starting.kind == "latest"


def test_read_options_round_trip_through_the_data_source_options():
    day = dt.datetime(2013, 1, 1, tzinfo=dt.UTC)
    options = ReadOptions.select(
        windows=iter(["w1", "w2"]),
        runs=["r1"],
        event_time_range=(day, None),
        parallelism="auto",
    )
    assert options == ReadOptions(
        windows=("w1", "w2"),
        runs=("r1",),
        event_time_start_us=1356998400000000,
        parallelism="auto",
    )
    with_metadata = ReadOptions(event_time_end_us=-5, parallelism=3, with_metadata=True)
    for o in (options, with_metadata, ReadOptions()):
        assert ReadOptions.parse(Options(o.to_options(), SHUFFLE)) == o
    assert ReadOptions().to_options() == {}
    # A plan fixes the runs and the splits: what goes along with it applies to rows.
    assert options.row_options() == ReadOptions(event_time_start_us=1356998400000000)
    assert options.to_options()["event_time_start_ms"] == "1356998400000"


def test_event_times_are_epoch_milliseconds_with_microseconds_exact():
    for micros, text in (
        (1356998400000000, "1356998400000"),
        (1356998400000001, "1356998400000.001"),
        (-1500, "-1.500"),
        (-1, "-0.001"),
        (0, "0"),
        (-(2**63), "-9223372036854775.808"),
        (2**63 - 1, "9223372036854775.807"),
    ):
        options = ReadOptions(event_time_start_us=micros)
        assert options.to_options() == {"event_time_start_ms": text}
        assert ReadOptions.parse(Options(options.to_options(), SHUFFLE)) == options
    parse = Options({"event_time_end_ms": " 12.5\t"}, SHUFFLE).millis_as_micros
    assert parse("event_time_end_ms") == 12_500
    for bad in ("1e3", "1.2345", "12.", ".5", "9223372036854775.808", "x", "1_000"):
        with pytest.raises(ShuffleOptionError, match="must be epoch milliseconds"):
            Options({"event_time_end_ms": bad}, SHUFFLE).millis_as_micros("event_time_end_ms")
    day = dt.datetime(2013, 1, 1, 0, 0, 0, 250, tzinfo=dt.UTC)
    selected = ReadOptions.select(event_time_range=(None, day))
    assert selected.to_options() == {
        "event_time_end_ms": "1356998400000.250",
        "parallelism": "auto",
    }


def test_the_old_microsecond_options_are_refused_naming_the_new_ones():
    for table in (SHUFFLE, SHUFFLE_JVM):
        with pytest.raises(ShuffleOptionError) as caught:
            Options({"event_time_start": "1", "EVENT_TIME_END": "2"}, table)
        assert str(caught.value) == (
            f"{table.source}: option 'EVENT_TIME_END' was renamed 'event_time_end_ms' (epoch "
            "milliseconds, as Spark's startingTimestamp; the old option took microseconds); "
            "option 'event_time_start' was renamed 'event_time_start_ms' (epoch milliseconds, "
            "as Spark's startingTimestamp; the old option took microseconds)"
        )


def test_read_selection_keywords_are_checked():
    with pytest.raises(
        ShuffleOptionError,
        match=r"ReadOptions.select: unexpected keyword argument 'window', did you mean 'windows'\?",
    ):
        ReadOptions.select(window=["2024-03-09"])  # type: ignore[call-arg]
    with pytest.raises(ShuffleOptionError, match="'colour' \\(it takes: a, b\\)"):
        check_keywords("f", {"a": 1, "colour": 2}, ["a", "b"])


def test_read_options_errors_name_the_option():
    with pytest.raises(ShuffleOptionError, match="src: option 'parallelism' must be"):
        ReadOptions.parse(Options({"parallelism": "0"}, OptionTable("src", SHUFFLE.options)))
    with pytest.raises(ShuffleOptionError, match="kafka-shuffle: option 'windows' must be a JSON"):
        ReadOptions.parse(Options({"windows": "w1"}, SHUFFLE))


def test_stream_options_round_trip_and_errors():
    options = StreamOptions(
        starting_offsets="latest", starting_timestamp_ms=12, max_rows_per_trigger=100
    )
    for o in (options, StreamOptions(max_runs_per_trigger=1), StreamOptions()):
        assert StreamOptions.parse(Options(o.to_options(), SHUFFLE)) == o
    with pytest.raises(ShuffleOptionError, match="shuffle: option 'startingOffsets' must be"):
        StreamOptions.parse(Options({"startingOffsets": "yesterday"}, SHUFFLE))
    with pytest.raises(ShuffleOptionError, match="'maxRunsPerTrigger' must be an integer >= 1"):
        StreamOptions.parse(Options({"maxRunsPerTrigger": "0"}, SHUFFLE))


def test_the_jvm_sources_have_the_option_tables_as_declared():
    from devstack.optiondocs import JAVA, java_tables

    # `python -m devstack.optiondocs --write` writes them again from the definitions. The docs
    # site's tables are written from them when it is built (tests/unit/test_docs.py).
    assert JAVA.read_text() == java_tables()
