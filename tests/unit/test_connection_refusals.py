"""Why a client cannot reach the cluster: a refusal waiting cannot cure is reported at once;
a broker that is stopping or starting is not mistaken for one."""

from confluent_kafka import KafkaError, KafkaException

from orchestration.shuffle.kafka.client import connection_refusal, translate

THREE = {"bootstrap.servers": "127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096"}


def closed(server: str) -> str:
    return (
        f"{server}/bootstrap: Disconnected while requesting ApiVersion: might be caused by "
        "incorrect security.protocol configuration (connecting to a SSL listener?)"
    )


def test_a_tls_listener_is_told_when_every_bootstrap_server_closes_at_the_first_request():
    lines = [closed(s) for s in THREE["bootstrap.servers"].split(",")]
    assert "needs security.protocol SSL or SASL_SSL" in connection_refusal([], lines, THREE)
    one = {"bootstrap.servers": "127.0.0.1:9092"}
    assert "needs security.protocol" in connection_refusal([], [closed("127.0.0.1:9092")], one)


def test_one_broker_of_three_closing_at_the_first_request_is_a_broker_restarting():
    # Killed or starting: the client goes on to the others instead of giving up.
    assert connection_refusal([], [closed("127.0.0.1:9094")], THREE) is None
    assert connection_refusal([], [], THREE) is None


def test_an_error_that_names_only_its_request_is_told_by_its_own_name():
    # A new cluster's first group request answers "ConsumerGroupDescribe: " and no more.
    bare = KafkaException(KafkaError(KafkaError.NOT_COORDINATOR, "ConsumerGroupDescribe: "))
    said = str(translate(bare, "describing group 'g'"))
    assert said == "describing group 'g': ConsumerGroupDescribe: NOT_COORDINATOR"
    told = KafkaException(KafkaError(KafkaError.NOT_COORDINATOR, "coordinator moved"))
    assert str(translate(told, "describing group 'g'")) == "describing group 'g': coordinator moved"
