package io.kafkashuffle.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * {@code spark.read.format("kafka-records-jvm")}: plain Kafka records read into columnar
 * batches on the JVM, executing ranges the Python {@code kafka-records} planner chose (it
 * resolves subscriptions, starting and ending offsets, timestamps and group positions; see
 * {@code orchestration/shuffle/spark/records.py} {@code read_records}).
 *
 * <p>Options: {@code ranges} (JSON {@code [[topic, partition, start, end], ...]}, offsets
 * {@code [start, end)}), {@code kafka.*} (librdkafka names, as the Python source takes them),
 * {@code includeHeaders} and {@code failOnDataLoss} (both {@code true} or {@code false}); any
 * other is refused by name ({@link OptionTables#RECORDS_JVM}). The columns are the Python
 * source's and Spark's {@code kafka} source's.
 */
public final class RecordsTableProvider implements TableProvider, DataSourceRegister {
  static final String OWNER = "kafka-records";

  @Override
  public String shortName() {
    return "kafka-records-jvm";
  }

  static StructType schema(boolean headers) {
    StructType s =
        new StructType()
            .add("key", DataTypes.BinaryType)
            .add("value", DataTypes.BinaryType)
            .add("topic", DataTypes.StringType)
            .add("partition", DataTypes.IntegerType)
            .add("offset", DataTypes.LongType)
            .add("timestamp", DataTypes.TimestampType)
            .add("timestampType", DataTypes.IntegerType);
    if (headers) {
      StructType header =
          new StructType().add("key", DataTypes.StringType).add("value", DataTypes.BinaryType);
      s = s.add("headers", DataTypes.createArrayType(header));
    }
    return s;
  }

  static boolean flag(Map<String, String> options, String name) {
    String v = options.get(name);
    if (v == null) {
      return OptionTables.RECORDS_JVM.flagDefault(name);
    }
    String t = v.trim().toLowerCase(java.util.Locale.ROOT);
    if (!t.equals("true") && !t.equals("false")) {
      throw ShuffleException.option(
          OWNER + ": option '" + name + "' must be 'true' or 'false', got '" + v + "'");
    }
    return t.equals("true");
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    SparkVersionCheck.require();
    // A batch source: Spark refuses a stream of it, so every read here is a batch read.
    OptionTables.RECORDS_JVM.check(options.asCaseSensitiveMap().keySet(), OptionCheck.BATCH);
    return schema(flag(options, "includeHeaders"));
  }

  @Override
  public Table getTable(
      StructType schema, Transform[] partitioning, Map<String, String> properties) {
    SparkVersionCheck.require();
    OptionTables.RECORDS_JVM.check(properties.keySet(), OptionCheck.BATCH);
    CaseInsensitiveStringMap options = new CaseInsensitiveStringMap(properties);
    Settings settings =
        new Settings(
            KafkaOptions.fromOptions(options),
            flag(options, "includeHeaders"),
            flag(options, "failOnDataLoss"));
    return new RecordsTable(settings, ranges(options.get("ranges")));
  }

  /** What every reader of one read needs (sent to the executors). */
  static final class Settings implements Serializable {
    private static final long serialVersionUID = 1L;
    final Map<String, String> kafka;
    final boolean headers;
    final boolean failOnDataLoss;

    Settings(Map<String, String> kafka, boolean headers, boolean failOnDataLoss) {
      this.kafka = new java.util.HashMap<>(kafka);
      this.headers = headers;
      this.failOnDataLoss = failOnDataLoss;
      // Refuses settings the Java client cannot honour here, on the driver.
      KafkaOptions.consumer(this.kafka, OWNER);
    }
  }

  /** Offsets {@code [start, end)} of one partition: one Spark partition of the read. */
  static final class Range implements InputPartition {
    private static final long serialVersionUID = 1L;
    final String topic;
    final int partition;
    final long start;
    final long end;

    Range(String topic, int partition, long start, long end) {
      this.topic = topic;
      this.partition = partition;
      this.start = start;
      this.end = end;
    }
  }

  static List<Range> ranges(String json) {
    if (json == null || json.isEmpty()) {
      throw ShuffleException.option(
          OWNER
              + "-jvm: option 'ranges' is required (the Python planner's; read with"
              + " orchestration.shuffle.read_records)");
    }
    JsonNode root;
    try {
      root = new ObjectMapper().readTree(json);
    } catch (IOException e) {
      throw ShuffleException.option(OWNER + "-jvm: option 'ranges' is not JSON: " + e);
    }
    List<Range> out = new ArrayList<>();
    for (JsonNode r : root) {
      if (!r.isArray() || r.size() != 4) {
        throw ShuffleException.option(
            OWNER + "-jvm: option 'ranges': each range is [topic, partition, start, end]: " + r);
      }
      out.add(new Range(r.get(0).asText(), r.get(1).asInt(), r.get(2).asLong(), r.get(3).asLong()));
    }
    return out;
  }

  static final class RecordsTable implements Table, SupportsRead {
    private final Settings settings;
    private final List<Range> ranges;

    RecordsTable(Settings settings, List<Range> ranges) {
      this.settings = settings;
      this.ranges = ranges;
    }

    @Override
    public String name() {
      return OWNER;
    }

    @Override
    public StructType schema() {
      return RecordsTableProvider.schema(settings.headers);
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return () -> new RecordsScan(settings, ranges, schema());
    }
  }

  static final class RecordsScan implements Scan, Batch {
    private final Settings settings;
    private final List<Range> ranges;
    private final StructType schema;

    RecordsScan(Settings settings, List<Range> ranges, StructType schema) {
      this.settings = settings;
      this.ranges = ranges;
      this.schema = schema;
    }

    @Override
    public StructType readSchema() {
      return schema;
    }

    @Override
    public String description() {
      long records = 0;
      for (Range r : ranges) {
        records += Math.max(0, r.end - r.start);
      }
      return OWNER + " ranges=" + ranges.size() + " offsets=" + records;
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
      return ranges.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new Factory(settings);
    }
  }

  static final class Factory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final Settings settings;

    Factory(Settings settings) {
      this.settings = settings;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      throw new UnsupportedOperationException(OWNER + "-jvm reads columnar batches only");
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return new RecordsBatchReader(settings, (Range) partition);
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return true;
    }
  }
}
