"""The soak's Dagster code location: a daily shuffle produced in range runs, three consumers
the commit sensor launches, the failed-region sensor, and the expiry job every minute.

Built from the library's public API as a user's project would be. Its environment (set by
``devstack.soak``): ``KAFKA_BOOTSTRAP_SERVERS``, ``SPARK_MASTER``, ``SOAK_OUT`` (outputs,
fault files, the stop file), ``SOAK_TOPIC``, ``SOAK_ROWS_PER_DAY``, ``SOAK_DAYS_PER_RUN``,
``SOAK_KEEP_LAST``.

Each day's rows are a pure function of the day (:func:`expected_day`), so every output can
be checked against what it must hold without reading Kafka.

Faults arrive as files in ``<SOAK_OUT>/faults``: ``producer-<day>`` makes the next write of
that day fail as a write whose tasks all fail does (its frames reach Kafka, nothing is
committed); ``consumer-<asset>-<day>`` makes that consumer's next run of the day fail. Each
file is used up by the run that takes it, which records when in ``<SOAK_OUT>/events.jsonl``.
"""

import contextlib
import datetime as dt
import json
import os
import shutil
import time
import warnings
from pathlib import Path

import pandas as pd
from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetSpec,
    BackfillPolicy,
    DagsterRunStatus,
    DailyPartitionsDefinition,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    Definitions,
    EnvVar,
    MaterializeResult,
    RunRequest,
    RunsFilter,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SensorEvaluationContext,
    SkipReason,
    asset,
    define_asset_job,
    in_process_executor,
    sensor,
)
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from orchestration import (
    KafkaResource,
    KafkaShuffleIOManager,
    ShuffleSparkResource,
    failed_region_sensor,
    shuffle_asset_checks,
    shuffle_commit_sensor,
    shuffle_expiry_job,
    shuffle_metadata,
    shuffle_pool,
)
from orchestration.shuffle import apply_per_key, session_settings
from orchestration.shuffle.testing import fail_window_writes

# Single-run backfills (one Spark session for a range of days) are a beta Dagster feature.
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=Warning)

FIRST_DAY = "2000-01-01"
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
PRODUCER_JOB = "soak_producer_job"
CONSUMERS = ("soak_rows", "soak_per_key", "soak_totals")
KEYS = 503
ACTIVE = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
          DagsterRunStatus.STARTED]  # fmt: skip


def out_dir() -> Path:
    return Path(os.environ.get("SOAK_OUT", ".local/soak"))


def rows_per_day() -> int:
    return int(os.environ.get("SOAK_ROWS_PER_DAY", "20000"))


def day_index(day: str) -> int:
    return (dt.date.fromisoformat(day) - dt.date.fromisoformat(FIRST_DAY)).days


def expected_day(day: str, rows: int) -> pd.DataFrame:
    """The rows of ``day``: ids unique across days, keys spread over :data:`KEYS` values."""
    import numpy as np

    i = np.arange(rows, dtype="int64")
    return pd.DataFrame(
        {"id": day_index(day) * 10_000_000 + i, "key": (i * 7919) % KEYS, "day": day}
    )


def record(event: str, **fields) -> None:
    """Appends one event to the soak's timeline (lines are short: one write is atomic)."""
    line = json.dumps({"t": time.time(), "event": event, **fields}) + "\n"
    with open(out_dir() / "events.jsonl", "a") as f:
        f.write(line)


def take_fault(name: str) -> bool:
    """Uses up the fault file ``name`` if present (a rename: only one run takes it)."""
    path = out_dir() / "faults" / name
    try:
        path.rename(path.with_suffix(".taken"))
    except FileNotFoundError:
        return False
    return True


daily = DailyPartitionsDefinition(start_date=FIRST_DAY)
TOPIC = os.environ.get("SOAK_TOPIC", "soak.events")
_held = contextlib.ExitStack()


LAYOUT = shuffle_metadata(
    key="key",
    num_partitions=6,
    max_parallelism=60,
    event_time="ts",
    topic=TOPIC,
    window_column="day",
    replication_factor=3,
)


