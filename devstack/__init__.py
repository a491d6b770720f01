"""Development tools, not installed with the library: the local Kafka stack
(``localstack``), a local S3 server (``locals3``), a local Spark standalone cluster
(``localcluster``) and an in-process runner of a pipeline's jobs and sensors (``runner``).

They are imported from a checkout (``scripts/dev`` puts it on ``PYTHONPATH``) by
``scripts/dev``, the tests, the benchmarks and ``jobs/main.py``.
"""
