"""The single Dagster composition root: ``workspace.yaml`` loads ``defs`` from here."""

from dagster import Definitions

from assets.pipeline import ALL_ASSETS, ALL_CHECKS, flights_shuffle_resource
from assets.stack_check import kafka_stack_check
from jobs.pipeline import ALL_JOBS, ALL_SCHEDULES, ALL_SENSORS
from orchestration.resources import (
    FaultInjection,
    KafkaResource,
    SparkResource,
    WarehouseResource,
)


def default_resources() -> dict:
    """The resources, configured from the environment (see README)."""
    return {
        "kafka": KafkaResource(),
        "spark": SparkResource(),
        "warehouse": WarehouseResource(),
        "shuffle": flights_shuffle_resource(),
        "faults": FaultInjection.from_env(),
    }


def build_defs(**overrides) -> Definitions:
    """The project's definitions; keyword arguments replace resources (tests use this)."""
    return Definitions(
        assets=[*ALL_ASSETS, kafka_stack_check],
        asset_checks=ALL_CHECKS,
        jobs=ALL_JOBS,
        schedules=ALL_SCHEDULES,
        sensors=ALL_SENSORS,
        resources={**default_resources(), **overrides},
    )


defs = build_defs()
