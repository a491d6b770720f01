"""The project's Spark data sources on any session, and a convenience session factory.

Every engine function that needs a data source registers it on the session it is given,
so a session from ``SparkSession.builder``, ``dagster_pyspark`` or a notebook works as is.
For use by name, register them yourself::

    register_data_sources(spark)
    spark.read.format("kafka-records").option("topic", "events")...

A Spark Connect session (``SparkSession.builder.remote(...)``) has no JVM on this side; the
functions here tell the two kinds apart per session (:func:`is_connect`), since one process
may hold both.

:func:`spark_session` only bundles settings that suit the shuffle on a laptop; it is never
required.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import threading
import warnings
from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource

from orchestration.shuffle.core.paths import Location, endpoint_mismatch
from orchestration.shuffle.errors import ShuffleSessionError

DEFAULT_MASTER = "local[2]"

# Connect sessions (by session id) our sources were registered with: Connect offers no way to
# ask the server whether a source is registered, and a registration lives in one session.
_connect_registered: set[str] = set()
_connect_lock = threading.Lock()
# ``explain`` only prints; capturing it swaps ``sys.stdout`` for the whole process.
_explain_lock = threading.Lock()


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session. Asked of the session itself, not of
    the process (``is_remote()``), since classic and Connect sessions can live side by side."""
    # A Connect session exists only once its module is loaded; looking it up there (instead
    # of importing it) keeps classic sessions from needing the Connect client's dependencies.
    module = sys.modules.get("pyspark.sql.connect.session")
    return module is not None and isinstance(spark, module.SparkSession)


def explain_text(df: Any, mode: str = "simple") -> str:
    """The plan ``df.explain(mode=mode)`` prints, as text. Public on both kinds of session;
    on Connect the only public view of the server's physical plan."""
    buffer = io.StringIO()
    with _explain_lock, contextlib.redirect_stdout(buffer):
        df.explain(mode=mode)
    return buffer.getvalue()


def _data_sources() -> list[type[DataSource]]:
    from orchestration.shuffle.spark.reader import ShuffleDataSource
    from orchestration.shuffle.spark.records import KafkaRecordsDataSource

    return [KafkaRecordsDataSource, ShuffleDataSource]


def _registered(spark: SparkSession, name: str) -> bool:
    try:
        manager = spark._jsparkSession.sessionState().dataSourceManager()
        return bool(manager.dataSourceExists(name))
    except Exception:  # noqa: BLE001 - an internal API; registering again is harmless
        return False


def register_data_sources(spark: SparkSession) -> None:
    """Registers the project's Python data sources (``kafka-shuffle``, ``kafka-records``)
    with ``spark``. Idempotent: a source already registered is left as it is."""
    from pyspark.errors import AnalysisException

    if is_connect(spark):
        _register_connect(spark)
        return
    missing = [s for s in _data_sources() if not _registered(spark, s.name())]
    if not missing:
        return
    # Spark checks a new name against the *active* session's sources; with several sessions
    # (``newSession()``) that is not always the one given, so make it active meanwhile.
    jvm: Any = spark._jvm  # py4j's view of the JVM: its members are looked up at run time
    jsessions = jvm.org.apache.spark.sql.SparkSession
    previous = jsessions.getActiveSession()
    jsessions.setActiveSession(spark._jsparkSession)
    try:
        for source in missing:
            try:
                spark.dataSource.register(source)
            except AnalysisException as exc:
                if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
                    raise
    finally:
        if previous.isDefined():
            jsessions.setActiveSession(previous.get())
        else:
            jsessions.clearActiveSession()


def _register_connect(spark: Any) -> None:
    # The server keeps a registration per Connect session; registering again would only
    # replace it (with a warning in the server's log), so each session registers once.
    with _connect_lock:
        if spark.session_id in _connect_registered:
            return
        for source in _data_sources():
            spark.dataSource.register(source)
        _connect_registered.add(spark.session_id)


def task_slots(spark: SparkSession) -> int | None:
    """How many tasks the session runs at once (``defaultParallelism``), if it says."""
    if is_connect(spark):
        # No SparkContext on Connect, and spark.default.parallelism is usually unset; the
        # server plans ``range`` with one split per slot and shows it in the plan.
        try:
            found = re.search(r"splits=(\d+)", explain_text(spark.range(1)))
        except Exception:  # noqa: BLE001 - "not known" is an answer callers handle
            return None
        return int(found.group(1)) if found else None
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # noqa: BLE001 - e.g. Spark Connect has no SparkContext
        return None


def session_settings(master: str, *, ui: bool = False) -> dict[str, str]:
    """Spark settings that suit the shuffle on one machine or a small cluster."""
    settings = {
        "spark.master": master,
        "spark.ui.enabled": str(ui).lower(),
        "spark.ui.showConsoleProgress": "false",
        # Render instants in UTC unless told otherwise (they are stored as UTC either way).
        "spark.sql.session.timeZone": "UTC",
        # The default of 200 is sized for clusters; it only adds overhead on a laptop.
        "spark.sql.shuffle.partitions": "4",
    }
    if master.startswith("local"):
        # Local mode talks to itself only; binding to loopback also avoids Spark's warning
        # about the host name resolving to a loopback address.
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    return settings


