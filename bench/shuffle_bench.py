"""Benchmark: the shuffle against Spark's own Kafka sink and source and against Spark's
``groupBy``, side by side.

For each size (default 1M and 10M rows; ``--quick``: 1M rows, one run) the script generates
synthetic rows once (a Zipf-skewed string key over 100k keys, "bench keys", and a second
source over 200k keys; a timestamp, five numeric columns) into Parquet, then, ``--repeat``
times and alternating which of each pair goes first:

- write: ``write_shuffle`` (Arrow frames; the source is a Parquet scan, so the tasks read
  it with pyarrow: the columnar path; ``shuffle_write_rows`` is the same write on the row
  path, ``columnar=False``) vs Spark's ``kafka`` sink, one JSON message per
  row keyed by the key column (Kafka partitions by key: the same keyed layout);
- read: ``read_shuffle`` vs Spark's ``kafka`` source parsing the JSON back into columns;
  both end in Spark's ``noop`` sink so every row is materialized;
- the floor under any writer that runs in Python: the same rows, with their key group,
  handed to an empty ``mapInArrow`` that only counts them;

and the targets, each against its own baseline:

- T1: ``apply_per_key`` with a per-key pandas function (200k keys) vs
  ``groupBy(key).applyInPandas`` with the same function over the Parquet source;
- T2: ``apply_per_key(per="batch")`` with a vectorized pandas aggregation vs
  ``groupBy(key).agg(...)`` over the Parquet source, and the same aggregation written with
  Arrow's ``group_by`` (``data="arrow"``);
- T3: ``aggregate_shuffle`` vs the same ``groupBy(key).agg(...)``, bench keys and 200k keys;
- T4: the write above against Spark's sink;
- T5: the write's bytes on the wire per second against Kafka's own producer performance
  tool (``ProducerPerformance``, ``acks=all``) on the same broker, with records the size
  of the write's frames;
- T6: reuse: one write plus three consumers over the persisted shuffle vs the three
  consumers each run as Spark would (Parquet source, Spark's shuffle, the same result):
  per-key totals (``aggregate_shuffle`` / ``groupBy.agg``), the largest gap between a
  key's consecutive events (``apply_per_key`` ordered by time / a window ``lag``) and each
  key's top three rows (``apply_per_key`` / ``row_number``);
- T7: recovery: re-running one failed consumer (the gaps) for one day of 30 vs re-running
  that day's whole pipeline (its write and the three consumers);
- T8: a commit-sensor tick (``shuffle_commits_since`` from the cursor it kept, one new
  commit) on a shuffle of 30 committed windows vs one of 1; reading 1 of the 30 windows vs
  all 30, with the default parallelism and with ``parallelism="auto"``;
- T9: the peak memory of a Python worker in each of our phases, the largest size against
  the smallest (meaningful with ``--no-worker-reuse``, which gives each task a fresh
  worker);
- B: against Spark's natural alternative for a reused keyed intermediate, a bucketed
  Parquet table (``bucketBy(8, "k")``, whose ``groupBy("k")`` and window-by-key plans have
  no Exchange): the write, a plain read, the aggregation, the per-key gaps consumer, and
  the write plus the three consumers, each against the same over the table;
- P6: the row-path write against the Arrow hand-over floor.

It samples the resident memory of Spark's Python worker processes during each phase,
prints a line per phase and the medians, writes every measurement to
``.local/bench/results.json`` and draws ``.local/bench/results.png`` (one panel per target).
``python -m bench.report`` turns the JSON into the tables of docs/performance.md.

Run::

    scripts/dev bench                          # 1M and 10M rows, 3 repeats
    scripts/dev bench --quick                  # 1M rows, one run: a smoke test
    scripts/dev bench --rows 1000000 --repeat 5
    scripts/dev bench --rows 1000000,10000000,100000000 --repeat 3,3,1   # a decade more data
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.common import (
    AGGREGATIONS,
    BASELINE_JARS,
    BATCH_SCHEMA,
    PER_KEY_SCHEMA,
    ROOT,
    WORK,
    batch_stats,
    drop_topics,
    function_cpu,
    generate,
    group_by,
    noop,
    per_key_stats,
    per_key_stats_streamed,
    spark_consumers,
    spark_gaps,
    spark_kafka_rows,
    spark_kafka_write,
)
from bench.results import T9_BOUND, chart, memory_growth, per_size, targets
from devstack import localstack
from orchestration.shuffle import (
    KafkaClient,
    ShuffleSpec,
    aggregate_shuffle,
    apply_per_key,
    read_shuffle,
    shuffle_commits_since,
    spark_session,
    write_shuffle,
)
from orchestration.shuffle.core.commitlog import commit_topic
from orchestration.shuffle.kafka.commitlog import log_end

PHASES = (
    "arrow_handover",
    "shuffle_write",
    "shuffle_write_rows",
    "spark_write",
    "shuffle_read",
    "spark_read",
    "shuffle_per_key",
    "shuffle_per_key_arrow",
    "shuffle_per_key_streamed",
    "shuffle_per_key_whole",
    "spark_group_by",
    "shuffle_aggregate",
    "spark_group_by_agg",
    "shuffle_per_key_200k",
    "spark_apply_in_pandas_200k",
    "shuffle_aggregate_200k",
    "spark_group_by_200k",
    "tick_30_windows",
    "tick_1_window",
    "read_1_of_30_windows",
    "read_30_windows",
    "read_1_of_30_windows_auto",
    "read_30_windows_auto",
    "kafka_perf_test",
    "reuse_three_consumers",
    "reuse_three_consumers_arrow",
    "spark_three_consumers",
    "recover_one_consumer",
    "rerun_day_pipeline",
    "shuffle_write_b",
    "bucketed_write",
    "shuffle_read_b",
    "bucketed_read",
    "shuffle_aggregate_b",
    "bucketed_group_by",
    "shuffle_gaps_b",
    "bucketed_gaps",
    "reuse_three_consumers_b",
    "bucketed_three_consumers",
)
WINDOWS = 30
TICKS = 50  # ticks timed per run (a tick takes milliseconds); their median is the run's time


class Sampler:
    """Calls ``sample()`` every ``interval`` seconds in a thread while the ``with`` block
    runs; subclasses keep the peak of what they sample."""

    def __init__(self, interval: float):
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


class WorkerMemory(Sampler):
    """Samples the RSS of Spark's Python worker processes (peak of any single one)."""

    def __init__(self, interval: float = 0.1):
        super().__init__(interval)
        self.peak = 0

    def sample(self) -> None:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"pyspark.daemon" not in cmd and b"pyspark.worker" not in cmd:
                    continue
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.peak = max(self.peak, int(line.split()[1]) * 1024)
            except OSError:
                continue


