"""Queue mode: record-level work over Kafka share groups, with nothing lost.

- :mod:`orchestration.shuffle.queue.driver` runs on the Spark driver: ``process_queue``,
  ``feed_queue``, ``read_queue_output``, the share group's configuration and checks. Its
  docstring explains the design and its guarantees.
- :mod:`orchestration.shuffle.queue.executor` runs inside Spark tasks: the share consumers,
  the durable writes of their output, the dead letters, the frames of a shuffle's work items.
- The decisions both take are pure functions of :mod:`orchestration.shuffle.core.queue`.

Import the public names from :mod:`orchestration.shuffle`.
"""
