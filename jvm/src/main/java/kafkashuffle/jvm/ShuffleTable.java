package kafkashuffle.jvm;

import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A shuffle topic as a table: the layout's columns (and, for a read with metadata, {@code
 * _partition}, {@code _key_group}, {@code _run_id}, {@code _offset}, {@code _window}). A read
 * executes a plan the Python planner made (options {@code plan}, {@code layout}).
 */
final class ShuffleTable implements SupportsRead {
  static final String OWNER = ShuffleBatchReader.OWNER;

  private final Layout layout;
  private final Map<String, String> catalogKafka;
  private final boolean withMetadata;
  private final StructType schema;

  ShuffleTable(Layout layout, Map<String, String> catalogKafka, boolean withMetadata) {
    this.layout = layout;
    this.catalogKafka = catalogKafka;
    this.withMetadata = withMetadata;
    this.schema = schemaOf(layout, withMetadata);
  }

  static StructType schemaOf(Layout layout, boolean withMetadata) {
    StructType s = ArrowUtils.fromArrowSchema(layout.schema);
    if (withMetadata) {
      s =
          s.add("_partition", DataTypes.IntegerType, true)
              .add("_key_group", DataTypes.IntegerType, true)
              .add("_run_id", DataTypes.StringType, true)
              .add("_offset", DataTypes.LongType, true)
              .add("_window", DataTypes.StringType, true);
    }
    return s;
  }

  @Override
  public String name() {
    return layout.topic;
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return new Builder(options);
  }

  private final class Builder implements ScanBuilder, SupportsPushDownRequiredColumns {
    private final CaseInsensitiveStringMap options;
    private StructType required = schema;

    Builder(CaseInsensitiveStringMap options) {
      this.options = options;
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
      this.required = requiredSchema;
    }

    @Override
    public Scan build() {
      String topic = layout.topic;
      String planText = options.get("plan");
      if (planText == null || planText.isEmpty()) {
        throw ShuffleException.option(
            OWNER
                + ": shuffle '"
                + topic
                + "' is read through a plan the Python planner made (option 'plan', as "
                + "orchestration.shuffle.plan_shuffle_read hands it over: read_shuffle(..., "
                + "engine='jvm')); a read of all visible commits without one is not supported");
      }
      Layout planned = layout;
      String layoutText = options.get("layout");
      if (layoutText != null && !layoutText.isEmpty()) {
        planned = Layout.parse(layoutText, OWNER + ": option 'layout'");
        if (!planned.topic.equals(topic)
            || planned.numPartitions != layout.numPartitions
            || planned.maxParallelism != layout.maxParallelism
            || !planned.key.equals(layout.key)) {
          throw new ShuffleException(
              ShuffleException.Kind.LAYOUT,
              OWNER
                  + ": option 'layout' (shuffle '"
                  + planned.topic
                  + "') does not match the layout in the commit log of '"
                  + topic
                  + "'");
        }
      }
      Map<String, String> kafka = KafkaSettings.fromOptions(options);
      if (!kafka.containsKey("bootstrap.servers")) {
        kafka = catalogKafka;
      }
      Long start = longOption("event_time_start");
      Long end = longOption("event_time_end");
      if ((start != null || end != null) && planned.eventTime == null) {
        throw ShuffleException.option(
            "shuffle '" + topic + "' has no event_time column; an event-time range cannot apply");
      }
      List<String> columns = new ArrayList<>();
      for (StructField f : required.fields()) {
        columns.add(f.name());
      }
      List<SplitPlan> splits = SplitPlan.parseAll(planText, "plan");
      ReadSpec spec =
          new ReadSpec(topic, kafka, planned, columns.toArray(new String[0]), start, end);
      return new ShuffleScan(spec, splits, required);
    }

    private Long longOption(String name) {
      String v = options.get(name);
      if (v == null || v.isEmpty()) {
        return null;
      }
      try {
        return Long.parseLong(v.trim());
      } catch (NumberFormatException e) {
        throw ShuffleException.option(
            OWNER + ": option '" + name + "' must be an integer, got '" + v + "'");
      }
    }
  }

  boolean withMetadata() {
    return withMetadata;
  }
}
