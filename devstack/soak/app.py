"""The soak's long-lived Spark application, on the local standalone cluster:

- a streaming producer: Spark's ``rate`` source, each micro-batch written as one committed run
  of the second shuffle (window ``b<batch id>``: a replayed batch supersedes its first run);
- a streaming consumer of that shuffle with a checkpoint, replacing each window's rows in a
  Parquet table by those of the window's latest run;
- queue mode: a feeder appending JSON records to a plain topic (every 97th one a poison
  record) and ``process_queue`` workers over it, with a dead-letter topic.

A query that fails (a broker gone at the wrong moment) is started again from its checkpoint;
the failure goes to the timeline. ``<out>/stop-app`` starts the drain: the producer stops, the
consumer catches up, the feeder stops and the queue is worked until it is empty.

    python -m devstack.soak.app --out DIR --bootstrap HOST:PORT --master spark://...
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from devstack.soak import definitions as soak
from orchestration.shuffle import (
    DeliveryPolicy,
    KafkaClient,
    QueueScale,
    QueueStop,
    ShuffleSpec,
    ShuffleTopicNotFoundError,
    jvm_spark_conf,
    process_queue,
    read_shuffle_stream,
    session_settings,
    shuffle_log,
    write_shuffle,
)
from orchestration.shuffle.testing import fail_write_attempts_below

STREAM_TOPIC = "soak.stream"
QUEUE_TOPIC = "soak.queue"
DLQ_TOPIC = "soak.queue.dlq"
QUEUE_GROUP = "soak-queue-workers"
POISON_EVERY = 97
RATE = 400  # rows per second into the streaming producer


def poisoned(record_id: int) -> bool:
    return record_id % POISON_EVERY == 0


def work(batch: pa.Table) -> pa.Table:
    """The queue's function: a poison record fails on every delivery."""
    ids = [json.loads(v)["id"] for v in batch.column("value").to_pylist()]
    bad = [i for i in ids if poisoned(i)]
    if bad:
        raise ValueError(f"poison records {bad}")
    return pa.table({"id": pa.array(ids, pa.int64()), "doubled": pa.array([2 * i for i in ids])})


