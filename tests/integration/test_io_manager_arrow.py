"""Consumers without Spark: inputs annotated ``pandas.DataFrame``, ``pyarrow.Table`` or an
iterator of ``pyarrow.RecordBatch`` are loaded by the shuffle IO manager without Spark, with
the same rows and input metadata as a Spark input of the same partition."""

import subprocess
import sys
import uuid

import pandas as pd
import pyarrow as pa
import pytest

pytestmark = pytest.mark.integration

DAYS = ["2024-08-01", "2024-08-02"]


def _project(topic: str) -> str:
    return f'''
from collections.abc import Iterator

import pandas as pd
import pyarrow as pa
from dagster import AssetKey, DailyPartitionsDefinition, MaterializeResult, asset

from orchestration import KafkaResource, KafkaShuffleIOManager, RecordBatches, shuffle_metadata
from orchestration.shuffle import runs_read

daily = DailyPartitionsDefinition(start_date="{DAYS[0]}")
TOPIC = "{topic}"


@asset(
    partitions_def=daily,
    io_manager_key="shuffle_io",
    metadata=shuffle_metadata(key="user_id", num_partitions=3, topic=TOPIC),
)
def events(context) -> pd.DataFrame:
    day = context.partition_key
    n = 40 if day == "{DAYS[0]}" else 25
    return pd.DataFrame({{
        "user_id": [f"u{{i % 6}}" for i in range(n)],
        "clicks": [i for i in range(n)],
        "ts": pd.date_range(day, periods=n, freq="min", tz="UTC"),
    }})


@asset(partitions_def=daily)
def as_pandas(events: pd.DataFrame) -> MaterializeResult:
    return MaterializeResult(metadata={{"rows": len(events), "clicks": int(events.clicks.sum()),
                                        "kind": type(events).__module__,
                                        "runs": runs_read(events)}})


@asset(partitions_def=daily)
def as_arrow(events: pa.Table) -> MaterializeResult:
    return MaterializeResult(metadata={{"rows": events.num_rows,
                                        "clicks": events.column("clicks").to_pandas().sum().item(),
                                        "kind": type(events).__module__,
                                        "runs": runs_read(events)}})


@asset(partitions_def=daily)
def as_batches(events: RecordBatches) -> MaterializeResult:
    batches = list(events)
    return MaterializeResult(metadata={{
        "rows": sum(b.num_rows for b in batches),
        "clicks": sum(pa.compute.sum(b.column("clicks")).as_py() or 0 for b in batches),
        "kind": type(batches[0]).__module__ if batches else "pyarrow",
    }})
'''


