"""The pytest plugin installed with the package (entry point ``pytest11``): fixtures for
testing a project's shuffle assets against a real Kafka broker and SparkSession.

- ``shuffle_kafka`` (session): a :class:`~orchestration.KafkaResource` of the test cluster:
  the one ``KAFKA_BOOTSTRAP_SERVERS`` names, else a single-node broker started once per test
  session from Kafka's jars (fetched once into a cache; see
  :mod:`orchestration.testing.broker`) with the Java runtime Spark uses.
- ``shuffle_spark`` (session): a local SparkSession, built as ``ShuffleSparkResource`` builds
  one (the JVM read path when the package's jar is there).
- ``shuffle_topic_prefix`` (per test): a topic prefix of the test's own.
- ``shuffle_io_manager`` (per test): a ``KafkaShuffleIOManager`` of that cluster whose topics
  carry that prefix, so no two tests (or two runs of one) see each other's shuffles.

A project overrides any of them in its ``conftest.py`` as any fixture, e.g. ``shuffle_kafka``
for a cluster that needs credentials. Only pytest and the standard library are imported
when pytest loads the plugin: a session that uses none of the fixtures pays for nothing.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from orchestration.io_manager import KafkaShuffleIOManager
    from orchestration.resources import KafkaResource

# What the plugin's SparkSession is built with; a test may change session settings itself.
SPARK_CONFIG = {
    "spark.master": "local[2]",
    "spark.app.name": "kafka-shuffle-tests",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
}


@pytest.fixture(scope="session")
def shuffle_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaResource]:
    """The test cluster: ``KAFKA_BOOTSTRAP_SERVERS`` if set, else a broker of this session."""
    from orchestration.resources import KafkaResource

    servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if servers:
        resource = KafkaResource(bootstrap_servers=servers)
        # A cluster that is not there fails the first test that needs it, saying so.
        resource.check()
        yield resource
        return
    from orchestration.testing.broker import start_kafka

    with start_kafka(tmp_path_factory.mktemp("kafka")) as broker:
        yield KafkaResource(bootstrap_servers=broker.bootstrap_servers)


@pytest.fixture(scope="session")
def shuffle_spark(shuffle_kafka: KafkaResource) -> Iterator[SparkSession]:
    """A local SparkSession for the session's tests, stopped at the end."""
    from pyspark.sql import SparkSession

    from orchestration.resources import ShuffleSparkResource

    # Spark's Python workers must run this interpreter: it has the project and pyarrow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = ShuffleSparkResource(kafka=shuffle_kafka, spark_config=SPARK_CONFIG).session_config()
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    yield spark
    spark.stop()


@pytest.fixture
def shuffle_topic_prefix(request: pytest.FixtureRequest) -> str:
    """``t-<test name>-<random>.``: unique per test and per run, and legible in a topic list."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name).strip("-")[:60]
    return f"t-{name}-{uuid.uuid4().hex[:8]}."


@pytest.fixture
def shuffle_io_manager(
    shuffle_kafka: KafkaResource, shuffle_spark: SparkSession, shuffle_topic_prefix: str
) -> KafkaShuffleIOManager:
    """A ``KafkaShuffleIOManager`` of the test cluster; its topics carry the test's prefix.
    It reads with ``shuffle_spark`` (the active session)."""
    from orchestration.io_manager import KafkaShuffleIOManager

    # Built anew, not model_copy()'d: Dagster rebuilds a resource from the arguments it was
    # constructed with, so a copied field would be lost when a run sets the resource up.
    fields = {name: getattr(shuffle_kafka, name) for name in type(shuffle_kafka).model_fields}
    kafka = type(shuffle_kafka)(**{**fields, "topic_prefix": shuffle_topic_prefix})
    return KafkaShuffleIOManager(kafka=kafka)
