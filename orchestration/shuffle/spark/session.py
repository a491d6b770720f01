"""The project's Spark data sources on any session, and a convenience session factory.

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
from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource

DEFAULT_MASTER = "local[2]"


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


def task_slots(spark: SparkSession) -> int | None:
    """How many tasks the session runs at once (``defaultParallelism``), if it says."""
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
) -> SparkSession:
    """Returns the active SparkSession, creating it with settings that suit the shuffle.

    Example::

        spark = spark_session()                      # local[2], UI off
        spark = spark_session(master="spark://h:7077", conf={"spark.executor.memory": "4g"})

    Args:
        master: Spark master URL.
        app_name: Application name shown in the Spark UI.
        conf: Extra Spark settings; they win over the defaults below.
        ui: Whether to start the Spark UI.
        log_level: Spark's log level once started.
    """
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
