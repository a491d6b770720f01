"""What the engine asks of a Spark session, whichever built it: classic or Spark Connect
(:func:`is_connect`), its plan as text, its task slots, the settings that suit the shuffle
(:func:`session_settings`), and whether its executors can reach a storage location.

A Spark Connect session (``SparkSession.builder.remote(...)``) has no JVM on this side; the
functions here tell the two kinds apart per session, since one process may hold both.

Registering the project's data sources on a session, and the convenience session factory
:func:`~orchestration.shuffle.spark.sources.spark_session`, are in
:mod:`orchestration.shuffle.spark.sources`.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import threading
from typing import Any

from pyspark.sql import SparkSession

from orchestration.shuffle.core.paths import Location, endpoint_mismatch
from orchestration.shuffle.errors import ShuffleSessionError

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
    """Spark settings that suit the shuffle on one machine or a small cluster (Python
    workers forked from :mod:`orchestration.shuffle.spark.daemon`, which has the engine's
    modules imported)."""
    from orchestration.shuffle.spark.daemon import DAEMON_MODULE, DAEMON_SETTING

    settings = {
        DAEMON_SETTING: DAEMON_MODULE,
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
