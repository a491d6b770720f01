"""jvm_spark_conf: the settings a session needs for the JVM read path (no Spark started)."""

import pytest

from orchestration.shuffle import ShuffleOptionError, ShuffleSessionError, jvm_spark_conf
from orchestration.shuffle.spark import jvm


@pytest.fixture
def built(tmp_path, monkeypatch):
    (tmp_path / "kafka-shuffle-jvm.jar").write_bytes(b"")
    (tmp_path / "kafka-clients-3.9.2.jar").write_bytes(b"")
    monkeypatch.setattr(jvm, "JARS_DIR", tmp_path)
    return tmp_path


def test_jars_catalog_kafka_and_planner_settings(built):
    conf = jvm_spark_conf(
        kafka={
            "bootstrap.servers": "b1:9092,b2:9092",
            "security.protocol": "SASL_SSL",
            "sasl.password": "secret",
        },
        catalog="shuffles",
    )
    assert conf["spark.jars"] == (
        f"{built / 'kafka-shuffle-jvm.jar'},{built / 'kafka-clients-3.9.2.jar'}"
    )
    assert conf["spark.sql.catalog.shuffles"] == "kafkashuffle.jvm.ShuffleCatalog"
    assert conf["spark.sql.catalog.shuffles.kafka.bootstrap.servers"] == "b1:9092,b2:9092"
    assert conf["spark.sql.catalog.shuffles.kafka.security.protocol"] == "SASL_SSL"
    # Spark redacts settings whose names say "password" in its UI and logs.
    assert conf["spark.sql.catalog.shuffles.kafka.sasl.password"] == "secret"
    assert conf["spark.sql.sources.v2.bucketing.enabled"] == "true"
    assert all(isinstance(v, str) for v in conf.values())


def test_refuses_a_catalog_name_that_is_not_an_identifier(built):
    with pytest.raises(ShuffleOptionError, match="catalog must be a plain identifier"):
        jvm_spark_conf(kafka={"bootstrap.servers": "b:9092"}, catalog="a.b")
    with pytest.raises(ShuffleOptionError, match="bootstrap.servers"):
        jvm_spark_conf(kafka={})


def test_says_how_to_build_missing_jars(tmp_path, monkeypatch):
    monkeypatch.setattr(jvm, "JARS_DIR", tmp_path)
    with pytest.raises(ShuffleSessionError, match="scripts/dev setup"):
        jvm_spark_conf(kafka={"bootstrap.servers": "b:9092"})
