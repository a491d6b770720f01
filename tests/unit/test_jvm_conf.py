"""jvm_spark_conf: the settings a session needs for the JVM read path (no Spark started)."""

import pytest

from orchestration.shuffle import ShuffleOptionError, ShuffleSessionError, jvm_spark_conf
from orchestration.shuffle.spark import jvm


@pytest.fixture
def built(tmp_path, monkeypatch):
    (tmp_path / "kafka-shuffle-spark_2.13-0.1.0.jar").write_bytes(b"")
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
        f"{built / 'kafka-shuffle-spark_2.13-0.1.0.jar'},{built / 'kafka-clients-3.9.2.jar'}"
    )
    assert conf["spark.sql.catalog.shuffles"] == "io.kafkashuffle.spark.ShuffleCatalog"
    assert conf["spark.sql.catalog.shuffles.kafka.bootstrap.servers"] == "b1:9092,b2:9092"
    assert conf["spark.sql.catalog.shuffles.kafka.security.protocol"] == "SASL_SSL"
    # Spark redacts settings whose names say "password" in its UI and logs.
    assert conf["spark.sql.catalog.shuffles.kafka.sasl.password"] == "secret"
    assert conf["spark.sql.sources.v2.bucketing.enabled"] == "true"
    # Python workers are forked from the daemon that has the engine imported, unless not.
    assert conf["spark.python.daemon.module"] == "orchestration.shuffle.spark.daemon"
    assert all(isinstance(v, str) for v in conf.values())
    plain = jvm_spark_conf(kafka={"bootstrap.servers": "b:9092"}, preload_workers=False)
    assert "spark.python.daemon.module" not in plain


def test_the_worker_daemon_preloads_what_it_can():
    import subprocess
    import sys

    from orchestration.shuffle.spark import daemon

    assert daemon.preload(("json", "no_such_module_here")) == ["no_such_module_here"]
    # Everything it preloads imports in a fresh interpreter, without starting Spark.
    code = "from orchestration.shuffle.spark import daemon; print(daemon.preload())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_workers_forked_from_the_daemon_reread_a_zip_archive_only_when_it_changed(tmp_path):
    """A worker's first task adds a directory to sys.path and invalidates the import caches.
    With the daemon's finders that re-reads no archive that is unchanged, modules of the
    archive still import, and an archive that changed is read again."""
    import subprocess
    import sys
    import zipfile

    archive = tmp_path / "lib.zip"

    def write(modules: dict[str, str]) -> None:
        with zipfile.ZipFile(archive, "w") as z:
            for name, text in {
                "zpkg/__init__.py": "",
                "zpkg/sub/__init__.py": "",
                **modules,
            }.items():
                z.writestr(name, text)

    write(
        {
            "zpkg/sub/a.py": "A = 1\n",
            "zpkg/sub/b.py": "B = 2\n",
            "zpkg/other/__init__.py": "",
            "zpkg/other/d.py": "",
        }
    )
    code = f"""
import importlib, os, sys, zipfile, zipimport
sys.path.insert(0, {str(archive)!r})
import zpkg.sub.a
from orchestration.shuffle.spark import daemon
print(daemon.keep_archive_listings() if sys.argv[1] == "keep" else 0)
reads = []
real = zipimport._read_directory
zipimport._read_directory = lambda path: reads.append(path) or real(path)
import zpkg.other.d  # a finder made after the daemon's (zpkg/other)
sys.path.insert(0, {str(tmp_path / "files")!r})
importlib.invalidate_caches()
import zpkg.sub.b
print(len(reads), zpkg.sub.a.A + zpkg.sub.b.B)
with zipfile.ZipFile({str(archive)!r}, "a") as z:
    z.writestr("zpkg/sub/c.py", "C = 3\\n")
os.utime({str(archive)!r}, ns=(1, 1))
importlib.invalidate_caches()
import zpkg.sub.c
print(len(reads) > 0, zpkg.sub.c.C)
"""

    def run(mode: str) -> list[str]:
        out = subprocess.run(
            [sys.executable, "-c", code, mode], capture_output=True, text=True, check=True
        )
        return out.stdout.split()

    # zipimport's own finders (the archive, zpkg, zpkg/sub, zpkg/other) each read the
    # archive again; the daemon's replace the first three and make the fourth.
    assert run("plain") == ["0", "4", "3", "True", "3"]
    assert run("keep") == ["3", "0", "3", "True", "3"]


