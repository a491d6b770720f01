"""One shuffle kept through a year of daily windows, with three schema changes and one growth
of its partitions along the way (and re-runs of old days after each), then every window's
rows checked on every read path against what was written."""

import datetime as dt
import random
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest

from orchestration.shuffle import (
    ShuffleSpec,
    alter_shuffle,
    iter_keys,
    read_batches,
    read_shuffle,
    read_shuffle_stream,
    read_table,
    shuffle_log,
    write_table,
)
from tests.conftest import jvm_read_off, jvm_read_on

# Slow (72 s on 2 cores): in `scripts/dev test-slow`, so that the default suite stays quick.
pytestmark = [pytest.mark.integration, pytest.mark.slow]

START = dt.date(2025, 1, 1)
DAYS = 365
ROWS = 6


def day(i: int) -> str:
    return (START + dt.timedelta(days=i)).isoformat()


# The schema's history: (the day it changes before, what changes). Columns as a model:
# latest name -> (Arrow type of writes from then on).
CHANGES = {
    90: {"add_columns": {"country": "string"}},
    180: {"rename_columns": {"amount": "price"}, "widen_columns": {"price": "double"}},
    240: {"num_partitions": 8},
    300: {"drop_columns": ["country"], "widen_columns": {"qty": "bigint"}},
}


def schema_at(i: int) -> dict[str, pa.DataType]:
    cols = {"k": pa.string(), "ts": pa.timestamp("us", "UTC"), "qty": pa.int32(),
            "amount": pa.float32()}  # fmt: skip
    if i >= 90:
        cols["country"] = pa.string()
    if i >= 180:
        cols["price"] = pa.float64()
        del cols["amount"]
    if i >= 300:
        del cols["country"]
        cols["qty"] = pa.int64()
    return cols


def rows_of(i: int, attempt: int, now: int) -> pa.Table:
    """Day ``i``'s rows as written on day ``now`` (its schema then)."""
    rng = random.Random(i * 1000 + attempt)
    cols = schema_at(now)
    t0 = dt.datetime.combine(START, dt.time(), dt.UTC) + dt.timedelta(days=i)
    data: dict[str, pa.Array] = {
        "k": pa.array([f"u{rng.randint(0, 40)}" for _ in range(ROWS)]),
        "ts": pa.array([t0 + dt.timedelta(minutes=j * 7) for j in range(ROWS)], cols["ts"]),
        "qty": pa.array(
            [rng.choice([None, -5, 0, 2**31 - 1, j]) for j in range(ROWS)], cols["qty"]
        ),
    }
    money = "price" if "price" in cols else "amount"
    data[money] = pa.array(
        [rng.choice([None, 0.5, -0.0, 1e6, float(j)]) for j in range(ROWS)], cols[money]
    )
    if "country" in cols:
        data["country"] = pa.array([rng.choice([None, "fr", "é", ""]) for _ in range(ROWS)])
    return pa.table(data)


def expected_rows(table: pa.Table) -> list[tuple]:
    """A day's rows as the latest version reads them: k, ts, qty, price (country dropped)."""
    money = "price" if "price" in table.column_names else "amount"
    out = []
    for r in table.to_pylist():
        out.append((r["k"], r["ts"], r["qty"], None if r[money] is None else float(r[money])))
    return sorted(out, key=repr)


def as_tuples(rows) -> list[tuple]:
    return sorted(
        ((r["k"], r["ts"].astimezone(dt.UTC) if r["ts"].tzinfo else r["ts"].replace(tzinfo=dt.UTC),
          r["qty"], r["price"]) for r in rows),
        key=repr,
    )  # fmt: skip


def test_a_year_of_windows_with_three_schema_changes_and_a_growth(
    spark, kafka_conf, unique, tmp_path
):
    topic = unique("evo-year")
    spec4 = ShuffleSpec(topic, "k", 4, 64, event_time="ts")
    written: dict[str, pa.Table] = {}

    def write(i: int, attempt: int = 0, now: int | None = None) -> None:
        table = rows_of(i, attempt, i if now is None else now)
        write_table(table, spec4, kafka=kafka_conf, window=day(i), schema_mode="merge")
        written[day(i)] = table

    bounds = [0, *sorted(CHANGES), DAYS]
    with ThreadPoolExecutor(4) as pool:
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            if lo in CHANGES:
                alter_shuffle(topic, kafka=kafka_conf, **CHANGES[lo])
            list(pool.map(write, range(lo, hi)))
            # Re-runs of two old days under the version in force now.
            for old in (lo // 3, lo // 2):
                if old < lo:
                    write(old, attempt=lo, now=lo)
    log = shuffle_log(topic, kafka=kafka_conf)
    # Three schema changes (one of them two changes at once) and one growth.
    assert log.layout.version == 5 and log.layout.num_partitions == 8
    assert log.layout.schema.names == ["k", "ts", "qty", "price"]
    assert len(log.latest_by_window()) == DAYS
    assert {c.layout_version for c in log.visible()} == {1, 2, 3, 4, 5}
    want = {w: expected_rows(t) for w, t in written.items()}

    def by_window(table: pa.Table) -> dict[str, list[tuple]]:
        out: dict[str, list] = {}
        for r in table.to_pylist():
            out.setdefault(r["_window"], []).append(r)
        return {w: as_tuples(rs) for w, rs in out.items()}

    # Without Spark: a table, record batches, key by key.
    assert by_window(read_table(topic, kafka=kafka_conf, with_metadata=True)) == want
    batches = pa.Table.from_batches(list(read_batches(topic, kafka=kafka_conf, with_metadata=True)))
    assert by_window(batches) == want
    keyed = pa.concat_tables(t for _, t in iter_keys(topic, kafka=kafka_conf, with_metadata=True))
    assert by_window(keyed) == want
    # One window of each version alone.
    for i in (0, 100, 200, 250, 364):
        assert (
            as_tuples(read_table(topic, kafka=kafka_conf, windows=[day(i)]).to_pylist())
            == want[day(i)]
        )
    # Spark: the Python source, then the JVM source on the same session.
    for engine in ("python", "jvm"):
        keys = jvm_read_on(spark, kafka_conf) if engine == "jvm" else []
        try:
            df = read_shuffle(spark, topic, kafka=kafka_conf, engine=engine, with_metadata=True)
            got: dict[str, list] = {}
            for r in df.collect():
                got.setdefault(r["_window"], []).append(r.asDict())
            assert {w: as_tuples(rs) for w, rs in got.items()} == want, engine
            # Keyed: every key's rows in one Spark partition, whatever the run's count.
            where = df.rdd.mapPartitionsWithIndex(lambda i, rs: [(r["k"], i) for r in rs])
            assert where.distinct().groupByKey().mapValues(len).values().max() == 1
            # A stream from the start reads every visible run as the latest version.
            seen: list = []
            stream = read_shuffle_stream(spark, topic, kafka=kafka_conf, engine=engine,
                                         with_metadata=True)  # fmt: skip
            query = (
                stream.writeStream.foreachBatch(
                    lambda b, _, seen=seen: seen.extend(r.asDict() for r in b.collect())
                )
                .option("checkpointLocation", str(tmp_path / engine))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(300)
            assert query.exception() is None
            latest = {c.run_id for c in log.visible()}
            streamed: dict[str, list] = {}
            for r in seen:
                if r["_run_id"] in latest:
                    streamed.setdefault(r["_window"], []).append(r)
            assert {w: as_tuples(rs) for w, rs in streamed.items()} == want, engine
        finally:
            if keys:
                jvm_read_off(spark, keys)
