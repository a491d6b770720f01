"""A shuffle's progress as Dagster is told it, from commit records alone: the numbers its
plots draw (progress_metadata), a run whose rows fall outside its window (outside_window),
and whether the watermark keeps advancing (watermark_progress, the cadence it expects)."""

import datetime as dt

import pyarrow as pa
import pytest
from dagster import (
    AssetCheckSeverity,
    AssetMaterialization,
    DailyPartitionsDefinition,
    FloatMetadataValue,
    HourlyPartitionsDefinition,
    IntMetadataValue,
    MetadataValue,
    StaticPartitionsDefinition,
)

from orchestration.checks import (
    DEFAULT_CADENCE,
    default_stall_after,
    expected_cadence,
    runs_outside_windows,
    watermark_progress,
)
from orchestration.metadata import (
    PROGRESS_SERIES,
    commit_metadata,
    outside_window,
    progress_metadata,
    watermark_as_of,
    window_bounds,
)
from orchestration.shuffle import Commit, Layout, ShuffleLog
from orchestration.shuffle.core.commitlog import PartitionRange, to_micros

UTC = dt.UTC
DAY = dt.timedelta(days=1)
DAILY = DailyPartitionsDefinition(start_date="2024-01-01")
LAYOUT = Layout(
    topic="events.by_user",
    key=("user_id",),
    num_partitions=2,
    max_parallelism=8,
    schema=pa.schema([("user_id", pa.string()), ("ts", pa.timestamp("us", tz="UTC"))]),
    event_time="ts",
)


def at(day: int, hour: int = 0) -> dt.datetime:
    """A time of January 2024 (UTC)."""
    return dt.datetime(2024, 1, day, hour, tzinfo=UTC)


def commit(
    day: int,
    *,
    committed: dt.datetime,
    run_id: str | None = None,
    rows_from: dt.datetime | None = None,
    rows_to: dt.datetime | None = None,
    complete: bool = True,
) -> Commit:
    """The run of window 2024-01-<day>, complete until the day's end, its rows inside the day
    unless told."""
    start = at(day)
    return Commit(
        run_id=run_id or f"r{day}-{committed.isoformat()}",
        window=start.date().isoformat(),
        committed_at=committed.isoformat(),
        tasks=((0, 0),),
        partitions={0: PartitionRange(0, 0, 1, 1)},
        rows=1,
        bytes=10,
        frames=1,
        event_time_min=to_micros(rows_from or start + dt.timedelta(hours=1)),
        event_time_max=to_micros(rows_to or start + dt.timedelta(hours=23)),
        complete_until=to_micros(start + DAY) if complete else None,
    )


def test_progress_is_numbers_dagster_plots_and_timestamps_to_read():
    c = commit(1, committed=at(2, 1))
    md = progress_metadata(c, shuffle_watermark=to_micros(at(3)))
    assert md["shuffle/watermark_epoch_s"] == at(2).timestamp()
    assert md["shuffle/shuffle_watermark_epoch_s"] == at(3).timestamp()
    assert md["shuffle/event_time_min_epoch_s"] == at(1, 1).timestamp()
    assert md["shuffle/event_time_max_epoch_s"] == at(1, 23).timestamp()
    # The window ended at midnight; the run committed an hour later.
    assert md["shuffle/commit_delay_s"] == 3600.0
    assert md["shuffle/shuffle_watermark"] == MetadataValue.timestamp(at(3))
    assert md["shuffle/event_time_min"] == MetadataValue.timestamp(at(1, 1))
    # Dagster's plots draw int and float entries: every series is one once normalized.
    normalized = AssetMaterialization(asset_key="events_by_user", metadata=md).metadata
    for key in PROGRESS_SERIES:
        assert isinstance(normalized[key], FloatMetadataValue | IntMetadataValue), key


def test_commit_metadata_carries_the_progress_and_dagster_takes_it():
    c = commit(1, committed=at(2, 1))
    md = commit_metadata(
        c, LAYOUT, {"bootstrap.servers": "k:1"}, shuffle_watermark=to_micros(at(2))
    )
    assert set(PROGRESS_SERIES) <= set(md)
    # The timestamp stays beside its number.
    assert md["shuffle/watermark"] == MetadataValue.timestamp(at(2))
    AssetMaterialization(asset_key="events_by_user", partition=c.window, metadata=md)


def test_window_end_given_wins_and_a_run_without_one_has_no_delay():
    c = commit(1, committed=at(2, 1), complete=False)
    assert "shuffle/commit_delay_s" not in progress_metadata(c)
    md = progress_metadata(c, window_end=at(2, 2))
    # Committed before the window ended: negative.
    assert md["shuffle/commit_delay_s"] == -3600.0
    unwindowed = Commit("u", None, at(2).isoformat(), ((0, 0),), {}, 0, 0, 0)
    assert progress_metadata(unwindowed) == {}


