"""kafka-records options, positions, rate limits and splits (pure)."""

import pytest

from orchestration.shuffle import ShuffleOptionError
from orchestration.shuffle.core.records import (
    Position,
    Range,
    offsets_from_json,
    offsets_to_json,
    parse_options,
    rate_limit,
    resolve,
    split,
)

K = {"kafka.bootstrap.servers": "h:1"}


def parse(streaming=False, **options):
    return parse_options({**K, **options}, streaming=streaming)


def test_subscriptions():
    assert parse(subscribe="a, b").subscription.topics == ("a", "b")
    assert parse(topic="a").subscription.topics == ("a",)
    sub = parse(subscribePattern="ev-.*").subscription
    assert sub.matches("ev-1") and not sub.matches("other")
    sub = parse(assign='{"a": [1, 0]}').subscription
    assert sub.assign == (("a", 0), ("a", 1)) and sub.matches("a")
    with pytest.raises(ShuffleOptionError, match="exactly one"):
        parse(subscribe="a", assign='{"a": [0]}')
    with pytest.raises(ShuffleOptionError, match="exactly one"):
        parse()
    with pytest.raises(ShuffleOptionError, match="subscribePattern"):
        parse(subscribePattern="(")


def test_positions_parse_and_name_the_option():
    assert parse(subscribe="a").starting.kind == "earliest"
    assert parse(streaming=True, subscribe="a").starting.kind == "latest"
    p = parse(subscribe="a", startingOffsets='{"a": {"0": 5, "1": -2}}').starting
    assert p.kind == "offsets" and p.values == {"a": {0: 5, 1: -2}}
    assert parse(subscribe="a", startingTimestamp="1000").starting == Position(
        "timestamp", {}, 1000
    )
    assert parse(subscribe="a", endingOffsetsByTimestamp='{"a": {"0": 9}}').ending.values == {
        "a": {0: 9}
    }
    with pytest.raises(ShuffleOptionError, match="'startingOffsets' must be"):
        parse(subscribe="a", startingOffsets="yesterday")
    with pytest.raises(ShuffleOptionError, match="cannot be combined"):
        parse(subscribe="a", startingOffsets="earliest", startingTimestamp="5")
    with pytest.raises(ShuffleOptionError, match="kafka.group.id"):
        parse(subscribe="a", startingOffsets="committed")
    with pytest.raises(ShuffleOptionError, match="kafka.group.id"):
        parse(subscribe="a", commitOffsets="true")
    with pytest.raises(ShuffleOptionError, match="'endingOffsets' applies to batch reads only"):
        parse(streaming=True, subscribe="a", endingOffsets="latest")
    with pytest.raises(ShuffleOptionError, match="'maxOffsetsPerTrigger' applies to streaming"):
        parse(subscribe="a", maxOffsetsPerTrigger="10")
    with pytest.raises(ShuffleOptionError, match="offsetResetStrategy"):
        parse(subscribe="a", offsetResetStrategy="sometimes")


B = {("a", 0): (10, 100), ("a", 1): (0, 50)}


def test_resolve_each_kind():
    assert resolve(Position("earliest"), B) == {("a", 0): 10, ("a", 1): 0}
    assert resolve(Position("latest"), B) == {("a", 0): 100, ("a", 1): 50}
    given = Position("offsets", {"a": {0: 5, 1: -1}})
    # Below the lowest offset is clamped (the reader reports the loss); -1 is the end.
    assert resolve(given, B) == {("a", 0): 10, ("a", 1): 50}
    by_time = {("a", 0): 42, ("a", 1): -1}
    assert resolve(Position("timestamp", timestamp=7), B, by_time=by_time) == {
        ("a", 0): 42,
        ("a", 1): 50,
    }


def test_resolve_committed_with_each_reset_strategy():
    committed = {("a", 0): 60, ("a", 1): -1001}
    c = Position("committed")
    assert resolve(c, B, committed=committed, reset="earliest") == {("a", 0): 60, ("a", 1): 0}
    assert resolve(c, B, committed=committed, reset="latest") == {("a", 0): 60, ("a", 1): 50}
    with pytest.raises(ShuffleOptionError, match="a-1"):
        resolve(c, B, committed=committed, reset="none")


def test_resolve_a_timestamp_without_a_record_by_strategy():
    by_time = {("a", 0): 42, ("a", 1): -1}
    at = Position("timestamp", timestamp=7)
    assert resolve(at, B, by_time=by_time, no_match="latest")[("a", 1)] == 50
    with pytest.raises(ShuffleOptionError, match=r"partition\(s\) a-1 \(startingOffsetsBy"):
        resolve(at, B, by_time=by_time, no_match="error")
    assert parse(subscribe="a").no_match == "latest"
    assert parse(subscribe="a", startingOffsetsByTimestampStrategy="ERROR").no_match == "error"
    with pytest.raises(ShuffleOptionError, match="'latest' or 'error', got 'never'"):
        parse(subscribe="a", startingOffsetsByTimestampStrategy="never")


def test_rate_limit_shares_by_lag():
    start = {("a", 0): 0, ("a", 1): 0}
    latest = {("a", 0): 300, ("a", 1): 100}
    assert rate_limit(start, latest, 1000) == latest
    assert rate_limit(start, latest, 100) == {("a", 0): 75, ("a", 1): 25}
    # A partition with a tiny share still moves.
    assert rate_limit(start, {("a", 0): 1000, ("a", 1): 1}, 10)[("a", 1)] == 1
    assert sum(rate_limit(start, latest, 100).values()) <= 100


def test_split_to_min_partitions():
    ranges = [Range("a", 0, 0, 100), Range("a", 1, 0, 10), Range("a", 2, 5, 5)]
    assert split(ranges, None) == ranges[:2]
    pieces = split(ranges, 6)
    assert len(pieces) >= 6
    for p in (0, 1):
        mine = [r for r in pieces if r.partition == p]
        assert mine[0].start == ranges[p].start and mine[-1].end == ranges[p].end
        assert all(x.end == y.start for x, y in zip(mine, mine[1:], strict=False))


def test_split_to_max_records_then_min_partitions():
    ranges = [Range("a", 0, 0, 100), Range("a", 1, 10, 20)]
    pieces = split(ranges, None, 30)
    assert [(r.partition, r.start, r.end) for r in pieces] == [
        (0, 0, 25),
        (0, 25, 50),
        (0, 50, 75),
        (0, 75, 100),
        (1, 10, 20),
    ]
    more = split(ranges, 8, 30)
    assert len(more) >= 8 and all(r.end - r.start <= 30 for r in more)
    assert sum(r.end - r.start for r in more) == 110
    assert parse(subscribe="a", maxRecordsPerPartition="30").max_records_per_partition == 30


def test_offsets_json_round_trip():
    offsets = {("a", 0): 5, ("b", 2): 7}
    assert offsets_from_json(offsets_to_json(offsets)) == offsets
    with pytest.raises(ShuffleOptionError, match="not a kafka-records offset"):
        offsets_from_json({"log": 3})
