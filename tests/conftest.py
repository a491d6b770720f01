"""Shared fixtures. Integration fixtures start the real stack lazily, once per session."""

import os
import time
import uuid
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def bootstrap() -> str:
    """The bootstrap address of a real broker: $KAFKA_BOOTSTRAP_SERVERS or the local one."""
    from devstack import localstack

    return localstack.start()


@pytest.fixture(scope="session")
def kafka_conf(bootstrap) -> dict:
    return {"bootstrap.servers": bootstrap}


@pytest.fixture(scope="session")
def postgres():
    """A database factory on the local PostgreSQL server (the machine's server binaries, a
    data directory in .local/, started once): ``postgres("name")`` is the URL of a fresh,
    empty database ``name``, for a Dagster instance of its own."""
    from devstack import localpg

    localpg.start()
    return localpg.create_database


def _use_local_s3() -> None:
    """Points pyarrow and every Spark session started from now on at the local S3 server,
    as ``eval "$(scripts/dev s3 env)"`` does in a shell: ``AWS_*`` variables and a
    ``SPARK_CONF_DIR`` whose spark-defaults.conf holds the S3A settings. The server itself
    starts only when a test asks for the ``s3`` fixture."""
    from devstack import locals3

    os.environ.update(locals3.env())


@pytest.fixture(scope="session")
def s3():
    """A prefix factory on the local S3 server (MinIO, started once): ``s3("name")`` is a
    fresh ``s3a://shuffle-dev/tests/<name>-<hex>`` location."""
    from devstack import locals3

    locals3.start()

    def prefix(name: str) -> str:
        return f"s3a://{locals3.BUCKET}/tests/{name}-{uuid.uuid4().hex[:10]}"

    return prefix


@pytest.fixture(scope="session")
def spark():
    """A session built the way any user builds one: nothing of the project's is registered
    on it; the engine must register what it needs itself. Its S3A settings come from the
    environment (``SPARK_CONF_DIR``), as a user's would."""
    import sys

    from pyspark.sql import SparkSession

    _use_local_s3()

    # The Python workers must run this interpreter (it has pyarrow and the project).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # local[2,3]: two cores, and a failed task is retried up to 3 attempts, as on a cluster.
    master = os.environ.get("SHUFFLE_TEST_SPARK_MASTER", "local[2,3]")
    builder = SparkSession.builder.master(master)
    if master.startswith("local"):
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    else:
        # On a cluster, executors import the functions the tests define from the tests'
        # own modules, as a user ships theirs; the project itself is installed in the venv.
        root = str(Path(__file__).resolve().parents[1])
        builder = builder.config("spark.executorEnv.PYTHONPATH", root)
    # The tests' jobs are many and small: the driver's JVM compiles with C1 alone (the
    # optimizing compiler's threads otherwise take about half its CPU time, on 2 cores
    # shared by two test workers). $SHUFFLE_TEST_DRIVER_JAVA_OPTIONS overrides it.
    opts = os.environ.get("SHUFFLE_TEST_DRIVER_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")
    if opts:
        builder = builder.config("spark.driver.extraJavaOptions", opts)
    session = (
        builder.appName("kafka-shuffle-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_spark():
    """A Spark Connect session: to the server $SHUFFLE_TEST_SPARK_REMOTE names (sc://host:port),
    else to one this process starts (``remote("local[2]")``, which holds the process's
    SparkContext: not for a run that also uses the classic ``spark`` fixture). Stopped at the
    end: a live Connect session hangs the interpreter's exit."""
    import sys
    import warnings

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    url = os.environ.get("SHUFFLE_TEST_SPARK_REMOTE") or "local[2]"
    builder = SparkSession.builder.remote(url)
    if url.startswith("local"):
        from orchestration.shuffle import jvm_jars

        # Settings of the server this process starts; a remote server has its own. The JVM
        # read path's jars are on its class path, as a deployment gives them (--jars), but
        # no catalog of it is configured: reads take the Python path until a test sets one.
        settings = {
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.jars": ",".join(str(p) for p in jvm_jars()),
        }
        for key, value in settings.items():
            builder = builder.config(key, value)
    builder = builder.config("spark.sql.session.timeZone", "UTC").config(
        "spark.sql.shuffle.partitions", "4"
    )
    with warnings.catch_warnings():
        # The server started here takes every setting; the client then tries the static ones
        # again as session settings and warns that it cannot.
        warnings.filterwarnings("ignore", message=".*CANNOT_MODIFY", category=UserWarning)
        session = builder.getOrCreate()
    yield session
    session.stop()


@pytest.fixture
def unique():
    """A factory of uuid-suffixed names, so tests never share topics or groups."""

    def make(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:10]}"

    return make


def delete_topics(admin, topics: list[str], within: float = 60) -> None:
    """Deletes ``topics`` with ``admin`` and waits until the broker no longer lists them
    (a deletion's result comes back before every listing drops the topic)."""
    for f in admin.delete_topics(topics, operation_timeout=30).values():
        f.result(within)
    deadline = time.monotonic() + within
    while left := set(admin.list_topics(timeout=10).topics) & set(topics):
        assert time.monotonic() < deadline, (
            f"{sorted(left)} still listed {within:g} s after deletion"
        )
        time.sleep(0.2)


def jvm_read_on(session, kafka_conf) -> list[str]:
    """Gives a session that is already running the JVM read path, as ``jvm_spark_conf`` gives
    it to one that starts: its jars with ``ADD JAR`` (``spark.jars`` is fixed at start) and
    the catalog and planner settings. Returns the catalog settings, for :func:`jvm_read_off`;
    until then, ``engine="auto"`` reads on the JVM."""
    from orchestration.shuffle import jvm_spark_conf

    conf = jvm_spark_conf(kafka=kafka_conf)
    for jar in conf["spark.jars"].split(","):
        session.sql(f"ADD JAR '{jar}'")
    # Static settings (the jars, the Python workers' daemon) stay as the session was built.
    static = ("spark.jars", "spark.python.daemon.module")
    added = {k: v for k, v in conf.items() if k not in static}
    for key, value in added.items():
        session.conf.set(key, value)
    return [k for k in added if k.startswith("spark.sql.catalog.")]


def jvm_read_off(session, keys: list[str]) -> None:
    """Takes the catalog away again: later reads take the Python path as before."""
    for key in keys:
        session.conf.unset(key)


@pytest.fixture(params=["python", "jvm"])
def engine(request, spark, kafka_conf):
    """Each read test of the engine runs on both read paths: ``read_shuffle(...,
    engine=engine)`` with the Python source, then with the JVM source on the same session."""
    if request.param == "python":
        yield "python"
        return
    keys = jvm_read_on(spark, kafka_conf)
    yield "jvm"
    jvm_read_off(spark, keys)
