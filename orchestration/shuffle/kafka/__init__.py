"""The Kafka side of the engine: one client object per cluster, the commit log's I/O,
retention and access control. No Spark.

Nothing is imported here: each module is imported on its own. The public names
(``KafkaClient``, ``KafkaConfig``, ``read_range``, ``read_chunks``, ``check_partitions``, ...)
are exported by :mod:`orchestration.shuffle`.

Example::

    from orchestration.shuffle import KafkaClient, read_range

    kafka = KafkaClient({"bootstrap.servers": "127.0.0.1:19092"})
    kafka.ensure_topic("events", partitions=4)
    with kafka.consumer() as c:
        for p, (low, high) in enumerate(kafka.end_offsets("events", 4)):
            for message in read_range(c, "events", p, low, high):
                ...
"""
