"""Shared fixtures. Integration fixtures start the real stack lazily, once per session."""

import os
import uuid

import pytest


@pytest.fixture(scope="session")
def bootstrap() -> str:
    """The bootstrap address of a real broker: $KAFKA_BOOTSTRAP_SERVERS or the local one."""
    from orchestration import localstack

    return localstack.start()


@pytest.fixture(scope="session")
def kafka_conf(bootstrap) -> dict:
    return {"bootstrap.servers": bootstrap}


@pytest.fixture(scope="session")
def spark():
    from orchestration.shuffle.spark import spark_session

    # local[2,3]: two cores, and a failed task is retried up to 3 attempts, as on a cluster.
    session = spark_session(
        master=os.environ.get("SHUFFLE_TEST_SPARK_MASTER", "local[2,3]"),
        app_name="kafka-shuffle-tests",
        conf={"spark.sql.shuffle.partitions": "4"},
    )
    yield session
    session.stop()


@pytest.fixture
def unique():
    """A factory of uuid-suffixed names, so tests never share topics or groups."""

    def make(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:10]}"

    return make
