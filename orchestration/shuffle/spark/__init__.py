"""The Spark side of the engine: the ``kafka-shuffle`` and ``kafka-records`` data sources,
the writer, the columnar write path, per-key work and session helpers. No Dagster.

Nothing is imported here: each module is imported on its own, by the public API
(``orchestration.shuffle``) or by the queue.
"""
