"""The project's Spark data sources, and their registration on any session.

``kafka-shuffle`` (:class:`ShuffleDataSource`: batch reads by
:mod:`~orchestration.shuffle.spark.reader`, streaming reads by
:mod:`~orchestration.shuffle.spark.stream`) and ``kafka-records``
(:class:`~orchestration.shuffle.spark.records.KafkaRecordsDataSource`). This module sits
above the readers it hands out.

Every engine function that needs a data source registers it on the session it is given,
so a session from ``SparkSession.builder``, ``dagster_pyspark`` or a notebook works as is.
For use by name, register them yourself::

    register_data_sources(spark)
    spark.read.format("kafka-records").option("topic", "events")...

:func:`spark_session` only bundles settings that suit the shuffle on a laptop; it is never
required.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource

from orchestration.shuffle.core.optiondefs import BATCH, STREAM
from orchestration.shuffle.spark.reader import SOURCE, ShuffleReader, SourceOptions, result_schema
from orchestration.shuffle.spark.records import KafkaRecordsDataSource
from orchestration.shuffle.spark.session import is_connect, session_settings
from orchestration.shuffle.spark.stream import ShuffleStreamReader

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

DEFAULT_MASTER = "local[2]"

# Connect sessions (by session id) our sources were registered with: Connect offers no way to
# ask the server whether a source is registered, and a registration lives in one session.
_connect_registered: set[str] = set()
_connect_lock = threading.Lock()


class ShuffleDataSource(DataSource):
    """``kafka-shuffle``: read a shuffle's committed runs.

    Prefer :func:`orchestration.shuffle.read_shuffle`, which also checks the layout and
    tags the key columns for :func:`orchestration.shuffle.apply_per_key`. Writing goes
    through :func:`orchestration.shuffle.write_shuffle`.
    """

    @classmethod
    def name(cls) -> str:
        return SOURCE

    def _source_options(self) -> SourceOptions:
        cached: SourceOptions | None = getattr(self, "_opts", None)
        if cached is None:
            cached = SourceOptions(self.options)
            self._opts = cached
        return cached

    def schema(self) -> StructType:
        from orchestration.shuffle.spark.compat import from_arrow_schema_ntz

        return from_arrow_schema_ntz(result_schema(self._source_options()))

    def reader(self, schema: StructType) -> ShuffleReader:
        opts = self._source_options()
        opts.check_mode(BATCH)
        return ShuffleReader(opts)

    def streamReader(self, schema: StructType) -> ShuffleStreamReader:
        opts = self._source_options()
        opts.check_mode(STREAM)
        return ShuffleStreamReader(opts)


def _data_sources() -> list[type[DataSource]]:
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
