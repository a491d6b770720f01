"""The reference pipeline's jobs, schedules and sensors: what launches each asset, and what
watches the shuffle and its consumers keep up."""

from dataclasses import dataclass

from dagster import ScheduleDefinition, build_schedule_from_partitioned_job, define_asset_job

from assets.enrichment import DEAD_LETTERS, ENRICHED
from assets.pipeline import (
    CONSUMERS,
    FLIGHTS,
    FLIGHTS_BY_TAILNUM,
    MISSING_TAILNUM,
    RUNNING_TOTALS,
    FlightsPipeline,
)
from orchestration import (
    failed_region_sensor,
    shuffle_commit_sensor,
    shuffle_expiry_job,
    shuffle_lag_sensor,
    shuffle_progress_sensor,
)

PRODUCER_JOB = "flights_producer_job"
COMMIT_SENSOR = "flights_shuffle_commit_sensor"
REGION_SENSOR = "flights_failed_region_sensor"
# Watch the shuffle's watermark (the producer team) and how far each consumer is behind (the
# consumer team), on every tick, whether anything is committed or not.
PROGRESS_SENSOR = "flights_shuffle_progress_sensor"
LAG_SENSOR = "flights_consumer_lag_sensor"
ENRICHED_SENSOR = "flights_enriched_commit_sensor"
CONSUMER_JOBS = [f"{name}_job" for name in CONSUMERS]
RUNNING_TOTALS_JOB = f"{RUNNING_TOTALS}_job"
# The running totals catch up with new commits once an hour.
RUNNING_TOTALS_CRON = "20 * * * *"
EXPIRY_JOB = "flights_shuffle_expiry_job"
ENRICHED_JOB = f"{ENRICHED}_job"
# Dagster's own run retries re-run a failed consumer run: one job, one day.
MAX_RETRIES_TAG = "dagster/max_retries"


@dataclass(frozen=True)
class FlightsJobs:
    jobs: list
    schedules: list
    sensors: list


def producer_jobs(shuffle, *, watermark=None, max_retries: int = 2) -> FlightsJobs:
    """The producer team's: the producer job and its daily schedule, the failed-region sensor
    that re-runs only the failed days of a producer run, the nightly expiry of superseded
    runs of ``shuffle`` (the shuffle's ``AssetsDefinition``), and the progress sensor that
    fails ``shuffle_watermark_progress`` when no new day is committed and materializes
    ``watermark`` (the shuffle's watermark asset) when one is."""
    producer_job = define_asset_job(
        PRODUCER_JOB,
        selection=[FLIGHTS, FLIGHTS_BY_TAILNUM, MISSING_TAILNUM],
        description="Loads days of flights and writes each to the shuffle as one committed run.",
    )
    # Superseded runs go every night; the daily runs of the last year stay.
    expiry_job = shuffle_expiry_job(EXPIRY_JOB, asset=shuffle, keep_last=366)
    return FlightsJobs(
        jobs=[producer_job, expiry_job],
        schedules=[
            build_schedule_from_partitioned_job(producer_job, hour_of_day=1),
            ScheduleDefinition(job=expiry_job, cron_schedule="0 3 * * *"),
        ],
        sensors=[
            # The shuffle asset too: its runs launched from the UI (an asset backfill, runs of
            # Dagster's implicit asset job) are retried as the producer job's are.
            failed_region_sensor(
                REGION_SENSOR, jobs=[producer_job], assets=[shuffle], max_retries=max_retries
            ),
            shuffle_progress_sensor(PROGRESS_SENSOR, asset=shuffle, watermark_asset=watermark),
        ],
    )


def consumer_jobs(shuffle, *, readers=(), max_retries: int = 2) -> FlightsJobs:
    """The consumer team's: one job per consumer (retried by Dagster up to ``max_retries``
    times), the running totals' and the enrichment's jobs; the commit sensors that launch
    the per-day consumers and the enrichment for each complete day of ``shuffle`` (the
    producer's ``AssetsDefinition`` in one location, its ``AssetSpec`` in a location of its
    own), the hourly schedule of the running totals, and the lag sensor that fails a
    reader's ``shuffle_consumer_lag`` when it falls behind (``readers``: the assets that
    read the shuffle)."""
    per_day = [
        define_asset_job(
            f"{name}_job",
            selection=[name],
            tags={MAX_RETRIES_TAG: str(max_retries)},
            description=f"Reads one day of the shuffle and materializes {name}.",
        )
        for name in CONSUMERS
    ]
    running_totals_job = define_asset_job(
        RUNNING_TOTALS_JOB,
        selection=[RUNNING_TOTALS],
        description="Brings the per-aircraft running totals up to date with new shuffle commits.",
    )
    enriched_job = define_asset_job(
        ENRICHED_JOB,
        selection=[ENRICHED, DEAD_LETTERS],
        tags={MAX_RETRIES_TAG: str(max_retries)},
        description="Enriches one day of the shuffle flight by flight through a Kafka share "
        "group, and reports that day's dead letters.",
    )
    return FlightsJobs(
        jobs=[*per_day, running_totals_job, enriched_job],
        schedules=[ScheduleDefinition(job=running_totals_job, cron_schedule=RUNNING_TOTALS_CRON)],
        sensors=[
            shuffle_commit_sensor(COMMIT_SENSOR, asset=shuffle, jobs=per_day),
            # COMMIT_SENSOR observes the commits no Dagster run materialized; this one
            # only launches, on its own ticks, so the slower enrichment holds nothing up.
            shuffle_commit_sensor(
                ENRICHED_SENSOR, asset=shuffle, jobs=[enriched_job], observe=False
            ),
            shuffle_lag_sensor(LAG_SENSOR, asset=shuffle, consumers=list(readers)),
        ],
    )


def flights_jobs(pipeline: FlightsPipeline, *, max_retries: int = 2) -> FlightsJobs:
    """Both teams' jobs, schedules and sensors, for the whole pipeline in one location."""
    producer = producer_jobs(
        pipeline.shuffle, watermark=pipeline.watermark, max_retries=max_retries
    )
    consumers = consumer_jobs(pipeline.shuffle, readers=pipeline.readers, max_retries=max_retries)
    return FlightsJobs(
        jobs=[*producer.jobs, *consumers.jobs],
        schedules=[*producer.schedules, *consumers.schedules],
        sensors=[*consumers.sensors, *producer.sensors],
    )
