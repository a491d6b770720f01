"""The Dagster guide's "Watching a shuffle" tables name every key the watching pieces record,
every check they judge and every sensor that judges them, as the code makes them: a key, a
check or a sensor added without a row fails here."""

import datetime as dt
import re
from pathlib import Path

import pytest
from dagster import AssetKey, DailyPartitionsDefinition, asset

import orchestration
from orchestration import shuffle_asset_checks, shuffle_consumer_checks, shuffle_metadata
from orchestration.metadata import Lag, lag_metadata, progress_metadata
from orchestration.shuffle import Commit
from orchestration.shuffle.core.commitlog import PartitionRange, to_micros

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "dagster.md"
DAILY = DailyPartitionsDefinition(start_date="2024-01-01")


def section() -> str:
    text = GUIDE.read_text()
    found = re.search(r"^## Watching a shuffle\n(.*?)^## ", text, re.S | re.M)
    assert found, "the guide has a section 'Watching a shuffle'"
    return found.group(1)


def table_cells() -> str:
    """The first cells of the section's table rows: what the tables name."""
    return "\n".join(
        line.split("|")[1] for line in section().splitlines() if line.startswith("| `")
    )


def a_commit() -> Commit:
    start = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    return Commit(
        run_id="r1",
        window="2024-01-01",
        committed_at=(start + dt.timedelta(days=1, hours=1)).isoformat(),
        tasks=((0, 0),),
        partitions={0: PartitionRange(0, 0, 1, 1)},
        rows=1,
        bytes=1,
        frames=1,
        event_time_min=to_micros(start),
        event_time_max=to_micros(start + dt.timedelta(hours=2)),
        complete_until=to_micros(start + dt.timedelta(days=1)),
    )


def recorded_keys() -> set[str]:
    """Every key the shuffle's progress and a consumer's lag record, all present at once."""
    commit = a_commit()
    progress = progress_metadata(commit, shuffle_watermark=commit.complete_until)
    lag = lag_metadata(Lag((commit,), dt.datetime(2024, 1, 3, tzinfo=dt.UTC)), [commit])
    return set(progress) | set(lag)


@pytest.mark.parametrize("key", sorted(recorded_keys()))
def test_every_key_recorded_is_in_a_table(key):
    # A number the plots draw has a row of its own; a timestamp or a list beside it may be
    # named in that row's text.
    where = table_cells() if key.endswith(("_s", "_windows")) else section()
    assert f"`{key}`" in where, key


def test_every_check_is_in_the_checks_table():
    @asset(
        partitions_def=DAILY,
        io_manager_key="shuffle_io",
        metadata=shuffle_metadata(key="k", num_partitions=2, event_time="ts"),
    )
    def events(): ...

    @asset(partitions_def=DAILY, deps=[events])
    def reader(): ...

    checks = [*shuffle_asset_checks(events), *shuffle_consumer_checks(events, [reader])]
    names = {key.name for c in checks for key in c.check_keys}
    # The checks that existed before the section are in the guide's list above it.
    new = names - {"shuffle_layout", "shuffle_rows", "shuffle_window_readable"}
    assert new == {
        "shuffle_event_times_in_window",
        "shuffle_watermark_progress",
        "shuffle_consumer_lag",
    }
    for name in new:
        assert f"`{name}`" in table_cells(), name
    assert AssetKey("reader") in {key.asset_key for c in checks for key in c.check_keys}


def test_every_watching_sensor_and_the_watermark_asset_are_named():
    cells = table_cells()
    watching = [n for n in orchestration.__all__ if n.endswith("_sensor")]
    for name in set(watching) - {"shuffle_commit_sensor", "failed_region_sensor"}:
        assert f"`{name}(" in cells, name
    assert "`shuffle_watermark_asset(" in section()
