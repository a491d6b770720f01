"""Benchmark: queue mode (``process_queue`` over a share group) against the number of
consumers, and against a plain ``kafka-records`` read with the same function.

- A 2-partition topic of ``--records`` small messages, written by a producer at its
  default batching (``--producer-batch N``: batches of N records instead). A share group
  acquires whole producer batches; ``process_queue`` spreads them through the topic's work
  topic, one record per item. Consumers poll ``--batch-size`` records at a time.
- I/O-bound function: waits ``--wait-ms`` per batch (a remote call), then returns one row per
  record. CPU-bound function: hashes each record ``--hash-rounds`` times in Python.
- For 1, 2, 4 and 8 consumers on the 2 partitions (2 Spark tasks once there are 2 or more
  consumers, the rest as threads), each with a new share group from the earliest record.
  Two rates: *active* = records / (last batch settled - first records polled, over all
  consumers), the processing rate; *wall* = records / (wall time - the idle timeout that
  ends the run), which also counts starting the Spark job and joining the group (~2 s).
- Overhead: the CPU-bound function over the same topic through
  ``spark.read.format("kafka-records")`` + ``mapInArrow`` (2 tasks) against ``process_queue``
  with 2 consumers (2 tasks), both writing Parquet.

Each measurement runs ``--repeat`` times (the consumer counts alternate direction); medians
and every measurement go to ``.local/bench/queue.json``.

Run::

    scripts/dev bench-queue                      # 24,000 records, 3 repeats
    scripts/dev bench-queue --records 4000 --repeat 1
"""

import argparse
import hashlib
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa
from confluent_kafka import Producer

from bench.common import WORK
from devstack import localstack
from orchestration.shuffle import (
    KafkaClient,
    QueueScale,
    QueueStop,
    process_queue,
    register_data_sources,
    spark_session,
)

SCHEMA = "id long, digest string"
IDLE = 2.0


def produce(kafka: dict, topic: str, records: int, batch: int | None) -> None:
    settings = {} if batch is None else {"batch.num.messages": batch, "linger.ms": 20}
    p = Producer({**kafka, **settings})
    for i in range(records):
        while True:
            try:
                p.produce(topic, key=str(i).encode(), value=str(i).encode(), partition=i % 2)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


class Waits:
    """I/O-bound: one fixed wait per batch, as a remote call would take."""

    def __init__(self, ms: float):
        self.ms = ms

    def __call__(self, table: pa.Table) -> pa.Table:
        time.sleep(self.ms / 1000)
        ids = [int(v) for v in table.column("value").to_pylist()]
        return pa.table({"id": ids, "digest": [""] * len(ids)})


class Hashes:
    """CPU-bound: ``rounds`` SHA-256 per record, in Python."""

    def __init__(self, rounds: int):
        self.rounds = rounds

    def __call__(self, table: pa.Table) -> pa.Table:
        ids, digests = [], []
        for v in table.column("value").to_pylist():
            d = v
            for _ in range(self.rounds):
                d = hashlib.sha256(d).digest()
            ids.append(int(v))
            digests.append(d.hex())
        return pa.table({"id": ids, "digest": digests})