def test_annotated_inputs_load_without_spark(bootstrap, tmp_path):
    """Run in a process of its own: the producer (pandas, written without Spark) and the
    three consumers; none of it starts Spark."""
    topic = f"arrow-io.events-{uuid.uuid4().hex[:8]}"
    (tmp_path / "project.py").write_text(_project(topic))
    code = f"""
import sys
sys.path.insert(0, {str(tmp_path)!r})
from dagster import AssetKey, AssetRecordsFilter, instance_for_test, materialize
import project
from orchestration import KafkaResource, KafkaShuffleIOManager

io = KafkaShuffleIOManager(kafka=KafkaResource(bootstrap_servers={bootstrap!r}))
with instance_for_test() as instance:
    for day in {DAYS!r}:
        assert materialize([project.events], partition_key=day, instance=instance,
                           resources={{"shuffle_io": io}}).success
        result = materialize(
            [project.events.to_source_asset(), project.as_pandas, project.as_arrow,
             project.as_batches],
            partition_key=day, instance=instance, resources={{"shuffle_io": io}},
            selection=[project.as_pandas, project.as_arrow, project.as_batches],
        )
        assert result.success
        n = 40 if day == {DAYS[0]!r} else 25
        for name, kind in (("as_pandas", "pandas"), ("as_arrow", "pyarrow"),
                           ("as_batches", "pyarrow")):
            (mat,) = result.asset_materializations_for_node(name)
            md = {{k: v.value for k, v in mat.metadata.items()}}
            assert md["rows"] == n and md["clicks"] == sum(range(n)), (name, md)
            assert md["kind"].split(".")[0] == kind, (name, md)
            if name != "as_batches":
                # Which committed run it holds: this day's, with its rows.
                (run,) = md["runs"].values()
                assert run == {{"window": day, "rows": n}}, (name, md)
        loaded = [e for e in result.all_events if e.event_type_value == "LOADED_INPUT"]
        assert len(loaded) == 3
# Nothing started Spark: no SparkContext, so no JVM, in this process.
from pyspark import SparkContext
assert SparkContext._active_spark_context is None
print("no spark context")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-4000:])
    assert "no spark context" in out.stdout


def test_arrow_inputs_equal_a_spark_input_of_the_same_window(bootstrap, kafka_conf, spark):
    from dagster import DailyPartitionsDefinition, asset, instance_for_test, materialize

    from orchestration import (
        KafkaResource,
        KafkaShuffleIOManager,
        RecordBatches,
        shuffle_metadata,
    )
    from orchestration.shuffle import read_shuffle

    topic = f"arrow-io.same-{uuid.uuid4().hex[:8]}"
    daily = DailyPartitionsDefinition(start_date=DAYS[0])
    seen: dict[str, object] = {}

    @asset(
        partitions_def=daily,
        io_manager_key="shuffle_io",
        metadata=shuffle_metadata(key="k", num_partitions=4, topic=topic),
    )
    def events(context) -> pd.DataFrame:
        return pd.DataFrame(
            {"k": [i % 9 for i in range(300)], "v": [float(i) / 3 for i in range(300)]}
        )

    @asset(partitions_def=daily)
    def with_arrow(events: pa.Table) -> None:
        seen["arrow"] = events

    @asset(partitions_def=daily)
    def with_batches(events: RecordBatches) -> None:
        seen["batches"] = pa.Table.from_batches(list(events))

    io = KafkaShuffleIOManager(kafka=KafkaResource(bootstrap_servers=bootstrap))
    with instance_for_test() as instance:
        assert materialize(
            [events, with_arrow, with_batches],
            partition_key=DAYS[1],
            instance=instance,
            resources={"shuffle_io": io},
        ).success
    expected = read_shuffle(spark, topic, kafka=kafka_conf, windows=[DAYS[1]]).toPandas()
    for name in ("arrow", "batches"):
        got = seen[name].to_pandas()
        assert list(got.columns) == list(expected.columns), name
        pd.testing.assert_frame_equal(
            got.sort_values(["k", "v"]).reset_index(drop=True),
            expected.sort_values(["k", "v"]).reset_index(drop=True),
        )


def test_polars_and_duckdb_consumers_of_a_shuffle_declared_as_an_asset_spec(
    bootstrap, kafka_conf, tmp_path
):
    """The consumer location of docs/guides/engine.md, as written but for its topic and
    broker: a shuffle declared as an ``AssetSpec``, consumers on Polars and DuckDB, run in a
    process that never starts Spark, over a day written without Spark."""
    from orchestration.shuffle import ShuffleSpec, write_table
    from tests.unit.test_docs import ROOT, python_blocks

    (block,) = [
        b
        for b in python_blocks(ROOT / "docs" / "guides" / "engine.md")
        if b.how == "tests/integration/test_io_manager_arrow.py"
    ]
    topic = f"arrow-io.flights-{uuid.uuid4().hex[:8]}"
    code = block.code.replace('"flights.by_tailnum"', repr(topic))
    code = code.replace("127.0.0.1:19092", bootstrap)
    assert topic in code
    (tmp_path / "consumers.py").write_text(code)
    day = "2013-01-02"
    # A day of legs: some delays unknown (null), aircraft flying once or many times.
    rows = pd.DataFrame(
        {
            "tailnum": [f"N{i % 37:03d}" for i in range(500)],
            "dep_delay": pd.array([None if i % 9 == 0 else i % 60 - 5 for i in range(500)],
                                  dtype="Int64"),
        }
    )  # fmt: skip
    write_table(
        rows, ShuffleSpec(topic, key="tailnum", num_partitions=8), kafka=kafka_conf, window=day
    )
    per_aircraft = rows.groupby("tailnum")["dep_delay"].sum()
    want = {"aircraft": len(per_aircraft), "delay": int(per_aircraft.sum())}
    script = f"""
import sys
sys.path.insert(0, {str(tmp_path)!r})
from dagster import instance_for_test, materialize
import consumers

with instance_for_test() as instance:
    result = materialize(
        [consumers.flights_by_tailnum, consumers.delays_on_polars, consumers.delays_on_duckdb],
        partition_key={day!r}, instance=instance,
        resources=consumers.defs.resources,
        selection=[consumers.delays_on_polars, consumers.delays_on_duckdb],
    )
    assert result.success
    for name in ("delays_on_polars", "delays_on_duckdb"):
        (mat,) = result.asset_materializations_for_node(name)
        print(name, {{k: v.value for k, v in mat.metadata.items()}})
from pyspark import SparkContext
assert SparkContext._active_spark_context is None
print("no spark context")
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-4000:])
    assert "no spark context" in out.stdout
    got = {
        line.split(" ", 1)[0]: eval(line.split(" ", 1)[1])  # noqa: S307 - our own print
        for line in out.stdout.splitlines()
        if line.startswith("delays_on_")
    }
    assert {k: got["delays_on_polars"][k] for k in want} == want
    assert {k: got["delays_on_duckdb"][k] for k in want} == want
    (run,) = got["delays_on_duckdb"]["runs"].values()
    assert run == {"window": day, "rows": 500}
