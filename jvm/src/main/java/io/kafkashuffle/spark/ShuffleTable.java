package io.kafkashuffle.spark;

import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Supplier;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A shuffle topic as a table: the layout's columns (and, for a read with metadata, {@code
 * _partition}, {@code _key_group}, {@code _run_id}, {@code _offset}, {@code _window}). A read
 * executes a plan the Python planner made (options {@code plan}, {@code layout}) or, for a
 * catalog table read without one (SQL), a plan {@link ReadPlanner} makes of the commit log
 * read when the table was loaded. A read of few rows is one split, still keyed ({@link
 * #smallReadRows}).
 */
final class ShuffleTable implements SupportsRead {
  static final String OWNER = ShuffleBatchReader.OWNER;

  private final Layout layout;
  private final Map<String, String> catalogKafka;
  private final boolean withMetadata;
  private final StructType schema;
  private final CommitLog log; // null: read only through a plan given as an option
  private final long smallReadRows; // the default of option small_read_rows

  ShuffleTable(
      Layout layout, Map<String, String> catalogKafka, boolean withMetadata, CommitLog log) {
    this(layout, catalogKafka, withMetadata, log, defaultSmallReadRows());
  }

  ShuffleTable(
      Layout layout,
      Map<String, String> catalogKafka,
      boolean withMetadata,
      CommitLog log,
      long smallReadRows) {
    this.layout = layout;
    this.catalogKafka = catalogKafka;
    this.withMetadata = withMetadata;
    this.schema = schemaOf(layout, withMetadata);
    this.log = log;
    this.smallReadRows = smallReadRows;
  }

  static final String SMALL_READ_ROWS = "small_read_rows";

  /** Option {@code small_read_rows}'s default in the option table. */
  static long defaultSmallReadRows() {
    return Long.parseLong(OptionTables.SHUFFLE_JVM.option(SMALL_READ_ROWS).defaultValue);
  }

  /**
   * {@code value} of option or setting {@code what} (named so in the error) as a row count:
   * an integer >= 0.
   */
  static long smallReadRows(String value, String what) {
    try {
      long n = Long.parseLong(value.trim());
      if (n >= 0) {
        return n;
      }
    } catch (NumberFormatException e) {
      // refused below
    }
    throw ShuffleException.option(what + " must be an integer >= 0, got '" + value + "'");
  }

  /** The column metadata per-key work looks for on a read's key columns (perkey.py). */
  static final String KEY_METADATA = "kafka_shuffle";

  static StructType schemaOf(Layout layout, boolean withMetadata) {
    StructType s = keyTagged(ArrowUtils.fromArrowSchema(layout.schema), layout);
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

  /**
   * {@code schema} with the shuffle's key columns tagged as read keyed ({@code KEY_METADATA}:
   * topic, key, num_partitions, max_parallelism), so that per-key work over a read of this
   * table, however many splits it has, finds them as over a read the Python planner made.
   */
  static StructType keyTagged(StructType schema, Layout layout) {
    org.apache.spark.sql.types.Metadata tag =
        new org.apache.spark.sql.types.MetadataBuilder()
            .putString("topic", layout.topic)
            .putStringArray("key", layout.key.toArray(new String[0]))
            .putLong("num_partitions", layout.numPartitions)
            .putLong("max_parallelism", layout.maxParallelism)
            .build();
    StructField[] fields = schema.fields().clone();
    for (int i = 0; i < fields.length; i++) {
      StructField f = fields[i];
      if (layout.key.contains(f.name())) {
        fields[i] =
            new StructField(
                f.name(),
                f.dataType(),
                f.nullable(),
                new org.apache.spark.sql.types.MetadataBuilder()
                    .withMetadata(f.metadata())
                    .putMetadata(KEY_METADATA, tag)
                    .build());
      }
    }
    return new StructType(fields);
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
    return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return new Builder(options);
  }

  private final class Builder
      implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownAggregates {
    private final CaseInsensitiveStringMap options;
    private StructType required = schema;
    private Planned planned; // what build() and an aggregation's check both need
    private PushedAggregation aggregation;

    Builder(CaseInsensitiveStringMap options) {
      this.options = options;
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
      this.required = requiredSchema;
    }

    /**
     * Taken whole or not at all: when every split reads whole Kafka partitions (the default
     * parallelism, or less), every run read was written under the latest partition count (a
     * run written before the shuffle grew holds a group's rows in another partition than a
     * later run does) and {@link PushedAggregation} can run the aggregation, which needs the
     * groups to include the key. Else Spark aggregates the read itself. Spark asks this before {@link #pushAggregation}, with the
     * same aggregation.
     */
    @Override
    public boolean supportCompletePushDown(Aggregation a) {
      return accept(a) != null;
    }

    @Override
    public boolean pushAggregation(Aggregation a) {
      aggregation = accept(a);
      return aggregation != null;
    }

    private PushedAggregation accept(Aggregation a) {
      boolean ansi = SQLConf.get().ansiEnabled();
      PushedAggregation p = PushedAggregation.of(a, schema, layout.key, ansi);
      if (p == null) {
        return null;
      }
      Planned plan = planned();
      List<SplitPlan> splits = plan.splits.get();
      return ShuffleScan.wholePartitions(splits)
              && ShuffleScan.latestPartitionCount(splits, plan.layout)
          ? p
          : null;
    }

    @Override
    public Scan build() {
      Planned plan = planned();
      StructType readSchema = aggregation == null ? required : aggregation.output;
      String[] columns =
          aggregation == null ? required.fieldNames() : aggregation.columns.clone();
      ReadSpec spec =
          new ReadSpec(layout.topic, plan.kafka, plan.layout, columns, plan.start, plan.end);
      return new ShuffleScan(
          spec, plan.splits, readSchema, options, plan.given, aggregation, plan.smallReadRows);
    }

    private Planned planned() {
      if (planned == null) {
        planned = plan();
      }
      return planned;
    }

    private Planned plan() {
      List<String> given = new ArrayList<>(options.asCaseSensitiveMap().keySet());
      // Names first: a misspelled or unsupported option is refused before anything is
      // planned. Whether each applies to this kind of read, the scan checks once Spark asks
      // it for a batch or a stream.
      OptionTables.SHUFFLE_JVM.check(given, null);
      String topic = layout.topic;
      String planText = options.get("plan");
      Map<String, String> kafka = KafkaOptions.fromOptions(options);
      if (!kafka.containsKey("bootstrap.servers")) {
        kafka = catalogKafka;
      }
      Layout planned = layout;
      Supplier<List<SplitPlan>> splits;
      Long start;
      Long end;
      String rowsOption = options.get(SMALL_READ_ROWS);
      long small =
          rowsOption == null || rowsOption.isEmpty()
              ? smallReadRows
              : smallReadRows(rowsOption, OWNER + ": option '" + SMALL_READ_ROWS + "'");
      if (planText == null || planText.isEmpty()) {
        if (log == null) {
          throw ShuffleException.option(
              OWNER
                  + ": shuffle '"
                  + topic
                  + "' needs a catalog (spark.sql.catalog.<name>="
                  + ShuffleCatalog.class.getName()
                  + ") or a plan the Python planner made (option 'plan') to be read");
        }
        // No Python planner: the commit log read when the table was loaded is planned here,
        // with the same rules (windows, runs, event-time range and parallelism options). Only
        // a batch read plans: a stream plans each micro-batch itself.
        ReadPlanner.Selection selection = ReadPlanner.Selection.parse(options, OWNER);
        CommitLog read = log;
        splits = once(() -> ReadPlanner.plan(read, selection));
        start = selection.eventTimeStart;
        end = selection.eventTimeEnd;
        if (selection.parallelism instanceof Integer) {
          small = 0; // the splits asked for
        }
      } else {
        String layoutText = options.get("layout");
        if (layoutText != null && !layoutText.isEmpty()) {
          planned = Layout.parse(layoutText, OWNER + ": option 'layout'");
          if (!planned.topic.equals(topic)
              || (planned.version() == layout.version()
                  && planned.numPartitions != layout.numPartitions)
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
          if (planned.version() > layout.version()) {
            throw new ShuffleException(
                ShuffleException.Kind.LAYOUT,
                OWNER
                    + ": the plan of shuffle '"
                    + topic
                    + "' was made with its layout version "
                    + planned.version()
                    + ", and the table's schema is of version "
                    + layout.version()
                    + ": the layout changed while the read was planned; read it again");
          }
          if (planned.version() < layout.version()) {
            // A change recorded since the plan was made: the table's schema is the newer
            // version's, and its layout holds every version the plan's runs were written under.
            planned = layout;
          }
        }
        start = ReadPlanner.Selection.millisAsMicros(options, "event_time_start_ms", OWNER);
        end = ReadPlanner.Selection.millisAsMicros(options, "event_time_end_ms", OWNER);
        if ((start != null || end != null) && planned.eventTime == null) {
          throw ShuffleException.option(
              "shuffle '" + topic + "' has no event_time column; an event-time range cannot apply");
        }
        List<SplitPlan> handed = SplitPlan.parseAll(planText, "plan");
        SchemaResolution.requireVersions(planned, handed);
        splits = () -> handed;
      }
      return new Planned(given, kafka, planned, splits, start, end, small);
    }
  }

  /** The options of a read, checked, and its splits, planned when first asked for. */
  private record Planned(
      List<String> given,
      Map<String, String> kafka,
      Layout layout,
      Supplier<List<SplitPlan>> splits,
      Long start,
      Long end,
      long smallReadRows) {}

  private static <T> Supplier<T> once(Supplier<T> make) {
    return new Supplier<>() {
      private T value;

      @Override
      public synchronized T get() {
        if (value == null) {
          value = make.get();
        }
        return value;
      }
    };
  }

  boolean withMetadata() {
    return withMetadata;
  }
}
