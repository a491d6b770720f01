import pytest

from orchestration.shuffle.core.options import Options, kafka_to_options
from orchestration.shuffle.errors import ShuffleError, ShuffleOptionError
from orchestration.shuffle.kafka.client import client_config


def test_client_config_requires_bootstrap():
    with pytest.raises(ShuffleOptionError, match="bootstrap.servers"):
        client_config({})
    with pytest.raises(ShuffleError):
        client_config(None)


def test_client_config_copies_and_overrides():
    user = {"bootstrap.servers": "h:1", "security.protocol": "SSL"}
    conf = client_config(user, **{"group.id": "g"})
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
