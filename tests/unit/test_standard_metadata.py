"""What Dagster is told of a shuffle's runs: commit_metadata (Dagster's standard keys and the
shuffle's own, from a commit and a layout), and what a read of a window that retention
expired says instead of "no committed run"."""

import datetime as dt

import pyarrow as pa
import pytest
from dagster import AssetMaterialization, MetadataValue, TableSchema

from orchestration import KafkaResource
from orchestration.metadata import column_schema, commit_metadata, shuffle_uri
from orchestration.shuffle import (
    Commit,
    Layout,
    ShuffleLog,
    ShuffleOptionError,
    ShuffleWindowNotFoundError,
)
from orchestration.shuffle.core.commitlog import PartitionRange, to_micros
from orchestration.shuffle.core.evolution import type_name
from orchestration.shuffle.core.planner import plan_read
from orchestration.shuffle.core.retention import marker, plan_expiry

SCHEMA = pa.schema(
    [
        pa.field("user_id", pa.string()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("amount", pa.decimal128(10, 2)),
        pa.field("n", pa.int64(), nullable=False),
        pa.field("tags", pa.list_(pa.string())),
    ]
)
LAYOUT = Layout(
    topic="events.by_user",
    key=("user_id",),
    num_partitions=2,
    max_parallelism=8,
    schema=SCHEMA,
    event_time="ts",
)


def commit(
    window: str | None = "2024-01-01", watermark: int | None = None, run_id: str = "r1"
) -> Commit:
    return Commit(
        run_id=run_id,
        window=window,
        committed_at="2024-01-02T03:04:05+00:00",
        tasks=((0, 0),),
        partitions={1: PartitionRange(10, 19, 40, 2), 0: PartitionRange(5, 7, 2, 1)},
        rows=42,
        bytes=1000,
        frames=3,
        watermark=watermark,
    )


def test_standard_keys_of_a_window_run():
    md = commit_metadata(commit(), LAYOUT, {"bootstrap.servers": "k1:9092,k2:9092"})
    assert md["dagster/row_count"] == 42
    assert md["dagster/partition_row_count"] == 42
    schema = md["dagster/column_schema"].value
    assert isinstance(schema, TableSchema)
    assert [(c.name, c.type) for c in schema.columns] == [
        ("user_id", "string"),
        ("ts", "timestamp"),
        ("amount", "decimal(10,2)"),
        ("n", "bigint"),
        ("tags", "array<string>"),
    ]
    assert md["dagster/uri"].value == "kafka://k1:9092,k2:9092/events.by_user?window=2024-01-01"
    # Dagster accepts the whole set on a materialization (it validates values and keys).
    AssetMaterialization(asset_key="events_by_user", partition="2024-01-01", metadata=md)


def test_shuffle_keys_are_kept():
    mark = dt.datetime(2024, 1, 2, tzinfo=dt.UTC)
    md = commit_metadata(
        commit(watermark=to_micros(mark)), LAYOUT, {"bootstrap.servers": "k:1"}, write_path="rows"
    )
    assert md["shuffle/topic"] == "events.by_user"
    assert md["shuffle/run_id"] == "r1"
    assert md["shuffle/window"] == "2024-01-01"
    assert (md["rows"], md["bytes"], md["frames"]) == (42, 1000, 3)
    assert md["offsets"] == MetadataValue.json({"0": [5, 7], "1": [10, 19]})
    assert md["shuffle/watermark"] == MetadataValue.timestamp(mark)
    assert md["shuffle/committed_at"] == MetadataValue.timestamp(
        dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    )
    assert md["shuffle/write_path"] == "rows"


def test_a_run_without_window_or_layout():
    md = commit_metadata(
        commit(window=None), None, KafkaResource(bootstrap_servers="k:9092"), topic="t"
    )
    assert "dagster/partition_row_count" not in md
    assert "dagster/column_schema" not in md
    assert "shuffle/watermark" not in md and "shuffle/write_path" not in md
    assert md["dagster/uri"].value == "kafka://k:9092/t"
    assert md["shuffle/window"] == ""
    with pytest.raises(ShuffleOptionError, match="r1"):
        commit_metadata(commit(), None, {"bootstrap.servers": "k:9092"})


def test_uri_shows_no_credentials_or_listener_names():
    kafka = KafkaResource(
        bootstrap_servers="SASL_SSL://b1:9093, b2:9093",
        security_protocol="SASL_SSL",
        sasl_mechanism="PLAIN",
        sasl_username="alice",
        sasl_password="s3cret",
    )
    uri = shuffle_uri(kafka, "t", "w")
    assert uri == "kafka://b1:9093,b2:9093/t?window=w"
    assert shuffle_uri(kafka.config(), "t", "w") == uri


def test_column_schema_marks_key_event_time_and_nullability():
    cols = {c.name: c for c in column_schema(LAYOUT).columns}
    assert cols["user_id"].description == "shuffle key"
    assert cols["ts"].description == "event time"
    assert cols["amount"].description is None
    assert cols["n"].constraints.nullable is False
    assert cols["user_id"].constraints.nullable is True


@pytest.mark.parametrize(
    ("arrow", "name"),
    [
        (pa.bool_(), "boolean"),
        (pa.int8(), "tinyint"),
        (pa.int16(), "smallint"),
        (pa.int32(), "int"),
        (pa.float32(), "float"),
        (pa.float64(), "double"),
        (pa.large_string(), "string"),
        (pa.binary(), "binary"),
        (pa.date32(), "date"),
        (pa.timestamp("us"), "timestamp_ntz"),
        (pa.map_(pa.string(), pa.int32()), "map<string,int>"),
        (
            pa.struct([("a", pa.int64()), ("b", pa.list_(pa.float64()))]),
            "struct<a:bigint,b:array<double>>",
        ),
        (pa.dictionary(pa.int32(), pa.string()), "string"),
        (pa.uint32(), "uint32"),
    ],
)
def test_type_names(arrow, name):
    assert type_name(arrow) == name


def expired_log(now: dt.datetime) -> ShuffleLog:
    """Windows d1 (two runs), d2 and d3; everything but the latest window expired."""
    records: list[tuple[str, str | None]] = [("layout", LAYOUT.to_json())]
    for run, window in (("a", "d1"), ("b", "d1"), ("c", "d2"), ("d", "d3")):
        records.append((f"commit/{run}", commit(window, run_id=run).to_json()))
    plan = plan_expiry(ShuffleLog.from_records("t", records), now=now, keep_last=1)
    for c, reason in plan.expire:
        records.append((f"expired/{c.run_id}", marker(c, reason, now).to_json()))
        records.append((f"commit/{c.run_id}", None))
    return ShuffleLog.from_records("t", records)


def test_reading_an_expired_window_says_when_and_why():
    now = dt.datetime(2024, 2, 1, 3, 0, tzinfo=dt.UTC)
    log = expired_log(now)
    assert [c.window for c in log.visible()] == ["d3"]
    with pytest.raises(ShuffleWindowNotFoundError) as err:
        plan_read(log, windows=["d1", "d3"])
    text = str(err.value)
    # d1's last visible run is named, not the one it superseded.
    assert "window(s) ['d1'] expired" in text
    assert f"run b, expired {now.isoformat()}: not among the 1 most recent windows" in text
    assert "run a" not in text and "no committed run" not in text


def test_expired_and_never_committed_windows_are_told_apart():
    log = expired_log(dt.datetime(2024, 2, 1, tzinfo=dt.UTC))
    with pytest.raises(ShuffleWindowNotFoundError) as err:
        plan_read(log, windows=["d2", "d9"])
    text = str(err.value)
    assert "window(s) ['d2'] expired: window 'd2' (run c," in text
    assert text.endswith("no committed run for window(s) ['d9']")
