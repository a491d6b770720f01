"""Dagster resources: typed access to Kafka and Spark. Thin wrappers over the engine."""

import os
from datetime import timedelta
from typing import Any

from dagster import ConfigurableResource, InitResourceContext
from pydantic import Field, PrivateAttr
from pyspark.sql import SparkSession

from orchestration import localstack
from orchestration.shuffle import ShuffleSpec
from orchestration.shuffle._kafka import check_reachable
from orchestration.shuffle.spark import spark_session


class KafkaResource(ConfigurableResource):
    """Connection settings of the Kafka cluster that holds the shuffle topics.

    Left empty, ``bootstrap_servers`` is ``$KAFKA_BOOTSTRAP_SERVERS`` or else the local
    broker started by ``python -m orchestration.localstack start``.

    Example::

        KafkaResource(
            bootstrap_servers=EnvVar("KAFKA_BOOTSTRAP_SERVERS"),
            security_protocol="SASL_SSL",
            sasl_mechanism="PLAIN",
            sasl_username=EnvVar("KAFKA_USER"),
            sasl_password=EnvVar("KAFKA_PASSWORD"),
        )
    """

    bootstrap_servers: str | None = Field(default=None, description="host:port[,host:port]")
    security_protocol: str | None = Field(default=None, description="PLAINTEXT, SSL, SASL_SSL...")
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    extra: dict[str, str] = Field(
        default_factory=dict, description="Any other librdkafka settings, by their dotted names."
    )

    def config(self) -> dict[str, Any]:
        """The librdkafka config dict for this cluster."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers or localstack.bootstrap_servers()
        }
        optional = {
            "security.protocol": self.security_protocol,
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "sasl.password": self.sasl_password,
        }
        conf.update({k: v for k, v in optional.items() if v})
        conf.update(self.extra)
        return conf

    def check(self) -> int:
        """Fails within seconds when no broker answers; returns the broker count."""
        return check_reachable(self.config())


class SparkResource(ConfigurableResource):
    """A lazily created SparkSession; local mode unless ``master`` says otherwise."""

    master: str | None = Field(
        default=None, description="Spark master; default $SPARK_MASTER or local[2]"
    )
    app_name: str = "kafka-shuffle"
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings")
    ui: bool = Field(default=False, description="Start the Spark UI")

    _session: SparkSession | None = PrivateAttr(default=None)

    @property
    def session(self) -> SparkSession:
        if self._session is None:
            self._session = spark_session(
                master=self.master, app_name=self.app_name, conf=self.conf, ui=self.ui
            )
        return self._session

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        # The in-process executor shares one JVM across a run's steps; stopping it here
        # would only make the next run pay start-up again, so the session is left alive
        # and stopped when the process exits.
        self._session = None


class WarehouseResource(ConfigurableResource):
    """Where asset outputs (Parquet) live: ``<path>/<asset_name>/day=YYYY-MM-DD/``.

    ``path`` defaults to ``$SHUFFLE_WAREHOUSE`` or ``.local/warehouse`` at the repository root.
    """

    path: str | None = Field(default=None, description="Root folder of the Parquet outputs")

    def root(self) -> str:
        default = str(localstack.ROOT / ".local" / "warehouse")
        return self.path or os.environ.get("SHUFFLE_WAREHOUSE") or default

    def day_path(self, asset_name: str, day: str) -> str:
        return f"{self.root()}/{asset_name}/day={day}"


class FaultInjection(ConfigurableResource):
    """Testing aid: makes chosen assets fail for chosen days (``"asset_name:YYYY-MM-DD"``).

    Empty by default; the tests use it to show that a failure stays in its region. Runs
    launched by a daemon get theirs from ``$SHUFFLE_INJECT_FAILURES`` (comma-separated).
    """

    fail: list[str] = Field(default_factory=list)

    @classmethod
    def from_env(cls):
        raw = os.environ.get("SHUFFLE_INJECT_FAILURES", "")
        return cls(fail=[item.strip() for item in raw.split(",") if item.strip()])

    def check(self, asset_name: str, day: str) -> None:
        if f"{asset_name}:{day}" in self.fail:
            raise RuntimeError(f"injected failure of {asset_name} for {day}")


class ShuffleResource(ConfigurableResource):
    """A shuffle's identity and layout, as configuration: the topic and how it is keyed.

    Example::

        ShuffleResource(topic="flights.by_tailnum", key=["tailnum"], event_time="sched_dep")
    """

    topic: str
    key: list[str]
    num_partitions: int = 8
    max_parallelism: int = 128
    event_time: str | None = None
    max_out_of_orderness_seconds: float = 0.0

    def spec(self) -> ShuffleSpec:
        return ShuffleSpec(
            topic=self.topic,
            key=tuple(self.key),
            num_partitions=self.num_partitions,
            max_parallelism=self.max_parallelism,
            event_time=self.event_time,
            max_out_of_orderness=timedelta(seconds=self.max_out_of_orderness_seconds),
        )
