"""The engine's pure core: key groups, frames, the commit-log model, read and stream
planning, aggregation, per-key grouping, retention and queue logic. No Spark, no Kafka, no
Dagster: pyarrow, numpy and pandas at most.

A core module and the I/O module that uses it share a name (``core.commitlog`` is the model
that ``kafka.commitlog`` reads and writes, ``core.planner`` the plan that ``spark.reader``
runs); docs/ARCHITECTURE.md lists the pairs. Nothing is imported here, so that importing one
core module loads only what that module needs.
"""
