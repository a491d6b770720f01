"""The JVM read path of a shuffle, from Python: the Spark settings a session needs for it,
whether a session has it, and a planned read executed by it.

The ``kafka-shuffle-jvm`` source (``jvm/``, built by the package's build into this package's
``jars`` folder: :func:`jvm_jars`) executes the splits the Python planner made (one set of
read rules: commit gating, winning attempts, supersession, windows, runs and expiry are
decided here, in :mod:`orchestration.shuffle.core.planner`), reads frames straight into
Arrow vectors that Spark uses as they are, and, when each split is one whole Kafka
partition, tells Spark that its rows are grouped by the key's partition. Spark then plans
``groupBy(key)``, ``Window.partitionBy(key)``, ``groupBy(key).applyInPandas``, SQL
``GROUP BY key`` over the read and a join of two shuffles of the same layout on the key
without an Exchange.

It reads through a catalog whose tables are shuffle topics (``spark.table("shuffle.`t`")``)
and whose functions compute a key's partition: that is what gives Spark the function its
partitioning names. A session gets both from :func:`jvm_spark_conf`::

    spark = SparkSession.builder.config(map=jvm_spark_conf(kafka=conf)).getOrCreate()

A catalog read that no Python planned (plain SQL over ``shuffle.`t```) is planned on the JVM
(``ReadPlanner.java``) by the same rules; both planners are held to the checked-in vectors
``tests/vectors/read_plans.json``.

A small read (at most ``small_read_rows`` rows by its commit records, 10,000 unless the read
option or the session's ``spark.sql.catalog.<catalog>.small_read_rows`` says otherwise; ``0``
turns it off) is read as one split instead of one per Kafka partition: one task whose reader
fetches every partition at once. Spark still sees it as keyed, by
``partition_of_<max_parallelism>_1(key)`` (every key in the one split), so ``groupBy``,
windows and a join with another such read by the key still plan no Exchange. A
``parallelism`` asked for is kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pyspark.sql import DataFrame, SparkSession

from orchestration.shuffle.core.options import kafka_to_options
from orchestration.shuffle.core.planner import AUTO, ReadPlan, SplitPlan, plan_splits
from orchestration.shuffle.errors import ShuffleOptionError, ShuffleSessionError
from orchestration.shuffle.kafka.client import KafkaClient, KafkaConfig
from orchestration.shuffle.spark.daemon import DAEMON_MODULE, DAEMON_SETTING
from orchestration.shuffle.spark.session import is_connect

SOURCE = "kafka-shuffle-jvm"
CATALOG_CLASS = "io.kafkashuffle.spark.ShuffleCatalog"
# The catalog name jvm_spark_conf gives by default.
DEFAULT_CATALOG = "shuffle"
PROVIDER_CLASS = "io.kafkashuffle.spark.ShuffleTableProvider"
JARS_DIR = Path(__file__).resolve().parent / "jars"
# The jar is <artifactId>-<version>.jar (jvm/pom.xml).
JAR_PREFIX = "kafka-shuffle-spark_2.13-"
# The Spark lines ("major.minor") the jar runs on: jvm/pom.xml's spark.supported, which the
# jar checks too (SparkVersionCheck.java); tests/unit/test_jvm_version.py holds them equal.
SUPPORTED_SPARK = ("4.0", "4.1", "4.2", "4.3")

# The read option (and catalog setting, spark.sql.catalog.<name>.small_read_rows) under which
# a read of few rows is one split on the JVM, still keyed (ShuffleScan.java).
SMALL_READ_ROWS = "small_read_rows"

Engine = Literal["auto", "jvm", "python"]
ENGINES: tuple[str, ...] = ("auto", "jvm", "python")

# Spark's planner settings the keyed reads rely on (Spark 4.3 defaults in brackets):
# - v2.bucketing.enabled [true]: use a source's KeyGroupedPartitioning at all;
# - v2.bucketing.pushPartValues.enabled [true]: a join of two shuffles whose partitions hold
#   different sets of keys (an empty partition on one side) still joins partition by partition.
# Set explicitly so that a session whose defaults were changed still plans without an Exchange.
PLANNER_SETTINGS = {
    "spark.sql.sources.v2.bucketing.enabled": "true",
    "spark.sql.sources.v2.bucketing.pushPartValues.enabled": "true",
}


def jvm_jars() -> list[str]:
    """The JVM read path's jars, as installed with the package: the read path's own
    (``kafka-shuffle-spark_2.13-<version>.jar``) and the kafka-clients it uses.

    Hand them to any Spark that should read shuffles on the JVM: ``spark.jars`` of a session
    (:func:`jvm_spark_conf` does it), ``spark-submit --jars``, or the ``--jars`` of a Spark
    Connect server (whose sessions then read on the JVM once a catalog is configured).

    Example::

        from orchestration.shuffle import jvm_jars

        print(",".join(jvm_jars()))   # for spark-submit --jars

    Raises:
        ShuffleSessionError: The package was built without them (``KAFKA_SHUFFLE_SKIP_JVM``,
            or an editable install whose build found no Maven).
    """
    jars = sorted(JARS_DIR.glob(f"{JAR_PREFIX}*.jar"))
    clients = sorted(JARS_DIR.glob("kafka-clients-*.jar"))
    if len(jars) != 1 or len(clients) != 1:
        found = sorted(p.name for p in JARS_DIR.glob("*.jar"))
        raise ShuffleSessionError(
            f"the JVM read path is not installed: {JARS_DIR} should hold one {JAR_PREFIX}"
            f"<version>.jar and one kafka-clients-<version>.jar, it holds {found}; install "
            "kafka-shuffle again with Maven and a JDK 17+ on the PATH (its build compiles "
            "them, unless KAFKA_SHUFFLE_SKIP_JVM is set), or in a checkout run "
            "`scripts/dev setup`"
        )
    return [str(jars[0]), str(clients[0])]


def spark_line(version: str) -> str:
    """The ``major.minor`` line of a Spark version (``"4.3"`` of ``"4.3.0"``)."""
    parts = version.strip().replace("-", ".").split(".")
    return ".".join(parts[:2])


def require_supported_spark(version: str) -> None:
    """Refuses a Spark the JVM read path was not built for, before any task would fail on it
    with a ``NoSuchMethodError``.

    Raises:
        ShuffleSessionError: ``version``'s line is not in :data:`SUPPORTED_SPARK`; the
            message names both.
    """
    if spark_line(version) not in SUPPORTED_SPARK:
        raise ShuffleSessionError(
            f"the JVM read path of kafka-shuffle runs on Spark {', '.join(SUPPORTED_SPARK)}; "
            f"this session runs Spark {version}: read with engine='python', or install the "
            "kafka-shuffle release built for that Spark line"
        )


def jvm_spark_conf(
    *, kafka: KafkaConfig, catalog: str = DEFAULT_CATALOG, preload_workers: bool = True
) -> dict[str, str]:
    """The Spark settings a session needs to read shuffles on the JVM.

    The jars (``spark.jars``), the catalog ``catalog`` (``spark.sql.catalog.<catalog>``) with
    the Kafka settings it reads commit logs with (``spark.sql.catalog.<catalog>.kafka.*``,
    librdkafka names as everywhere in the engine), and the planner settings keyed reads rely
    on. ``spark.jars`` is static: give these when the session is built. A ``spark.jars`` of
    your own must be merged with this one (the value is a comma-separated list).

    Example::

        spark = SparkSession.builder.config(map=jvm_spark_conf(kafka=conf)).getOrCreate()
        keyed = read_shuffle(spark, "flights.by_tailnum", kafka=conf)  # read on the JVM
        spark.table("shuffle.`flights.by_tailnum`").schema               # the shuffle's columns

    Args:
        kafka: The cluster the catalog's shuffles live on (a ``KafkaClient`` or settings).
        catalog: The catalog's name in Spark SQL.
        preload_workers: Also fork Spark's Python workers from
            :mod:`orchestration.shuffle.spark.daemon`, which has pyarrow, pandas and the
            engine imported, so that the first Python task after an idle minute does not
            import them again (``spark.python.daemon.module``; the executors' Python must
            have the package installed). False leaves Spark's own daemon.

    Raises:
        ShuffleSessionError: The package holds no jars (:func:`jvm_jars`), or the installed
            PySpark is of a Spark line the jar was not built for.
    """
    if not catalog or not catalog.replace("_", "").isalnum():
        raise ShuffleOptionError(
            f"jvm_spark_conf: catalog must be a plain identifier (letters, digits, _), "
            f"got {catalog!r}"
        )
    import pyspark

    # The Spark a classic session runs is the installed PySpark's.
    require_supported_spark(pyspark.__version__)
    client = KafkaClient.of(kafka)
    conf = {
        "spark.jars": ",".join(jvm_jars()),
        f"spark.sql.catalog.{catalog}": CATALOG_CLASS,
    }
    for key, value in kafka_to_options(client.settings).items():
        conf[f"spark.sql.catalog.{catalog}.{key}"] = value
    conf.update(PLANNER_SETTINGS)
    if preload_workers:
        conf[DAEMON_SETTING] = DAEMON_MODULE
    return conf


def _setting(spark: Any, key: str) -> str | None:
    try:
        value = spark.conf.get(key, None)
    except Exception:  # noqa: BLE001 - a session that shows no settings has no catalog of ours
        return None
    return None if value is None else str(value)


def _settings(spark: Any) -> dict[str, str]:
    try:
        return {str(k): str(v) for k, v in spark.conf.getAll.items()}
    except Exception:  # noqa: BLE001 - a session that shows no settings has no catalog of ours
        return {}


# The Spark context whose class loader last loaded the source: a class once loaded stays
# loadable for that context, so only the first read of a session asks (a py4j round trip
# of ~6 ms). A context without the class is asked again each time (ADD JAR may add it).
_LOADED_IN: list[Any] = []


def _class_loadable(spark: SparkSession) -> bool:
    context = getattr(spark.sparkContext, "_jsc", None)
    if context is not None and any(c is context for c in _LOADED_IN):
        return True
    try:
        jvm: Any = spark._jvm
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        loader.loadClass(PROVIDER_CLASS)
    except Exception:  # noqa: BLE001 - py4j raises its own errors for a missing class
        return False
    if context is not None:
        _LOADED_IN[:] = [context]
    return True


def jvm_available(spark: SparkSession) -> bool:
    """Whether ``spark`` can read shuffles on the JVM: on a classic session, the source's
    class loads (its jar is on the session); on Spark Connect, where no JVM is at hand, a
    catalog of the JVM path is configured on the server (so its jar is there)."""
    if is_connect(spark):
        return any(
            k.startswith("spark.sql.catalog.") and k.count(".") == 3 and v == CATALOG_CLASS
            for k, v in _settings(spark).items()
        )
    return _class_loadable(spark)


def jvm_catalog(spark: SparkSession, kafka: KafkaClient) -> str | None:
    """The catalog of the JVM path configured on ``spark`` for ``kafka``'s cluster (same
    ``bootstrap.servers``), if any: the one named ``shuffle`` (:func:`jvm_spark_conf`'s
    default) if it is one, else the first in name order."""
    # Two lookups for the usual session; listing every setting costs ~25 ms through py4j.
    key = f"spark.sql.catalog.{DEFAULT_CATALOG}"
    if (
        _setting(spark, key) == CATALOG_CLASS
        and _setting(spark, f"{key}.kafka.bootstrap.servers") == kafka.bootstrap_servers
    ):
        return DEFAULT_CATALOG
    settings = _settings(spark)
    for key in sorted(settings):
        parts = key.split(".")
        if len(parts) != 4 or parts[:3] != ["spark", "sql", "catalog"]:
            continue
        if settings[key] != CATALOG_CLASS:
            continue
        servers = settings.get(f"{key}.kafka.bootstrap.servers")
        if servers == kafka.bootstrap_servers:
            return parts[3]
    return None


def _session_problems(spark: SparkSession, kafka: KafkaClient) -> list[str]:
    problems = []
    if not jvm_available(spark):
        problems.append(
            f"the JVM read path's jar ({JAR_PREFIX}<version>.jar) is not on the session "
            "(spark.jars, given when the session is built: jvm_spark_conf(kafka=...) has it)"
        )
    if jvm_catalog(spark, kafka) is None:
        problems.append(
            f"no catalog of class {CATALOG_CLASS} with kafka.bootstrap.servers="
            f"{kafka.bootstrap_servers} (spark.sql.catalog.<name> and "
            "spark.sql.catalog.<name>.kafka.*: jvm_spark_conf(kafka=...) has them)"
        )
    return problems


def choose_engine(spark: SparkSession, kafka: KafkaClient, engine: str) -> str | None:
    """The catalog to read through on the JVM, or None to read with the Python source.

    ``"auto"``: the JVM when the session has the jar and a catalog for this cluster;
    ``"jvm"``: the JVM or an error saying what the session lacks; ``"python"``: Python.
    """
    if engine not in ENGINES:
        raise ShuffleOptionError(f"engine must be one of {ENGINES}, got {engine!r}")
    if engine == "python":
        return None
    catalog = jvm_catalog(spark, kafka) if jvm_available(spark) else None
    if catalog is None and engine == "jvm":
        raise ShuffleSessionError(
            "engine='jvm': the session cannot read shuffles on the JVM: "
            + "; ".join(_session_problems(spark, kafka))
        )
    if catalog is not None:
        # A session set up for the JVM path on another Spark line fails here, with the
        # versions named, rather than in its first task.
        require_supported_spark(str(spark.version))
    return catalog


def choose_stream_engine(spark: SparkSession, kafka: KafkaClient, engine: str) -> str | None:
    """:func:`choose_engine` for a streaming read. On Spark Connect, ``"auto"`` streams on the
    JVM only when the server has the jar in ``spark.jars`` (given when it started, e.g.
    ``--jars``): the tasks of a streaming query on a Connect server do not see a jar that a
    session added for itself (``ADD JAR``) and fail with ``ClassNotFoundException``, while
    batch reads do. ``"jvm"`` streams on the JVM whatever the server has."""
    catalog = choose_engine(spark, kafka, engine)
    if catalog is not None and engine == "auto" and is_connect(spark):
        if not has_jar(_setting(spark, "spark.jars")):
            return None
    return catalog


def has_jar(spark_jars: str | None) -> bool:
    """Whether a ``spark.jars`` value (comma-separated paths or URLs) names our jar."""
    names = (Path(j.strip()).name for j in (spark_jars or "").split(",") if j.strip())
    return any(n.startswith(JAR_PREFIX) and n.endswith(".jar") for n in names)


def jvm_splits(plan: ReadPlan, parallelism: int | str | None) -> Sequence[SplitPlan]:
    """The splits a JVM read is handed: the plan's, except that ``"auto"`` is one split per
    Kafka partition. ``"auto"`` merges the partitions of a small read because a task of the
    Python source costs ~80 ms before it reads; on the JVM, one split per partition is what
    Spark sees as keyed, and the scan itself reads a small read as one split, keyed too
    (``small_read_rows``)."""
    if parallelism == AUTO:
        return plan_splits(plan.layout, plan.commits, None)
    return plan.splits


def load_jvm(spark: SparkSession, catalog: str, options: Mapping[str, str]) -> DataFrame:
    """``spark.read.format("kafka-shuffle-jvm")`` with the ``kafka-shuffle`` source's options
    (see :func:`~orchestration.shuffle.spark.reader.source_options`), through ``catalog``."""
    return spark.read.format(SOURCE).options(**options, catalog=catalog).load()


def load_jvm_stream(
    spark: SparkSession,
    catalog: str,
    topic: str,
    options: Mapping[str, str],
    *,
    with_metadata: bool = False,
) -> DataFrame:
    """``spark.readStream.table("<catalog>.`<topic>`")`` (``<catalog>.with_metadata.`<topic>```
    with the metadata columns): a streaming read on the JVM with the ``kafka-shuffle``
    source's streaming options (``startingOffsets``, ``startingTimestamp``,
    ``maxRunsPerTrigger``, ``maxRowsPerTrigger``, ``parallelism``). The catalog has the
    Kafka settings, so none go into the query's options."""
    quoted = "`" + topic.replace("`", "``") + "`"
    name = f"{catalog}.with_metadata.{quoted}" if with_metadata else f"{catalog}.{quoted}"
    return spark.readStream.options(**options).table(name)