class DiskPeak(Sampler):
    """Samples the used bytes of the file system that holds the broker's data and the bench's
    files (one disk on this machine): the peak over what was used on entry is what a size
    takes on disk (its topics, Parquet sources, tables and Spark's spill files)."""

    def __init__(self, path: Path, interval: float = 1.0):
        super().__init__(interval)
        self.path = path
        self.start = shutil.disk_usage(path).used
        self.peak = self.start

    def sample(self) -> None:
        self.peak = max(self.peak, shutil.disk_usage(self.path).used)

    @property
    def peak_gib(self) -> float:
        return (self.peak - self.start) / 2**30


def timed(fn) -> tuple[float, int, object]:
    with WorkerMemory() as mem:
        start = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - start
    return seconds, mem.peak, out


def logical_bytes_per_row(path: Path) -> float:
    """Uncompressed Arrow bytes per row, from the first row group of the Parquet source."""
    files = sorted(path.glob("*.parquet"))
    table = pq.ParquetFile(files[0]).read_row_group(0)
    return table.nbytes / max(table.num_rows, 1)


def batch_stats_arrow(table):
    """T2's function written with Arrow's hash aggregation instead of pandas (data="arrow")."""
    out = table.group_by("k").aggregate([("a", "count"), ("a", "sum"), ("b", "mean"), ("c", "max")])
    return out.rename_columns({"a_count": "n", "a_sum": "sa", "b_mean": "mb", "c_max": "mc"})


def gaps_batch(pdf):
    """T6/T7's second consumer, over whole keys with each key's rows in time order: the
    events per key and the largest gap (seconds) between two consecutive ones."""
    gap = pdf.groupby("k", sort=False)["ts"].diff().dt.total_seconds()
    return (
        pdf[["k"]]
        .assign(gap=gap)
        .groupby("k", as_index=False)
        .agg(n=("gap", "size"), max_gap=("gap", "max"))
    )


GAPS_SCHEMA = "k string, n long, max_gap double"


