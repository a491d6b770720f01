package io.kafkashuffle.spark;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.spark.sql.catalyst.analysis.NoSuchFunctionException;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.connector.catalog.FunctionCatalog;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.connector.catalog.functions.UnboundFunction;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A catalog whose tables are shuffle topics and whose functions compute where a key lives.
 *
 * <p>Configured as {@code spark.sql.catalog.shuffle=io.kafkashuffle.spark.ShuffleCatalog} with
 * {@code spark.sql.catalog.shuffle.kafka.bootstrap.servers=...} (and any other {@code kafka.*}
 * setting, librdkafka-style as the Python side takes them). {@code spark.table("shuffle.`t`")}
 * is the shuffle {@code t} (its layout read from the commit log {@code t__commits});
 * {@code shuffle.with_metadata.`t`} adds the metadata columns. {@code ALTER TABLE} adds, renames,
 * drops and widens a shuffle's columns ({@link #alterTable}). Functions: {@code
 * partition_of_<max_parallelism>_<num_partitions>} and {@code
 * partition_of_<max_parallelism>_<num_partitions>_in_<splits>} (see {@link PartitionFunction}).
 */
public final class ShuffleCatalog implements TableCatalog, FunctionCatalog {
  private static final Logger LOG = LoggerFactory.getLogger(ShuffleCatalog.class);

  static final String COMMITS_SUFFIX = "__commits";
  static final String LAYOUT_KEY = "layout";
  static final String WITH_METADATA = "with_metadata";

  private String name;
  private Map<String, String> kafka = new HashMap<>();

  @Override
  public void initialize(String name, CaseInsensitiveStringMap options) {
    SparkVersionCheck.require();
    this.name = name;
    this.kafka = KafkaOptions.fromOptions(options);
  }

  /**
   * The catalog's Kafka settings as the session has them now. Spark builds a catalog once per
   * session, from the settings of that moment; a session whose {@code
   * spark.sql.catalog.<name>.kafka.*} settings change later (another cluster, another user)
   * reads with the new ones, and what was read of commit logs under the old ones is dropped.
   */
  private synchronized Map<String, String> kafka() {
    String prefix = "spark.sql.catalog." + name + ".";
    Map<String, String> now = new HashMap<>();
    for (Map.Entry<String, String> e :
        CollectionConverters.asJava(SQLConf.get().getAllConfs()).entrySet()) {
      if (e.getKey().startsWith(prefix)) {
        now.put(e.getKey().substring(prefix.length()), e.getValue());
      }
    }
    Map<String, String> settings = KafkaOptions.fromOptions(now);
    // No settings under the name: the catalog was unset, and keeps what it was built with.
    if (!settings.isEmpty() && !settings.equals(kafka)) {
      kafka = settings;
      synchronized (read) {
        read.clear();
      }
    }
    return kafka;
  }

  @Override
  public String name() {
    return name;
  }

  private String owner() {
    return "catalog '" + name + "'";
  }

  private Properties consumerSettings() {
    return logConsumerSettings(kafka(), owner());
  }

  /** Settings of a consumer that reads commit logs to their end (read_committed). */
  static Properties logConsumerSettings(Map<String, String> kafka, String owner) {
    Properties p = KafkaOptions.consumer(kafka, owner);
    p.setProperty("enable.auto.commit", "false");
    p.setProperty("auto.offset.reset", "none");
    p.setProperty("isolation.level", "read_committed");
    p.setProperty("allow.auto.create.topics", "false");
    // The log is read to its end; a fetch there must not wait the default 500 ms.
    p.setProperty("fetch.max.wait.ms", "1");
    return p;
  }