def test_the_daemon_imports_the_worker_module_spark_names():
    from orchestration.shuffle.spark import daemon

    assert daemon.worker_module(["daemon"]) == "pyspark.worker"
    assert daemon.worker_module(["daemon", "pyspark.sql.worker.create_data_source"]) == (
        "pyspark.sql.worker.create_data_source"
    )
    # pyspark.daemon runs pyspark.worker for any other name, and so does this daemon.
    assert daemon.worker_module(["daemon", "other.module"]) == "pyspark.worker"


def test_the_daemon_freezes_what_it_imported_before_forking():
    import subprocess
    import sys

    code = (
        "import gc, sys, zipimport\n"
        "from orchestration.shuffle.spark import daemon\n"
        "missing = daemon.prepare(worker=daemon.worker_module(['daemon', 'pyspark.worker']))\n"
        "assert 'pyspark.worker' in sys.modules\n"
        "zips = [f for f in sys.path_importer_cache.values()"
        " if isinstance(f, zipimport.zipimporter) and not isinstance(f, daemon.ArchiveFinder)]\n"
        "print(missing, len(zips), gc.get_freeze_count() > 50000, len(gc.get_objects(2)) < 1000)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # pandas and pyarrow alone allocate tens of thousands of objects; none is left for a
    # worker's collections to visit.
    assert out.stdout.split() == ["[]", "0", "True", "True"]


def test_refuses_a_catalog_name_that_is_not_an_identifier(built):
    with pytest.raises(ShuffleOptionError, match="catalog must be a plain identifier"):
        jvm_spark_conf(kafka={"bootstrap.servers": "b:9092"}, catalog="a.b")
    with pytest.raises(ShuffleOptionError, match="bootstrap.servers"):
        jvm_spark_conf(kafka={})


def test_says_how_to_build_missing_jars(tmp_path, monkeypatch):
    monkeypatch.setattr(jvm, "JARS_DIR", tmp_path)
    with pytest.raises(ShuffleSessionError, match="scripts/dev setup"):
        jvm_spark_conf(kafka={"bootstrap.servers": "b:9092"})


@pytest.fixture
def no_session(monkeypatch):
    """As in a fresh process: the resource would start the session (a suite run in one
    process may have one running already; nothing here starts or stops it)."""
    from pyspark import SparkContext

    monkeypatch.setattr(SparkContext, "_active_spark_context", None)


def test_spark_resource_builds_its_session_for_the_jvm_path(built, no_session):
    from orchestration import KafkaResource, ShuffleSparkResource

    kafka = KafkaResource(
        bootstrap_servers="b:9092", security_protocol="SASL_SSL", sasl_password="secret"
    )
    res = ShuffleSparkResource(spark_config={"spark.jars": "/opt/mine.jar"}, kafka=kafka)
    conf = res.session_config()
    assert conf["spark.jars"].split(",") == [
        "/opt/mine.jar",
        str(built / "kafka-shuffle-spark_2.13-0.1.0.jar"),
        str(built / "kafka-clients-3.9.2.jar"),
    ]
    assert conf["spark.sql.catalog.shuffle"] == "io.kafkashuffle.spark.ShuffleCatalog"
    assert conf["spark.sql.catalog.shuffle.kafka.sasl.password"] == "secret"
    # The password is read from the kafka resource when the session starts, not configured.
    assert "secret" not in str(res.spark_config)
    plain = {"spark.app.name": "x"}
    assert (
        ShuffleSparkResource(spark_config=plain, kafka=kafka, jvm_read=False).session_config()
        == plain
    )
    assert ShuffleSparkResource(spark_config=plain).session_config() == plain
    remote = {"spark.remote": "sc://host:15002"}
    assert ShuffleSparkResource(spark_config=remote, kafka=kafka).session_config() == remote


def test_spark_resource_without_the_jar_reads_in_python(tmp_path, monkeypatch, no_session):
    from orchestration import KafkaResource, ShuffleSparkResource

    monkeypatch.setattr(jvm, "JARS_DIR", tmp_path)
    res = ShuffleSparkResource(spark_config={}, kafka=KafkaResource(bootstrap_servers="b:9092"))
    assert res.session_config() == {}


def test_a_connect_server_has_the_jar_only_when_spark_jars_names_it():
    # read_shuffle_stream(engine="auto") on Spark Connect streams on the JVM only then.
    assert jvm.has_jar(
        "/opt/jars/kafka-clients-3.9.2.jar, file:/opt/jars/kafka-shuffle-spark_2.13-0.1.0.jar"
    )
    assert jvm.has_jar("hdfs://nn/jars/kafka-shuffle-spark_2.13-0.2.0.jar")
    assert not jvm.has_jar("/opt/jars/kafka-clients-3.9.2.jar")
    assert not jvm.has_jar("/opt/jars/kafka-shuffle-spark_2.13-0.1.0.jar.bak")
    assert not jvm.has_jar("/opt/jars/kafka-shuffle-spark_2.12-0.1.0.jar")
    assert not jvm.has_jar("")
    assert not jvm.has_jar(None)


def test_jvm_jars_is_public_and_lists_the_jar_then_kafka_clients(built):
    from orchestration.shuffle import __all__, jvm_jars

    assert "jvm_jars" in __all__
    assert jvm_jars() == [
        str(built / "kafka-shuffle-spark_2.13-0.1.0.jar"),
        str(built / "kafka-clients-3.9.2.jar"),
    ]


def test_jvm_jars_refuses_a_folder_with_two_versions_of_the_jar(built):
    (built / "kafka-shuffle-spark_2.13-0.0.9.jar").write_bytes(b"")
    with pytest.raises(ShuffleSessionError, match="kafka-shuffle-spark_2.13-0.0.9.jar"):
        jvm.jvm_jars()


@pytest.mark.parametrize(
    "version", ["4.0.0", "4.0.5", "4.1.4", "4.2.0", "4.3.0", "4.3.1", "4.3.0-SNAPSHOT", "4.2"]
)
def test_supported_spark_lines(version):
    jvm.require_supported_spark(version)


@pytest.mark.parametrize("version", ["3.5.1", "3.5.9", "4.4.0", "4.30.0", "5.0.0"])
def test_another_spark_line_is_refused_naming_both_versions(version):
    with pytest.raises(ShuffleSessionError) as info:
        jvm.require_supported_spark(version)
    message = str(info.value)
    assert f"runs Spark {version}" in message
    assert "Spark 4.0, 4.1, 4.2, 4.3" in message


def test_jvm_spark_conf_refuses_an_installed_pyspark_of_another_line(built, monkeypatch):
    import pyspark

    monkeypatch.setattr(pyspark, "__version__", "4.4.0")
    with pytest.raises(ShuffleSessionError, match="this session runs Spark 4.4.0"):
        jvm_spark_conf(kafka={"bootstrap.servers": "b:9092"})


class _Conf:
    def __init__(self, settings):
        self.settings = settings

    def get(self, key, default=None):
        return self.settings.get(key, default)

    @property
    def getAll(self):  # noqa: N802 - SparkConf's name
        return self.settings


class _Session:
    """What choose_engine reads of a session: its settings and its Spark version."""

    def __init__(self, version):
        self.version = version
        self.conf = _Conf(
            {
                "spark.sql.catalog.shuffle": jvm.CATALOG_CLASS,
                "spark.sql.catalog.shuffle.kafka.bootstrap.servers": "b:9092",
            }
        )


@pytest.fixture
def jar_on_session(monkeypatch):
    monkeypatch.setattr(jvm, "jvm_available", lambda spark: True)


def test_a_session_set_up_for_the_jvm_on_another_spark_line_is_refused(jar_on_session):
    from orchestration.shuffle import KafkaClient

    kafka = KafkaClient.of({"bootstrap.servers": "b:9092"})
    assert jvm.choose_engine(_Session("4.3.0"), kafka, "auto") == "shuffle"
    for engine in ("auto", "jvm"):
        with pytest.raises(ShuffleSessionError, match="this session runs Spark 4.4.1"):
            jvm.choose_engine(_Session("4.4.1"), kafka, engine)
    # The Python path does not need the jar, so any Spark may take it.
    assert jvm.choose_engine(_Session("4.4.1"), kafka, "python") is None
