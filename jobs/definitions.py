"""The single Dagster composition root. ``workspace.yaml`` loads two code locations from here,
as two teams would run them: ``producer_defs`` (the producer team's: ``flights``, the shuffle,
its checks, schedules, failed-region sensor and expiry) and ``consumer_defs`` (the consumer
team's: its consumers, their jobs and the commit sensor that launches them, the shuffle
declared as an ``AssetSpec`` of the producer's asset). :func:`build_defs` makes either, or
the whole pipeline in one location.

The environment is read here and nowhere else:

| variable | configures | default |
|---|---|---|
| ``KAFKA_BOOTSTRAP_SERVERS`` | the ``kafka`` resource (``bootstrap_servers``) | required |
| ``SPARK_MASTER`` | the ``spark`` resource's ``spark.master`` | ``local[2]`` |
| ``SPARK_DRIVER_MEMORY`` | the ``spark`` resource's ``spark.driver.memory`` | ``2g`` |
| ``SPARK_DRIVER_JAVA_OPTIONS`` | its ``spark.driver.extraJavaOptions`` | C1 only (below) |
| ``SPARK_REMOTE`` | a Spark Connect server (``sc://host:port``) instead of a local session | none |
| ``SPARK_UI`` | ``1``: the local session serves the Spark UI, which runs link to | ``0`` |
| ``SHUFFLE_JVM_READ`` | ``0``: the local session reads shuffles in Python, not on the JVM | ``1`` |
| ``SHUFFLE_WAREHOUSE`` | the ``warehouse`` resource (``path``) | ``.local/warehouse`` |
| ``SHUFFLE_FLIGHTS_TOPIC`` | the topic of ``flights_by_tailnum`` | ``flights.by_tailnum`` |
| ``SHUFFLE_MAX_RETRIES`` | retries of a failed consumer run / producer day | ``2`` |
| ``SHUFFLE_INJECT_FAILURES`` | the ``faults`` resource (``asset:YYYY-MM-DD,...``) | none |
| ``KAFKA_SECURITY_PROTOCOL`` | ``kafka``'s ``security_protocol`` (e.g. SASL_SSL) | none |
| ``KAFKA_SASL_MECHANISM`` | ``sasl_mechanism`` (e.g. SCRAM-SHA-512) | none |
| ``KAFKA_SASL_USERNAME`` | ``sasl_username`` | none |
| ``KAFKA_SASL_PASSWORD`` | ``sasl_password`` (read by Dagster when used, never stored) | none |
| ``KAFKA_SSL_CA_LOCATION`` | ``ssl_ca_location``: the CA's PEM file | none |

The definitions load without the required variables (Dagster reads an ``EnvVar`` when a run
starts); :func:`require_env` names the missing ones up front, and :func:`kafka_client` reads
the ``kafka`` resource's settings for code that talks to the cluster outside a run.
"""

import os
import sys
from collections.abc import Mapping

from dagster import Definitions, EnvVar
from dagster_pyspark import LazyPySparkResource

from assets.pipeline import (
    flights_consumer_team,
    flights_pipeline,
    flights_producer,
    flights_shuffle_spec,
)
from assets.shared import DEFAULT_TOPIC, SHUFFLE_IO_MANAGER, FaultInjection
from assets.stack_check import kafka_stack_check
from assets.warehouse import WarehouseResource
from jobs.pipeline import consumer_jobs, flights_jobs, producer_jobs
from orchestration import KafkaResource, KafkaShuffleIOManager, ShuffleSparkResource
from orchestration.shuffle import KafkaClient, session_settings

# Variables of the table above without a default.
REQUIRED_ENV = ("KAFKA_BOOTSTRAP_SERVERS",)


class EnvironmentNotSet(RuntimeError):
    """A variable the definitions require is not set."""


def require_env(env: Mapping[str, str] | None = None) -> None:
    """Raises :class:`EnvironmentNotSet` naming each required variable that ``env`` (the
    process environment by default) does not set."""
    env = os.environ if env is None else env
    missing = [var for var in REQUIRED_ENV if not env.get(var)]
    if missing:
        raise EnvironmentNotSet(
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set "
            "(the kafka resource's bootstrap_servers; see jobs/definitions.py)"
        )


def kafka_client(definitions: Definitions) -> KafkaClient:
    """The cluster of ``definitions``' ``kafka`` resource, its ``EnvVar`` settings read now
    as Dagster reads them when a run starts (security settings and password included): for
    code that talks to the cluster outside a run, such as jobs/main.py's summary."""
    resource: KafkaResource = definitions.resources["kafka"]
    return resource.process_config_and_initialize().client()


# The pipeline's days are a few hundred rows each: its jobs are many and small, and a local
# driver's JVM spends less CPU compiling them with C1 alone (the optimizing compiler pays off
# on large data; SPARK_DRIVER_JAVA_OPTIONS="" brings it back).
DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"


def spark_resource(
    master: str = "local[2]",
    driver_memory: str = "2g",
    remote: str | None = None,
    kafka: KafkaResource | None = None,
    driver_java_options: str = DRIVER_JAVA_OPTIONS,
    ui: bool = False,
) -> LazyPySparkResource:
    """A lazily started SparkSession with settings that suit the pipeline; with ``remote``
    (``sc://host:port``), a Spark Connect session of that server, which owns its master,
    memory and static settings (only session settings are sent). With ``kafka``, a local
    session is built to read that cluster's shuffles on the JVM (``ShuffleSparkResource``,
    ``jvm_spark_conf``). With ``ui``, the local session serves the Spark UI (off by default:
    a port and a little CPU per run), which the runs that use it link to (``spark/ui``)."""
    if remote:
        return LazyPySparkResource(
            spark_config={
                "spark.remote": remote,
                "spark.sql.session.timeZone": "UTC",
                "spark.sql.shuffle.partitions": "4",
            }
        )
    config = {
        **session_settings(master, ui=ui),
        "spark.app.name": "kafka-shuffle",
        "spark.driver.memory": driver_memory,
    }
    if driver_java_options:
        config["spark.driver.extraJavaOptions"] = driver_java_options
    if kafka is not None:
        return ShuffleSparkResource(spark_config=config, kafka=kafka)
    return LazyPySparkResource(spark_config=config)


