"""Benchmark: reading a shuffle against Kafka's own consumer over the same bytes.

A shuffle of the synthetic rows of ``shuffle_bench`` (Zipf string keys, a timestamp, five
numeric columns; ``--partitions`` Kafka partitions) is written once. Then, ``--repeat``
times, alternating order:

- ``kafka_consumer_perf_test``: Kafka's own ``ConsumerPerformance`` tool (a Java consumer,
  one thread, a fresh group each time) reads every record of the data topic; its bytes per
  second of fetching (``fetch.MB.sec``: its JVM start-up and group join excluded) is the
  read-side limit of this broker on this machine;
- ``shuffle_read_jvm``: ``read_shuffle(engine="jvm")`` into the ``noop`` sink (every frame
  fetched, decoded into Spark's columns);
- ``shuffle_read_python``: ``read_shuffle(engine="python")`` into the ``noop`` sink.

Each read's bytes per second is the run's bytes (the commit record's: the frames' keys and
values as produced) over its wall time. The ratio of each to the perf test's rate, medians of
the repeats, is the result (target: >= 0.8 on the JVM path). Medians and every measurement
go to ``.local/bench/read_limit.json`` (``read_limit-warm.json`` with ``--warmup``), from
which ``python -m bench.report`` writes the docs' table.

A fresh JVM compiles Spark's and the reader's code while it reads: in the first seven JVM
reads of a session the JIT compiler's threads took 0.3-1.4 s of CPU per 10M-row read here,
on the same two cores as the read. ``--warmup N`` reads N times on each path, untimed,
before the repeats (the default, 0, times a fresh session as the runs before did); each JVM
repeat records the CPU seconds the compiler threads took during it (``jit_cpu_seconds``,
where the driver's threads can be read from ``/proc``: a local master on Linux).

Run::

    scripts/dev bench-read-limit                      # 10M rows, 3 repeats
    scripts/dev bench-read-limit --rows 2000000 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from pathlib import Path

from bench.common import WORK, consumer_perf_test, drop_topics, generate, noop
from bench.results import READ_LIMIT_BOUND
from devstack import localstack
from orchestration.shuffle import (
    ShuffleSpec,
    jvm_spark_conf,
    read_shuffle,
    spark_session,
    write_shuffle,
)


def compiler_cpu_seconds(pid: int) -> float | None:
    """CPU seconds the JIT compiler threads of JVM ``pid`` have used, or None where its
    threads cannot be read (not Linux, or not this machine's process)."""
    total = 0.0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        for t in tasks:
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                if "CompilerThre" not in f.read():
                    continue
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--warmup", type=int, default=0, help="untimed reads on each path before the repeats"
    )
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--driver-java-options",
        default="",
        help="spark.driver.extraJavaOptions of the session (the reads run in the driver's JVM "
        "under local[N]), e.g. -XX:TieredStopAtLevel=1",
    )
    parser.add_argument(
        "--compression", default="lz4", help="the frames' compression (write_shuffle's)"
    )
    parser.add_argument(
        "--out",
        help="results file (default: read_limit.json in .local/bench, read_limit-warm.json "
        "with --warmup)",
    )
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = str(WORK / ("read_limit-warm.json" if args.warmup else "read_limit.json"))

    kafka = {"bootstrap.servers": localstack.start()}
    spark = spark_session(
        master=args.master,
        app_name="kafka-shuffle-bench-read-limit",
        conf={
            **jvm_spark_conf(kafka=kafka),
            "spark.driver.memory": "6g",
            **(
                {"spark.driver.extraJavaOptions": args.driver_java_options}
                if args.driver_java_options
                else {}
            ),
        },
    )
    src = WORK / f"source-{args.rows}.parquet"
    generate(spark, args.rows, src)
    topic = f"bench.readlimit.{uuid.uuid4().hex[:8]}"
    spec = ShuffleSpec(topic=topic, key="k", num_partitions=args.partitions, event_time="ts")
    written = write_shuffle(
        spark.read.parquet(str(src)),
        spec,
        kafka=kafka,
        window="bench",
        compression=args.compression,
    )
    records = sum(hi - lo for lo, hi in written.offsets.values())
    print(f"shuffle {topic}: {written.rows} rows, {written.bytes / 2**20:.1f} MiB in "
          f"{written.frames} frames, {records} records", flush=True)  # fmt: skip

    jvm_pid = int(spark._jvm.ProcessHandle.current().pid())
    jit: list[float] = []

    def timed(engine: str):
        def run() -> float:
            before = compiler_cpu_seconds(jvm_pid)
            start = time.perf_counter()
            noop(read_shuffle(spark, topic, kafka=kafka, engine=engine))
            rate = written.bytes / (time.perf_counter() - start)
            after = compiler_cpu_seconds(jvm_pid)
            if engine == "jvm" and before is not None and after is not None:
                jit.append(after - before)
            return rate

        return run

    for _ in range(args.warmup):
        for engine in ("jvm", "python"):
            noop(read_shuffle(spark, topic, kafka=kafka, engine=engine))
    if args.warmup:
        print(f"  {args.warmup} untimed reads on each path", flush=True)

    phases = {
        "kafka_consumer_perf_test": lambda: consumer_perf_test(kafka, topic, records),
        "shuffle_read_jvm": timed("jvm"),
        "shuffle_read_python": timed("python"),
    }
    rates: dict[str, list[float]] = {name: [] for name in phases}
    for i in range(args.repeat):
        order = list(phases)
        if i % 2:
            order.reverse()
        for name in order:
            rate = phases[name]()
            rates[name].append(rate)
            compiled = (
                f" (JIT compiler {jit[-1]:.2f} s CPU)" if name.endswith("jvm") and jit else ""
            )
            print(f"  repeat={i} {name:<26} {rate / 2**20:8.1f} MiB/s{compiled}", flush=True)
    med = {name: statistics.median(v) for name, v in rates.items()}
    limit = med["kafka_consumer_perf_test"]
    report = {
        "rows": written.rows,
        "bytes": written.bytes,
        "records": records,
        "partitions": args.partitions,
        "repeat": args.repeat,
        "warmup": args.warmup,
        "master": args.master,
        "driver_java_options": args.driver_java_options,
        "compression": args.compression,
        "median_mib_per_s": {k: v / 2**20 for k, v in med.items()},
        "ratio_to_consumer_perf_test": {
            "jvm": med["shuffle_read_jvm"] / limit,
            "python": med["shuffle_read_python"] / limit,
        },
        "all_mib_per_s": {k: [x / 2**20 for x in v] for k, v in rates.items()},
        "jit_cpu_seconds": jit or None,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    for engine, ratio in report["ratio_to_consumer_perf_test"].items():
        verdict = "meets" if ratio >= READ_LIMIT_BOUND else "misses"
        target = f" ({verdict} the {READ_LIMIT_BOUND} target)" if engine == "jvm" else ""
        print(f"read on the {engine} path: {ratio:.2f} of Kafka's consumer perf test{target}")
    print(f"results: {out}")
    drop_topics(kafka, [topic, f"{topic}__commits"])
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
