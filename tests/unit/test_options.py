import datetime as dt

import pytest

from orchestration.shuffle.core.options import Options, kafka_to_options
from orchestration.shuffle.core.reader import ReadOptions
from orchestration.shuffle.core.stream import StreamOptions
from orchestration.shuffle.errors import ShuffleError, ShuffleOptionError
from orchestration.shuffle.kafka.client import KafkaClient


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
        {"topic": "t", "kafka.bootstrap.servers": "h:1", "Kafka.sasl.mechanism": "PLAIN"}, "src"
    )
    assert opts.kafka() == {"bootstrap.servers": "h:1", "sasl.mechanism": "PLAIN"}
    conf = {"bootstrap.servers": "h:1", "linger.ms": 5}
    assert Options(kafka_to_options(conf), "src").kafka() == {
        "bootstrap.servers": "h:1",
        "linger.ms": "5",
    }


def test_kafka_options_require_bootstrap():
    with pytest.raises(ShuffleOptionError, match="src: option 'kafka.bootstrap.servers'"):
        Options({"topic": "t"}, "src").kafka()


def test_offsets():
    opts = Options({"s": "earliest", "j": '{"0": 5, "2": 7}', "bad": "yesterday"}, "src")
    assert opts.offsets("s", "latest") == "earliest"
    assert opts.offsets("missing", "latest") == "latest"
    assert opts.offsets("j", "latest") == {0: 5, 2: 7}
    with pytest.raises(ShuffleOptionError, match="'bad'"):
        opts.offsets("bad", "latest")


def test_typed_options_name_the_option_and_the_source():
    opts = Options({"n": "12", "neg": "-1", "x": "twelve", "f": "TRUE", "l": '["a", 1]'}, "src")
    assert opts.integer("n") == 12
    assert opts.integer("missing", default=3) == 3
    with pytest.raises(ShuffleOptionError, match="src: option 'x' must be an integer"):
        opts.integer("x")
    with pytest.raises(ShuffleOptionError, match="'neg' must be an integer >= 0"):
        opts.integer("neg")
    with pytest.raises(ShuffleOptionError, match="src: option 'topic' is required"):
        opts.text("topic", required=True)
    assert opts.flag("f") is True and opts.flag("missing") is False
    with pytest.raises(ShuffleOptionError, match="'n' must be 'true' or 'false'"):
        opts.flag("n")
    assert opts.json_list("l") == ["a", "1"]
    with pytest.raises(ShuffleOptionError, match="JSON list"):
        opts.json_list("n")


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
        event_time_start=1356998400000000,
        parallelism="auto",
    )
    with_metadata = ReadOptions(event_time_end=-5, parallelism=3, with_metadata=True)
    for o in (options, with_metadata, ReadOptions()):
        assert ReadOptions.parse(Options(o.to_options(), "src")) == o
    assert ReadOptions().to_options() == {}
    # A plan fixes the runs and the splits: what goes along with it applies to rows.
    assert options.row_options() == ReadOptions(event_time_start=1356998400000000)


def test_read_options_errors_name_the_option():
    with pytest.raises(ShuffleOptionError, match="src: option 'parallelism' must be"):
        ReadOptions.parse(Options({"parallelism": "0"}, "src"))
    with pytest.raises(ShuffleOptionError, match="src: option 'windows' must be a JSON list"):
        ReadOptions.parse(Options({"windows": "w1"}, "src"))


def test_stream_options_round_trip_and_errors():
    options = StreamOptions(
        starting_offsets="latest", starting_timestamp_ms=12, max_rows_per_trigger=100
    )
    for o in (options, StreamOptions(max_runs_per_trigger=1), StreamOptions()):
        assert StreamOptions.parse(Options(o.to_options(), "src")) == o
    with pytest.raises(ShuffleOptionError, match="src: option 'startingOffsets' must be"):
        StreamOptions.parse(Options({"startingOffsets": "yesterday"}, "src"))
    with pytest.raises(ShuffleOptionError, match="'maxRunsPerTrigger' must be an integer >= 1"):
        StreamOptions.parse(Options({"maxRunsPerTrigger": "0"}, "src"))
