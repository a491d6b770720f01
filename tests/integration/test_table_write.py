"""``write_table``: a pyarrow table or pandas frame written as a run without Spark, on the
real broker, held to Spark's own write of the same rows: the same schema, the same key
group and partition for every row, read back equal by every path."""

import datetime as dt
import random
import subprocess
import sys
import uuid
from decimal import Decimal

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from orchestration.shuffle import (
    ShuffleKeyError,
    ShuffleLayoutError,
    ShuffleSchemaError,
    ShuffleSpec,
    read_shuffle,
    shuffle_log,
    write_shuffle,
    write_table,
)

pytestmark = pytest.mark.integration


def _topic(name: str) -> str:
    return f"table-write.{name}-{uuid.uuid4().hex[:8]}"


def _frame(n: int = 500) -> pd.DataFrame:
    start = pd.Timestamp("2024-05-01", tz="UTC")
    return pd.DataFrame(
        {
            "user_id": [f"user-{i % 37}" for i in range(n)],
            "n": np.arange(n, dtype=np.int64),
            "small": np.arange(n, dtype=np.uint16) % 300,
            "score": [float(i) / 7 if i % 11 else float("nan") for i in range(n)],
            "ts": [start + pd.Timedelta(seconds=37 * i, microseconds=i) for i in range(n)],
            "day": [dt.date(2024, 5, 1 + i % 3) for i in range(n)],
            "amount": [Decimal(i) / 100 for i in range(n)],
            "tag": pd.Categorical([["a", "b", None][i % 3] for i in range(n)]),
        }
    )


def _by_partition(topic: str, kafka_conf: dict, spark, run: str) -> dict:
    """Per row id, its key group and partition, as the run committed them."""
    rows = (
        read_shuffle(spark, topic, kafka=kafka_conf, runs=[run], with_metadata=True)
        .select("n", "_key_group", "_partition")
        .collect()
    )
    return {r["n"]: (r["_key_group"], r["_partition"]) for r in rows}


def test_a_frame_written_without_spark_equals_sparks_write_of_it(spark, kafka_conf):
    frame = _frame()
    ours, theirs = _topic("ours"), _topic("spark")
    spec = dict(key="user_id", num_partitions=4, max_parallelism=16, event_time="ts")
    mine = write_table(frame, ShuffleSpec(ours, **spec), kafka=kafka_conf, window="w1")
    spark_df = spark.createDataFrame(frame.astype({"tag": object, "small": "int32"}))
    other = write_shuffle(spark_df, ShuffleSpec(theirs, **spec), kafka=kafka_conf, window="w1")
    assert mine.path == "table" and mine.rows == other.rows == len(frame)
    # The same schema as Spark's, but for the uint16 column: Spark, given uint16, keeps
    # int32 here too; the shuffle records Spark's type for it.
    mine_schema = shuffle_log(ours, kafka=kafka_conf).layout.schema
    their_schema = shuffle_log(theirs, kafka=kafka_conf).layout.schema
    assert mine_schema == their_schema, (mine_schema, their_schema)
    # Every row in the same key group and partition as Spark put it.
    assert _by_partition(ours, kafka_conf, spark, mine.run_id) == _by_partition(
        theirs, kafka_conf, spark, other.run_id
    )
    # One producer saw every row: its watermark is the latest event time (Spark's run, of
    # several tasks, takes the least of theirs).
    assert mine.watermark == frame["ts"].max().to_pydatetime()
    # Read back equal (the JVM path and the Python path alike: read_shuffle picks one).
    a = read_shuffle(spark, ours, kafka=kafka_conf).toPandas().sort_values("n")
    b = read_shuffle(spark, theirs, kafka=kafka_conf).toPandas().sort_values("n")
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True))


SPECIAL_INTS = [0, -1, 1, 2**31, -(2**31) - 1, 2**63 - 1, -(2**63)]
SPECIAL_FLOATS = [0.0, -0.0, float("nan"), float("inf"), -float("inf"), 5e-324, 1.5]


@pytest.mark.parametrize("seed", [1, 2])
def test_key_groups_equal_sparks_for_generated_keys(spark, kafka_conf, seed):
    """Generated rows, special values included (-0.0, NaN, infinities, the ends of int64,
    empty and non-ASCII strings): each row lands where Spark's own write puts it."""
    rng = random.Random(seed)
    n = rng.randint(1, 80)
    ints = [rng.choice(SPECIAL_INTS) if rng.random() < 0.3 else rng.getrandbits(64) - 2**63
            for _ in range(n)]  # fmt: skip
    floats = [rng.choice(SPECIAL_FLOATS) if rng.random() < 0.4 else rng.uniform(-1e9, 1e9)
              for _ in range(n)]  # fmt: skip
    strings = ["".join(rng.choice("aé€😀 ") for _ in range(rng.randint(0, 6))) for _ in range(n)]
    table = pa.table(
        {
            "k": pa.array(ints, pa.int64()),
            "f": pa.array(floats, pa.float64()),
            "s": pa.array(strings),
            "flag": pa.array([i % 2 == 0 for i in range(n)]),
            "n": pa.array(range(n), pa.int64()),
        }
    )
    # From Arrow, not pandas: Spark turns a pandas NaN into a null.
    df = spark.createDataFrame(table)
    for key in (("k",), ("f",), ("s", "k", "flag")):
        spec = dict(key=key, num_partitions=3, max_parallelism=12)
        ours, theirs = _topic("gen"), _topic("gen-spark")
        mine = write_table(table, ShuffleSpec(ours, **spec), kafka=kafka_conf)
        other = write_shuffle(df, ShuffleSpec(theirs, **spec), kafka=kafka_conf)
        assert _by_partition(ours, kafka_conf, spark, mine.run_id) == _by_partition(
            theirs, kafka_conf, spark, other.run_id
        ), key


