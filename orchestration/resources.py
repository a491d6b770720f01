"""Dagster resources: plain configuration, no environment reads, no defaults from the machine."""

from typing import Any

from dagster import ConfigurableResource
from pydantic import Field

from orchestration.shuffle.kafka import KafkaClient


class KafkaResource(ConfigurableResource):
    """Connection settings of the Kafka cluster that holds the shuffle topics.

    Example::

        KafkaResource(
            bootstrap_servers=EnvVar("KAFKA_BOOTSTRAP_SERVERS"),
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username=EnvVar("KAFKA_USER"),
            sasl_password=EnvVar("KAFKA_PASSWORD"),
        )
    """

    bootstrap_servers: str = Field(description="host:port[,host:port]")
    security_protocol: str | None = Field(default=None, description="PLAINTEXT, SSL, SASL_SSL...")
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    # Secrets: never part of a printed resource.
    sasl_password: str | None = Field(default=None, repr=False)
    ssl_ca_location: str | None = Field(
        default=None, description="PEM file of the CA that signed the brokers' certificates"
    )
    extra: dict[str, str] = Field(
        default_factory=dict,
        repr=False,
        description="Any other librdkafka settings, by their dotted names.",
    )

    def config(self) -> dict[str, Any]:
        """The librdkafka config dict for this cluster."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        optional = {
            "security.protocol": self.security_protocol,
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "sasl.password": self.sasl_password,
            "ssl.ca.location": self.ssl_ca_location,
        }
        conf.update({k: v for k, v in optional.items() if v})
        conf.update(self.extra)
        return conf

    def client(self) -> KafkaClient:
        """The engine's client of this cluster (settings only: it opens no connection)."""
        return KafkaClient(self.config())

    def check(self) -> int:
        """Fails within seconds when no broker answers; returns the broker count."""
        return self.client().check_reachable()


class WarehouseResource(ConfigurableResource):
    """Where Parquet outputs live: ``<path>/<asset_name>/day=YYYY-MM-DD/``.

    Example::

        WarehouseResource(path=EnvVar("SHUFFLE_WAREHOUSE"))
    """

    path: str = Field(description="Root folder of the Parquet outputs")

    def root(self) -> str:
        return self.path

    def day_path(self, asset_name: str, day: str) -> str:
        return f"{self.path}/{asset_name}/day={day}"
