"""The reference pipeline's jobs, schedule and sensors."""

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
from orchestration import failed_region_sensor, shuffle_commit_sensor, shuffle_expiry_job

PRODUCER_JOB = "flights_producer_job"
COMMIT_SENSOR = "flights_shuffle_commit_sensor"
REGION_SENSOR = "flights_failed_region_sensor"
CONSUMER_JOBS = [f"{name}_job" for name in CONSUMERS]
RUNNING_TOTALS_JOB = f"{RUNNING_TOTALS}_job"
EXPIRY_JOB = "flights_shuffle_expiry_job"
ENRICHED_JOB = f"{ENRICHED}_job"
# Dagster's own run retries re-run a failed consumer run: one job, one day.
MAX_RETRIES_TAG = "dagster/max_retries"


@dataclass(frozen=True)
class FlightsJobs:
    jobs: list
    schedules: list
    sensors: list


def producer_jobs(shuffle, *, max_retries: int = 2) -> FlightsJobs:
    """The producer team's: the producer job and its daily schedule, the failed-region sensor
    that re-runs only the failed days of a producer run, and the nightly expiry of
    superseded runs of ``shuffle`` (the shuffle's ``AssetsDefinition``)."""
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
        ],
    )


def consumer_jobs(shuffle, *, max_retries: int = 2) -> FlightsJobs:
    """The consumer team's: one job per consumer (retried by Dagster up to ``max_retries``
    times), the running totals' and the enrichment's jobs, and the commit sensor that
    launches the consumers of each complete day of ``shuffle`` (the producer's
    ``AssetsDefinition`` in one location, its ``AssetSpec`` in a location of its own)."""
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
        schedules=[],
        sensors=[shuffle_commit_sensor(COMMIT_SENSOR, asset=shuffle, jobs=per_day)],
    )


def flights_jobs(pipeline: FlightsPipeline, *, max_retries: int = 2) -> FlightsJobs:
    """Both teams' jobs, schedules and sensors, for the whole pipeline in one location."""
    producer = producer_jobs(pipeline.shuffle, max_retries=max_retries)
    consumers = consumer_jobs(pipeline.shuffle, max_retries=max_retries)
    return FlightsJobs(
        jobs=[*producer.jobs, *consumers.jobs],
        schedules=[*producer.schedules, *consumers.schedules],
        sensors=[*consumers.sensors, *producer.sensors],
    )
