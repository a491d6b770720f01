"""Dagster resources: plain configuration, no environment reads, no defaults from the machine."""

import re
from typing import Any

from dagster import ConfigurableResource, get_dagster_logger
from dagster_pyspark import LazyPySparkResource
from dagster_pyspark.resources import spark_session_from_config
from pydantic import Field, field_validator

from orchestration.shuffle.kafka.client import KafkaClient

# What Kafka allows in a topic name; a prefix is the start of one.
_TOPIC_CHARS = re.compile(r"[A-Za-z0-9._-]*")


class KafkaResource(ConfigurableResource):
    """Connection settings of the Kafka cluster that holds the shuffle topics.

    The settings of a Spark ``format("kafka")`` job work too, in the Java client's names
    (a JAAS line in ``sasl_jaas_config``, the rest in ``extra``); the Python path translates
    them for librdkafka (:mod:`orchestration.shuffle.core.kafka_config`).

    Example::

        KafkaResource(
            bootstrap_servers=EnvVar("KAFKA_BOOTSTRAP_SERVERS"),
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username=EnvVar("KAFKA_USER"),
            sasl_password=EnvVar("KAFKA_PASSWORD"),
        )
        # or, as a Spark job has them:
        KafkaResource(
            bootstrap_servers=EnvVar("KAFKA_BOOTSTRAP_SERVERS"),
            security_protocol="SASL_SSL",
            sasl_mechanism="PLAIN",
            sasl_jaas_config=EnvVar("KAFKA_JAAS_CONFIG"),
            extra={"ssl.truststore.location": "/etc/kafka/ca.pem", "ssl.truststore.type": "PEM"},
        )
        # two deployments on one cluster, each with its own shuffles:
        KafkaResource(
            bootstrap_servers=EnvVar("KAFKA_BOOTSTRAP_SERVERS"),
            topic_prefix=EnvVar("SHUFFLE_TOPIC_PREFIX"),   # e.g. "staging."
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
    # A secret too: the JAAS line holds the password.
    sasl_jaas_config: str | None = Field(
        default=None,
        repr=False,
        description="The Java client's sasl.jaas.config (PlainLoginModule, ScramLoginModule)",
    )
    extra: dict[str, str] = Field(
        default_factory=dict,
        repr=False,
        description="Any other settings, by their dotted names: librdkafka's or the Java "
        "client's (as Spark's kafka.* options have them, without the prefix).",
    )

    topic_prefix: str = Field(
        default="",
        description="Put before the topic of every shuffle asset stored, read, checked or "
        "expired through this resource (e.g. 'staging.'), so that deployments sharing a "
        "cluster do not share shuffles. Letters, digits, '.', '_' and '-'.",
    )

    @field_validator("topic_prefix")
    @classmethod
    def _legal_prefix(cls, value: str) -> str:
        # Checked here, where it is set, rather than as a topic name the broker refuses on a
        # run's first write.
        if not _TOPIC_CHARS.fullmatch(value):
            raise ValueError(
                f"topic_prefix {value!r} may hold only letters, digits, '.', '_' and '-'"
            )
        return value

    def config(self) -> dict[str, Any]:
        """The settings of this cluster, by their dotted names (as given: the clients made
        from them translate the Java client's names)."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        optional = {
            "security.protocol": self.security_protocol,
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "sasl.password": self.sasl_password,
            "ssl.ca.location": self.ssl_ca_location,
            "sasl.jaas.config": self.sasl_jaas_config,
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


class ShuffleSparkResource(LazyPySparkResource):
    """A lazily started SparkSession that reads shuffles on the JVM (Spark sees them as keyed).

    ``LazyPySparkResource`` with one addition: when ``kafka`` is given and the session is not
    Spark Connect (``spark.remote``), the session is built with
    :func:`orchestration.shuffle.jvm_spark_conf` for that cluster: the JVM read path's jars,
    a catalog named ``catalog`` over the cluster's shuffles and the planner settings. Its
    Kafka settings (a SASL password included) are read from the ``kafka`` resource when the
    session starts, so they are never part of this resource's configuration. Without the
    built jar (``scripts/dev setup`` builds it), or with ``jvm_read=False``, the session is
    the plain ``spark_config`` and shuffles are read by the Python source. A SparkSession
    already running in the process is used as it was built (its jars are fixed).

    A Spark Connect server that should read on the JVM is configured on the server: give it
    the same settings (``jvm_spark_conf``) when it starts.
    """

    kafka: KafkaResource | None = Field(
        default=None, description="The cluster whose shuffles the session reads on the JVM."
    )
    jvm_read: bool = Field(default=True, description="Build the session for JVM reads.")
    catalog: str = Field(default="shuffle", description="The shuffle catalog's name in Spark SQL.")

    @classmethod
    def _is_dagster_maintained(cls) -> bool:
        return False

    def session_config(self) -> dict[str, Any]:
        """The settings the session is built with."""
        from pyspark import SparkContext

        from orchestration.shuffle.errors import ShuffleSessionError
        from orchestration.shuffle.spark.jvm import jvm_spark_conf

        conf = dict(self.spark_config)
        if not self.jvm_read or self.kafka is None or conf.get("spark.remote"):
            return conf
        if SparkContext._active_spark_context is not None:
            # A running session's jars are fixed; it reads on the JVM if it was built so.
            get_dagster_logger().info(
                "a SparkSession is already running: it is used as it was built (jvm_spark_conf "
                "applies to a session when it starts)"
            )
            return conf
        try:
            jvm = jvm_spark_conf(kafka=self.kafka.config(), catalog=self.catalog)
        except ShuffleSessionError as e:
            get_dagster_logger().warning(f"shuffles are read by the Python source: {e}")
            return conf
        jars = [j for j in (conf.get("spark.jars"), jvm.pop("spark.jars")) if j]
        conf["spark.jars"] = ",".join(jars)
        for key, value in jvm.items():
            conf.setdefault(key, value)
        return conf

    def _init_session(self) -> None:
        if self._spark_session is None:
            self._spark_session = spark_session_from_config(self.session_config())
