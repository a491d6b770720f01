"""A SparkSession factory with the settings the shuffle needs, for any master.

Example::

    spark = spark_session()                      # local[2], UI off
    spark = spark_session(master="spark://h:7077", conf={"spark.executor.memory": "4g"})
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[2]"


def spark_session(
    master: str | None = None,
    app_name: str = "kafka-shuffle",
    conf: Mapping[str, str] | None = None,
    ui: bool = False,
    log_level: str = "WARN",
) -> SparkSession:
    """Returns the active SparkSession, creating it with the shuffle's settings if needed.

    Args:
        master: Spark master URL; default ``$SPARK_MASTER`` or ``local[2]``.
        app_name: Application name shown in the Spark UI.
        conf: Extra Spark settings; they win over the defaults below.
        ui: Whether to start the Spark UI (off in tests and by default).
        log_level: Spark's log level once started.
    """
    # Python workers must run the interpreter that has pyarrow and this package installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    resolved = master or os.environ.get("SPARK_MASTER", DEFAULT_MASTER)
    if resolved.startswith("local"):
        # Local mode talks to itself only; binding to loopback also avoids Spark's warning
        # about the host name resolving to a loopback address.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings: dict[str, str] = {
        "spark.ui.enabled": str(ui).lower(),
        "spark.ui.showConsoleProgress": "false",
        # Event times are stored as UTC instants; render them as such unless told otherwise.
        "spark.sql.session.timeZone": "UTC",
        # The default of 200 is sized for clusters; it only adds overhead on a laptop.
        "spark.sql.shuffle.partitions": str(2 * (os.cpu_count() or 2)),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.driver.memory": os.environ.get("SPARK_DRIVER_MEMORY", "2g"),
    }
    settings.update({k: str(v) for k, v in (conf or {}).items()})
    builder = SparkSession.builder.master(resolved)
    builder = builder.appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register_data_sources(spark)
    return spark


def register_data_sources(spark: SparkSession) -> None:
    """Registers the project's Python data sources with ``spark``."""
    from .reader import ShuffleDataSource
    from .records import KafkaRecordsDataSource

    spark.dataSource.register(KafkaRecordsDataSource)
    spark.dataSource.register(ShuffleDataSource)