def spark_session(
    master: str = DEFAULT_MASTER,
    app_name: str = "kafka-shuffle",
    conf: Mapping[str, str] | None = None,
    ui: bool = False,
    log_level: str = "WARN",
    remote: str | None = None,
) -> SparkSession:
    """Returns a SparkSession with settings that suit the shuffle, creating it.

    An already active classic session is returned as it is: its settings and log level
    belong to whoever built it (a ``conf`` given then is not applied, with a warning).

    With ``remote`` (or the ``SPARK_REMOTE`` environment variable), a Spark Connect session
    to that server instead: the server owns its static settings (master, application name,
    UI, jars, log level), so only ``conf`` and the session-level time zone and shuffle
    partitions below are set, on this session only.

    Example::

        spark = spark_session()                      # local[2], UI off
        spark = spark_session(master="spark://h:7077", conf={"spark.executor.memory": "4g"})
        spark = spark_session(remote="sc://127.0.0.1:15002")   # Spark Connect

    Args:
        master: Spark master URL (ignored with ``remote``).
        app_name: Application name shown in the Spark UI (ignored with ``remote``).
        conf: Extra Spark settings; they win over the defaults below.
        ui: Whether to start the Spark UI (ignored with ``remote``).
        log_level: Spark's log level once started (ignored with ``remote``).
        remote: A Spark Connect URL (``sc://host:port``); default ``$SPARK_REMOTE``.
    """
    remote = remote or os.environ.get("SPARK_REMOTE") or None
    if remote:
        return _connect_session(remote, conf)
    existing = SparkSession.getActiveSession()
    if existing is not None:
        # Someone else's session: its settings and log level are its owner's.
        if conf:
            warnings.warn(
                "spark_session: a SparkSession is already active; it is returned as it is "
                f"and conf {sorted(conf)} is not applied to it",
                stacklevel=2,
            )
        register_data_sources(existing)
        return existing
    # Python workers must run the interpreter that has pyarrow and this package installed.
    # PySpark reads this when the session starts (a Spark setting would not reach local
    # workers); a value the user set is kept.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = session_settings(master, ui=ui)
    settings.update({k: str(v) for k, v in (conf or {}).items()})
    builder = SparkSession.builder.appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register_data_sources(spark)
    return spark


def _connect_session(url: str, conf: Mapping[str, str] | None) -> SparkSession:
    # Runtime settings only: a Connect session cannot change the server's static ones.
    settings = {"spark.sql.session.timeZone": "UTC", "spark.sql.shuffle.partitions": "4"}
    settings.update({k: str(v) for k, v in (conf or {}).items()})
    builder = SparkSession.builder.remote(url)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register_data_sources(spark)
    return spark


def s3_endpoints(spark: SparkSession, bucket: str) -> tuple[str | None, str | None]:
    """The S3 endpoints Spark and pyarrow use for ``bucket``: S3A's
    (``spark.hadoop.fs.s3a.bucket.<bucket>.endpoint``, else ``spark.hadoop.fs.s3a.endpoint``;
    None when unset) and pyarrow's (``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL``)."""
    spark_endpoint = None
    for key in (f"spark.hadoop.fs.s3a.bucket.{bucket}.endpoint", "spark.hadoop.fs.s3a.endpoint"):
        try:
            value = spark.conf.get(key, None)
        except Exception:  # noqa: BLE001 - a setting the server will not show is unset here
            value = None
        if value:
            spark_endpoint = str(value)
            break
    arrow_endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return spark_endpoint, arrow_endpoint


def storage_problems(spark: SparkSession, location: Location) -> list[str]:
    """What keeps the session from reading and writing ``location`` beside pyarrow: no
    Hadoop file system for its scheme on a classic session's class path (Spark Connect's
    server is not asked; its error comes when Spark reads), or an S3 endpoint that differs
    between Spark and pyarrow. Empty when nothing is known to be missing."""
    if location.is_local:
        return []
    problems = []
    scheme = location.spark.split("://", 1)[0]
    if not is_connect(spark):
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        try:
            jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(
                scheme, spark.sparkContext._jsc.hadoopConfiguration()
            )
        except Exception:  # noqa: BLE001 - py4j's error: the scheme has no file system
            hadoop = jvm.org.apache.hadoop.util.VersionInfo.getVersion()
            hint = (
                f"org.apache.hadoop:hadoop-aws:{hadoop} and the AWS SDK bundle it depends on"
                if scheme == "s3a"
                else f"the Hadoop connector of {scheme}:// (Hadoop {hadoop})"
            )
            problems.append(
                f"the session has no Hadoop file system for {scheme}:// on its class path: add "
                f"{hint} when the session is built (spark.jars.packages, or "
                "spark.driver.extraClassPath and spark.executor.extraClassPath)"
            )
    bucket = location.spark.split("://", 1)[1].split("/", 1)[0]
    spark_endpoint, arrow_endpoint = s3_endpoints(spark, bucket)
    mismatch = endpoint_mismatch(
        location, spark_endpoint=spark_endpoint, arrow_endpoint=arrow_endpoint
    )
    if mismatch:
        problems.append(mismatch)
    return problems


def check_storage(spark: SparkSession, location: Location, what: str) -> None:
    """Raises :class:`ShuffleSessionError` listing every :func:`storage_problems` of
    ``location`` at once; the session's settings are left as they are."""
    problems = storage_problems(spark, location)
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise ShuffleSessionError(
            f"{what} {location.given!r}: the Spark session is not set up for it "
            f"(its settings are the session owner's to change):\n{listed}"
        )
