"""The driver's lent consumers (``KafkaClient.lent_consumer``) on the real broker: a short
read borrows an idle consumer instead of connecting anew, and one that failed is closed,
never lent again."""

import time

import pytest

from orchestration.shuffle import KafkaClient
from orchestration.shuffle.errors import ShuffleError

pytestmark = pytest.mark.integration


def test_a_consumer_is_lent_again_after_a_read_and_not_after_a_failure(kafka_conf, unique):
    kafka = KafkaClient(kafka_conf)
    topic = unique("lent")
    kafka.ensure_topic(topic, 2)
    with kafka.lent_consumer() as first:
        assert len(kafka.end_offsets(topic, 2)) == 2  # lends another: this one is out
    with kafka.lent_consumer() as again:
        assert again is first
        with kafka.lent_consumer() as other:  # lent at the same time: not the same one
            assert other is not first
    with pytest.raises(RuntimeError), kafka.lent_consumer() as failed:
        raise RuntimeError("a read that failed")
    with kafka.lent_consumer() as after, kafka.lent_consumer() as second:
        assert failed not in (after, second)


def test_offsets_of_a_missing_topic_are_still_an_error_naming_it(kafka_conf, unique):
    kafka = KafkaClient(kafka_conf)
    missing = unique("lent-missing")
    started = time.monotonic()
    with pytest.raises(ShuffleError, match=missing):
        kafka.end_offsets(missing, 1)
    assert time.monotonic() - started < 30


def test_an_idle_consumer_is_closed_when_it_expires_without_another_lend(
    kafka_conf, unique, monkeypatch
):
    # Left idle, a consumer keeps its connections (and, once the cluster is gone, logs each
    # reconnection): it is closed once it expires, with nothing else lent meanwhile.
    from orchestration.shuffle.kafka import client

    monkeypatch.setattr(client, "IDLE_CONSUMER_S", 0.4)
    kafka = KafkaClient({**kafka_conf, "client.id": unique("lent-idle")})  # a pool of its own
    with kafka.lent_consumer() as c:
        c.list_topics(timeout=10)
    # Expired after 0.4 s; closed within the reaper's next look (at most 5 s apart).
    time.sleep(6)
    with pytest.raises(RuntimeError, match="closed"):
        c.list_topics(timeout=1)
    with kafka.lent_consumer() as again:
        assert again is not c