def test_rows_outside_their_window_are_named():
    inside = commit(1, committed=at(2))
    assert outside_window(inside, *window_bounds(DAILY, inside.window)) is None
    # A producer that read every day instead of its own.
    wrong = commit(1, committed=at(2), rows_from=at(1), rows_to=at(5, 6), run_id="r-all")
    message = outside_window(wrong, *window_bounds(DAILY, wrong.window))
    assert message is not None
    assert "run r-all of window 2024-01-01" in message
    assert "2024-01-05T06:00:00+00:00" in message and "2024-01-02T00:00:00+00:00" in message
    # The window's end is not in the window.
    at_end = commit(1, committed=at(2), rows_to=at(2))
    assert outside_window(at_end, *window_bounds(DAILY, at_end.window)) is not None
    assert runs_outside_windows([inside, wrong, at_end], DAILY) == [
        outside_window(c, *window_bounds(DAILY, c.window)) for c in (wrong, at_end)
    ]
    # No time windows: nothing to hold to.
    assert window_bounds(StaticPartitionsDefinition(["a"]), "a") is None
    assert runs_outside_windows([wrong], None) == []


def test_cadence_comes_from_the_partitions():
    assert expected_cadence(DAILY) == DAY
    assert expected_cadence(HourlyPartitionsDefinition(start_date="2024-01-01-00:00")) == (
        dt.timedelta(hours=1)
    )
    assert expected_cadence(None) == expected_cadence(StaticPartitionsDefinition(["a"]))
    assert expected_cadence(None) == DEFAULT_CADENCE
    assert default_stall_after(DAILY) == dt.timedelta(hours=30)


def log_of(*commits: Commit) -> ShuffleLog:
    return ShuffleLog("events.by_user", LAYOUT, list(commits))


STALL = dt.timedelta(hours=30)


@pytest.mark.parametrize(
    ("now", "passed", "severity"),
    [
        (at(3, 8), True, AssetCheckSeverity.WARN),  # 29 h after the last advance
        (at(3, 10), False, AssetCheckSeverity.WARN),  # 31 h: a day went by with no commit
        (at(4, 14), False, AssetCheckSeverity.WARN),  # 59 h: not yet twice the limit
        (at(4, 16), False, AssetCheckSeverity.ERROR),  # 61 h
    ],
)
def test_a_watermark_that_stands_still_fails_then_errs(now, passed, severity):
    log = log_of(commit(1, committed=at(2, 1)), commit(2, committed=at(2, 3)))
    progress = watermark_progress(log, now, STALL)
    assert progress.advanced_at == at(2, 3)
    assert (progress.passed, progress.severity) == (passed, severity)
    result = progress.result()
    assert result.passed is passed
    assert result.metadata["watermark_epoch_s"].value == at(3).timestamp()
    assert ("stalled" in progress.description) is not passed


def test_a_rerun_of_an_old_window_is_not_progress():
    first, second = commit(1, committed=at(2, 1)), commit(2, committed=at(3, 1))
    rerun_old = commit(1, committed=at(5, 0), run_id="again-1")
    rerun_latest = commit(2, committed=at(5, 1), run_id="again-2")
    progress = watermark_progress(log_of(first, second, rerun_old, rerun_latest), at(5, 2), STALL)
    assert progress.advanced_at == at(3, 1)
    assert not progress.passed
    # A new window is.
    later = commit(3, committed=at(5, 2))
    assert watermark_progress(log_of(first, second, later), at(5, 3), STALL).passed


def test_without_watermarks_each_commit_is_progress_and_nothing_committed_passes():
    c = commit(1, committed=at(2), complete=False)
    c = Commit(**{**c.__dict__, "event_time_min": None, "event_time_max": None})
    progress = watermark_progress(log_of(c), at(3, 7), STALL)
    assert progress.watermark is None and progress.advanced_at == at(2)
    assert not progress.passed and "no run declares a watermark" in progress.description
    empty = watermark_progress(log_of(), at(3), STALL)
    assert empty.passed and empty.idle is None
    assert "nothing committed" in empty.description


def test_the_shuffle_watermark_is_as_of_each_commit():
    # A range run's windows, recorded together after the last committed, each show the
    # shuffle's watermark as their own commit left it; a re-run of an old day, the furthest.
    one, two, three = (commit(d, committed=at(4, d)) for d in (1, 2, 3))
    rerun = commit(1, committed=at(5), run_id="again")
    log = log_of(one, two, three, rerun)
    assert [watermark_as_of(log, c) for c in (one, two, three, rerun)] == [
        to_micros(at(2)),
        to_micros(at(3)),
        to_micros(at(4)),
        to_micros(at(4)),
    ]


def test_the_spark_ui_is_linked_only_when_there_is_one():
    from types import SimpleNamespace

    from orchestration.metadata import spark_ui_url

    on = SimpleNamespace(sparkContext=SimpleNamespace(uiWebUrl="http://127.0.0.1:4040"))
    off = SimpleNamespace(sparkContext=SimpleNamespace(uiWebUrl=None))

    class Connect:  # a Spark Connect session has no SparkContext
        @property
        def sparkContext(self):
            raise RuntimeError("[JVM_ATTRIBUTE_NOT_SUPPORTED]")

    assert spark_ui_url(on) == "http://127.0.0.1:4040"
    assert spark_ui_url(off) is None and spark_ui_url(Connect()) is None