  @Override
  public Identifier[] listTables(String[] namespace) {
    List<Identifier> out = new ArrayList<>();
    KafkaConsumer<byte[], ByteBuffer> c = ConsumerPool.borrow(consumerSettings(), "shuffle-catalog");
    boolean ok = false;
    try {
      for (String t : c.listTopics(Duration.ofSeconds(30)).keySet()) {
        if (t.endsWith(COMMITS_SUFFIX)) {
          out.add(Identifier.of(namespace, t.substring(0, t.length() - COMMITS_SUFFIX.length())));
        }
      }
      ok = true;
    } finally {
      ConsumerPool.release(c, ok);
    }
    return out.toArray(new Identifier[0]);
  }

  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
    String[] ns = ident.namespace();
    boolean withMetadata = ns.length == 1 && ns[0].equals(WITH_METADATA);
    if (ns.length != 0 && !withMetadata) {
      throw new NoSuchTableException(ident);
    }
    CommitLog log = readLog(ident.name());
    Layout layout = log == null ? null : log.layout();
    if (layout == null) {
      throw new NoSuchTableException(ident);
    }
    return new ShuffleTable(layout, kafka(), withMetadata, log, smallReadRows());
  }

  /**
   * The session's default of option {@code small_read_rows} for this catalog's reads: its
   * setting {@code spark.sql.catalog.<name>.small_read_rows} as the session has it now (set
   * when the session is built or at any time after), else the option's own default.
   */
  private long smallReadRows() {
    String key = "spark.sql.catalog." + name + "." + ShuffleTable.SMALL_READ_ROWS;
    String value = SQLConf.get().getConfString(key, null);
    if (value == null || value.isEmpty()) {
      return ShuffleTable.defaultSmallReadRows();
    }
    return ShuffleTable.smallReadRows(value, owner() + ": setting '" + key + "'");
  }

  /**
   * What was read of a commit log: offsets {@code [begin, end)}, the log they make, and the
   * last record read (its offset, timestamp and key), by which a later read recognizes the
   * same log.
   */
  private static final class LogRead {
    final long begin;
    final long end;
    final CommitLog log;
    final long lastOffset; // -1: no record read
    final long lastTimestamp;
    final String lastKey;

    LogRead(long begin, long end, CommitLog log, long lastOffset, long lastTs, String lastKey) {
      this.begin = begin;
      this.end = end;
      this.log = log;
      this.lastOffset = lastOffset;
      this.lastTimestamp = lastTs;
      this.lastKey = lastKey;
    }

    boolean sameRecord(ConsumerRecord<byte[], ByteBuffer> r) {
      return r.offset() == lastOffset
          && r.timestamp() == lastTimestamp
          && java.util.Objects.equals(keyOf(r), lastKey);
    }
  }

  private static String keyOf(ConsumerRecord<byte[], ByteBuffer> r) {
    return r.key() == null ? null : new String(r.key(), StandardCharsets.UTF_8);
  }

  // Per commit log, what was read of it: a later lookup reads only the records after it.
  private final Map<String, LogRead> read = new HashMap<>();

  /** The shuffle's commit log read to its end, or null when it has none. */
  CommitLog readLog(String topic) {
    String ctopic = topic + COMMITS_SUFFIX;
    KafkaConsumer<byte[], ByteBuffer> c = ConsumerPool.borrow(consumerSettings(), "shuffle-catalog");
    boolean ok = false;
    try {
      List<PartitionInfo> parts = c.partitionsFor(ctopic, Duration.ofSeconds(30));
      if (parts == null || parts.isEmpty()) {
        ok = true;
        return null;
      }
      TopicPartition tp = new TopicPartition(ctopic, 0);
      c.assign(List.of(tp));
      long begin = c.beginningOffsets(List.of(tp)).get(tp);
      long end = c.endOffsets(List.of(tp)).get(tp);
      LogRead before;
      synchronized (read) {
        before = read.get(ctopic);
      }
      // The log only grows at its end: a later read starts again at the last record it read
      // and goes on from there when that record is still the same one. A log that lost its
      // head (retention), shrank, or was deleted and created again is read from its start.
      boolean resume =
          before != null && before.begin == begin && before.end <= end && before.lastOffset >= 0;
      LogRead got = read(c, tp, ctopic, topic, resume ? before : null, begin, end);
      if (got == null) {
        got = read(c, tp, ctopic, topic, null, begin, end);
      }
      synchronized (read) {
        read.put(ctopic, got);
      }
      CommitLog out = got.log.copy();
      List<PartitionInfo> data = c.partitionsFor(topic, Duration.ofSeconds(30));
      out.dataPartitions = data == null ? 0 : data.size();
      ok = true;
      return out;
    } catch (KafkaException e) {
      throw new ShuffleException(
          ShuffleException.Kind.CONNECTION,
          owner() + ": reading commit log '" + ctopic + "': " + e,
          e);
    } finally {
      ConsumerPool.release(c, ok);
    }
  }

  /**
   * Reads the log to {@code end}: from {@code begin}, or from {@code before}'s last record
   * when given; null when that record is not the one {@code before} read (another log).
   */
  private LogRead read(
      KafkaConsumer<byte[], ByteBuffer> c,
      TopicPartition tp,
      String ctopic,
      String topic,
      LogRead before,
      long begin,
      long end) {
    CommitLog log = before == null ? new CommitLog(topic) : before.log.copy();
    c.seek(tp, before == null ? begin : before.lastOffset);
    long lastOffset = before == null ? -1 : before.lastOffset;
    long lastTs = before == null ? 0 : before.lastTimestamp;
    String lastKey = before == null ? null : before.lastKey;
    boolean checked = before == null;
    long deadline = System.currentTimeMillis() + 30_000;
    while (c.position(tp) < end) {
      if (System.currentTimeMillis() > deadline) {
        throw new ShuffleException(
            ShuffleException.Kind.CONNECTION,
            owner() + ": reading commit log '" + ctopic + "' took over 30s");
      }
      for (ConsumerRecord<byte[], ByteBuffer> r : c.poll(Duration.ofMillis(200)).records(tp)) {
        if (!checked) {
          if (!before.sameRecord(r)) {
            return null;
          }
          checked = true;
          continue; // applied by the earlier read
        }
        String key = keyOf(r);
        log.apply(
            key,
            r.value() == null ? null : StandardCharsets.UTF_8.decode(r.value()).toString(),
            r.offset());
        lastOffset = r.offset();
        lastTs = r.timestamp();
        lastKey = key;
      }
    }
    if (!checked) {
      return null; // the record is gone (compacted away): read the log again
    }
    long seen = before == null ? -1 : before.lastOffset;
    for (CommitLog.BadRecord b : log.badRecords()) {
      if (b.offset > seen) {
        LOG.warn(b.describe(topic));
      }
    }
    return new LogRead(begin, end, log, lastOffset, lastTs, lastKey);
  }

  @Override
  @SuppressWarnings("deprecation")
  public Table createTable(
      Identifier ident, StructType schema, Transform[] partitions, Map<String, String> props) {
    throw readOnly(ident);
  }

  /**
   * ALTER TABLE of a shuffle: columns added (nullable), renamed, dropped or widened (ALTER
   * COLUMN ... TYPE, a type promotion), recorded as a new layout version in its commit log
   * ({@link TableAlteration}), as {@code alter_shuffle} records one; runs already written are
   * read as the new version. Refused with {@code alter_shuffle}'s messages (a key, {@code
   * sort_by} or event-time column touched, a column that does not exist or exists already, a
   * type that is no promotion, a column added that is not nullable), and any other change with
   * what is not changed here; nothing is written then. The catalog's Kafka settings must allow
   * writing to the shuffle's commit log.
   */
  @Override
  public Table alterTable(Identifier ident, TableChange... changes) throws NoSuchTableException {
    String[] ns = ident.namespace();
    boolean withMetadata = ns.length == 1 && ns[0].equals(WITH_METADATA);
    if (ns.length != 0 && !withMetadata) {
      throw new NoSuchTableException(ident);
    }
    String topic = ident.name();
    CommitLog log = readLog(topic);
    Layout layout = log == null ? null : log.layout();
    if (layout == null) {
      throw new NoSuchTableException(ident);
    }
    TableAlteration change =
        TableAlteration.of(
            owner() + ": shuffle " + ReadPlanner.repr(topic), layout.latest(), changes);
    if (change.isEmpty()) {
      return new ShuffleTable(layout, kafka(), withMetadata, log); // DROP COLUMN IF EXISTS only
    }
    TableAlteration.Recorded done;
    try (ChangeWriter writer = new ChangeWriter(topic)) {
      done =
          TableAlteration.record(
              topic,
              writer,
              layout,
              l -> change.apply(topic, l.latest(), TableAlteration.Pinned.of(l)),
              TableAlteration.MADE_BY);
    }
    LOG.info(
        "shuffle '{}': layout version {} recorded (ALTER TABLE): {}",
        topic,
        done.version().version,
        String.join("; ", done.version().changes()));
    return new ShuffleTable(done.log().layout(), kafka(), withMetadata, done.log());
  }

  /** Writes change records to a shuffle's commit log and reads the log back. */
  private final class ChangeWriter implements TableAlteration.ChangeLog, AutoCloseable {
    private final String topic;
    private final String ctopic;
    private KafkaProducer<String, String> producer;

    ChangeWriter(String topic) {
      this.topic = topic;
      this.ctopic = topic + COMMITS_SUFFIX;
    }

    @Override
    public void write(String key, String value) {
      String what =
          owner()
              + ": writing "
              + ReadPlanner.repr(key)
              + " to commit log "
              + ReadPlanner.repr(ctopic);
      try {
        if (producer == null) {
          Properties p = KafkaOptions.producer(kafka(), owner());
          p.setProperty("acks", "all");
          p.setProperty("linger.ms", "0");
          // One keyed record at a time: a retried duplicate is harmless, so idempotence (and
          // the producer-id round trip and ACL it needs) buys nothing.
          p.setProperty("enable.idempotence", "false");
          p.setProperty("max.block.ms", "30000");
          producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
        }
        producer.send(new ProducerRecord<>(ctopic, 0, key, value)).get(30, TimeUnit.SECONDS);
      } catch (ExecutionException e) {
        throw new ShuffleException(
            ShuffleException.Kind.CONNECTION, what + ": " + e.getCause(), e.getCause());
      } catch (TimeoutException | KafkaException e) {
        throw new ShuffleException(ShuffleException.Kind.CONNECTION, what + ": " + e, e);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new ShuffleException(ShuffleException.Kind.CONNECTION, what + ": interrupted", e);
      }
    }

    @Override
    public CommitLog read() {
      CommitLog log = readLog(topic);
      if (log == null) {
        throw new ShuffleException(
            ShuffleException.Kind.NOT_FOUND,
            owner() + ": commit log " + ReadPlanner.repr(ctopic) + " is gone");
      }
      return log;
    }

    @Override
    public void close() {
      if (producer != null) {
        producer.close(Duration.ofSeconds(30));
      }
    }
  }

  @Override
  public boolean dropTable(Identifier ident) {
    throw readOnly(ident);
  }

  @Override
  public void renameTable(Identifier oldIdent, Identifier newIdent) {
    throw readOnly(oldIdent);
  }

  private UnsupportedOperationException readOnly(Identifier ident) {
    return new UnsupportedOperationException(
        owner()
            + " does not create, drop or rename shuffles (ALTER TABLE changes their columns):"
            + " shuffle '"
            + ident.name()
            + "' is written with orchestration.shuffle.write_shuffle and expired with "
            + "expire_shuffle");
  }

  @Override
  public Identifier[] listFunctions(String[] namespace) {
    return new Identifier[0];
  }

  @Override
  public UnboundFunction loadFunction(Identifier ident) throws NoSuchFunctionException {
    PartitionFunction f = ident.namespace().length == 0 ? PartitionFunction.parse(ident.name()) : null;
    if (f == null) {
      throw new NoSuchFunctionException(ident);
    }
    return f;
  }
}
