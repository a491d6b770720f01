"""The single Dagster composition root: ``workspace.yaml`` loads ``defs`` from here."""

from dagster import Definitions

from assets.stack_check import kafka_stack_check
from orchestration.resources import KafkaResource, SparkResource

defs = Definitions(
    assets=[kafka_stack_check],
    resources={
        "kafka": KafkaResource(),
        "spark": SparkResource(),
    },
)
