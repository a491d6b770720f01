"""Benchmark: a year of windows. How planning, a one-window read, a write, the commit
sensor's tick and the layout check behave as a shuffle's commit log grows.

Two shuffles of the same tiny windows (``--rows`` rows each, 4 partitions) side by side: one
with ``--few`` committed windows (10), one with ``--windows`` (10,000: hourly windows for
about a year, the last ``--reruns`` of them written twice, as re-runs are). The first window
of each is written with ``write_table``; the others with the same producer and commit
record, without reading the log before each (which is what a write of a window costs on
its own, measured below), so that setting up 10,000 windows takes minutes, not hours.

Then, ``--repeat`` times, for each shuffle, in the same process:

- ``log``: ``shuffle_log`` (the whole log read: what every plan, check and IO-manager load
  starts with);
- ``plan``: ``plan_shuffle_read`` of one window, without Spark (``ReadOptions.plan``);
- ``read_table``: ``read_table`` of one window;
- ``write``: ``write_table`` of one more window (its layout check reads the log);
- ``sensor_tick``: ``shuffle_commits_since`` from the log's end (nothing new), what the
  commit sensor reads on a tick;
- ``layout_check``: the ``shuffle_layout`` check's reads (the log, the data topic's
  partitions);
- with ``--spark``: ``spark_python`` and ``spark_jvm``: a one-window read collected through
  the Python source and through the JVM source, in one warm session.

A cold read (a fresh process, as a Dagster run is) is measured too: ``cold_log``,
``cold_plan`` and ``cold_read_table`` time one ``shuffle_log``, one plan of one window and
one ``read_table`` of one window, each in a new interpreter (its imports not counted). The
long log's writers keep its index (``<topic>__commits.index``), which the plan and the
one-window read use; ``shuffle_log`` reads every run, from the index and the log's tail.

Medians go to ``.local/bench/log_growth.json`` with each ratio (many / few). Target: every
ratio within 1.2x; the sensor tick under 100 ms.

Run::

    scripts/dev bench-log-growth                         # 10,000 windows, 5 repeats
    scripts/dev bench-log-growth --windows 2000 --spark
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from bench.common import WORK, drop_topics
from devstack import localstack
from orchestration.shuffle import (
    KafkaClient,
    ShuffleSpec,
    read_table,
    shuffle_commits_since,
    shuffle_log,
    write_table,
)
from orchestration.shuffle.core.commitlog import TaskResult, commit_topic, to_micros
from orchestration.shuffle.core.logindex import index_topic
from orchestration.shuffle.core.planner import ReadOptions
from orchestration.shuffle.core.vhash import key_groups
from orchestration.shuffle.kafka.commitlog import check_partitions, log_end
from orchestration.shuffle.spark.writer import ProducerSubtask, commit_run
from orchestration.shuffle.spec import run_options

START = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def window_name(i: int) -> str:
    return (START + dt.timedelta(hours=i)).strftime("%Y-%m-%dT%H")


def rows_of(i: int, n: int) -> pa.Table:
    t0 = START + dt.timedelta(hours=i)
    return pa.table(
        {
            "k": [f"k{(i + j) % 37}" for j in range(n)],
            "ts": pa.array(
                [t0 + dt.timedelta(seconds=j) for j in range(n)], pa.timestamp("us", "UTC")
            ),
            "v": pa.array(range(n), pa.int64()),
        }
    )


def fill(kafka: KafkaClient, spec: ShuffleSpec, windows: int, reruns: int, rows: int) -> None:
    """Writes ``windows`` windows (the first with write_table, then producer and commit
    record only, several at once: a run's producer waits on its acknowledgements), the last
    ``reruns`` of them again once all were written."""
    write_table(rows_of(0, rows), spec, kafka=kafka, window=window_name(0))
    layout = shuffle_log(spec.topic, kafka=kafka).require_layout()

    def one(i: int) -> None:
        table = rows_of(i, rows)
        groups = key_groups([table.column("k")], layout.max_parallelism)
        table = table.append_column("_key_group", pa.array(groups, pa.int32()))
        opts = run_options(kafka, spec, layout, window_name(i), None, "lz4")
        task = ProducerSubtask(opts, 0, 0)
        try:
            for batch in table.to_batches():
                task.add(batch)
            result: TaskResult = task.finish()
        finally:
            task.close()
        end = to_micros(START + dt.timedelta(hours=i + 1))
        commit_run(kafka, spec.topic, opts.run_id, window_name(i), end, [result])

    started = time.monotonic()
    for batch in (range(1, windows), range(windows - reruns, windows)):
        with ThreadPoolExecutor(16) as pool:
            for done, _ in enumerate(pool.map(one, batch), 1):
                if done % 1000 == 0:
                    rate = done / (time.monotonic() - started)
                    print(f"  {spec.topic}: {done}/{len(batch)} runs ({rate:.0f}/s)", flush=True)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


COLD = """
import time
from orchestration.shuffle import read_table, shuffle_log
from orchestration.shuffle.core.planner import ReadOptions
from orchestration.shuffle.kafka.client import KafkaClient
from orchestration.shuffle.kafka.planner import plan_shuffle
conf = {{"bootstrap.servers": {servers!r}}}
t = time.perf_counter()
{call}
print(time.perf_counter() - t)
"""


def cold(servers: str, topic: str, window: str) -> list[float]:
    """``shuffle_log``, the plan of one window and ``read_table`` of one window, each in a
    fresh interpreter (as the first read of a Dagster run's process is)."""
    calls = (
        f"shuffle_log({topic!r}, kafka=conf)",
        f"plan_shuffle(KafkaClient(conf), {topic!r}, ReadOptions(windows=({window!r},)))",
        f"read_table({topic!r}, kafka=conf, windows=[{window!r}])",
    )
    times = []
    for call in calls:
        out = subprocess.run(
            [sys.executable, "-c", COLD.format(servers=servers, call=call)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        times.append(float(out[-1]))
    return times


def one_round(
    t: dict[str, list[float]],
    kafka: KafkaClient,
    servers: str,
    spec: ShuffleSpec,
    window: str,
    new_window: int,
    args: argparse.Namespace,
    spark: object | None,
) -> None:
    """Times each measurement once for the shuffle ``spec``, appending to ``t``."""
    topic = spec.topic
    t.setdefault("log", []).append(timed(lambda: shuffle_log(topic, kafka=kafka)))
    t.setdefault("plan", []).append(
        timed(lambda: ReadOptions(windows=(window,)).plan(shuffle_log(topic, kafka=kafka)))
    )
    t.setdefault("read_table", []).append(
        timed(lambda: read_table(topic, kafka=kafka, windows=[window]))
    )
    t.setdefault("write", []).append(
        timed(
            lambda: write_table(
                rows_of(new_window, args.rows), spec, kafka=kafka, window=window_name(new_window)
            )
        )
    )
    end = log_end(kafka, topic)
    t.setdefault("sensor_tick", []).append(
        timed(lambda: shuffle_commits_since(topic, kafka=kafka, offset=end))
    )
    t.setdefault("layout_check", []).append(
        timed(lambda: check_partitions(kafka, shuffle_log(topic, kafka=kafka).require_layout()))
    )
    if spark is not None:
        from orchestration.shuffle import read_shuffle

        for engine in ("python", "jvm"):
            t.setdefault(f"spark_{engine}", []).append(
                timed(
                    lambda engine=engine: read_shuffle(
                        spark, topic, kafka=kafka.settings, windows=[window], engine=engine
                    ).collect()
                )
            )
    for name, took in zip(
        ("cold_log", "cold_plan", "cold_read_table"), cold(servers, topic, window), strict=True
    ):
        t.setdefault(name, []).append(took)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=10_000)
    parser.add_argument("--reruns", type=int, default=760)
    parser.add_argument("--few", type=int, default=10)
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--spark", action="store_true", help="also time the Spark readers")
    parser.add_argument("--out", default=str(WORK / "log_growth.json"))
    args = parser.parse_args(argv)
    servers = localstack.start()
    kafka = KafkaClient({"bootstrap.servers": servers})
    tag = uuid.uuid4().hex[:6]
    shuffles = {
        "few": ShuffleSpec(f"bench.growth-few-{tag}", "k", 4, 128, event_time="ts"),
        "many": ShuffleSpec(f"bench.growth-many-{tag}", "k", 4, 128, event_time="ts"),
    }
    sizes = {"few": (args.few, 0), "many": (args.windows - args.reruns, args.reruns)}
    spark = None
    if args.spark:
        from orchestration.shuffle import jvm_spark_conf, spark_session

        spark = spark_session(conf=jvm_spark_conf(kafka=kafka.settings))
    try:
        for name, spec in shuffles.items():
            n, reruns = sizes[name]
            print(f"writing {n} windows ({reruns} re-run) to {spec.topic}", flush=True)
            fill(kafka, spec, n, reruns, args.rows)
        times: dict[str, dict[str, list[float]]] = {name: {} for name in shuffles}
        write_at = {name: sizes[name][0] for name in shuffles}
        for _ in range(args.repeat):
            for name, spec in shuffles.items():
                window = window_name(sizes[name][0] // 2)
                one_round(times[name], kafka, servers, spec, window, write_at[name], args, spark)
                write_at[name] += 1
        medians = {
            name: {k: statistics.median(v) for k, v in t.items()} for name, t in times.items()
        }
        ratios = {k: medians["many"][k] / medians["few"][k] for k in medians["few"]}
        out = {
            "args": vars(args),
            "windows": {name: sizes[name][0] + sizes[name][1] for name in shuffles},
            "medians_s": medians,
            "ratio_many_over_few": ratios,
            "times_s": times,
        }
        WORK.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(out, f, indent=2)
        print(f"{'':14}{'few (ms)':>10}{'many (ms)':>11}{'ratio':>8}")
        for k in medians["few"]:
            few, many = medians["few"][k] * 1e3, medians["many"][k] * 1e3
            print(f"{k:14}{few:10.1f}{many:11.1f}{ratios[k]:8.2f}")
        print(f"wrote {args.out}")
    finally:
        topics = [
            t
            for s in shuffles.values()
            for t in (s.topic, commit_topic(s.topic), index_topic(s.topic))
        ]
        drop_topics(dict(kafka.settings), topics)
        if spark is not None:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