def top3_batch(pdf):
    """T6's third consumer, over whole keys: each key's three rows with the largest ``b``."""
    top = pdf.sort_values(["k", "b"], ascending=[True, False]).groupby("k", sort=False).head(3)
    return top[["k", "ts", "b"]]


TOP3_SCHEMA = "k string, ts timestamp, b double"


def _key_starts(keys) -> np.ndarray:
    """Where each run of equal keys begins in ``keys`` (an Arrow array grouped by key)."""
    n = len(keys)
    changes = pc.not_equal(keys.slice(1), keys.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    return np.flatnonzero(np.r_[True, changes])


def gaps_arrow(table):
    """``gaps_batch`` on Arrow (``data="arrow"``): rows come grouped by key, in time order."""
    n = table.num_rows
    unit = table.schema.field("ts").type.unit
    ts = pc.cast(table["ts"], pa.int64()).to_numpy(zero_copy_only=False)
    gap = np.empty(n)
    gap[1:] = np.diff(ts) / {"s": 1, "ms": 1e3, "us": 1e6, "ns": 1e9}[unit]
    first = np.zeros(n, dtype=bool)
    first[_key_starts(table["k"])] = True
    out = pa.table({"k": table["k"], "gap": pa.array(gap, mask=first)})
    out = out.group_by("k").aggregate([([], "count_all"), ("gap", "max")])
    return out.rename_columns({"count_all": "n", "gap_max": "max_gap"})


def top3_arrow(table):
    """``top3_batch`` on Arrow (``data="arrow"``): each key's three rows with the largest b."""
    order = pc.sort_indices(table, [("k", "ascending"), ("b", "descending")])
    table = table.take(order)
    starts = _key_starts(table["k"])
    group = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, table.num_rows]))
    rank = np.arange(table.num_rows) - starts[group]
    return table.filter(pa.array(rank < 3)).select(["k", "ts", "b"])


# T6's two per-key consumers: (function, output schema, order_by) per data form.
PER_KEY_CONSUMERS = {
    "pandas": [(gaps_batch, GAPS_SCHEMA, ["ts"]), (top3_batch, TOP3_SCHEMA, [])],
    "arrow": [(gaps_arrow, GAPS_SCHEMA, ["ts"]), (top3_arrow, TOP3_SCHEMA, [])],
}


def our_consumers(spark, kafka: dict, topic: str, windows=None, data: str = "pandas") -> None:
    """The three consumers of T6 (and of T7's whole day) over the persisted shuffle; with
    ``data="arrow"`` the two per-key ones are written on Arrow."""
    noop(aggregate_shuffle(spark, topic, kafka=kafka, windows=windows, aggregations=AGGREGATIONS))
    for fn, schema, order_by in PER_KEY_CONSUMERS[data]:
        our_per_key(spark, kafka, topic, windows, fn, schema, order_by, data)


def our_per_key(spark, kafka: dict, topic: str, windows, fn, schema, order_by, data) -> None:
    shuffled = read_shuffle(spark, topic, kafka=kafka, windows=windows)
    noop(apply_per_key(shuffled, "k", fn, schema, order_by=order_by, per="batch", data=data))


def our_gaps(spark, kafka: dict, topic: str, windows) -> None:
    """T7's failed consumer (the pandas gaps one)."""
    fn, schema, order_by = PER_KEY_CONSUMERS["pandas"][0]
    our_per_key(spark, kafka, topic, windows, fn, schema, order_by, "pandas")


