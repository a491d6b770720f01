"""Benchmark: the JVM read path against an Apache Iceberg table bucketed by the key, which
Spark reads with storage-partitioned joins and grouping, side by side in one Spark session.

Iceberg's Spark runtime exists for Spark 4.1 and not later (``iceberg-pom.xml``), so this
benchmark runs on a PySpark 4.1 of its own: a virtualenv made as the test matrix makes one
(:func:`devstack.matrix.build_wheel` and :func:`devstack.matrix.install`: the wheel of a
clean clone of the committed tree, that PySpark pinned), kept under ``.local/bench`` and
made again when the committed library changes. The command run from the checkout prepares
that virtualenv and Iceberg's jar, then runs the measurement in it (``--inner``), from the
matrix's folder that mirrors the checkout but for the library, so ``orchestration`` is the
wheel's.

The session carries the jars of :func:`orchestration.shuffle.jvm_spark_conf` and Iceberg's
runtime, a Hadoop catalog on local disk (``ice``), the storage-partitioned settings
Iceberg documents (:data:`SPJ_SETTINGS`) and broadcasting off. Over the same synthetic
rows as ``jvm_bench`` (``bench.common.generate``: Zipf string keys ``k``, a timestamp, five
numeric columns) and a one-row-per-key table, written as shuffles of ``--partitions``
Kafka partitions and as Iceberg tables ``PARTITIONED BY (bucket(<partitions>, k))``, it
times each pair ``--repeat`` times, alternating which goes first:

- write: ``write_shuffle`` / ``overwritePartitions()`` of the table (both write again what
  is there: the second and later runs);
- read: the rows into the ``noop`` sink;
- agg: ``groupBy("k").agg(count, sum, avg, max)``;
- window: ``row_number()`` over ``Window.partitionBy("k").orderBy("ts")``, every row;
- join: the rows joined on ``k`` with the one-row-per-key side (two shuffles / two tables;
  a sort-merge join, broadcasting being off);
- reuse: one write, then three keyed consumers (``bench.common.spark_consumers``: per-key
  totals, a window ``lag``, each key's top 3);
- the write, the window, the join and reuse again on sorted layouts: shuffles written with
  ``sort_by=("k", "ts")`` (the other side ``("k",)``), whose order the JVM read reports to
  Spark, and tables with Iceberg's sort order (``WRITE ORDERED BY k, ts``; ``k``), by
  which its write sorts and which its scan does not report (Iceberg 1.12). A team picks
  the layout that suits its work, so a second table gives, for the window, the join and
  reuse, each side's faster layout side by side.

Each run is tagged with its name as Spark's job description, so the executed plans (the
final adaptive plans) come back from the Spark UI's REST API: the output records, for each
measure and side, whether any plan had an Exchange (for reuse, the consumers' plans, its
write's recorded apart; Iceberg's write has one, the distribution it asks of Spark), and
the last run's stages (tasks, wall, run and CPU time) and plan nodes' metrics: where each
side's time goes. Whether a plan sorts (a ``Sort`` node) is recorded beside the Exchange.

Targets (round six): our keyed groupBy, window and join each take at most half of Iceberg's
time, and reuse at most 0.5 of it, at 2M and 10M rows; the table prints Iceberg's time /
ours (met at 2x or more). Medians go to ``.local/bench/iceberg.json``.

Run::

    scripts/dev bench-iceberg                             # 2M and 10M rows, 5 repeats
    scripts/dev bench-iceberg --rows 20000 --repeat 1     # a quick look
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from bench.common import (
    ROOT,
    WORK,
    drop_topics,
    generate,
    group_by,
    noop,
    side_by_side,
    spark_consumers,
)
from bench.results import per_size

# The Spark line Iceberg's newest runtime is built for, and that runtime.
PYSPARK_LINE = "4.1"
ICEBERG_POM = ROOT / "bench" / "iceberg-pom.xml"
ICEBERG_JARS = WORK / "iceberg-jars"
VENV = WORK / f"pyspark-{PYSPARK_LINE}-venv"
VENV_LOG = WORK / f"pyspark-{PYSPARK_LINE}-venv.log"
# What the wheel is built from: the virtualenv is made again when one of these changes in
# the committed tree.
LIBRARY_PATHS = ("orchestration", "jvm", "pyproject.toml", "setup.py", "MANIFEST.in")
WAREHOUSE = WORK / "iceberg-warehouse"
CATALOG = "ice"
NAMESPACE = "bench"
OUT = WORK / "iceberg.json"

# Iceberg in the session: its SQL extensions (Iceberg's Spark configuration page asks for
# them for its SQL commands; a Spark user sets them up with the catalog) and a Hadoop
# catalog, whose tables are folders of metadata and Parquet files on local disk.
ICEBERG_CATALOG = {
    "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
    f"spark.sql.catalog.{CATALOG}": "org.apache.iceberg.spark.SparkCatalog",
    f"spark.sql.catalog.{CATALOG}.type": "hadoop",
    f"spark.sql.catalog.{CATALOG}.warehouse": str(WAREHOUSE),
}
# Storage-partitioned joins and grouping, the settings Iceberg's documentation and its
# guides on storage-partitioned joins give for Spark 3.3 and later:
# - spark.sql.sources.v2.bucketing.enabled: Spark uses the partitioning a V2 source reports
#   (Iceberg's partition transforms, here bucket(8, k)) to leave out the Exchange;
# - spark.sql.sources.v2.bucketing.pushPartValues.enabled: when one side of a join lacks
#   some partition values, Spark gives it empty partitions for them instead of shuffling;
# - spark.sql.iceberg.planning.preserve-data-grouping (Iceberg's, off by default): "co-locate
#   scan tasks for the same partition in the same read split, used in Storage Partitioned
#   Joins", and what makes Iceberg report its partitioning to Spark at all;
# - spark.sql.requireAllClusterKeysForCoPartition false: a join may be co-partitioned on
#   partition keys that are a subset of its join keys (here they are the same key);
# - spark.sql.sources.v2.bucketing.partiallyClusteredDistribution.enabled: with skew, Spark
#   may split the larger side's partitions and replicate the other side's to match them.
# Spark 4.1's defaults already have the first two on; ours (jvm_spark_conf) sets them too.
SPJ_SETTINGS = {
    "spark.sql.sources.v2.bucketing.enabled": "true",
    "spark.sql.sources.v2.bucketing.pushPartValues.enabled": "true",
    "spark.sql.iceberg.planning.preserve-data-grouping": "true",
    "spark.sql.requireAllClusterKeysForCoPartition": "false",
    "spark.sql.sources.v2.bucketing.partiallyClusteredDistribution.enabled": "true",
}
# Broadcasting off: the join is a sort-merge join over each side's own partitioning, as
# between tables too large to broadcast. A broadcast would put a BroadcastExchange on both
# sides and use neither side's storage partitioning.
NO_BROADCAST = {"spark.sql.autoBroadcastJoinThreshold": "-1"}

# (measure, what it is); each is a pair "ours_<measure>" / "iceberg_<measure>".
MEASURES = (
    ("write", "write (a second or later run)"),
    ("read", "plain read"),
    ("agg", "`groupBy(k).agg(count, sum, avg, max)`"),
    ("window", "`row_number()` over a window by key"),
    ("join", "join by key with a one-row-per-key table, no broadcast"),
    ("reuse", "reuse: one write, then three keyed consumers"),
    ("write_sorted", "sorted: write (a second or later run)"),
    ("window_sorted", "sorted: `row_number()` over a window by key"),
    ("join_sorted", "sorted: join by key with a one-row-per-key table, no broadcast"),
    ("reuse_sorted", "sorted: reuse, one write, then three keyed consumers"),
)
# Round six's targets: Iceberg's time / ours at least this (ours at most half of Iceberg's).
TARGETS = {
    "agg": 2.0, "window": 2.0, "join": 2.0, "reuse": 2.0,
    "window_sorted": 2.0, "join_sorted": 2.0, "reuse_sorted": 2.0,
}  # fmt: skip
# The steps a reuse run is tagged with: its write, and its three consumers.
WRITE_STEP, CONSUMERS_STEP = "write", "consumers"


# -- the virtualenv and the jar (in the checkout's virtualenv) ------------------------------


def committed_library() -> str:
    """The committed tree's object ids of what the wheel is built from."""
    out = subprocess.run(
        ["git", "rev-parse", *(f"HEAD:{p}" for p in LIBRARY_PATHS)],
        capture_output=True, text=True, cwd=ROOT, check=True,
    ).stdout  # fmt: skip
    return " ".join(out.split())


