"""What reading a partition's offsets does after each error, as a leader dies and a new one
is elected (``KafkaClient.end_offsets``; the broker-fault tests run it against a real
cluster)."""

import pytest
from confluent_kafka import KafkaError

from orchestration.shuffle.kafka.client import offsets_retry

DEADLINE, FAILOVER = 8.0, 30.0


def step(code, now, leader_lost=False):
    return offsets_retry(code, now, deadline=DEADLINE, failover=FAILOVER, leader_lost=leader_lost)


@pytest.mark.parametrize("code", [KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART])
def test_a_partition_unknown_for_a_moment_is_asked_again_until_the_short_deadline(code):
    assert step(code, 1.0) == "wait"
    assert step(code, DEADLINE + 1) == "raise"  # a partition that does not exist


def test_a_partition_a_new_consumer_does_not_know_yet_after_its_leader_died_is_asked_again():
    # The soak's case: the dead leader's timeout used up the short deadline, the consumer was
    # replaced, and the new one did not have the topic's metadata yet.
    assert step(KafkaError._UNKNOWN_PARTITION, DEADLINE + 1, leader_lost=True) == "wait"
    assert step(KafkaError.UNKNOWN_TOPIC_OR_PART, DEADLINE + 1, leader_lost=True) == "wait"
    assert step(KafkaError._UNKNOWN_PARTITION, FAILOVER + 1, leader_lost=True) == "raise"


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.OFFSET_NOT_AVAILABLE,
    ],
)
def test_a_moving_leadership_is_waited_for_until_failover(code):
    assert step(code, DEADLINE + 1) == "wait"
    assert step(code, FAILOVER + 1) == "raise"


@pytest.mark.parametrize(
    "code", [KafkaError._TIMED_OUT, KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT]
)
def test_a_leader_that_does_not_answer_is_asked_through_a_new_consumer_until_failover(code):
    assert step(code, 1.0) == "reconnect"
    assert step(code, FAILOVER + 1) == "raise"


@pytest.mark.parametrize("code", [KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._SSL, None])
def test_what_waiting_cannot_change_is_raised_at_once(code):
    assert step(code, 0.0) == "raise"
    assert step(code, 0.0, leader_lost=True) == "raise"