def kafka_perf_test(kafka: dict, topic: str, record_bytes: int, total_bytes: int) -> float:
    """Kafka's own producer performance tool (``acks=all``, records of ``record_bytes``,
    about ``total_bytes`` in all) on ``topic``: the seconds it needs for ``total_bytes`` at
    the rate it reports (its JVM start-up excluded)."""
    import re
    import subprocess

    records = max(total_bytes // record_bytes, 20)
    cmd = [
        localstack.java_executable(),
        "-cp",
        localstack.kafka_classpath(),
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic", topic,
        "--num-records", str(records),
        "--record-size", str(record_bytes),
        "--throughput", "-1",
        "--producer-props",
        f"bootstrap.servers={kafka['bootstrap.servers']}",
        "acks=all",
        f"max.request.size={record_bytes + 1024 * 1024}",
        f"buffer.memory={max(64 * 2**20, 4 * record_bytes)}",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True).stdout
    # The summary line: "N records sent, R records/sec (M MB/sec), ..."
    summary = [line for line in out.splitlines() if "records sent" in line][-1]
    records_per_s = float(re.search(r"([\d.]+) records/sec", summary).group(1))
    return total_bytes / (records_per_s * record_bytes)


def make_phases(
    spark, kafka: dict, df, json_schema, spec: ShuffleSpec, theirs: str, topics: dict, state: dict
) -> list:
    """Pairs of phases on this run's topics: (ours name, ours fn, baseline name, baseline fn).

    ``topics`` names the extra topics of this run (``perf``: Kafka's producer tool,
    ``reuse``: T6's shuffle); ``state["write"]`` is the last write's result."""
    ours = spec.topic

    def w_ours():
        state["write"] = write_shuffle(df, spec, kafka=kafka, window="bench")
        return state["write"]

    def w_rows():
        # The row path (Spark's hash, rows handed over through mapInArrow), for comparison;
        # to a topic of its own, so the reads below see the columnar write's rows only.
        rows_spec = dataclasses.replace(spec, topic=topics["rows"])
        return write_shuffle(df, rows_spec, kafka=kafka, window="bench", columnar=False)

    def perf():
        w = state["write"]
        return kafka_perf_test(kafka, topics["perf"], max(w.bytes // max(w.frames, 1), 1), w.bytes)

    def reuse(topic: str, data: str):
        write_shuffle(df, dataclasses.replace(spec, topic=topic), kafka=kafka, window="bench")
        our_consumers(spark, kafka, topic, ["bench"], data=data)

    def w_theirs():
        spark_kafka_write(df, kafka, theirs)

    def r_ours():
        noop(read_shuffle(spark, ours, kafka=kafka))

    def r_theirs():
        noop(spark_kafka_rows(spark, kafka, theirs, json_schema))

    def k_ours():
        read = read_shuffle(spark, ours, kafka=kafka)
        noop(apply_per_key(read, "k", batch_stats, BATCH_SCHEMA, per="batch"))

    def k_arrow():
        read = read_shuffle(spark, ours, kafka=kafka)
        noop(apply_per_key(read, "k", batch_stats_arrow, BATCH_SCHEMA, per="batch", data="arrow"))

    def handover():
        from pyspark.sql import functions as F

        def count(batches):
            rows = sum(b.num_rows for b in batches)
            yield pa.record_batch({"rows": [rows]})

        keyed = df.withColumn("_key_group", F.pmod(F.hash("k"), F.lit(spec.max_parallelism)))
        return keyed.mapInArrow(count, "rows long").collect()

    def a_ours():
        noop(aggregate_shuffle(spark, ours, kafka=kafka, aggregations=AGGREGATIONS))

    def k_streamed():
        # T1's function per bench key, in the iterator form: the hot key (13% of the rows)
        # reaches pandas a batch at a time. Beside it the same function on whole keys.
        read = read_shuffle(spark, ours, kafka=kafka)
        noop(apply_per_key(read, "k", per_key_stats_streamed, PER_KEY_SCHEMA))

    def k_whole():
        read = read_shuffle(spark, ours, kafka=kafka)
        noop(apply_per_key(read, "k", per_key_stats, PER_KEY_SCHEMA))

    # The bucketed table's pairs: a shuffle and a table of their own, written by the first.
    table = f"bench_bucketed_{topics['b'].rsplit('.', 1)[-1]}"
    b_spec = dataclasses.replace(spec, topic=topics["b"])

    def bucketed_write(name: str) -> None:
        spark.sql(f"DROP TABLE IF EXISTS {name}")
        df.write.bucketBy(spec.num_partitions, "k").format("parquet").saveAsTable(name)

    def a_b():
        noop(aggregate_shuffle(spark, b_spec.topic, kafka=kafka, aggregations=AGGREGATIONS))

    def b_reuse():
        reuse_spec = dataclasses.replace(spec, topic=topics["reuse_b"])
        write_shuffle(df, reuse_spec, kafka=kafka, window="bench")
        our_consumers(spark, kafka, topics["reuse_b"], ["bench"])

    def b_theirs_reuse():
        bucketed_write(table + "_reuse")
        spark_consumers(spark.table(table + "_reuse"))

    return [
        # The writer's floor: Spark -> Python hand-over alone, no Kafka.
        ("arrow_handover", handover, None, None),
        ("shuffle_write", w_ours, "spark_write", w_theirs),
        ("shuffle_write_rows", w_rows, None, None),
        # T5: what Kafka's own producer does with the bytes the write just sent.
        ("kafka_perf_test", perf, None, None),
        ("shuffle_read", r_ours, "spark_read", r_theirs),
        ("shuffle_per_key", k_ours, "spark_group_by", lambda: group_by(df)),
        ("shuffle_per_key_arrow", k_arrow, None, None),
        ("shuffle_per_key_streamed", k_streamed, "shuffle_per_key_whole", k_whole),
        ("shuffle_aggregate", a_ours, "spark_group_by_agg", lambda: group_by(df)),
        ("reuse_three_consumers", lambda: reuse(topics["reuse"], "pandas"), "spark_three_consumers",
         lambda: spark_consumers(df)),
        ("reuse_three_consumers_arrow", lambda: reuse(topics["reuse_arrow"], "arrow"), None, None),
        ("shuffle_write_b", lambda: write_shuffle(df, b_spec, kafka=kafka, window="bench"),
         "bucketed_write", lambda: bucketed_write(table)),
        ("shuffle_read_b", lambda: noop(read_shuffle(spark, b_spec.topic, kafka=kafka)),
         "bucketed_read", lambda: noop(spark.table(table))),
        ("shuffle_aggregate_b", a_b, "bucketed_group_by", lambda: group_by(spark.table(table))),
        ("shuffle_gaps_b", lambda: our_gaps(spark, kafka, b_spec.topic, None),
         "bucketed_gaps", lambda: spark_gaps(spark.table(table))),
        ("reuse_three_consumers_b", b_reuse, "bucketed_three_consumers", b_theirs_reuse),
    ]  # fmt: skip


class Fixtures:
    """Shuffles written once per size, outside the timings: the 200k-key one (T1, T3) and
    the windowed ones (T8)."""

    def __init__(
        self,
        spark,
        kafka: dict,
        rows: int,
        partitions: int,
        mp: int,
        windows: bool = True,
        k200k: bool = True,
    ):
        from pyspark.sql import functions as F

        self.kafka = kafka
        tag = uuid.uuid4().hex[:8]
        self.topic_200k = f"bench.k200k.{tag}" if k200k else None
        self.topic_30 = f"bench.w30.{tag}"
        self.topic_1 = f"bench.w1.{tag}"
        self.topic_day = f"bench.day.{tag}"

        def spec(topic: str) -> ShuffleSpec:
            return ShuffleSpec(
                topic=topic, key=("k",), num_partitions=partitions, max_parallelism=mp,
                event_time="ts",
            )  # fmt: skip

        if k200k:
            print("  preparing: the 200k-key shuffle", flush=True)
            src = WORK / f"source-{rows}-k200000.parquet"
            generate(spark, rows, src, keys=200_000)
            self.source_200k = spark.read.parquet(str(src))
            write_shuffle(self.source_200k, spec(self.topic_200k), kafka=kafka, window="bench")
        self.cursor = {}
        if not windows:
            return
        print(f"  preparing: {WINDOWS} windows of {rows // WINDOWS} rows", flush=True)
        bench_keys = spark.read.parquet(str(WORK / f"source-{rows}.parquet"))
        window_of = F.pmod(F.hash("a"), F.lit(WINDOWS))
        for w in range(WINDOWS):
            part = bench_keys.where(window_of == w)
            write_shuffle(part, spec(self.topic_30), kafka=kafka, window=f"w{w:02d}")
            if w == 0:
                write_shuffle(part, spec(self.topic_1), kafka=kafka, window=f"w{w:02d}")
        # T7's day: its source rows, and a shuffle of its own that the day's whole pipeline
        # writes again (so the 30-window shuffle's commits stay as T8 expects them).
        self.day = bench_keys.where(window_of == 7)
        self.spec_day = spec(self.topic_day)
        write_shuffle(self.day, self.spec_day, kafka=kafka, window="w07")
        # A sensor's cursor just before the newest commit: each tick reads one new commit.
        client = KafkaClient(kafka)
        self.cursor = {t: log_end(client, t) - 1 for t in (self.topic_30, self.topic_1)}

    def topics(self) -> list[str]:
        windowed = [self.topic_30, self.topic_1, self.topic_day] if self.cursor else []
        return ([self.topic_200k] if self.topic_200k else []) + windowed

    def tick(self, topic: str) -> float:
        """The median of TICKS sensor ticks (shuffle_commits_since from the kept cursor)."""
        times = []
        for _ in range(TICKS):
            start = time.perf_counter()
            commits, _ = shuffle_commits_since(topic, kafka=self.kafka, offset=self.cursor[topic])
            times.append(time.perf_counter() - start)
            assert len(commits) == 1, commits
        return statistics.median(times)

    def pairs(self, spark) -> list:
        kafka = self.kafka

        def t1_ours():
            read = read_shuffle(spark, self.topic_200k, kafka=kafka)
            noop(apply_per_key(read, "k", per_key_stats, PER_KEY_SCHEMA))

        def t1_theirs():
            noop(self.source_200k.groupBy("k").applyInPandas(per_key_stats, PER_KEY_SCHEMA))

        def t3_ours():
            noop(aggregate_shuffle(spark, self.topic_200k, kafka=kafka, aggregations=AGGREGATIONS))

        def read_one():
            noop(read_shuffle(spark, self.topic_30, kafka=kafka, windows=["w07"]))

        def read_all():
            noop(read_shuffle(spark, self.topic_30, kafka=kafka))

        def read_one_auto():
            noop(
                read_shuffle(spark, self.topic_30, kafka=kafka, windows=["w07"], parallelism="auto")
            )

        def read_all_auto():
            noop(read_shuffle(spark, self.topic_30, kafka=kafka, parallelism="auto"))

        def recover():
            our_gaps(spark, kafka, self.topic_30, ["w07"])

        def rerun_day():
            write_shuffle(self.day, self.spec_day, kafka=kafka, window="w07")
            our_consumers(spark, kafka, self.topic_day, ["w07"])

        k200k = [
            ("shuffle_per_key_200k", t1_ours, "spark_apply_in_pandas_200k", t1_theirs),
            ("shuffle_aggregate_200k", t3_ours, "spark_group_by_200k",
             lambda: group_by(self.source_200k)),
        ] if self.topic_200k else []  # fmt: skip
        return k200k + [
            ("tick_30_windows", lambda: self.tick(self.topic_30),
             "tick_1_window", lambda: self.tick(self.topic_1)),
            ("read_1_of_30_windows", read_one, "read_30_windows", read_all),
            ("read_1_of_30_windows_auto", read_one_auto, "read_30_windows_auto", read_all_auto),
            ("recover_one_consumer", recover, "rerun_day_pipeline", rerun_day),
        ]  # fmt: skip


def run_size(
    spark, kafka: dict, rows: int, repeat: int, partitions: int, mp: int, skip: set[str]
) -> dict:
    src = WORK / f"source-{rows}.parquet"
    generate(spark, rows, src)
    bpr = logical_bytes_per_row(src)
    df = spark.read.parquet(str(src))
    json_schema = df.schema
    fixtures = Fixtures(
        spark,
        kafka,
        rows,
        partitions,
        mp,
        windows=not {
            "tick_30_windows",
            "read_1_of_30_windows",
            "read_1_of_30_windows_auto",
            "recover_one_consumer",
        }
        <= skip,
        k200k=not {"shuffle_per_key_200k", "shuffle_aggregate_200k"} <= skip,
    )
    results: dict[str, list[dict]] = {k: [] for k in PHASES}
    client = KafkaClient(kafka)
    for i in range(repeat):
        ours = f"bench.shuffle.{uuid.uuid4().hex[:8]}"
        theirs = f"bench.spark.{uuid.uuid4().hex[:8]}"
        client.ensure_topic(theirs, partitions, config={"retention.ms": "-1"})
        topics = {
            "perf": f"bench.perf.{uuid.uuid4().hex[:8]}",
            "reuse": f"bench.reuse.{uuid.uuid4().hex[:8]}",
            "reuse_arrow": f"bench.reuse.{uuid.uuid4().hex[:8]}",
            "rows": f"bench.rows.{uuid.uuid4().hex[:8]}",
            "b": f"bench.b.{uuid.uuid4().hex[:8]}",
            "reuse_b": f"bench.reuse.{uuid.uuid4().hex[:8]}",
        }
        client.ensure_topic(
            topics["perf"], partitions,
            config={"retention.ms": "-1", "max.message.bytes": str(32 * 2**20)},
        )  # fmt: skip
        state: dict = {}
        spec = ShuffleSpec(
            topic=ours, key=("k",), num_partitions=partitions, max_parallelism=mp, event_time="ts"
        )

        # Create both topics outside the timings: the baseline's topic is made up front too.
        write_shuffle(df.limit(0), spec, kafka=kafka, window="setup")
        if "shuffle_write" in skip:
            # The per-key and aggregation phases read what the write phase writes.
            state["write"] = write_shuffle(df, spec, kafka=kafka, window="bench")
        pairs = make_phases(
            spark, kafka, df, json_schema, spec, theirs, topics, state
        ) + fixtures.pairs(spark)
        # Topics no later pair reads, dropped as soon as their pair is done, so that a large
        # size needs the disk of a few copies of its rows, not of all of them at once.
        done_with = {
            "kafka_perf_test": [topics["perf"]],
            "shuffle_write_rows": [topics["rows"], commit_topic(topics["rows"])],
            "shuffle_read": [theirs],
            "reuse_three_consumers": [topics["reuse"], commit_topic(topics["reuse"])],
            "reuse_three_consumers_arrow": [
                topics["reuse_arrow"],
                commit_topic(topics["reuse_arrow"]),
            ],
            "reuse_three_consumers_b": [topics["reuse_b"], commit_topic(topics["reuse_b"])],
        }
        for a_name, a_fn, b_name, b_fn in pairs:
            if a_name in skip:
                continue
            order = [(a_name, a_fn)] + ([(b_name, b_fn)] if b_fn else [])
            if i % 2:
                order.reverse()
            for name, fn in order:
                seconds, peak, out = timed(fn)
                if name.startswith("tick_") or name == "kafka_perf_test":
                    seconds = out  # the median tick; the producer tool's time at its rate
                entry = {"seconds": seconds, "worker_peak_rss": peak}
                if name in ("shuffle_write", "shuffle_write_rows"):
                    entry["kafka_bytes"] = out.bytes
                    entry["write_path"] = out.path
                results[name].append(entry)
                print(
                    f"  rows={rows:>9} repeat={i} {name:<27} {seconds:9.3f}s "
                    f"{rows / seconds / 1e3:9.0f}k rows/s  worker peak {peak / 2**20:6.0f} MiB",
                    flush=True,
                )
            if a_name in done_with:
                drop_topics(kafka, done_with[a_name])
        reuses = [topics["reuse"], topics["reuse_arrow"], topics["rows"], topics["b"]]
        reuses.append(topics["reuse_b"])
        for t in spark.catalog.listTables():
            if t.name.startswith("bench_bucketed_"):
                spark.sql(f"DROP TABLE IF EXISTS {t.name}")
        drop_topics(
            kafka,
            [ours, commit_topic(ours), theirs, topics["perf"]]
            + reuses
            + [commit_topic(t) for t in reuses],
        )
    drop_topics(kafka, [t for x in fixtures.topics() for t in (x, commit_topic(x))])
    summary: dict = {}
    for name, entries in results.items():
        if not entries:
            continue
        med = statistics.median(e["seconds"] for e in entries)
        summary[name] = {
            "median_seconds": med,
            "rows_per_s": rows / med,
            "logical_mb_per_s": rows * bpr / med / 1e6,
            "worker_peak_rss_mib": max(e["worker_peak_rss"] for e in entries) / 2**20,
            "runs": entries,
        }
    for a, b in (
        ("shuffle_write", "spark_write"),
        ("shuffle_read", "spark_read"),
        ("arrow_handover", "spark_write"),
    ):
        if a in summary and b in summary:
            speedup = summary[b]["median_seconds"] / summary[a]["median_seconds"]
            summary[f"{a}_vs_{b}_speedup"] = speedup
    if "shuffle_per_key_200k" in summary:
        # T1's bound as overhead: what each engine adds to the function's own CPU time spread
        # over the cores (measured once, in the driver, over the same rows and keys).
        summary["t1_function"] = function_cpu(WORK / f"source-{rows}-k200000.parquet")
        summary["t1_function"]["cores"] = spark.sparkContext.defaultParallelism
        f = summary["t1_function"]
        print(
            f"  T1's function alone: {f['function_cpu_seconds']:.2f} s of CPU over "
            f"{f['keys']:,} keys (slicing them: {f['slices_cpu_seconds']:.2f} s), "
            f"{f['cores']} cores",
            flush=True,
        )
    summary["targets"] = targets(summary)
    summary["logical_bytes_per_row"] = bpr
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=None, help="comma-separated sizes (default 1M,10M)")
    parser.add_argument(
        "--repeat",
        default=None,
        help="runs per phase (default 3): one number, or one per size (3,3,1)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 1M rows, one run of each phase"
    )
    parser.add_argument(
        "--skip", default="", help="comma-separated phases (the first of a pair) to leave out"
    )
    parser.add_argument(
        "--only", default="", help="comma-separated phases (the first of a pair): only these"
    )
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--max-parallelism", type=int, default=128)
    parser.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[2]"))
    parser.add_argument("--out", default=str(WORK / "results.json"))
    parser.add_argument(
        "--no-worker-reuse",
        action="store_true",
        help="fresh Python worker per task, so worker peak memory is per phase, not cumulative",
    )
    args = parser.parse_args(argv)
    rows_arg = args.rows or ("1000000" if args.quick else "1000000,10000000")
    sizes = [int(r) for r in rows_arg.split(",")]
    repeats = per_size(args.repeat, sizes, 1 if args.quick else 3)
    skip = {p for p in args.skip.split(",") if p}
    only = {p for p in args.only.split(",") if p}
    if only:
        skip |= {p for p in PHASES if p not in only}

    kafka = {"bootstrap.servers": localstack.start()}
    jars = localstack.resolve_jars(ROOT / "bench" / "pom.xml", WORK / "jars")
    wanted = [str(p) for p in sorted(jars.glob("*.jar")) if p.name.startswith(BASELINE_JARS)]
    spark = spark_session(
        master=args.master,
        app_name="kafka-shuffle-bench",
        conf={
            "spark.jars": ",".join(wanted),
            "spark.driver.memory": "6g",
            "spark.sql.shuffle.partitions": str(args.partitions),
            "spark.python.worker.reuse": str(not args.no_worker_reuse).lower(),
            # The bucketed tables of the B pairs.
            "spark.sql.warehouse.dir": str(WORK / "spark-warehouse"),
        },
    )
    report = {
        "master": args.master,
        "partitions": args.partitions,
        "repeat": dict(zip((str(r) for r in sizes), repeats, strict=True)),
        "python_worker_reuse": not args.no_worker_reuse,
        "cores": os.cpu_count(),
        "sizes": {},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for rows, repeat in zip(sizes, repeats, strict=True):
        print(f"== {rows} rows, {repeat} run(s) of each phase", flush=True)
        load_before = os.getloadavg()[0]
        with DiskPeak(WORK) as disk:
            report["sizes"][str(rows)] = run_size(
                spark, kafka, rows, repeat, args.partitions, args.max_parallelism, skip
            )
        report["sizes"][str(rows)]["disk_peak_gib"] = disk.peak_gib
        report["sizes"][str(rows)]["repeat"] = repeat
        print(f"  disk taken at the peak of this size: {disk.peak_gib:.1f} GiB", flush=True)
        # Other work on the machine skews side-by-side ratios less than absolute times, but
        # it shows: the 1-minute load average before and after the size's phases.
        report["sizes"][str(rows)]["load_average"] = [load_before, os.getloadavg()[0]]
        report["memory_growth"] = memory_growth(report)
        out.write_text(json.dumps(report, indent=2))  # what is measured so far survives
    png = out.with_suffix(".png")
    chart(report, png)
    print("\nmedians (side by side in this run):")
    print(
        f"{'rows':>10} {'phase':<27} {'seconds':>9} {'k rows/s':>9} {'MB/s':>7} {'worker MiB':>10}"
    )
    for rows, s in report["sizes"].items():
        for name in PHASES:
            if name not in s:
                continue
            e = s[name]
            print(
                f"{rows:>10} {name:<27} {e['median_seconds']:9.3f} "
                f"{e['rows_per_s'] / 1e3:9.0f} {e['logical_mb_per_s']:7.1f} "
                f"{e['worker_peak_rss_mib']:10.0f}"
            )
        for name, t in s["targets"].items():
            kind = "faster" if t["kind"] == "speedup" else "of the baseline's time"
            want = ">=" if t["kind"] == "speedup" else "<="
            print(
                f"{rows:>10} {name:<8} {t['ours_seconds']:8.3f}s vs {t['baseline_seconds']:8.3f}s"
                f": {t['ratio']:.3f}x {kind} (target {want} {t['bound']}): "
                f"{'met' if t['met'] else 'MISSED'}"
            )
    for name, g in report.get("memory_growth", {}).items():
        print(
            f"T9 {name:<27} {g['small_mib']:6.0f} MiB -> {g['large_mib']:6.0f} MiB: "
            f"{g['ratio']:.2f}x (target <= {T9_BOUND}): {'met' if g['met'] else 'MISSED'}"
        )
    print(f"\nall measurements: {out}\nchart: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
