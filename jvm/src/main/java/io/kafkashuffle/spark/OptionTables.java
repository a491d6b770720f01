package io.kafkashuffle.spark;

/**
 * Every data source's options, written by {@code python -m devstack.optiondocs --write}
 * from {@code orchestration/shuffle/core/optiondefs.py}, where they are declared: edit
 * them there.
 */
final class OptionTables {
  private OptionTables() {}

  static final OptionCheck SHUFFLE =
      new OptionCheck(
          "kafka-shuffle",
          new OptionCheck.Option[] {
            new OptionCheck.Option(
                "topic",
                true,
                true,
                true,
                null,
                null),
            new OptionCheck.Option(
                "windows",
                true,
                false,
                true,
                null,
                null),
            new OptionCheck.Option(
                "runs",
                true,
                false,
                true,
                null,
                null),
            new OptionCheck.Option(
                "event_time_start_ms",
                true,
                false,
                true,
                null,
                null),
            new OptionCheck.Option(
                "event_time_end_ms",
                true,
                false,
                true,
                null,
                null),
            new OptionCheck.Option(
                "parallelism",
                true,
                true,
                true,
                null,
                null),
            new OptionCheck.Option(
                "with_metadata",
                true,
                true,
                true,
                "false",
                null),
            new OptionCheck.Option(
                "startingOffsets",
                false,
                true,
                true,
                "earliest",
                null),
            new OptionCheck.Option(
                "startingTimestamp",
                false,
                true,
                true,
                null,
                0L),
            new OptionCheck.Option(
                "maxRunsPerTrigger",
                false,
                true,
                true,
                null,
                1L),
            new OptionCheck.Option(
                "maxRowsPerTrigger",
                false,
                true,
                true,
                null,
                1L),
            new OptionCheck.Option(
                "layout",
                true,
                false,
                false,
                null,
                null),
            new OptionCheck.Option(
                "plan",
                true,
                false,
                false,
                null,
                null),
            new OptionCheck.Option(
                "aggregate",
                true,
                false,
                false,
                null,
                null),
            new OptionCheck.Option(
                "per_key",
                true,
                false,
                false,
                null,
                null),
            new OptionCheck.Option(
                "per_key_schema",
                true,
                false,
                false,
                null,
                null),
            new OptionCheck.Option(
                "pass_rows",
                true,
                false,
                false,
                "2000000",
                1L),
          },
          new OptionCheck.Refused[] {
            new OptionCheck.Refused(
                "subscribe",
                "a read names one shuffle, with option 'topic'",
                true),
            new OptionCheck.Refused(
                "subscribePattern",
                "a read names one shuffle, with option 'topic'",
                true),
            new OptionCheck.Refused(
                "assign",
                "a read names one shuffle, with option 'topic'",
                true),
            new OptionCheck.Refused(
                "startingOffsetsByTimestamp",
                "use 'startingTimestamp' (epoch ms, every partition)",
                true),
            new OptionCheck.Refused(
                "startingOffsetsByTimestampStrategy",
                "a stream started at 'startingTimestamp' reads the runs committed from "
                    + "then on, if any",
                true),
            new OptionCheck.Refused(
                "endingOffsets",
                "a batch read reads the runs committed when it is planned: choose them "
                    + "with 'windows' or 'runs'",
                true),
            new OptionCheck.Refused(
                "endingTimestamp",
                "a batch read reads the runs committed when it is planned: choose them "
                    + "with 'windows' or 'runs'",
                true),
            new OptionCheck.Refused(
                "endingOffsetsByTimestamp",
                "a batch read reads the runs committed when it is planned: choose them "
                    + "with 'windows' or 'runs'",
                true),
            new OptionCheck.Refused(
                "maxOffsetsPerTrigger",
                "a micro-batch admits whole runs: bound it with 'maxRunsPerTrigger' or "
                    + "'maxRowsPerTrigger'",
                true),
            new OptionCheck.Refused(
                "minOffsetsPerTrigger",
                "a micro-batch admits whole runs: bound it with 'maxRunsPerTrigger' or "
                    + "'maxRowsPerTrigger'",
                true),
            new OptionCheck.Refused(
                "maxTriggerDelay",
                "a micro-batch admits whole runs: bound it with 'maxRunsPerTrigger' or "
                    + "'maxRowsPerTrigger'",
                true),
            new OptionCheck.Refused(
                "minPartitions",
                "use 'parallelism'",
                true),
            new OptionCheck.Refused(
                "maxRecordsPerPartition",
                "use 'parallelism'",
                true),
            new OptionCheck.Refused(
                "failOnDataLoss",
                "a shuffle read always fails when a committed frame is missing (END frame "
                    + "counts)",
                true),
            new OptionCheck.Refused(
                "includeHeaders",
                "shuffle frames carry no headers",
                true),
            new OptionCheck.Refused(
                "groupIdPrefix",
                "a shuffle read joins no consumer group",
                true),
            new OptionCheck.Refused(
                "fetchOffset.numRetries",
                "Kafka requests use the client's own timeouts and retries (kafka.* "
                    + "settings)",
                true),
            new OptionCheck.Refused(
                "fetchOffset.retryIntervalMs",
                "Kafka requests use the client's own timeouts and retries (kafka.* "
                    + "settings)",
                true),
            new OptionCheck.Refused(
                "kafkaConsumer.pollTimeoutMs",
                "Kafka requests use the client's own timeouts and retries (kafka.* "
                    + "settings)",
                true),
            new OptionCheck.Refused(
                "small_read_rows",
                "it is the JVM read path's (kafka-shuffle-jvm); here parallelism 'auto' "
                    + "reads a small read in few tasks",
                false),
            new OptionCheck.Refused(
                "path",
                "load() takes no path (name the shuffle with option 'topic')",
                false),
            new OptionCheck.Refused(
                "paths",
                "load() takes no path (name the shuffle with option 'topic')",
                false),
          },
          new OptionCheck.Renamed[] {
            new OptionCheck.Renamed(
                "event_time_start",
                "event_time_start_ms",
                "epoch milliseconds, as Spark's startingTimestamp; the old option took "
                    + "microseconds"),
            new OptionCheck.Renamed(
                "event_time_end",
                "event_time_end_ms",
                "epoch milliseconds, as Spark's startingTimestamp; the old option took "
                    + "microseconds"),
          });