def environment(reinstall: bool) -> tuple[Path, Path]:
    """The PySpark 4.1 virtualenv's interpreter (made as the test matrix makes its
    virtualenvs, when missing or built from another committed library) and the folder the
    measurement runs from (the checkout but for the library)."""
    from devstack import matrix

    combos = [c for c in matrix.combinations() if c.pyspark == PYSPARK_LINE]
    if not combos:
        raise SystemExit(f"pyproject.toml admits no PySpark {PYSPARK_LINE}: nothing to run on")
    combo = combos[-1]  # with the newest Dagster the package admits
    stamp, wanted = VENV / ".bench-library", f"{combo.name} {committed_library()}"
    if reinstall or not stamp.exists() or stamp.read_text() != wanted:
        WORK.mkdir(parents=True, exist_ok=True)
        VENV_LOG.write_text("")
        print(f"making {VENV} ({combo.name}, the wheel of a clean clone; log {VENV_LOG})",
              file=sys.stderr, flush=True)  # fmt: skip
        wheel = matrix.build_wheel(VENV_LOG)
        matrix.install(combo, VENV, VENV_LOG, wheel)
        stamp.write_text(wanted)
    return VENV / "bin" / "python", matrix.mirror()


def iceberg_jar() -> Path:
    """Iceberg's Spark runtime jar, resolved by Maven from ``iceberg-pom.xml`` once."""
    from devstack import localstack

    (jar,) = localstack.resolve_jars(ICEBERG_POM, ICEBERG_JARS).glob("iceberg-spark-runtime-*.jar")
    return jar