def test_a_sorted_shuffle_written_without_spark_reads_sorted(spark, kafka_conf):
    frame = _frame(300).sample(frac=1.0, random_state=3)
    topic = _topic("sorted")
    spec = ShuffleSpec(topic, key="user_id", num_partitions=2, sort_by=("user_id", "n"))
    write_table(frame, spec, kafka=kafka_conf)
    got = read_shuffle(spark, topic, kafka=kafka_conf, with_metadata=True).toPandas()
    for _, part in got.groupby("_partition"):
        pairs = list(zip(part["user_id"], part["n"], strict=True))
        assert pairs == sorted(pairs)


def test_bad_input_is_refused_before_anything_is_written(kafka_conf):
    topic = _topic("bad")
    spec = ShuffleSpec(topic, key="user_id", num_partitions=2)
    with pytest.raises(ShuffleKeyError, match=r"null key \(user_id: 1\)"):
        write_table(pd.DataFrame({"user_id": ["a", None]}), spec, kafka=kafka_conf)
    with pytest.raises(ShuffleSchemaError, match="'missing' is not in"):
        write_table(
            pd.DataFrame({"x": [1]}),
            ShuffleSpec(topic, key="missing", num_partitions=2),
            kafka=kafka_conf,
        )
    big = pa.table({"user_id": ["a"], "u": pa.array([1], pa.uint64())})
    with pytest.raises(ShuffleSchemaError, match="column 'u' has Arrow type uint64"):
        write_table(big, spec, kafka=kafka_conf)
    listed = pa.table({"user_id": pa.array([[1, 2]], pa.list_(pa.int64()))})
    with pytest.raises(ShuffleKeyError, match="key column 'user_id'.*write_shuffle"):
        write_table(listed, spec, kafka=kafka_conf)
    # Nothing was created by the refusals.
    with pytest.raises(Exception, match="not"):
        shuffle_log(topic, kafka=kafka_conf).require_layout()
    write_table(pd.DataFrame({"user_id": ["a"], "v": [1]}), spec, kafka=kafka_conf)
    with pytest.raises(ShuffleLayoutError):
        write_table(pd.DataFrame({"user_id": ["a"], "v": ["one"]}), spec, kafka=kafka_conf)


def test_writing_a_table_imports_no_pyspark(bootstrap):
    """A producer of a few rows pays no Spark: not a JVM, not even pyspark's import."""
    code = f"""
import sys
import pandas as pd
from orchestration.shuffle import ShuffleSpec, write_table
result = write_table(
    pd.DataFrame({{"k": ["a", "b", "c"], "v": [1, 2, 3]}}),
    ShuffleSpec("{_topic("nospark")}", key="k", num_partitions=2),
    kafka={{"bootstrap.servers": "{bootstrap}"}},
)
assert result.rows == 3, result
loaded = sorted(m for m in sys.modules if m == "pyspark" or m.startswith("pyspark."))
print("pyspark modules:", loaded)
assert not loaded, loaded
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]


def test_an_asset_returning_pandas_is_stored_without_spark(kafka_conf, bootstrap):
    """The IO manager stores a pandas asset with write_table: one run per partition of a
    range run, with the metadata a Spark asset's materialization carries."""
    from dagster import (
        AssetKey,
        AssetRecordsFilter,
        BackfillPolicy,
        DailyPartitionsDefinition,
        asset,
        instance_for_test,
        materialize,
    )

    from orchestration import KafkaResource, KafkaShuffleIOManager, shuffle_metadata

    topic = _topic("io")
    days = ["2024-06-01", "2024-06-02"]

    @asset(
        partitions_def=DailyPartitionsDefinition(start_date="2024-06-01"),
        backfill_policy=BackfillPolicy.single_run(),
        io_manager_key="shuffle_io",
        metadata=shuffle_metadata(
            key="user_id", num_partitions=2, topic=topic, window_column="day"
        ),
    )
    def events(context) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "user_id": [f"u{i % 3}" for i in range(10)],
                "day": [context.partition_keys[i % 2] for i in range(10)],
                "n": range(10),
            }
        )

    io = KafkaShuffleIOManager(kafka=KafkaResource(bootstrap_servers=bootstrap))
    with instance_for_test() as instance:
        result = materialize(
            [events],
            resources={"shuffle_io": io},
            instance=instance,
            tags={
                "dagster/asset_partition_range_start": days[0],
                "dagster/asset_partition_range_end": days[1],
            },
        )
        assert result.success
        log = shuffle_log(topic, kafka=kafka_conf)
        by_day = {c.window: c for c in log.visible()}
        assert sorted(by_day) == days and all(c.rows == 5 for c in by_day.values())
        for day in days:
            (record,) = instance.fetch_materializations(
                AssetRecordsFilter(asset_key=AssetKey("events"), asset_partitions=[day]), 1
            ).records
            md = record.asset_materialization.metadata
            assert md["shuffle/run_id"].value == by_day[day].run_id
            assert md["dagster/row_count"].value == 5