  static final OptionCheck RECORDS =
      new OptionCheck(
          "kafka-records",
          new OptionCheck.Option[] {
            new OptionCheck.Option(
                "subscribe",
                true,
                true,
                true,
                null,
                null),
            new OptionCheck.Option(
                "subscribePattern",
                true,
                true,
                true,
                null,
                null),
            new OptionCheck.Option(
                "assign",
                true,
                true,
                true,
                null,
                null),
            new OptionCheck.Option(
                "topic",
                true,
                true,
                true,
                null,
                null),
            new OptionCheck.Option(
                "startingOffsets",
                true,
                true,
                true,
                "earliest",
                null),
            new OptionCheck.Option(
                "startingTimestamp",
                true,
                true,
                true,
                null,
                0L),
            new OptionCheck.Option(
                "startingOffsetsByTimestamp",
                true,
                true,
                true,
                null,
                null),
            new OptionCheck.Option(
                "startingOffsetsByTimestampStrategy",
                true,
                true,
                true,
                "latest",
                null),
            new OptionCheck.Option(
                "endingOffsets",
                true,
                false,
                true,
                "latest",
                null),
            new OptionCheck.Option(
                "endingTimestamp",
                true,
                false,
                true,
                null,
                0L),
            new OptionCheck.Option(
                "endingOffsetsByTimestamp",
                true,
                false,
                true,
                null,
                null),
            new OptionCheck.Option(
                "maxOffsetsPerTrigger",
                false,
                true,
                true,
                null,
                1L),
            new OptionCheck.Option(
                "minPartitions",
                true,
                true,
                true,
                null,
                1L),
            new OptionCheck.Option(
                "maxRecordsPerPartition",
                true,
                true,
                true,
                null,
                1L),
            new OptionCheck.Option(
                "failOnDataLoss",
                true,
                true,
                true,
                "true",
                null),
            new OptionCheck.Option(
                "includeHeaders",
                true,
                true,
                true,
                "false",
                null),
            new OptionCheck.Option(
                "commitOffsets",
                true,
                true,
                true,
                "false",
                null),
            new OptionCheck.Option(
                "offsetResetStrategy",
                true,
                true,
                true,
                "earliest",
                null),
          },
          new OptionCheck.Refused[] {
            new OptionCheck.Refused(
                "minOffsetsPerTrigger",
                "a micro-batch reads what there is, up to 'maxOffsetsPerTrigger'",
                true),
            new OptionCheck.Refused(
                "maxTriggerDelay",
                "a micro-batch reads what there is, up to 'maxOffsetsPerTrigger'",
                true),
            new OptionCheck.Refused(
                "groupIdPrefix",
                "reads assign partitions and join no group ('kafka.group.id' names the "
                    + "group whose offsets startingOffsets=committed reads and commitOffsets "
                    + "writes)",
                true),
            new OptionCheck.Refused(
                "fetchOffset.numRetries",
                "Kafka requests use the client's own timeouts and retries (kafka.* "
                    + "settings)",
                true),
            new OptionCheck.Refused(
                "fetchOffset.retryIntervalMs",
                "Kafka requests use the client's own timeouts and retries (kafka.* "
                    + "settings)",
                true),
            new OptionCheck.Refused(
                "kafkaConsumer.pollTimeoutMs",
                "Kafka requests use the client's own timeouts and retries (kafka.* "
                    + "settings)",
                true),
            new OptionCheck.Refused(
                "path",
                "load() takes no path (name the topics with option 'subscribe')",
                false),
            new OptionCheck.Refused(
                "paths",
                "load() takes no path (name the topics with option 'subscribe')",
                false),
          },
          new OptionCheck.Renamed[] {
          });