@asset(
    partitions_def=daily,
    backfill_policy=BackfillPolicy.single_run(),
    io_manager_key="shuffle_io",
    metadata=LAYOUT,
    pool=shuffle_pool(TOPIC),
)
def soak_events(context: AssetExecutionContext, spark: ShuffleSparkResource) -> DataFrame:
    rows = rows_per_day()
    for day in context.partition_keys:
        if take_fault(f"producer-{day}"):
            # Left entered for the run's process: the IO manager's write of the day fails.
            _held.enter_context(fail_window_writes(day, topic=TOPIC))
            record("fault_taken", kind="producer_run_fails", day=day, run=context.run_id)
    session = spark.spark_session
    days = session.createDataFrame([(d, day_index(d)) for d in context.partition_keys],
                                   "day string, d long")  # fmt: skip
    ids = session.range(0, rows, numPartitions=4)
    return days.crossJoin(ids).select(
        (F.col("d") * 10_000_000 + F.col("id")).alias("id"),
        ((F.col("id") * 7919) % KEYS).alias("key"),
        "day",
        F.timestamp_seconds(
            F.unix_timestamp(F.to_timestamp("day")) + F.floor(F.col("id") * 86400 / rows)
        ).alias("ts"),
    )


def _consumer_fails(name: str, day: str, run_id: str) -> None:
    if take_fault(f"consumer-{name}-{day}"):
        record("fault_taken", kind="consumer_run_fails", asset=name, day=day, run=run_id)
        raise RuntimeError(f"injected failure of {name} for {day} (once)")


def _write(df: DataFrame, name: str, day: str, run_id: str) -> str:
    """The day's output, replaced whole: written under a hidden name of this run, then
    swapped in. Two runs of one day (a superseding run's consumer beside the first's) may
    write at once; Spark's own overwrite of one folder by both left a mix of their files."""
    final = out_dir() / "consumers" / name / f"day={day}"
    staged = final.parent / f".day={day}.{run_id}"
    df.write.mode("overwrite").parquet(str(staged))
    for _ in range(100):
        old = final.parent / f".day={day}.{run_id}.old.{time.monotonic_ns()}"
        with contextlib.suppress(FileNotFoundError):
            final.rename(old)
        try:
            staged.rename(final)
        except OSError:  # another run's output came in between: take it out again
            continue
        finally:
            shutil.rmtree(old, ignore_errors=True)
        return str(final)
    raise RuntimeError(f"could not put {name}'s output for {day} in place")


@asset(partitions_def=daily)
def soak_rows(context: AssetExecutionContext, soak_events: DataFrame) -> MaterializeResult:
    """Every row of the day, as read."""
    day = context.partition_key
    _consumer_fails("soak_rows", day, context.run_id)
    path = _write(soak_events.select("id", "key", "day"), "soak_rows", day, context.run_id)
    return MaterializeResult(metadata={"path": path})


def per_key(pdf: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "key": [int(pdf["key"].iloc[0])],
            "n": [len(pdf)],
            "id_sum": [int(pdf["id"].sum())],
            "distinct_ids": [int(pdf["id"].nunique())],
        }
    )


@asset(partitions_def=daily)
def soak_per_key(context: AssetExecutionContext, soak_events: DataFrame) -> MaterializeResult:
    """Per key (``apply_per_key``, no Exchange): rows, distinct ids and the ids' sum."""
    day = context.partition_key
    _consumer_fails("soak_per_key", day, context.run_id)
    schema = "key long, n long, id_sum long, distinct_ids long"
    path = _write(
        apply_per_key(soak_events, "key", per_key, schema), "soak_per_key", day, context.run_id
    )
    return MaterializeResult(metadata={"path": path})


@asset(partitions_def=daily)
def soak_totals(context: AssetExecutionContext, soak_events: DataFrame) -> MaterializeResult:
    """Per key with Spark's own ``groupBy`` over the keyed read."""
    day = context.partition_key
    _consumer_fails("soak_totals", day, context.run_id)
    totals = soak_events.groupBy("key").agg(
        F.count(F.lit(1)).alias("n"), F.sum("id").alias("id_sum")
    )
    path = _write(totals, "soak_totals", day, context.run_id)
    return MaterializeResult(metadata={"path": path})


producer_job = define_asset_job(PRODUCER_JOB, selection=[soak_events])
consumer_jobs = [
    define_asset_job(f"{name}_job", selection=[name], tags={"dagster/max_retries": "2"})
    for name in CONSUMERS
]


