package io.kafkashuffle.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadAllAvailable;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A streaming read of a shuffle on the JVM ({@code spark.readStream.table("shuffle.`t`")}):
 * each micro-batch holds the runs committed since the previous one, with the rules of the
 * Python stream reader ({@code core/stream.py}) and its offsets, options and progress metrics.
 *
 * <p>An offset is a position in the commit log, {@code {"log": N, "snapshot": S}}: micro-batch
 * {@code (start, end]} reads the runs whose commit records sit at offsets {@code [start.log,
 * end.log)}. Records before {@code snapshot} (where the query's history ends) count only if
 * their run was still visible there; every commit after it is new data, a run superseding an
 * earlier run of its window included. Admission control ({@code maxRunsPerTrigger}, {@code
 * maxRowsPerTrigger}) admits whole runs, at least one.
 */
final class ShuffleStream
    implements MicroBatchStream, SupportsAdmissionControl, SupportsTriggerAvailableNow {
  static final String METRICS_KEY = "@metrics";
  static final String EARLIEST = "earliest";
  static final String LATEST = "latest";

  private final ReadSpec spec;
  private final String ctopic;
  private final String owner;
  private final LogSource source;
  private final String starting;
  private final Long startingTimestampMs;
  private final Long maxRuns;
  private final Long maxRows;
  private final Object parallelism;

  private Long target; // Trigger.AvailableNow: the log's end when the query started
  private Read last; // the last commit-log read, reused to plan the batch it admitted
  private List<CommitLog.Commit> planned = List.of();
  private static final Logger LOG = LoggerFactory.getLogger(ShuffleStream.class);
  // Unreadable commit records in the range latestOffset last looked at, skipped as a batch
  // read skips them; each is logged once by this stream.
  private List<CommitLog.BadRecord> skipped = List.of();
  private final Set<Long> warned = new HashSet<>();
  private long logEnd = -1;

  /** Where the stream reads its commit log: Kafka, or records a test gives. */
  interface LogSource {
    /** The records from offset {@code from} on, and the log's end offset. */
    Read read(long from);

    /** The log's end offset. */
    long end();
  }

  ShuffleStream(ReadSpec spec, Map<String, String> options) {
    this(spec, options, ShuffleTable.OWNER, null);
  }

  /** {@code source} null: the commit log in Kafka, with the spec's settings. */
  ShuffleStream(ReadSpec spec, Map<String, String> options, String owner, LogSource source) {
    this.spec = spec;
    this.ctopic = spec.topic + ShuffleCatalog.COMMITS_SUFFIX;
    this.owner = owner;
    this.source = source != null ? source : new KafkaLog();
    // In the order the Python source parses them, with its messages.
    this.parallelism = ReadPlanner.Selection.parse(options, owner).parallelism;
    String given = options.get("startingOffsets");
    OptionCheck table = OptionTables.SHUFFLE_JVM;
    String dflt = table.option("startingOffsets").defaultValue;
    String s = (given == null || given.isEmpty() ? dflt : given).strip().toLowerCase();
    if (!s.equals(EARLIEST) && !s.equals(LATEST)) {
      throw ShuffleException.option(
          owner
              + ": option 'startingOffsets' must be 'earliest' or 'latest', got "
              + ReadPlanner.repr(s));
    }
    this.starting = s;
    this.startingTimestampMs =
        number(options, "startingTimestamp", table.minimum("startingTimestamp"));
    this.maxRuns = number(options, "maxRunsPerTrigger", table.minimum("maxRunsPerTrigger"));
    this.maxRows = number(options, "maxRowsPerTrigger", table.minimum("maxRowsPerTrigger"));
  }

  private Long number(Map<String, String> options, String name, long minimum) {
    String v = options.get(name);
    if (v == null || v.isEmpty()) {
      return null;
    }
    long n;
    try {
      n = Long.parseLong(v.strip());
    } catch (NumberFormatException e) {
      throw ShuffleException.option(
          owner + ": option '" + name + "' must be an integer, got " + ReadPlanner.repr(v));
    }
    if (n < minimum) {
      throw ShuffleException.option(
          owner
              + ": option '"
              + name
              + "' must be an integer >= "
              + minimum
              + ", got "
              + ReadPlanner.repr(v));
    }
    return n;
  }

  /** A position in the commit log: the offset Spark checkpoints. */
  static final class Position extends Offset {
    final long log;
    final long snapshot;

    Position(long log, long snapshot) {
      this.log = log;
      this.snapshot = snapshot;
    }

    @Override
    public String json() {
      return "{\"log\": " + log + ", \"snapshot\": " + snapshot + "}";
    }

    static Position parse(String json) {
      try {
        JsonNode n = Layout.JSON.readTree(json);
        if (n != null && n.path("log").canConvertToLong() && n.path("snapshot").canConvertToLong()) {
          return new Position(n.get("log").asLong(), n.get("snapshot").asLong());
        }
      } catch (IOException e) {
        // reported below
      }
      throw ShuffleException.option(
          "kafka-shuffle: "
              + json
              + " is not a shuffle stream offset; was the checkpoint written by another source?");
    }

    static Position of(Offset o) {
      return o instanceof Position ? (Position) o : parse(o.json());
    }
  }

  /** An offset reported with the latest one: the log's end and what the batch planned. */
  private static final class Reported extends Offset {
    private final String json;

    Reported(String json) {
      this.json = json;
    }

    @Override
    public String json() {
      return json;
    }
  }

  /** A commit-log record. */
  static final class Record {
    final long offset;
    final String key;
    final String value;

    Record(long offset, String key, String value) {
      this.offset = offset;
      this.key = key;
      this.value = value;
    }
  }

  /** Records of the commit log from {@code first} on, and its end offset. */
  static final class Read {
    final long first;
    final List<Record> records;
    final long high;

    Read(long first, List<Record> records, long high) {
      this.first = first;
      this.records = records;
      this.high = high;
    }
  }

  /** The commit log in Kafka, read with a pooled consumer. */
  private final class KafkaLog implements LogSource {
    @Override
    public Read read(long from) {
      return withLogConsumer(
          "reading commit log '" + ctopic + "'",
          c -> {
            List<PartitionInfo> parts = c.partitionsFor(ctopic, Duration.ofSeconds(30));
            if (parts == null || parts.isEmpty()) {
              throw new ShuffleException(
                  ShuffleException.Kind.NOT_FOUND,
                  "shuffle '"
                      + spec.topic
                      + "' does not exist on '"
                      + spec.kafka.get("bootstrap.servers")
                      + "' (no commit-log topic '"
                      + ctopic
                      + "')");
            }
            TopicPartition tp = new TopicPartition(ctopic, 0);
            c.assign(List.of(tp));
            long low = c.beginningOffsets(List.of(tp)).get(tp);
            long high = c.endOffsets(List.of(tp)).get(tp);
            List<Record> out = new ArrayList<>();
            c.seek(tp, Math.max(from, low));
            long deadline = System.currentTimeMillis() + 30_000;
            while (c.position(tp) < high) {
              if (System.currentTimeMillis() > deadline) {
                throw new ShuffleException(
                    ShuffleException.Kind.CONNECTION,
                    ShuffleTable.OWNER + ": reading commit log '" + ctopic + "' took over 30s");
              }
              for (ConsumerRecord<byte[], ByteBuffer> r :
                  c.poll(Duration.ofMillis(200)).records(tp)) {
                if (r.offset() >= high) {
                  break;
                }
                out.add(
                    new Record(
                        r.offset(),
                        r.key() == null ? null : new String(r.key(), StandardCharsets.UTF_8),
                        r.value() == null
                            ? null
                            : StandardCharsets.UTF_8.decode(r.value()).toString()));
              }
            }
            return new Read(from, out, Math.max(high, from));
          });
    }

    @Override
    public long end() {
      return withLogConsumer(
          "the end of commit log '" + ctopic + "'",
          c -> {
            TopicPartition tp = new TopicPartition(ctopic, 0);
            return c.endOffsets(List.of(tp), Duration.ofSeconds(30)).get(tp);
          });
    }
  }

  /**
   * {@code use} applied to a pooled consumer of the commit log; a Kafka error while it runs is
   * a connection error about {@code what}.
   */
  private <T> T withLogConsumer(
      String what, Function<KafkaConsumer<byte[], ByteBuffer>, T> use) {
    return ConsumerPool.with(
        ShuffleCatalog.logConsumerSettings(spec.kafka, ShuffleTable.OWNER),
        "shuffle-stream",
        c -> {
          try {
            return use.apply(c);
          } catch (KafkaException e) {
            throw new ShuffleException(
                ShuffleException.Kind.CONNECTION, ShuffleTable.OWNER + ": " + what + ": " + e, e);
          }
        });
  }

  /** The records from {@code start} on; planning reuses the last read when it reaches far enough. */
  private Read records(Position start, Long neededUntil) {
    // Visibility before the snapshot needs the log from its beginning.
    long first = start.log < start.snapshot ? 0 : start.log;
    Read cached = last;
    if (neededUntil != null && cached != null && cached.first == first && cached.high >= neededUntil) {
      return cached;
    }
    last = source.read(first);
    return last;
  }

  /**
   * The commit {@code r} holds, or null (a layout record, an expiry marker or a delete); a
   * commit record that cannot be read is null too, and added to {@code skipped}, as the Python
   * reader's {@code stream_commits} skips it.
   */
  private static CommitLog.Commit commitOf(Record r, List<CommitLog.BadRecord> skipped) {
    if (r.value == null || r.key == null || !r.key.startsWith(CommitLog.COMMIT_PREFIX)) {
      return null;
    }
    try {
      return CommitLog.Commit.parse(r.value, r.key);
    } catch (ShuffleException e) {
      skipped.add(new CommitLog.BadRecord(r.offset, r.key, e.getMessage(), false, null));
      return null;
    }
  }

  /** Run ids visible in the commit log as it was before offset {@code before}. */
  private Set<String> visibleRuns(List<Record> records, long before) {
    CommitLog log = new CommitLog(spec.topic);
    for (Record r : records) {
      if (r.offset < before && r.key != null && r.key.startsWith(CommitLog.COMMIT_PREFIX)) {
        log.apply(r.key, r.value, r.offset);
      }
    }
    Set<String> out = new HashSet<>();
    for (CommitLog.Commit c : log.visible(null, null)) {
      out.add(c.runId);
    }
    return out;
  }

  /** The commits read from {@code start} up to offset {@code end} (exclusive), in log order. */
  private List<Object[]> streamCommits(
      List<Record> records, Position start, Long end, List<CommitLog.BadRecord> skipped) {
    Set<String> visible =
        start.log < start.snapshot ? visibleRuns(records, start.snapshot) : Set.of();
    List<Object[]> out = new ArrayList<>();
    for (Record r : records) {
      if (r.offset < start.log || (end != null && r.offset >= end)) {
        continue;
      }
      CommitLog.Commit c = commitOf(r, skipped);
      if (c == null || (r.offset < start.snapshot && !visible.contains(c.runId))) {
        continue; // not a commit, or superseded before the query's history ended
      }
      out.add(new Object[] {r.offset, c});
    }
    return out;
  }

  /** The end of the next micro-batch: every commit up to {@code high}, or fewer whole runs. */
  static Position admit(
      List<Object[]> commits, Position start, long high, Long maxRuns, Long maxRows) {
    if (maxRuns == null && maxRows == null) {
      return new Position(Math.max(high, start.log), start.snapshot);
    }
    long runs = 0;
    long rows = 0;
    long end = start.log;
    for (Object[] oc : commits) {
      CommitLog.Commit c = (CommitLog.Commit) oc[1];
      if (runs > 0
          && ((maxRuns != null && runs + 1 > maxRuns)
              || (maxRows != null && rows + c.rows > maxRows))) {
        return new Position(end, start.snapshot);
      }
      runs++;
      rows += c.rows;
      end = (Long) oc[0] + 1;
    }
    // Everything pending fits: past records that are not commits (layout, deletes) too.
    return new Position(Math.max(high, start.log), start.snapshot);
  }

  @Override
  public Offset initialOffset() {
    Read read = source.read(0);
    long high = read.high;
    if (startingTimestampMs != null) {
      for (Record r : read.records) {
        CommitLog.Commit c = commitOf(r, new ArrayList<>()); // an unreadable one: no start
        if (c != null && committedMillis(c) >= startingTimestampMs) {
          return new Position(r.offset, r.offset);
        }
      }
      return new Position(high, high);
    }
    return starting.equals(LATEST) ? new Position(high, high) : new Position(0, high);
  }

  private static double committedMillis(CommitLog.Commit c) {
    if (c.committedAt == null) {
      throw ShuffleException.format("commit of run " + c.runId + " has no committed_at");
    }
    java.time.Instant t;
    try {
      t = OffsetDateTime.parse(c.committedAt).toInstant();
    } catch (java.time.format.DateTimeParseException e) {
      // Written without an offset: UTC, as the writer's clock.
      t = java.time.LocalDateTime.parse(c.committedAt).toInstant(java.time.ZoneOffset.UTC);
    }
    return t.getEpochSecond() * 1000.0 + t.getNano() / 1_000_000.0;
  }

  @Override
  public Offset deserializeOffset(String json) {
    return Position.parse(json);
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    // Spark passes its own limit types only: a run stands for a file here.
    if (maxRuns != null) {
      return ReadLimit.maxFiles((int) Math.min(maxRuns, Integer.MAX_VALUE));
    }
    if (maxRows != null) {
      return ReadLimit.maxRows(maxRows);
    }
    return ReadLimit.allAvailable();
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    target = source.end();
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException(
        "kafka-shuffle-jvm streams are read with admission control: latestOffset(start, limit)");
  }

  @Override
  public Offset latestOffset(Offset startOffset, ReadLimit limit) {
    Position begin = Position.of(startOffset);
    Read read = records(begin, null);
    logEnd = read.high;
    long high = target == null ? read.high : Math.min(read.high, target);
    boolean limited = !(limit instanceof ReadAllAvailable);
    List<CommitLog.BadRecord> bad = new ArrayList<>();
    List<Object[]> commits = streamCommits(read.records, begin, high, bad);
    for (CommitLog.BadRecord b : bad) {
      if (warned.add(b.offset)) {
        LOG.warn(
            "kafka-shuffle stream of '{}': {}; its run is not read",
            spec.topic,
            b.describe(spec.topic));
      }
    }
    skipped = bad;
    Position end =
        admit(commits, begin, high, limited ? maxRuns : null, limited ? maxRows : null);
    List<CommitLog.Commit> now = new ArrayList<>();
    for (Object[] oc : commits) {
      if ((Long) oc[0] < end.log) {
        now.add((CommitLog.Commit) oc[1]);
      }
    }
    planned = now;
    return end;
  }

  @Override
  public Offset reportLatestOffset() {
    // Shown in the query's progress as latestOffset, right after latestOffset() planned a
    // micro-batch: the runs planned are that batch's (as the Python source reports them).
    ObjectNode metrics = Layout.JSON.createObjectNode();
    metrics.put("topic", spec.topic);
    ArrayNode runs = metrics.putArray("runs");
    long rows = 0;
    long bytes = 0;
    for (CommitLog.Commit c : planned) {
      runs.add(c.runId);
      rows += c.rows;
      bytes += c.bytes;
    }
    metrics.put("rows", rows);
    metrics.put("bytes", bytes);
    // Commit records skipped as unreadable in the batch's range, as batch reads report them.
    ArrayNode bad = metrics.putArray("skipped_records");
    for (CommitLog.BadRecord b : skipped) {
      bad.addObject().put("offset", b.offset).put("key", b.key).put("reason", b.reason);
    }
    ObjectNode out = Layout.JSON.createObjectNode();
    out.put("log", logEnd >= 0 ? logEnd : source.end());
    out.set(METRICS_KEY, metrics);
    return new Reported(out.toString());
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    Position begin = Position.of(start);
    Position stop = Position.of(end);
    if (stop.log <= begin.log) {
      return new InputPartition[0];
    }
    Read read = records(begin, stop.log);
    List<CommitLog.Commit> commits = new ArrayList<>();
    for (Object[] oc : streamCommits(read.records, begin, stop.log, new ArrayList<>())) {
      commits.add((CommitLog.Commit) oc[1]);
    }
    if (commits.isEmpty()) {
      return new InputPartition[0];
    }
    Layout layout = spec.layout();
    for (CommitLog.Commit c : commits) {
      if (c.layoutVersion > layout.version()) {
        // A stream's schema is fixed when its query starts.
        throw new ShuffleException(
            ShuffleException.Kind.LAYOUT,
            "shuffle "
                + ReadPlanner.repr(spec.topic)
                + ": run "
                + ReadPlanner.repr(c.runId)
                + " was written under layout version "
                + c.layoutVersion
                + ", recorded after this stream started with version "
                + layout.version()
                + "; restart the query to read the shuffle's new schema");
      }
    }
    List<SplitPlan> splits = ReadPlanner.planSplits(layout, commits, parallelism);
    InputPartition[] out = new InputPartition[splits.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = new ShuffleInputPartition(splits.get(i));
    }
    return out;
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new ShuffleScan.ReaderFactory(spec);
  }

  @Override
  public void commit(Offset end) {}

  @Override
  public void stop() {}

  @Override
  public String toString() {
    return "kafka-shuffle-jvm stream topic=" + spec.topic;
  }
}
