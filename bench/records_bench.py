"""Benchmark: ``kafka-records`` against Spark's ``kafka`` source, and streaming shuffle reads
against batch shuffle reads, side by side.

- records: a topic of plain messages (``--value-bytes`` each, 8 partitions) read in full by
  ``read_records`` on the JVM (the ``kafka-records-jvm`` executor), by the Python
  ``spark.read.format("kafka-records")`` and by Spark's ``spark.read.format("kafka")``, one
  Spark task per partition, every column, into the ``noop`` sink;
- shuffle stream: a shuffle of ``--runs`` committed runs read by ``read_shuffle`` (batch)
  and by ``read_shuffle_stream`` with ``Trigger.AvailableNow`` into the ``noop`` sink, on
  each read path (``engine="python"``, ``engine="jvm"``), and the same rows as Parquet files
  read by Spark's own source, batch and streamed (``spark.readStream.parquet``): what Spark
  itself pays to stream. The streaming query's wall time includes starting it (on the
  Python path Spark starts a Python process for the source); its micro-batches' own time is
  recorded beside, and where it goes: the sum over the query's micro-batches of each phase
  Spark times in a batch's progress (``durationMs``: ``latestOffset``, ``queryPlanning``,
  ``getBatch``, ``walCommit``, ``addBatch``, ``commitOffsets``, ``triggerExecution``).

Each pair runs ``--repeat`` times, alternating which goes first; medians and every
measurement go to ``.local/bench/records.json``.

Run::

    scripts/dev bench-records                        # 1M and 10M messages, 3 repeats
    scripts/dev bench-records --messages 1000000 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from bench.common import BASELINE_JARS, ROOT, WORK
from devstack import localstack
from orchestration.shuffle import (
    KafkaClient,
    ShuffleSpec,
    jvm_spark_conf,
    read_records,
    read_shuffle,
    read_shuffle_stream,
    register_data_sources,
    spark_session,
    write_shuffle,
)


def produce(kafka: dict, topic: str, messages: int, value_bytes: int, partitions: int) -> None:
    p = Producer({**kafka, "linger.ms": 50, "batch.size": 1_000_000, "compression.type": "lz4"})
    value = os.urandom(value_bytes // 2).hex().encode()[:value_bytes]
    for i in range(messages):
        while True:
            try:
                p.produce(topic, value=value, key=str(i).encode(), partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(120) == 0


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def side_by_side(pairs, repeat: int, label: str) -> dict:
    runs: dict[str, list[float]] = {name: [] for name, _ in pairs}
    for i in range(repeat):
        order = pairs if i % 2 == 0 else list(reversed(pairs))
        for name, fn in order:
            seconds = timed(fn)
            runs[name].append(seconds)
            print(f"  {label} repeat={i} {name:<20} {seconds:8.2f}s", flush=True)
    return {name: {"median_seconds": statistics.median(v), "runs": v} for name, v in runs.items()}


def records_pair(spark, kafka: dict, topic: str):
    def on_jvm():
        options = {"subscribe": topic, "kafka.bootstrap.servers": kafka["bootstrap.servers"]}
        read_records(spark, options, engine="jvm").write.format("noop").mode("overwrite").save()

    def ours():
        (
            spark.read.format("kafka-records")
            .option("kafka.bootstrap.servers", kafka["bootstrap.servers"])
            .option("subscribe", topic)
            .load()
            .write.format("noop")
            .mode("overwrite")
            .save()
        )

    def theirs():
        (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", kafka["bootstrap.servers"])
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
            .write.format("noop")
            .mode("overwrite")
            .save()
        )

    return [
        ("kafka_records_jvm", on_jvm),
        ("kafka_records", ours),
        ("spark_kafka_source", theirs),
    ]


def shuffle_pair(
    spark,
    kafka: dict,
    topic: str,
    parquet: str,
    processing: dict[str, list[float]],
    phases: dict[str, list[dict]],
):
    """The batch and streaming reads on each read path (``engine``: the Python source, the
    JVM one), and Spark's own Parquet source over the same rows (``parquet``, a folder), the
    bound a stream's fixed costs set; ``processing[engine]`` gets, per streaming run, the
    seconds its micro-batches took (Spark's ``batchDuration``), which leaves out starting
    the query, and ``phases[engine]`` the milliseconds of each phase of them, summed over
    the micro-batches, with their count (``batches``)."""

    def batch(engine: str):
        def run():
            read = read_shuffle(spark, topic, kafka=kafka, engine=engine)
            read.write.format("noop").mode("overwrite").save()

        return run

    def streamed(name: str, make):
        def run():
            with tempfile.TemporaryDirectory() as chk:
                q = (
                    make()
                    .writeStream.format("noop")
                    .option("checkpointLocation", chk)
                    .trigger(availableNow=True)
                    .start()
                )
                q.awaitTermination()
                progress = q.recentProgress
                seconds = sum(p["batchDuration"] for p in progress) / 1000
                processing.setdefault(name, []).append(seconds)
                summed: dict = {"batches": len(progress)}
                for p in progress:
                    for phase, ms in (p.get("durationMs") or {}).items():
                        summed[phase] = summed.get(phase, 0) + ms
                phases.setdefault(name, []).append(summed)

        return run

    def stream(engine: str):
        return streamed(
            engine, lambda: read_shuffle_stream(spark, topic, kafka=kafka, engine=engine)
        )

    schema = spark.read.parquet(parquet).schema
    return [
        ("shuffle_batch_read", batch("python")),
        ("shuffle_stream_read", stream("python")),
        ("shuffle_batch_read_jvm", batch("jvm")),
        ("shuffle_stream_read_jvm", stream("jvm")),
        (
            "shuffle_batch_read_parquet",
            lambda: spark.read.parquet(parquet).write.format("noop").mode("overwrite").save(),
        ),
        (
            "shuffle_stream_read_parquet",
            streamed("parquet", lambda: spark.readStream.schema(schema).parquet(parquet)),
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", default="1000000,10000000", help="comma-separated sizes")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--runs", type=int, default=4, help="committed runs of the shuffle")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--out", default=str(WORK / "records.json"))
    args = parser.parse_args(argv)

    kafka = {"bootstrap.servers": localstack.start()}
    jars = localstack.resolve_jars(ROOT / "bench" / "pom.xml", WORK / "jars")
    # Spark's Kafka connector beside the jars of the JVM path (kafka-clients: the same one).
    ours = jvm_spark_conf(kafka=kafka)
    have = {Path(j).name for j in ours["spark.jars"].split(",")}
    wanted = [
        str(p)
        for p in sorted(jars.glob("*.jar"))
        if p.name.startswith(BASELINE_JARS) and p.name not in have
    ]
    spark = spark_session(
        master=args.master,
        app_name="kafka-records-bench",
        conf={
            **ours,  # the catalog too: the shuffle reads and streams take both paths
            "spark.jars": ",".join([ours["spark.jars"], *wanted]),
            "spark.driver.memory": "4g",
        },
    )
    register_data_sources(spark)
    report: dict = {"master": args.master, "partitions": args.partitions, "sizes": {}}
    for n in (int(m) for m in args.messages.split(",")):
        print(f"== {n} messages of {args.value_bytes} bytes", flush=True)
        topic = f"bench.records.{uuid.uuid4().hex[:8]}"
        KafkaClient(kafka).ensure_topic(topic, args.partitions, config={"retention.ms": "-1"})
        produce(kafka, topic, n, args.value_bytes, args.partitions)
        records = side_by_side(records_pair(spark, kafka, topic), args.repeat, f"n={n}")
        shuffle = f"bench.stream.{uuid.uuid4().hex[:8]}"
        spec = ShuffleSpec(topic=shuffle, key="k", num_partitions=args.partitions)
        per_run = n // args.runs
        for r in range(args.runs):
            df = spark.range(r * per_run, (r + 1) * per_run).selectExpr(
                "concat('k', cast(id % 100003 as string)) as k", "id", "rand() as x"
            )
            write_shuffle(df, spec, kafka=kafka, window=f"w{r}")
        # The same rows as Parquet files (one per Kafka partition): Spark's own source.
        parquet = str(WORK / f"stream-source-{n}.parquet")
        spark.range(n).selectExpr(
            "concat('k', cast(id % 100003 as string)) as k", "id", "rand() as x"
        ).repartition(args.partitions).write.mode("overwrite").parquet(parquet)
        processing: dict[str, list[float]] = {}
        phases: dict[str, list[dict]] = {}
        streams = side_by_side(
            shuffle_pair(spark, kafka, shuffle, parquet, processing, phases),
            args.repeat,
            f"n={n}",
        )
        spark_s = records["spark_kafka_source"]["median_seconds"]
        ratio = spark_s / records["kafka_records"]["median_seconds"]
        jvm_ratio = spark_s / records["kafka_records_jvm"]["median_seconds"]
        paths = {}
        for engine, suffix in (("python", ""), ("jvm", "_jvm"), ("parquet", "_parquet")):
            batch_s = streams[f"shuffle_batch_read{suffix}"]["median_seconds"]
            stream_s = streams[f"shuffle_stream_read{suffix}"]["median_seconds"]
            processing_s = statistics.median(processing[engine])
            names = sorted({k for run in phases[engine] for k in run})
            streams[f"shuffle_stream_processing{suffix}"] = {
                "median_seconds": processing_s,
                "runs": processing[engine],
                # Each phase's median over the runs (milliseconds, summed over a run's
                # micro-batches), and every run's.
                "phases_ms": {
                    k: statistics.median(run.get(k, 0) for run in phases[engine]) for k in names
                },
                "phase_runs": phases[engine],
            }
            paths[f"stream_vs_batch_throughput{suffix}"] = batch_s / stream_s
            paths[f"stream_processing_vs_batch_throughput{suffix}"] = batch_s / processing_s
        report["sizes"][n] = {
            **records,
            **streams,
            "kafka_records_vs_spark_speedup": ratio,
            "kafka_records_jvm_vs_spark_speedup": jvm_ratio,
            **paths,
        }
        print(
            f"{n:>10} kafka-records on the JVM "
            f"{records['kafka_records_jvm']['median_seconds']:.2f}s ({jvm_ratio:.2f}x), in "
            f"Python {records['kafka_records']['median_seconds']:.2f}s ({ratio:.2f}x) vs Spark "
            f"{spark_s:.2f}s",
            flush=True,
        )
        for engine, suffix in (("python", ""), ("jvm", "_jvm"), ("parquet", "_parquet")):
            what = "Parquet source" if engine == "parquet" else f"shuffle on the {engine} path"
            print(
                f"{n:>10} {what}: stream "
                f"{streams[f'shuffle_stream_read{suffix}']['median_seconds']:.2f}s vs batch "
                f"{streams[f'shuffle_batch_read{suffix}']['median_seconds']:.2f}s (stream "
                f"throughput {paths[f'stream_vs_batch_throughput{suffix}']:.2f} of batch with "
                "the query's start, "
                f"{paths[f'stream_processing_vs_batch_throughput{suffix}']:.2f} in its "
                "micro-batches)",
                flush=True,
            )
            shown = streams[f"shuffle_stream_processing{suffix}"]["phases_ms"]
            print(
                f"{n:>10} {what}, its micro-batches' phases (medians, ms): "
                + ", ".join(f"{k} {v:g}" for k, v in shown.items()),
                flush=True,
            )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"\nall measurements: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