@sensor(job=producer_job, minimum_interval_seconds=10, default_status=DefaultSensorStatus.RUNNING)
def soak_producer_sensor(context: SensorEvaluationContext):
    """Launches the next days as one range run while the consumers keep up: at most one
    producer run at a time, and no more than four days produced but not yet consumed. Every
    fourth run starts a day early, re-running the last day (a superseded run for expiry)."""
    if (out_dir() / "stop-producing").exists():
        return SkipReason("the soak is draining")
    instance = context.instance
    if instance.get_runs(RunsFilter(job_name=PRODUCER_JOB, statuses=ACTIVE), limit=1):
        return SkipReason("a producer run is in progress")
    produced = instance.get_materialized_partitions(AssetKey("soak_events"))
    consumed = set(produced)
    for name in CONSUMERS:
        consumed &= instance.get_materialized_partitions(AssetKey(name))
    if len(set(produced) - consumed) > 4:
        return SkipReason(f"{len(set(produced) - consumed)} days wait for their consumers")
    cursor = json.loads(context.cursor) if context.cursor else {"next": FIRST_DAY, "runs": 0}
    first = dt.date.fromisoformat(cursor["next"])
    if cursor["runs"] % 4 == 3 and cursor["next"] != FIRST_DAY:
        first -= dt.timedelta(days=1)
    last = dt.date.fromisoformat(cursor["next"]) + dt.timedelta(
        days=int(os.environ.get("SOAK_DAYS_PER_RUN", "2")) - 1
    )
    context.update_cursor(
        json.dumps({"next": (last + dt.timedelta(days=1)).isoformat(), "runs": cursor["runs"] + 1})
    )
    return RunRequest(
        run_key=f"range-{first}-{last}-{cursor['runs']}",
        tags={RANGE_START: first.isoformat(), RANGE_END: last.isoformat()},
    )


kafka = KafkaResource(bootstrap_servers=EnvVar("KAFKA_BOOTSTRAP_SERVERS"))
RUN_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
spark = ShuffleSparkResource(
    spark_config={
        **session_settings(os.environ.get("SPARK_MASTER", "local[2]")),
        "spark.app.name": "soak-run",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.memory": "1g",
        "spark.executor.memory": "768m",
        # One executor of two cores: one JVM to start per run, not two.
        "spark.cores.max": "2",
        "spark.executor.cores": "2",
        # A run's JVMs live a few minutes: the C1 compiler only and the serial collector cut
        # the CPU a session takes to start and run a small job by some 40% (25 s to 14.5 s
        # alone on 2 cores), on a machine the soak over-subscribes.
        "spark.driver.extraJavaOptions": RUN_JVM_OPTIONS,
        "spark.executor.extraJavaOptions": RUN_JVM_OPTIONS,
        "spark.executorEnv.PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    },
    kafka=kafka,
)
expiry_job = shuffle_expiry_job(
    "soak_expiry_job",
    asset=soak_events,
    keep_last=int(os.environ.get("SOAK_KEEP_LAST", "30")),
    min_age_minutes=1,
)


def _no_expiry_pending(context: ScheduleEvaluationContext) -> bool:
    # Every two minutes once the shuffle exists, unless the last one has not run yet (a
    # queue behind a fault).
    instance = context.instance
    if instance.get_latest_materialization_event(AssetKey("soak_events")) is None:
        return False
    return not instance.get_runs(RunsFilter(job_name="soak_expiry_job", statuses=ACTIVE))


resources = {
    "kafka": kafka,
    "spark": spark,
    "shuffle_io": KafkaShuffleIOManager(kafka=kafka, spark=spark),
}

# Two code locations, as teams run them: the producer's and the consumers' (which declare the
# shuffle as an asset of another location).
producer_defs = Definitions(
    assets=[soak_events],
    asset_checks=shuffle_asset_checks(soak_events),
    jobs=[producer_job, expiry_job],
    schedules=[
        ScheduleDefinition(
            job=expiry_job,
            cron_schedule="*/2 * * * *",
            should_execute=_no_expiry_pending,
            default_status=DefaultScheduleStatus.RUNNING,
        )
    ],
    # Each run in one process: a subprocess per step would start Python again per check.
    executor=in_process_executor,
    sensors=[
        soak_producer_sensor,
        failed_region_sensor(
            "soak_failed_region_sensor",
            jobs=[producer_job],
            assets=[soak_events],
            max_retries=3,
            minimum_interval_seconds=10,
            default_status=DefaultSensorStatus.RUNNING,
        ),
    ],
    resources=resources,
)
soak_events_spec = AssetSpec(
    "soak_events", partitions_def=daily, metadata=LAYOUT
).with_io_manager_key("shuffle_io")
consumer_defs = Definitions(
    assets=[soak_events_spec, *[globals()[name] for name in CONSUMERS]],
    jobs=consumer_jobs,
    executor=in_process_executor,
    sensors=[
        shuffle_commit_sensor(
            "soak_commit_sensor",
            asset=soak_events_spec,
            jobs=consumer_jobs,
            minimum_interval_seconds=10,
            default_status=DefaultSensorStatus.RUNNING,
        ),
    ],
    resources=resources,
)