def run_queue(spark, kafka, topic, fn, consumers, batch, out) -> tuple[float, float, float, int]:
    tasks = min(consumers, 2)
    res = process_queue(
        spark,
        topic,
        f"bench-{uuid.uuid4().hex[:8]}",
        fn,
        SCHEMA,
        kafka=kafka,
        output=out,
        scale=QueueScale(tasks=tasks, consumers_per_task=consumers // tasks, batch_size=batch),
        stop=QueueStop(idle_timeout=IDLE),
    )
    wall = max(res.seconds - IDLE, 1e-6)
    active = max(res.active_seconds, 1e-6)
    return res.accepted / active, res.accepted / wall, wall, res.accepted


def run_records(spark, kafka, topic, fn, out) -> float:
    def apply(batches):
        for b in batches:
            yield from fn(pa.Table.from_batches([b])).to_batches()

    started = time.monotonic()
    (
        spark.read.format("kafka-records")
        .option("kafka.bootstrap.servers", kafka["bootstrap.servers"])
        .option("subscribe", topic)
        .load()
        .mapInArrow(apply, SCHEMA)
        .write.mode("overwrite")
        .parquet(out)
    )
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=24_000)
    ap.add_argument("--batch-size", type=int, default=50, help="records per poll")
    ap.add_argument(
        "--producer-batch",
        type=int,
        default=None,
        help="records per producer batch (default: the producer's own batching)",
    )
    ap.add_argument("--wait-ms", type=float, default=50.0)
    ap.add_argument("--hash-rounds", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)

    kafka = {"bootstrap.servers": localstack.start()}
    spark = spark_session("local[2]")
    register_data_sources(spark)
    topic = f"bench-queue-{uuid.uuid4().hex[:8]}"
    KafkaClient(kafka).ensure_topic(topic, partitions=2)
    produce(kafka, topic, args.records, args.producer_batch)
    counts = [1, 2, 4, 8]
    results: dict = {
        "records": args.records,
        "batch_size": args.batch_size,
        "producer_batch": args.producer_batch,
        "runs": [],
    }
    tmp = Path(tempfile.mkdtemp(prefix="queue-bench-", dir=WORK if WORK.exists() else None))
    fns = {"io": Waits(args.wait_ms), "cpu": Hashes(args.hash_rounds)}
    for r in range(args.repeat):
        order = counts if r % 2 == 0 else list(reversed(counts))
        for kind, fn in fns.items():
            for c in order:
                rate, wall_rate, secs, accepted = run_queue(
                    spark, kafka, topic, fn, c, args.batch_size, str(tmp / uuid.uuid4().hex)
                )
                assert accepted == args.records, (kind, c, accepted)
                results["runs"].append(
                    {
                        "kind": kind,
                        "consumers": c,
                        "rate": rate,
                        "wall_rate": wall_rate,
                        "seconds": secs,
                    }
                )
                print(
                    f"repeat {r + 1} {kind:>3} {c} consumers: {rate:9.0f} records/s active, "
                    f"{wall_rate:9.0f} wall ({secs:.1f} s)",
                    flush=True,
                )
        pair = (
            [("queue", None), ("records", None)]
            if r % 2 == 0
            else [("records", None), ("queue", None)]
        )
        for which, _ in pair:
            if which == "queue":
                _, _, secs, _ = run_queue(
                    spark, kafka, topic, fns["cpu"], 2, args.batch_size, str(tmp / uuid.uuid4().hex)
                )
            else:
                secs = run_records(spark, kafka, topic, fns["cpu"], str(tmp / uuid.uuid4().hex))
            results["runs"].append({"kind": f"overhead-{which}", "seconds": secs})
            print(f"repeat {r + 1} cpu via {which}: {secs:.1f} s", flush=True)

    def median(kind, c=None, key="rate"):
        vals = [
            x[key]
            for x in results["runs"]
            if x["kind"] == kind and (c is None or x.get("consumers") == c)
        ]
        return statistics.median(vals)

    summary = {kind: {c: median(kind, c) for c in counts} for kind in fns}
    for kind in fns:
        summary[f"{kind}_wall"] = {c: median(kind, c, "wall_rate") for c in counts}
    summary["io_8_vs_2"] = summary["io"][8] / summary["io"][2]
    summary["io_wall_8_vs_2"] = summary["io_wall"][8] / summary["io_wall"][2]
    summary["cpu_8_vs_2"] = summary["cpu"][8] / summary["cpu"][2]
    summary["queue_vs_records_seconds"] = median("overhead-queue", key="seconds") / median(
        "overhead-records", key="seconds"
    )
    results["summary"] = summary
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "queue.json").write_text(json.dumps(results, indent=1))
    print()
    print(f"{'consumers':>10}{'io active':>11}{'io wall':>10}{'cpu active':>12}{'cpu wall':>10}")
    for c in counts:
        print(
            f"{c:>10}{summary['io'][c]:>11.0f}{summary['io_wall'][c]:>10.0f}"
            f"{summary['cpu'][c]:>12.0f}{summary['cpu_wall'][c]:>10.0f}"
        )
    producer = (
        "a default producer"
        if args.producer_batch is None
        else f"{args.producer_batch}-record batches"
    )
    verdict = "met" if summary["io_8_vs_2"] >= 3 else "missed"
    print(
        f"P7 I/O-bound, 8 vs 2 consumers on 2 partitions ({producer}): "
        f"{summary['io_8_vs_2']:.2f}x active, {summary['io_wall_8_vs_2']:.2f}x wall "
        f"(target >= 3x active): {verdict}"
    )
    print(f"CPU-bound, 8 vs 2 consumers: {summary['cpu_8_vs_2']:.2f}x")
    print(
        "queue mode vs kafka-records + mapInArrow, same CPU-bound fn (time ratio): "
        f"{summary['queue_vs_records_seconds']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
