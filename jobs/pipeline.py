"""The reference pipeline's jobs, schedule and sensors."""

import os

from dagster import build_schedule_from_partitioned_job, define_asset_job

from assets.flights_data import day_end_utc
from assets.pipeline import CONSUMERS, FLIGHTS, FLIGHTS_BY_TAILNUM, MISSING_TAILNUM
from orchestration.sensors import failed_region_sensor, shuffle_commit_sensor

producer_job = define_asset_job(
    "flights_producer_job",
    selection=[FLIGHTS, FLIGHTS_BY_TAILNUM, MISSING_TAILNUM],
    description="Loads a day of flights and writes it to the shuffle topic as one committed run.",
)

consumer_jobs = [
    define_asset_job(
        f"{name}_job",
        selection=[name],
        description=f"Reads one day of the shuffle and materializes {name}.",
    )
    for name in CONSUMERS
]

producer_schedule = build_schedule_from_partitioned_job(producer_job, hour_of_day=1)

commit_sensor = shuffle_commit_sensor(
    "flights_shuffle_commit_sensor", consumer_jobs, window_end=day_end_utc
)

region_sensor = failed_region_sensor(
    "flights_failed_region_sensor",
    [producer_job, *consumer_jobs],
    max_retries=int(os.environ.get("SHUFFLE_MAX_RETRIES", "2")),
)

ALL_JOBS = [producer_job, *consumer_jobs]
ALL_SENSORS = [commit_sensor, region_sensor]
ALL_SCHEDULES = [producer_schedule]
