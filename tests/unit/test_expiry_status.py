"""What ``shuffle_window_readable`` says of a window from the commit log alone, and how the
expiry job's factory takes its ages and its ``reconcile_status``."""

import datetime as dt

import pyarrow as pa
import pytest
from dagster import AssetCheckSeverity, DailyPartitionsDefinition, asset, validate_run_config

from orchestration import shuffle_expiry_job, shuffle_metadata
from orchestration.checks import gone_windows, readability
from orchestration.maintenance import ExpiryConfig
from orchestration.shuffle import Commit, Layout, ShuffleLog, ShuffleOptionError
from orchestration.shuffle.core.commitlog import PartitionRange
from orchestration.shuffle.core.retention import marker

NOW = dt.datetime(2024, 6, 1, tzinfo=dt.UTC)
LAYOUT = Layout("t", ("k",), 1, 4, pa.schema([pa.field("k", pa.string())]))


def commit(run_id: str, window: str | None) -> Commit:
    parts = {0: PartitionRange(0, 1, 3, 1)}
    return Commit(run_id, window, NOW.isoformat(), ((0, 0),), parts, 3, 10, 1)


def log_of(*records) -> ShuffleLog:
    return ShuffleLog.from_records("t", [("layout", LAYOUT.to_json()), *records])


def expired(c: Commit, reason: str) -> tuple[str, str]:
    return (f"expired/{c.run_id}", marker(c, reason, NOW).to_json())


def test_readable_expired_and_missing_windows():
    d1, d2 = commit("r1", "d1"), commit("r2", "d2")
    log = log_of(expired(d1, "not among the 1 most recent windows"), ("commit/r2", d2.to_json()))
    assert set(gone_windows(log, partitioned=True)) == {"d1"}

    ok = readability(log, ["d2"])
    assert ok.passed and ok.description is None and ok.metadata == {"readable": 1}

    gone = readability(log, ["d1"])
    assert not gone.passed and gone.severity == AssetCheckSeverity.WARN
    assert gone.description == (
        f"window d1: its last run r1 expired {NOW.isoformat()}: not among the 1 most recent windows"
    )
    md = {k: getattr(v, "value", v) for k, v in gone.metadata.items()}
    assert md["shuffle/expired"] is True and md["shuffle/run_id"] == "r1"
    assert md["shuffle/expiry_reason"] == "not among the 1 most recent windows"
    assert md["shuffle/expired_at"] == NOW.timestamp()

    # A window that never had a run is an error, not retention's doing.
    both = readability(log, ["d1", "d2", "d9"])
    assert not both.passed and both.severity == AssetCheckSeverity.ERROR
    assert both.description.endswith("window d9: no committed run")
    assert both.metadata["readable"] == 1
    assert list(both.metadata["expired"].value) == ["d1"]
    assert both.metadata["missing"].value == ["d9"]


def test_an_unpartitioned_shuffle_is_gone_when_its_last_run_is():
    first, last = commit("r1", None), commit("r2", None)
    alive = log_of(expired(first, "older than 1 day"), ("commit/r2", last.to_json()))
    assert gone_windows(alive, partitioned=False) == {}
    assert readability(alive, None).passed
    both = log_of(expired(first, "older than 1 day"), expired(last, "older than 1 day"))
    assert gone_windows(both, partitioned=False)[None].run_id == "r2"
    found = readability(both, None)
    assert not found.passed and found.severity == AssetCheckSeverity.WARN
    assert found.description.startswith("the asset: its last run r2 expired")


def test_records_readers_skip_are_named_and_a_window_they_may_hide_is_an_error():
    d1, d2 = commit("r1", "d1"), commit("r2", "d2")
    log = log_of(
        ("commit/r1", d1.to_json()),
        ("user-42", '{"event": "click"}'),
        ("commit/r3", '{"run_id": "r3", "window": "d1", "commi'),
        ("commit/r2", d2.to_json()),
    )
    # d2 is not affected: the foreign record and the cut commit (of d1) are a warning.
    ok = readability(log, ["d2"])
    assert not ok.passed and ok.severity == AssetCheckSeverity.WARN
    assert ok.description == (
        "commit log t__commits has 2 record(s) readers skip: 'user-42' at offset 2; "
        "'commit/r3' at offset 3"
    )
    assert [b["offset"] for b in ok.metadata["bad_records"].value] == [2, 3]
    assert ok.metadata["readable"] == 1
    # d1's latest readable run is older than a commit of d1 that cannot be read.
    hidden = readability(log, ["d1", "d2"])
    assert not hidden.passed and hidden.severity == AssetCheckSeverity.ERROR
    assert hidden.description.startswith(
        "shuffle 't': window 'd1' cannot be read: record 'commit/r3' at partition 0 offset 3"
    )
    assert hidden.metadata["readable"] == 1


@asset(
    partitions_def=DailyPartitionsDefinition(start_date="2024-05-01"),
    io_manager_key="shuffle_io",
    metadata=shuffle_metadata(key="k", num_partitions=1, topic="t"),
)
def events() -> None: ...


def test_expiry_job_config_holds_the_ages_and_the_status():
    job = shuffle_expiry_job(
        "x", asset=events, keep_last=3, older_than_hours=1.5, min_age_minutes=0
    )
    # The factory's arguments are the defaults of the job's run config, in the same units.
    fields = job.graph.node_defs[0].config_schema.config_type.fields
    defaults = {name: f.default_value for name, f in fields.items()}
    assert defaults == {
        "keep_last": 3,
        "older_than_hours": 1.5,
        "min_age_minutes": 0,
        "reconcile_status": "check",
    }
    # A run that sets one field keeps the job's others.
    done = validate_run_config(job, {"ops": {"x_expire": {"config": {"min_age_minutes": 5}}}})
    ages = done["ops"]["x_expire"]["config"]
    assert ages == {
        "keep_last": 3,
        "older_than_hours": 1.5,
        "min_age_minutes": 5,
        "reconcile_status": "check",
    }
    assert ExpiryConfig(**ages).ages() == (dt.timedelta(minutes=90), dt.timedelta(minutes=5))


def test_old_age_arguments_fail_clearly():
    with pytest.raises(TypeError, match="older_than"):
        shuffle_expiry_job("x", asset=events, older_than=dt.timedelta(hours=1))


@pytest.mark.parametrize("given", [True, False, "forget"])
def test_reconcile_status_takes_check_or_wipe(given):
    with pytest.raises(ShuffleOptionError, match=r"reconcile_status=.*use 'check' .*'wipe'"):
        shuffle_expiry_job("x", asset=events, reconcile_status=given)