class App:
    def __init__(self, out: Path, bootstrap: str, master: str):
        self.out = out
        self.conf = {"bootstrap.servers": bootstrap}
        self.stop = threading.Event()
        self.producing = threading.Event()
        self.producing.set()
        self.spark = SparkSession.builder.config(
            map={
                **session_settings(master),
                **jvm_spark_conf(kafka=self.conf),
                "spark.app.name": "soak-app",
                "spark.driver.host": "127.0.0.1",
                "spark.driver.memory": "1g",
                "spark.executor.memory": "1g",
                "spark.cores.max": "4",
                "spark.executorEnv.PYTHONPATH": str(Path(__file__).resolve().parents[2]),
            }
        ).getOrCreate()
        self.spark.sparkContext.setLogLevel("ERROR")
        self.spec = ShuffleSpec(
            topic=STREAM_TOPIC,
            key="key",
            num_partitions=4,
            max_parallelism=40,
            event_time="ts",
            replication_factor=3,
        )

    # -- the streaming producer -----------------------------------------------------------

    def produce(self, batch: DataFrame, batch_id: int) -> None:
        rows = batch.select(
            F.col("value").alias("id"), (F.col("value") % 101).alias("key"),
            F.col("timestamp").alias("ts"),
        )  # fmt: skip
        window = f"b{batch_id:09d}"
        if soak.take_fault("stream-task"):
            soak.record("fault_taken", kind="producer_task_fails", window=window)
            with fail_write_attempts_below(1):
                result = write_shuffle(rows, self.spec, kafka=self.conf, window=window)
        else:
            result = write_shuffle(rows, self.spec, kafka=self.conf, window=window)
        soak.record("stream_commit", window=window, rows=result.rows, run=result.run_id)

    def producer_query(self):
        return (
            self.spark.readStream.format("rate")
            .option("rowsPerSecond", RATE)
            .option("numPartitions", 2)
            .load()
            .writeStream.foreachBatch(self.produce)
            .option("checkpointLocation", str(self.out / "chk" / "producer"))
            .trigger(processingTime="3 seconds")
            .start()
        )

    # -- the streaming consumer -----------------------------------------------------------

    def consume(self, batch: DataFrame, batch_id: int) -> None:
        present = batch.select("_window", "_run_id").distinct().collect()
        if not present:
            return
        order = {
            c.run_id: i for i, c in enumerate(shuffle_log(STREAM_TOPIC, kafka=self.conf).commits)
        }
        newest: dict[str, str] = {}
        for r in present:
            best = newest.get(r._window)
            if best is None or order.get(r._run_id, -1) > order.get(best, -1):
                newest[r._window] = r._run_id
        rows = batch.filter(F.col("_run_id").isin(list(newest.values())))
        (
            rows.select("id", "key", F.col("_window").alias("window"), "_run_id")
            .write.mode("overwrite")
            .option("partitionOverwriteMode", "dynamic")
            .partitionBy("window")
            .parquet(str(self.out / "stream_out"))
        )
        soak.record("stream_batch", batch=batch_id, windows=sorted(newest))

    def consumer_query(self):
        return (
            read_shuffle_stream(
                self.spark, STREAM_TOPIC, kafka=self.conf, with_metadata=True,
                max_runs_per_trigger=20,
            )
            .writeStream.foreachBatch(self.consume)
            .option("checkpointLocation", str(self.out / "chk" / "consumer"))
            .trigger(processingTime="3 seconds")
            .start()
        )  # fmt: skip

    # -- queue mode -----------------------------------------------------------------------

    def feed(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({**self.conf, "enable.idempotence": True, "linger.ms": 20})
        next_id = 0
        errors: list = []
        while self.producing.is_set():
            for _ in range(20):
                producer.produce(
                    QUEUE_TOPIC,
                    key=str(next_id).encode(),
                    value=json.dumps({"id": next_id}).encode(),
                    on_delivery=lambda err, _msg: errors.append(err) if err else None,
                )
                next_id += 1
            producer.poll(0)
            time.sleep(0.5)
        left = producer.flush(120)
        soak.record("queue_fed", records=next_id, undelivered=left, errors=[str(e) for e in errors])

    def work_queue(self, *, drain: bool = False) -> None:
        while not self.stop.is_set() or drain:
            try:
                res = process_queue(
                    self.spark,
                    QUEUE_TOPIC,
                    QUEUE_GROUP,
                    work,
                    "id long, doubled long",
                    kafka=self.conf,
                    output=str(self.out / "queue_out"),
                    scale=QueueScale(tasks=2),
                    stop=QueueStop(
                        idle_timeout=10 if drain else 5, max_seconds=None if drain else 45
                    ),
                    # The lock outlasts a dead-letter write through a broker's failover on
                    # this loaded machine (15 s did not, once, and 45 s did not, once, at a
                    # load of 20 on 2 cores: the record came back to another consumer while
                    # the first one's write waited, and was dead-lettered twice;
                    # docs/guides/queue.md). 60 s is the most the broker allows by default
                    # (group.share.max.record.lock.duration.ms).
                    delivery=DeliveryPolicy(
                        max_deliveries=2, dead_letter_topic=DLQ_TOPIC, lock_seconds=60
                    ),
                )
                soak.record("queue_result", accepted=res.accepted, dead=res.dead_lettered,
                            drain=drain)  # fmt: skip
                if drain:
                    return
            except Exception as exc:  # noqa: BLE001 - recorded; the loop goes on
                soak.record("queue_failed", error=f"{type(exc).__name__}: {exc}"[:2000])
                time.sleep(5)

    # -- supervision ------------------------------------------------------------------------

    def run(self) -> None:
        client = KafkaClient(self.conf)
        client.ensure_topic(QUEUE_TOPIC, partitions=3)
        starters = {"producer": self.producer_query, "consumer": self.consumer_query}
        queries = {"producer": self.producer_query(), "consumer": None}
        feeder = threading.Thread(target=self.feed, name="feeder", daemon=True)
        feeder.start()
        worker = threading.Thread(target=self.work_queue, name="queue", daemon=True)
        worker.start()
        soak.record("app_started")
        while not (self.out / "stop-app").exists():
            for name, q in list(queries.items()):
                if q is not None and not q.isActive:
                    error = q.exception()
                    soak.record("query_failed", query=name, error=str(error)[:2000])
                    time.sleep(3)
                    q = None
                if q is None:
                    queries[name] = self._start(name, starters[name])
            time.sleep(1)
        soak.record("app_draining")
        if queries["producer"] is not None:
            queries["producer"].stop()
        self.producing.clear()
        feeder.join(180)
        self.stop.set()
        worker.join(600)
        self._catch_up(queries)
        self.work_queue(drain=True)
        soak.record("app_drained")
        self.spark.stop()

    @staticmethod
    def _start(name: str, starter):
        """The query started, or None when it cannot start yet (the consumer before the
        producer's first commit, a broker away): tried again a second later."""
        try:
            return starter()
        except ShuffleTopicNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - recorded; tried again
            soak.record("query_failed", query=name, error=f"at start: {exc}"[:2000])
            time.sleep(3)
            return None

    def _catch_up(self, queries: dict) -> None:
        """Until the consumer has read every run the producer committed (or 5 minutes)."""
        deadline = time.monotonic() + 300
        idle_since = None
        while time.monotonic() < deadline:
            q = queries["consumer"]
            if q is None or not q.isActive:
                if q is not None:
                    soak.record("query_failed", query="consumer", error=str(q.exception())[:2000])
                queries["consumer"] = self._start("consumer", self.consumer_query)
                time.sleep(1)
                continue
            status = q.status
            if not status["isDataAvailable"] and not status["isTriggerActive"]:
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > 12:
                    break
            else:
                idle_since = None
            time.sleep(1)
        if queries["consumer"] is not None:
            queries["consumer"].stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.soak.app")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--master", required=True)
    args = parser.parse_args(argv)
    App(args.out, args.bootstrap, args.master).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