  static final OptionCheck SHUFFLE_JVM =
      new OptionCheck(
          "kafka-shuffle-jvm",
          new OptionCheck.Option[] {
            new OptionCheck.Option(
                "topic",
                true,
                false,
                true,
                null,
                null),
            new OptionCheck.Option(
                "catalog",
                true,
                false,
                true,
                "shuffle",
                null),
            new OptionCheck.Option(
                "with_metadata",
                true,
                false,
                true,
                "false",
                null),
            new OptionCheck.Option(
                "windows",
                true,
                false,
                true,
                null,
                null),
            new OptionCheck.Option(
                "runs",
                true,
                false,
                true,
                null,
                null),
            new OptionCheck.Option(
                "event_time_start_ms",
                true,
                false,
                true,
                null,
                null),
            new OptionCheck.Option(
                "event_time_end_ms",
                true,
                false,
                true,
                null,
                null),
            new OptionCheck.Option(
                "parallelism",
                true,
                true,
                true,
                null,
                null),
            new OptionCheck.Option(
                "small_read_rows",
                true,
                false,
                true,
                "10000",
                0L),
            new OptionCheck.Option(
                "startingOffsets",
                false,
                true,
                true,
                "earliest",
                null),
            new OptionCheck.Option(
                "startingTimestamp",
                false,
                true,
                true,
                null,
                0L),
            new OptionCheck.Option(
                "maxRunsPerTrigger",
                false,
                true,
                true,
                null,
                1L),
            new OptionCheck.Option(
                "maxRowsPerTrigger",
                false,
                true,
                true,
                null,
                1L),
            new OptionCheck.Option(
                "layout",
                true,
                false,
                false,
                null,
                null),
            new OptionCheck.Option(
                "plan",
                true,
                false,
                false,
                null,
                null),
          },
          new OptionCheck.Refused[] {
            new OptionCheck.Refused(
                "subscribe",
                "a read names one shuffle, with option 'topic'",
                true),
            new OptionCheck.Refused(
                "subscribePattern",
                "a read names one shuffle, with option 'topic'",
                true),
            new OptionCheck.Refused(
                "assign",
                "a read names one shuffle, with option 'topic'",
                true),
            new OptionCheck.Refused(
                "startingOffsetsByTimestamp",
                "use 'startingTimestamp' (epoch ms, every partition)",
                true),
            new OptionCheck.Refused(
                "startingOffsetsByTimestampStrategy",
                "a stream started at 'startingTimestamp' reads the runs committed from "
                    + "then on, if any",
                true),
            new OptionCheck.Refused(
                "endingOffsets",
                "a batch read reads the runs committed when it is planned: choose them "
                    + "with 'windows' or 'runs'",
                true),
            new OptionCheck.Refused(
                "endingTimestamp",
                "a batch read reads the runs committed when it is planned: choose them "
                    + "with 'windows' or 'runs'",
                true),
            new OptionCheck.Refused(
                "endingOffsetsByTimestamp",
                "a batch read reads the runs committed when it is planned: choose them "
                    + "with 'windows' or 'runs'",
                true),
            new OptionCheck.Refused(
                "maxOffsetsPerTrigger",
                "a micro-batch admits whole runs: bound it with 'maxRunsPerTrigger' or "
                    + "'maxRowsPerTrigger'",
                true),
            new OptionCheck.Refused(
                "minOffsetsPerTrigger",
                "a micro-batch admits whole runs: bound it with 'maxRunsPerTrigger' or "
                    + "'maxRowsPerTrigger'",
                true),
            new OptionCheck.Refused(
                "maxTriggerDelay",
                "a micro-batch admits whole runs: bound it with 'maxRunsPerTrigger' or "
                    + "'maxRowsPerTrigger'",
                true),
            new OptionCheck.Refused(
                "minPartitions",
                "use 'parallelism'",
                true),
            new OptionCheck.Refused(
                "maxRecordsPerPartition",
                "use 'parallelism'",
                true),
            new OptionCheck.Refused(
                "failOnDataLoss",
                "a shuffle read always fails when a committed frame is missing (END frame "
                    + "counts)",
                true),
            new OptionCheck.Refused(
                "includeHeaders",
                "shuffle frames carry no headers",
                true),
            new OptionCheck.Refused(
                "groupIdPrefix",
                "a shuffle read joins no consumer group",
                true),
            new OptionCheck.Refused(
                "fetchOffset.numRetries",
                "Kafka requests use the client's own timeouts and retries (kafka.* "
                    + "settings)",
                true),
            new OptionCheck.Refused(
                "fetchOffset.retryIntervalMs",
                "Kafka requests use the client's own timeouts and retries (kafka.* "
                    + "settings)",
                true),
            new OptionCheck.Refused(
                "kafkaConsumer.pollTimeoutMs",
                "Kafka requests use the client's own timeouts and retries (kafka.* "
                    + "settings)",
                true),
            new OptionCheck.Refused(
                "aggregate",
                "it runs in the Python reader: use the kafka-shuffle source "
                    + "(aggregate_shuffle, apply_per_key)",
                false),
            new OptionCheck.Refused(
                "per_key",
                "it runs in the Python reader: use the kafka-shuffle source "
                    + "(aggregate_shuffle, apply_per_key)",
                false),
            new OptionCheck.Refused(
                "per_key_schema",
                "it runs in the Python reader: use the kafka-shuffle source "
                    + "(aggregate_shuffle, apply_per_key)",
                false),
            new OptionCheck.Refused(
                "pass_rows",
                "it runs in the Python reader: use the kafka-shuffle source "
                    + "(aggregate_shuffle, apply_per_key)",
                false),
            new OptionCheck.Refused(
                "path",
                "load() takes no path (name the shuffle with option 'topic')",
                false),
            new OptionCheck.Refused(
                "paths",
                "load() takes no path (name the shuffle with option 'topic')",
                false),
          },
          new OptionCheck.Renamed[] {
            new OptionCheck.Renamed(
                "event_time_start",
                "event_time_start_ms",
                "epoch milliseconds, as Spark's startingTimestamp; the old option took "
                    + "microseconds"),
            new OptionCheck.Renamed(
                "event_time_end",
                "event_time_end_ms",
                "epoch milliseconds, as Spark's startingTimestamp; the old option took "
                    + "microseconds"),
          });

