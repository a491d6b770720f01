"""Dagster on the real stack: the definitions load, and the stack-check asset materializes."""

import subprocess
import sys
from pathlib import Path

import pytest
from dagster import instance_for_test, materialize

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_definitions_validate():
    dagster = Path(sys.executable).with_name("dagster")
    proc = subprocess.run(
        [str(dagster), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_stack_check_asset_materializes(bootstrap, spark):
    from dagster_pyspark import LazyPySparkResource

    from assets.stack_check import STACK_CHECK_ROWS, kafka_stack_check
    from orchestration import KafkaResource

    with instance_for_test() as instance:
        result = materialize(
            [kafka_stack_check],
            instance=instance,
            resources={
                "kafka": KafkaResource(bootstrap_servers=bootstrap),
                "spark": LazyPySparkResource(spark_config={}),
            },
        )
    assert result.success
    md = result.asset_materializations_for_node("kafka_stack_check")[0].metadata
    assert md["produced"].value == STACK_CHECK_ROWS
    assert md["read_back"].value == STACK_CHECK_ROWS
