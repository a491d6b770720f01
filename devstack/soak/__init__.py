"""The soak: everything at once, for minutes or hours, with faults on a seeded schedule.

    scripts/dev soak --minutes 30 [--seed 7] [--out .local/soak]

On a 3-node Kafka cluster (replication factor 3) and the local Spark standalone cluster, both
its own, with a real ``dagster-daemon`` on a temporary instance:

- Dagster (:mod:`devstack.soak.definitions`): range runs of a daily shuffle launched as the
  consumers keep up, three consumer jobs launched by the commit sensor, the failed-region
  sensor, the expiry job every minute;
- a long-lived Spark application (:mod:`devstack.soak.app`): a streaming producer appending
  runs to a second shuffle, a streaming consumer of it with a checkpoint, queue-mode workers
  over a topic with poison records;
- faults (:mod:`devstack.soak.faults`): brokers killed and restarted one at a time (once the
  active controller's node), a Spark worker killed with its executors, the daemon restarted,
  a producer run failing, a streaming producer's task failing, a consumer run failing once.

Then it drains and checks from Kafka and the outputs alone (:mod:`devstack.soak.verify`),
prints throughput over time and every stall longer than 10 s with its cause, and writes
``summary.json`` and ``soak.png`` to the output folder. The exit status is 0 only when every
check holds and every kind of fault happened.
"""
