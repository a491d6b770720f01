"""Benchmark: what the frames' checksum (format version 2's CRC-32 of each payload) costs.

In one process, ``--repeat`` times: a write of ``--rows`` rows (``write_shuffle``, the row
path from ``spark.range``), a read of them back on the Python path and, when the session has
the jar, on the JVM path (each into Spark's ``noop`` sink); then, without Spark, the CRC-32
of every frame the write made against the time to encode and decode them. Prints one JSON
object with the medians. Run it once with the checkout's library and once with another's
(``PYTHONPATH=<other checkout>``) to compare two frame formats on one machine::

    .venv/bin/python -m bench.checksum_bench --rows 2000000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
import zlib

from devstack import localstack
from orchestration.shuffle import KafkaClient, ShuffleSpec, read_range, read_shuffle, write_shuffle
from orchestration.shuffle.core import frames as fr


def main(argv: list[str]) -> int:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("--rows", type=int, default=2_000_000)
    args.add_argument("--repeat", type=int, default=3)
    args.add_argument("--jvm", action="store_true", help="also read on the JVM path")
    opts = args.parse_args(argv)

    from pyspark.sql import SparkSession

    conf = {"bootstrap.servers": localstack.start()}
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    if opts.jvm:
        from orchestration.shuffle import jvm_spark_conf

        for key, value in jvm_spark_conf(kafka=conf).items():
            builder = builder.config(key, value)
    spark = builder.config("spark.sql.session.timeZone", "UTC").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    rows = spark.range(opts.rows).selectExpr(
        "concat('k', cast(id % 100000 as string)) as k",
        "id",
        "timestamp_seconds(1356998400 + id) as ts",
        "cast(id as double) * 1.5 as v",
    )
    times: dict[str, list[float]] = {"write": [], "read_python": [], "read_jvm": []}
    topic = ""
    for _ in range(opts.repeat):
        topic = f"bench-crc-{uuid.uuid4().hex[:8]}"
        spec = ShuffleSpec(topic=topic, key=("k",), num_partitions=4, max_parallelism=64)
        t0 = time.perf_counter()
        write_shuffle(rows, spec, kafka=conf)
        times["write"].append(time.perf_counter() - t0)
        engines = ["python", "jvm"] if opts.jvm else ["python"]
        for engine in engines:
            t0 = time.perf_counter()
            read_shuffle(spark, topic, kafka=conf, engine=engine).write.format("noop").mode(
                "overwrite"
            ).save()
            times[f"read_{engine}"].append(time.perf_counter() - t0)
    # The frames of the last write, in memory: their checksums against decoding them.
    client = KafkaClient(conf)
    values: list[bytes] = []
    with client.consumer() as c:
        for p, (low, high) in enumerate(client.end_offsets(topic, 4)):
            values += [m.value() for m in read_range(c, topic, p, low, high)]
    crc_s, decode_s = [], []
    for _ in range(opts.repeat):
        t0 = time.perf_counter()
        for v in values:
            zlib.crc32(memoryview(v)[fr.HEADER_SIZE :])
        crc_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for v in values:
            f = fr.decode(v)
            if f.header.type is fr.FrameType.DATA:
                f.batch()
        decode_s.append(time.perf_counter() - t0)
    out = {
        "rows": opts.rows,
        "frame_version": fr.VERSION,
        "frames": len(values),
        "frame_bytes": sum(len(v) for v in values),
        **{f"{k}_s": round(statistics.median(v), 3) for k, v in times.items() if v},
        "crc32_of_every_payload_s": round(statistics.median(crc_s), 4),
        "decode_every_frame_s": round(statistics.median(decode_s), 4),
        "runs": times,
    }
    print(json.dumps(out))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
