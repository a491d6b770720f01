"""Retention of superseded and expired runs on the real broker and Spark."""

import datetime as dt

import pytest

from orchestration.shuffle import (
    KafkaClient,
    ShuffleSpec,
    ShuffleWindowNotFoundError,
    ShuffleWriteError,
    expire_shuffle,
    read_shuffle,
    shuffle_log,
    shuffle_watermark,
    write_shuffle,
)
from orchestration.shuffle.testing import fail_write_attempts_below

pytestmark = pytest.mark.integration

DAY = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def rows(spark, n, offset=0):
    return spark.range(offset, offset + n).selectExpr(
        "concat('k', cast(id % 29 as string)) as k",
        "id",
        "timestamp_seconds(1704067200 + id) as ts",
    )


def ids(df):
    return sorted(r.id for r in df.select("id").collect())


def test_expire_superseded_then_by_count(spark, kafka_conf, unique):
    topic = unique("exp")
    spec = ShuffleSpec(topic=topic, key="k", num_partitions=3, max_parallelism=12, event_time="ts")
    old = write_shuffle(rows(spark, 300), spec, kafka=kafka_conf, window="d1")
    write_shuffle(
        rows(spark, 200, 1000), spec, kafka=kafka_conf, window="d2",
        complete_until=DAY + dt.timedelta(days=2),
    )  # fmt: skip
    with pytest.raises(ShuffleWriteError), fail_write_attempts_below(99):
        write_shuffle(rows(spark, 50, 5000), spec, kafka=kafka_conf, window="d9")
    new = write_shuffle(rows(spark, 100, 2000), spec, kafka=kafka_conf, window="d1")
    watermark = shuffle_watermark(topic, kafka=kafka_conf)
    visible = ids(read_shuffle(spark, topic, kafka=kafka_conf))

    # Young records are protected by default: the run is expired, nothing deleted yet.
    first = expire_shuffle(topic, kafka=kafka_conf)
    assert first.runs_expired == [old.run_id] and first.records_deleted == {}
    assert first.bytes_freed == {}
    # Run again with no protection (as after an interruption): the same run's data goes.
    lows = [lo for lo, _ in KafkaClient(kafka_conf).end_offsets(topic, 3)]
    second = expire_shuffle(topic, kafka=kafka_conf, min_age=dt.timedelta(0))
    assert second.runs_expired == []
    # Its frames are what went: all of its committed bytes.
    assert sum(second.bytes_freed.values()) == pytest.approx(old.bytes, rel=0.01)
    assert set(second.records_deleted) == set(old.offsets) and all(
        n > 0 for n in second.records_deleted.values()
    )
    after = KafkaClient(kafka_conf).end_offsets(topic, 3)
    for p, (first_offset, _) in old.offsets.items():
        assert after[p][0] > lows[p] and after[p][0] > first_offset
    # Live runs and the watermark are unaffected.
    assert ids(read_shuffle(spark, topic, kafka=kafka_conf)) == visible
    assert ids(read_shuffle(spark, topic, kafka=kafka_conf, runs=[new.run_id])) == list(
        range(2000, 2100)
    )
    assert shuffle_watermark(topic, kafka=kafka_conf) == watermark
    # The expired run is refused with the reason.
    with pytest.raises(ShuffleWindowNotFoundError, match="removed by retention"):
        read_shuffle(spark, topic, kafka=kafka_conf, runs=[old.run_id])
    # Nothing left to do: a third run changes nothing.
    third = expire_shuffle(topic, kafka=kafka_conf, min_age=dt.timedelta(0))
    assert third.runs_expired == [] and third.records_deleted == {}

    # keep_last=1: only the most recently committed window (d1) stays.
    last = expire_shuffle(topic, kafka=kafka_conf, keep_last=1, min_age=dt.timedelta(0))
    assert last.windows_expired == ["d2"]
    assert ids(read_shuffle(spark, topic, kafka=kafka_conf)) == list(range(2000, 2100))
    with pytest.raises(ShuffleWindowNotFoundError, match="d2"):
        read_shuffle(spark, topic, kafka=kafka_conf, windows=["d2"])
    assert [c.run_id for c in shuffle_log(topic, kafka=kafka_conf).commits] == [new.run_id]