def launch(argv: list[str], reinstall: bool) -> int:
    """Runs the measurement in the PySpark 4.1 virtualenv, as an activated one would."""
    from devstack import localstack

    bootstrap = localstack.start()
    jar = iceberg_jar()
    python, stage = environment(reinstall)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    # Spark's Python workers run the virtualenv's interpreter too.
    env["PYSPARK_PYTHON"] = str(python)
    # bench and devstack from the checkout (through the mirror), orchestration from the wheel.
    env["PYTHONPATH"] = str(stage)
    env["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
    cmd = [str(python), "-m", "bench.iceberg_bench", *argv, "--inner", "--iceberg-jar", str(jar)]
    return subprocess.run(cmd, env=env, cwd=stage).returncode


# -- the measurement (in the PySpark 4.1 virtualenv) ---------------------------------------


def tagged(spark, label: str, fn):
    """``fn`` with Spark's job description set to ``label`` while it runs: its SQL
    executions carry it in the UI."""

    def run():
        sc = spark.sparkContext
        sc.setJobDescription(label)
        try:
            return fn()
        finally:
            sc.setJobDescription(None)

    return run


def ui_get(spark, path: str):
    """A document of the Spark UI's REST API for this application."""
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/{path}"
    with urllib.request.urlopen(url, timeout=120) as response:
        return json.load(response)


def instant(text: str | None) -> float | None:
    """Seconds since the epoch of a UI time (``2026-01-02T03:04:05.678GMT``)."""
    if not text:
        return None
    return dt.datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def executions(spark, labels: set[str], settle: float = 60.0) -> list[dict]:
    """The UI's SQL executions tagged with one of ``labels``, each with its plan and its
    nodes' metrics, once every one has ended."""
    deadline = time.monotonic() + settle
    while True:
        found = ui_get(spark, "sql?details=true&planDescription=true&offset=0&length=1000000")
        mine = [e for e in found if e.get("description") in labels]
        if all(e.get("status") != "RUNNING" for e in mine) or time.monotonic() > deadline:
            return sorted(mine, key=lambda e: e["id"])
        time.sleep(0.5)


def stage_times(job_ids: list[int], jobs: dict, stages: dict) -> list[dict]:
    """The stages of ``job_ids``: tasks, wall seconds, and the tasks' run and CPU seconds."""
    out = []
    for job in job_ids:
        for sid in sorted(jobs.get(job, {}).get("stageIds", [])):
            s = stages.get(sid)
            if s is None:
                continue
            began, ended = instant(s.get("submissionTime")), instant(s.get("completionTime"))
            out.append({
                "stage": sid, "name": s.get("name"), "tasks": s.get("numTasks"),
                "wall_seconds": None if began is None or ended is None else ended - began,
                "run_seconds": s.get("executorRunTime", 0) / 1000,
                "cpu_seconds": s.get("executorCpuTime", 0) / 1e9,
                "input_bytes": s.get("inputBytes"), "shuffle_read_bytes": s.get("shuffleReadBytes"),
                "shuffle_write_bytes": s.get("shuffleWriteBytes"),
            })  # fmt: skip
    return out


def plan_flags(group: list[dict]) -> dict:
    """How many executions ``group`` holds, whether any plan had an Exchange or a Sort
    node, and the distinct plans."""
    texts = [e.get("planDescription", "") for e in group]
    return {
        "executions": len(group),
        "exchange": any("Exchange" in t for t in texts),
        # A Sort node of the tree ("+- Sort [k#1 ASC NULLS FIRST], false, 0"), not
        # SortMergeJoin or SortAggregate.
        "sort": any(re.search(r"\bSort \[", t) for t in texts),
        "plans": sorted(set(texts)),
    }


def plans_and_profiles(spark, names: list[str], repeat: int) -> tuple[dict, dict]:
    """For each measured name: whether its executed plans had an Exchange (the reads; a
    reuse's consumers, its write apart), every distinct plan, and its last run's
    executions with their stages and plan nodes' metrics."""
    labels = set(names) | {f"{n}:{s}" for n in names for s in (WRITE_STEP, CONSUMERS_STEP)}
    found = executions(spark, labels)
    runs = {label: [e for e in found if e["description"] == label] for label in labels}
    jobs = {j["jobId"]: j for j in ui_get(spark, "jobs")}
    stages = {s["stageId"]: s for s in ui_get(spark, "stages") if s.get("status") != "SKIPPED"}
    plans, profiles = {}, {}
    for name in names:
        if runs[f"{name}:{CONSUMERS_STEP}"]:
            read, write = runs[f"{name}:{CONSUMERS_STEP}"], runs[f"{name}:{WRITE_STEP}"]
        elif name.split("_", 1)[1].startswith("write"):
            read, write = [], runs[name]
        else:
            read, write = runs[name], []
        plans[name] = {"read": plan_flags(read), "write": plan_flags(write)}
        # The last run's executions: each run of a name executes as many as the others.
        mine = sorted(read + write, key=lambda e: e["id"])
        last = mine[-(len(mine) // repeat) :] if mine and len(mine) % repeat == 0 else mine[-1:]
        profiles[name] = [
            {
                "description": e["description"],
                "seconds": e.get("duration", 0) / 1000,
                "stages": stage_times(e.get("successJobIds", []), jobs, stages),
                "nodes": [
                    {
                        "node": n["nodeName"],
                        "metrics": {m["name"]: m["value"] for m in n["metrics"]},
                    }
                    for n in e.get("nodes", [])
                    if n.get("metrics")
                ],
            }
            for e in last
        ]
    return plans, profiles


def metric_seconds(value: str) -> float | None:
    """The total of a timing metric as the UI shows it (``total (min, med, max ...)\n1.2 s
    (...)``, or a bare ``35 ms``), in seconds."""
    head = value.split("\n")[-1].split("(")[0].strip().split()
    units = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    if len(head) != 2 or head[1] not in units:
        return None
    return float(head[0].replace(",", "")) * units[head[1]]


def breakdown(report: dict) -> str:
    """Where each run's time went, from its last run's executions: the stages (tasks, wall,
    the tasks' run and CPU seconds) and the timing metrics of the plan's nodes."""
    lines = []
    for rows, size in report["sizes"].items():
        for execs in size["profiles"].values():
            for e in execs:
                lines.append(f"{int(rows) / 1e6:g}M {e['description']}: {e['seconds']:.2f} s")
                for st in e["stages"]:
                    wall = st["wall_seconds"]
                    lines.append(
                        f"    stage {st['stage']}: {st['tasks']} tasks, wall "
                        f"{'-' if wall is None else f'{wall:.2f}'} s, tasks run "
                        f"{st['run_seconds']:.2f} s, CPU {st['cpu_seconds']:.2f} s"
                    )
                for node in e["nodes"]:
                    timed = {
                        k: metric_seconds(v)
                        for k, v in node["metrics"].items()
                        if "time" in k or k == "duration"
                    }
                    timed = {k: v for k, v in timed.items() if v}
                    if timed:
                        shown = ", ".join(f"{k} {v:.2f} s" for k, v in timed.items())
                        lines.append(f"    {node['node']}: {shown}")
    return "\n".join(lines)


def run_size(spark, kafka: dict, rows: int, repeat: int, partitions: int) -> dict:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from orchestration.shuffle import ShuffleSpec, read_shuffle, write_shuffle
    from orchestration.shuffle.core.commitlog import commit_topic

    src = WORK / f"source-{rows}.parquet"
    generate(spark, rows, src)
    df = spark.read.parquet(str(src))
    # The join's other side: one row per key, keyed as the rows are (jvm_bench's).
    other_src = WORK / f"source-{rows}-per-key.parquet"
    if not (other_src / "_SUCCESS").exists():
        df.groupBy("k").agg(F.avg("a").alias("a2")).write.mode("overwrite").parquet(str(other_src))
    other = spark.read.parquet(str(other_src))
    tag = uuid.uuid4().hex[:8]
    topic, other_topic = f"bench.iceberg.{tag}", f"bench.iceberg2.{tag}"
    table = f"{CATALOG}.{NAMESPACE}.rows_{tag}"
    other_table = f"{CATALOG}.{NAMESPACE}.per_key_{tag}"

    def spec(t: str, event_time: str | None = "ts", sort_by: tuple = ()) -> ShuffleSpec:
        return ShuffleSpec(topic=t, key=("k",), num_partitions=partitions, event_time=event_time,
                           sort_by=sort_by)  # fmt: skip

    def ours_write() -> None:
        write_shuffle(df, spec(topic), kafka=kafka, window="bench")

    def create(name: str, frame, ordered_by: str = "") -> None:
        columns = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in frame.schema)
        spark.sql(
            f"CREATE TABLE {name} ({columns}) USING iceberg "
            f"PARTITIONED BY (bucket({partitions}, k))"
        )
        if ordered_by:
            # Iceberg's sort order: its writes sort each task's rows by it (after the
            # partition's), and each data file records it.
            spark.sql(f"ALTER TABLE {name} WRITE ORDERED BY {ordered_by}")

    def iceberg_write() -> None:
        # A table's content replaced by a new snapshot: every bucket is in the rows, so a
        # dynamic overwrite replaces all of them. Iceberg asks Spark for its default write
        # distribution of a partitioned table (hash by the bucket), so each bucket's rows
        # are written by one task.
        df.writeTo(table).overwritePartitions()

    # Sorted: shuffles written with sort_by, whose order the JVM read reports to Spark, and
    # tables with Iceberg's sort order, by which its write sorts (Iceberg 1.12's scan
    # reports no order to Spark).
    sorted_topic, sorted_other_topic = f"bench.iceberg-s.{tag}", f"bench.iceberg2-s.{tag}"
    sorted_table = f"{CATALOG}.{NAMESPACE}.rows_sorted_{tag}"
    sorted_other_table = f"{CATALOG}.{NAMESPACE}.per_key_sorted_{tag}"

    def ours_write_sorted() -> None:
        write_shuffle(df, spec(sorted_topic, sort_by=("k", "ts")), kafka=kafka, window="bench")

    def iceberg_write_sorted() -> None:
        df.writeTo(sorted_table).overwritePartitions()

    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{NAMESPACE}")
    create(table, df)
    create(other_table, other)
    create(sorted_table, df, "k, ts")
    create(sorted_other_table, other, "k")
    ours_write()
    ours_write_sorted()
    write_shuffle(other, spec(other_topic, None), kafka=kafka, window="bench")
    write_shuffle(other, spec(sorted_other_topic, None, ("k",)), kafka=kafka, window="bench")
    iceberg_write()
    iceberg_write_sorted()
    other.writeTo(other_table).overwritePartitions()
    other.writeTo(sorted_other_table).overwritePartitions()

    def shuffle(t: str):
        """A read of the shuffle ``t`` on the JVM path, made when called."""
        return lambda: read_shuffle(spark, t, kafka=kafka, engine="jvm")

    def table_of(name: str):
        """A read of the Iceberg table ``name``, made when called."""
        return lambda: spark.table(name)

    ours, ours_other = shuffle(topic), shuffle(other_topic)
    ours_sorted, ours_sorted_other = shuffle(sorted_topic), shuffle(sorted_other_topic)
    iceberg, iceberg_other = table_of(table), table_of(other_table)
    iceberg_sorted, iceberg_sorted_other = table_of(sorted_table), table_of(sorted_other_table)

    expected = df.count()
    counts = {
        "ours": ours().count(), "iceberg": iceberg().count(),
        "ours_sorted": ours_sorted().count(), "iceberg_sorted": iceberg_sorted().count(),
    }  # fmt: skip
    if set(counts.values()) != {expected}:
        raise SystemExit(f"rows read back differ from the {expected} written: {counts}")
    files = spark.sql(f"SELECT count(*) AS n, sum(file_size_in_bytes) AS b FROM {table}.files")
    iceberg_files = files.first().asDict()

    def window(frame) -> None:
        rank = F.row_number().over(Window.partitionBy("k").orderBy("ts"))
        noop(frame.withColumn("r", rank))

    def reuse(name: str, write, read):
        def run() -> None:
            tagged(spark, f"{name}:{WRITE_STEP}", write)()
            tagged(spark, f"{name}:{CONSUMERS_STEP}", lambda: spark_consumers(read()))()

        return run

    work = {
        "write": (ours_write, iceberg_write),
        "read": (lambda: noop(ours()), lambda: noop(iceberg())),
        "agg": (lambda: group_by(ours()), lambda: group_by(iceberg())),
        "window": (lambda: window(ours()), lambda: window(iceberg())),
        "join": (
            lambda: noop(ours().join(ours_other(), "k")),
            lambda: noop(iceberg().join(iceberg_other(), "k")),
        ),
        "reuse": (
            reuse("ours_reuse", ours_write, ours),
            reuse("iceberg_reuse", iceberg_write, iceberg),
        ),
        "write_sorted": (ours_write_sorted, iceberg_write_sorted),
        "window_sorted": (lambda: window(ours_sorted()), lambda: window(iceberg_sorted())),
        "join_sorted": (
            lambda: noop(ours_sorted().join(ours_sorted_other(), "k")),
            lambda: noop(iceberg_sorted().join(iceberg_sorted_other(), "k")),
        ),
        "reuse_sorted": (
            reuse("ours_reuse_sorted", ours_write_sorted, ours_sorted),
            reuse("iceberg_reuse_sorted", iceberg_write_sorted, iceberg_sorted),
        ),
    }
    pairs = []
    for measure, (a, b) in work.items():
        fa, fb = (a, b) if measure.startswith("reuse") else (
            tagged(spark, f"ours_{measure}", a), tagged(spark, f"iceberg_{measure}", b)
        )  # fmt: skip
        pairs.append(((f"ours_{measure}", fa), (f"iceberg_{measure}", fb)))
    times = side_by_side(pairs, repeat, f"rows={rows:>9}")
    plans, profiles = plans_and_profiles(spark, list(times), repeat)

    shuffles = (topic, other_topic, sorted_topic, sorted_other_topic)
    drop_topics(kafka, [t for x in shuffles for t in (x, commit_topic(x))])
    for t in (table, other_table, sorted_table, sorted_other_table):
        spark.sql(f"DROP TABLE IF EXISTS {t} PURGE")
    med = {k: statistics.median(v) for k, v in times.items()}
    results = {}
    for measure, _ in MEASURES:
        step = "write" if measure.startswith("write") else "read"
        ours_s, ice_s = med[f"ours_{measure}"], med[f"iceberg_{measure}"]
        ratio = ice_s / ours_s
        bound = TARGETS.get(measure)
        results[measure] = {
            "ours_seconds": ours_s,
            "iceberg_seconds": ice_s,
            "iceberg_over_ours": ratio,
            "ours_over_iceberg": ours_s / ice_s,
            # A repeat's pair runs back to back: a load that comes and goes on a shared
            # machine falls on both halves of a pair more often than on both medians.
            "iceberg_over_ours_per_repeat": statistics.median(
                i / o
                for i, o in zip(times[f"iceberg_{measure}"], times[f"ours_{measure}"], strict=True)
            ),
            "target": bound,
            "met": None if bound is None else ratio >= bound,
            # A write's own plans; the reads' for the rest (a reuse's consumers).
            "exchange": {
                side: plans[f"{side}_{measure}"][step]["exchange"] for side in ("ours", "iceberg")
            },
            "sort": {
                side: plans[f"{side}_{measure}"][step]["sort"] for side in ("ours", "iceberg")
            },
        }
    return {
        "times": times,
        "medians": med,
        "measures": results,
        "plans": plans,
        "profiles": profiles,
        "iceberg_files": iceberg_files,
    }


def session(args):
    """One session for both sides: ours (jvm_spark_conf) and Iceberg's jar and catalog."""
    import orchestration
    from orchestration.shuffle import jvm_spark_conf, spark_session

    where = Path(orchestration.__file__).resolve()
    if not where.is_relative_to(Path(sys.prefix).resolve()):
        raise SystemExit(
            f"orchestration comes from {where}, not the wheel installed in {sys.prefix}"
        )
    kafka = {"bootstrap.servers": os.environ["KAFKA_BOOTSTRAP_SERVERS"]}
    ours = jvm_spark_conf(kafka=kafka)
    conf = {
        **ours,
        "spark.jars": ",".join([ours["spark.jars"], args.iceberg_jar]),
        **ICEBERG_CATALOG,
        **SPJ_SETTINGS,
        **NO_BROADCAST,
        "spark.driver.memory": args.driver_memory,
        "spark.sql.shuffle.partitions": str(args.partitions),
        "spark.sql.warehouse.dir": str(WORK / "spark-warehouse"),
    }
    # The UI serves the executed plans and stage times the output records.
    spark = spark_session(master=args.master, app_name="kafka-shuffle-iceberg-bench", conf=conf,
                          ui=True)  # fmt: skip
    return spark, kafka, conf


def measure(args) -> int:
    import pyspark

    shutil.rmtree(WAREHOUSE, ignore_errors=True)  # tables of an interrupted run
    spark, kafka, conf = session(args)
    report: dict = {
        "pyspark": pyspark.__version__,
        "iceberg_jar": Path(args.iceberg_jar).name,
        "master": args.master,
        "cores": os.cpu_count(),
        "partitions": args.partitions,
        "settings": {k: conf[k] for k in (*SPJ_SETTINGS, *NO_BROADCAST)},
        "sizes": {},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    sizes = [int(r) for r in args.rows.split(",")]
    for rows, repeat in zip(sizes, per_size(args.repeat, sizes, 5), strict=True):
        print(f"== {rows} rows, {repeat} run(s) of each phase", flush=True)
        result = run_size(spark, kafka, rows, repeat, args.partitions)
        report["sizes"][str(rows)] = {"repeat": repeat, **result}
        out.write_text(json.dumps(report, indent=2))
    print(breakdown(report))
    print(table(report))
    print()
    print(best_table(report))
    print(f"\nall measurements: {out}")
    return 0


def table(report: dict) -> str:
    """The results as a Markdown table: ours, Iceberg, Iceberg's time / ours, Exchanges."""
    lines = [
        "| rows | work | ours (JVM read) | Iceberg | Iceberg's time / ours "
        "| the same, median of each repeat's | Exchange (ours / Iceberg) "
        "| Sort (ours / Iceberg) | target |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    what = dict(MEASURES)
    for rows, size in report["sizes"].items():
        for measure, r in size["measures"].items():
            ex = r["exchange"]
            exchange = f"{'yes' if ex['ours'] else 'no'} / {'yes' if ex['iceberg'] else 'no'}"
            so = r.get("sort", {})
            sort = f"{'yes' if so.get('ours') else 'no'} / {'yes' if so.get('iceberg') else 'no'}"
            if r["target"] is None:
                target = ""
            else:
                verdict = "met" if r["met"] else "**missed**"
                target = f">= {r['target']:g}x: {verdict}"
            lines.append(
                f"| {int(rows) / 1e6:g}M | {what[measure]} | {r['ours_seconds']:.2f} s "
                f"| {r['iceberg_seconds']:.2f} s | {r['iceberg_over_ours']:.2f}x "
                f"| {r['iceberg_over_ours_per_repeat']:.2f}x | {exchange} | {sort} "
                f"| {target} |"
            )
    return "\n".join(lines)


# The work measured on both layouts: each side's faster layout is what a team would pick.
BOTH_LAYOUTS = ("window", "join", "reuse")


def best_table(report: dict) -> str:
    """For the work measured on both layouts (unsorted and sorted), each side's faster
    median, which layout it was, and Iceberg's time / ours of the two."""
    lines = [
        "| rows | work | ours, its faster layout | Iceberg, its faster layout "
        "| Iceberg's time / ours | target |",
        "|---|---|---|---|---|---|",
    ]
    what = dict(MEASURES)
    for rows, size in report["sizes"].items():
        m = size["measures"]
        for measure in BOTH_LAYOUTS:
            if f"{measure}_sorted" not in m:
                continue
            best = {}
            for side in ("ours", "iceberg"):
                options = [(m[x][f"{side}_seconds"], x) for x in (measure, f"{measure}_sorted")]
                best[side] = min(options)
            ratio = best["iceberg"][0] / best["ours"][0]
            bound = TARGETS[measure]
            verdict = "met" if ratio >= bound else "**missed**"

            def shown(side: str, best: dict = best) -> str:
                seconds, x = best[side]
                return f"{seconds:.2f} s ({'sorted' if x.endswith('_sorted') else 'unsorted'})"

            lines.append(
                f"| {int(rows) / 1e6:g}M | {what[measure]} | {shown('ours')} "
                f"| {shown('iceberg')} | {ratio:.2f}x | >= {bound:g}x: {verdict} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="2000000,10000000", help="comma-separated sizes")
    parser.add_argument(
        "--repeat", default="5", help="runs per phase: one number, or one per size (5,3)"
    )
    parser.add_argument("--partitions", type=int, default=8, help="Kafka partitions and buckets")
    parser.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[2]"))
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument(
        "--reinstall", action="store_true", help="make the PySpark 4.1 virtualenv again"
    )
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--iceberg-jar", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.inner:
        return launch([a for a in argv if a != "--reinstall"], args.reinstall)
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