KAFKA_SECURITY_ENV = {
    "security_protocol": "KAFKA_SECURITY_PROTOCOL",
    "sasl_mechanism": "KAFKA_SASL_MECHANISM",
    "sasl_username": "KAFKA_SASL_USERNAME",
    "sasl_password": "KAFKA_SASL_PASSWORD",
    "ssl_ca_location": "KAFKA_SSL_CA_LOCATION",
}


def kafka_resource(env: Mapping[str, str]) -> KafkaResource:
    """The ``kafka`` resource: each setting an ``EnvVar`` when its variable is set, so values
    (the password above all) are read by Dagster at run time and never stored."""
    fields = {f: EnvVar(var) for f, var in KAFKA_SECURITY_ENV.items() if env.get(var)}
    return KafkaResource(bootstrap_servers=EnvVar("KAFKA_BOOTSTRAP_SERVERS"), **fields)


# The code locations of workspace.yaml.
PRODUCER_LOCATION = "flights_producer"
CONSUMER_LOCATION = "flights_consumers"
LOCATIONS = (PRODUCER_LOCATION, CONSUMER_LOCATION)


def build_defs(
    *,
    topic: str = DEFAULT_TOPIC,
    num_partitions: int = 8,
    max_parallelism: int = 128,
    max_retries: int = 2,
    resources: Mapping[str, object] | None = None,
    location: str | None = None,
) -> Definitions:
    """The project's definitions: the whole pipeline in one location, or with ``location``
    (:data:`PRODUCER_LOCATION` or :data:`CONSUMER_LOCATION`) one team's part of it.
    ``resources`` replace the defaults (tests use this)."""
    if location is None:
        pipeline = flights_pipeline(
            topic, num_partitions=num_partitions, max_parallelism=max_parallelism
        )
        assets = [*pipeline.assets, kafka_stack_check]
        checks = pipeline.checks
        jobs = flights_jobs(pipeline, max_retries=max_retries)
    elif location == PRODUCER_LOCATION:
        producer = flights_producer(
            topic, num_partitions=num_partitions, max_parallelism=max_parallelism
        )
        assets = [*producer.assets, kafka_stack_check]
        checks = producer.checks
        jobs = producer_jobs(
            producer.shuffle, watermark=producer.watermark, max_retries=max_retries
        )
    elif location == CONSUMER_LOCATION:
        shuffle = flights_shuffle_spec(
            topic, num_partitions=num_partitions, max_parallelism=max_parallelism
        )
        consumers = flights_consumer_team(shuffle, topic)
        assets = [shuffle, *consumers.assets]
        checks = consumers.checks
        jobs = consumer_jobs(shuffle, readers=consumers.readers, max_retries=max_retries)
    else:
        raise ValueError(f"location {location!r}: expected one of {', '.join(LOCATIONS)}")
    kafka = dict(resources or {}).get("kafka") or kafka_resource(os.environ)
    merged = {
        "kafka": kafka,
        "spark": spark_resource(kafka=kafka),
        "warehouse": WarehouseResource(path=os.path.abspath(".local/warehouse")),
        "faults": FaultInjection(),
        **dict(resources or {}),
    }
    merged.setdefault(
        SHUFFLE_IO_MANAGER, KafkaShuffleIOManager(kafka=merged["kafka"], spark=merged["spark"])
    )
    return Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=jobs.jobs,
        schedules=jobs.schedules,
        sensors=jobs.sensors,
        resources=merged,
    )


def defs_from_env(env: Mapping[str, str], location: str | None = None) -> Definitions:
    """The definitions of ``location`` (the whole pipeline by default) configured from
    environment variables (see the table above)."""
    # Python workers must run this interpreter, which has pyarrow and the project installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    faults = [i.strip() for i in env.get("SHUFFLE_INJECT_FAILURES", "").split(",") if i.strip()]
    kafka = kafka_resource(env)
    return build_defs(
        location=location,
        topic=env.get("SHUFFLE_FLIGHTS_TOPIC", DEFAULT_TOPIC),
        max_retries=int(env.get("SHUFFLE_MAX_RETRIES", "2")),
        resources={
            "spark": spark_resource(
                env.get("SPARK_MASTER", "local[2]"),
                env.get("SPARK_DRIVER_MEMORY", "2g"),
                remote=env.get("SPARK_REMOTE") or None,
                kafka=None if env.get("SHUFFLE_JVM_READ", "1") == "0" else kafka,
                driver_java_options=env.get("SPARK_DRIVER_JAVA_OPTIONS", DRIVER_JAVA_OPTIONS),
                ui=env.get("SPARK_UI", "0") == "1",
            ),
            "kafka": kafka,
            "warehouse": WarehouseResource(
                path=env.get("SHUFFLE_WAREHOUSE") or os.path.abspath(".local/warehouse")
            ),
            "faults": FaultInjection(fail=faults),
        },
    )


producer_defs = defs_from_env(os.environ, PRODUCER_LOCATION)
consumer_defs = defs_from_env(os.environ, CONSUMER_LOCATION)
