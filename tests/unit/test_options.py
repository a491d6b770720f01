import pytest

from orchestration.shuffle._kafka import client_config
from orchestration.shuffle.errors import ShuffleError, ShuffleOptionError
from orchestration.shuffle.records import _parse_offsets, kafka_options


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


def test_kafka_options_strip_prefix():
    opts = {"topic": "t", "kafka.bootstrap.servers": "h:1", "Kafka.sasl.mechanism": "PLAIN"}
    assert kafka_options(opts) == {"bootstrap.servers": "h:1", "sasl.mechanism": "PLAIN"}


def test_parse_offsets():
    assert _parse_offsets("earliest", "startingOffsets") == "earliest"
    assert _parse_offsets('{"0": 5, "2": 7}', "startingOffsets") == {0: 5, 2: 7}
    with pytest.raises(ShuffleOptionError, match="endingOffsets"):
        _parse_offsets("yesterday", "endingOffsets")