  static final OptionCheck RECORDS_JVM =
      new OptionCheck(
          "kafka-records-jvm",
          new OptionCheck.Option[] {
            new OptionCheck.Option(
                "ranges",
                true,
                true,
                false,
                null,
                null),
            new OptionCheck.Option(
                "includeHeaders",
                true,
                true,
                true,
                "false",
                null),
            new OptionCheck.Option(
                "failOnDataLoss",
                true,
                true,
                true,
                "true",
                null),
          },
          new OptionCheck.Refused[] {
            new OptionCheck.Refused(
                "subscribe",
                "read_records(spark, options) takes it and plans the ranges this source "
                    + "reads",
                false),
            new OptionCheck.Refused(
                "subscribePattern",
                "read_records(spark, options) takes it and plans the ranges this source "
                    + "reads",
                false),
            new OptionCheck.Refused(
                "assign",
                "read_records(spark, options) takes it and plans the ranges this source "
                    + "reads",
                false),
            new OptionCheck.Refused(
                "topic",
                "read_records(spark, options) takes it and plans the ranges this source "
                    + "reads",
                false),
            new OptionCheck.Refused(
                "startingOffsets",
                "read_records(spark, options) takes it and plans the ranges this source "
                    + "reads",
                false),
            new OptionCheck.Refused(
                "startingTimestamp",
                "read_records(spark, options) takes it and plans the ranges this source "
                    + "reads",
                false),
            new OptionCheck.Refused(
                "startingOffsetsByTimestamp",
                "read_records(spark, options) takes it and plans the ranges this source "
                    + "reads",
                false),
            new OptionCheck.Refused(
                "startingOffsetsByTimestampStrategy",
                "read_records(spark, options) takes it and plans the ranges this source "
                    + "reads",
                false),
            new OptionCheck.Refused(
                "endingOffsets",
                "read_records(spark, options) takes it and plans the ranges this source "
                    + "reads",
                false),
            new OptionCheck.Refused(
                "endingTimestamp",
                "read_records(spark, options) takes it and plans the ranges this source "
                    + "reads",
                false),
            new OptionCheck.Refused(
                "endingOffsetsByTimestamp",
                "read_records(spark, options) takes it and plans the ranges this source "
                    + "reads",
                false),
            new OptionCheck.Refused(
                "maxOffsetsPerTrigger",
                "read_records(spark, options) takes it and plans the ranges this source "
                    + "reads",
                false),
            new OptionCheck.Refused(
                "minPartitions",
                "read_records(spark, options) takes it and plans the ranges this source "
                    + "reads",
                false),
            new OptionCheck.Refused(
                "maxRecordsPerPartition",
                "read_records(spark, options) takes it and plans the ranges this source "
                    + "reads",
                false),
            new OptionCheck.Refused(
                "commitOffsets",
                "read_records(spark, options) takes it and plans the ranges this source "
                    + "reads",
                false),
            new OptionCheck.Refused(
                "offsetResetStrategy",
                "read_records(spark, options) takes it and plans the ranges this source "
                    + "reads",
                false),
            new OptionCheck.Refused(
                "minOffsetsPerTrigger",
                "a micro-batch reads what there is, up to 'maxOffsetsPerTrigger'",
                true),
            new OptionCheck.Refused(
                "maxTriggerDelay",
                "a micro-batch reads what there is, up to 'maxOffsetsPerTrigger'",
                true),
            new OptionCheck.Refused(
                "groupIdPrefix",
                "reads assign partitions and join no group ('kafka.group.id' names the "
                    + "group whose offsets startingOffsets=committed reads and commitOffsets "
                    + "writes)",
                true),
            new OptionCheck.Refused(
                "fetchOffset.numRetries",
                "Kafka requests use the client's own timeouts and retries (kafka.* "
                    + "settings)",
                true),
            new OptionCheck.Refused(
                "fetchOffset.retryIntervalMs",
                "Kafka requests use the client's own timeouts and retries (kafka.* "
                    + "settings)",
                true),
            new OptionCheck.Refused(
                "kafkaConsumer.pollTimeoutMs",
                "Kafka requests use the client's own timeouts and retries (kafka.* "
                    + "settings)",
                true),
            new OptionCheck.Refused(
                "path",
                "load() takes no path (name the topics with option 'subscribe')",
                false),
            new OptionCheck.Refused(
                "paths",
                "load() takes no path (name the topics with option 'subscribe')",
                false),
          },
          new OptionCheck.Renamed[] {
          });

  /** The table of data source {@code source}. */
  static OptionCheck of(String source) {
    switch (source) {
      case "kafka-shuffle":
        return SHUFFLE;
      case "kafka-records":
        return RECORDS;
      case "kafka-shuffle-jvm":
        return SHUFFLE_JVM;
      case "kafka-records-jvm":
        return RECORDS_JVM;
      default:
        throw new IllegalArgumentException("no option table for data source " + source);
    }
  }
}
