package io.kafkashuffle.spark;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.SupportsCatalogOptions;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code spark.read.format("kafka-shuffle-jvm")}: a shuffle read that executes a plan the
 * Python planner made, with the options of the Python {@code kafka-shuffle} source: {@code
 * topic}, {@code kafka.*}, {@code layout}, {@code plan}, {@code event_time_start_ms}, {@code
 * event_time_end_ms}, {@code with_metadata}; or, without a plan, one that the catalog's
 * planner makes ({@code windows}, {@code runs}, {@code parallelism}). Any option it does not
 * take ({@link OptionTables#SHUFFLE_JVM}) is refused by name.
 *
 * <p>The read goes through the catalog (option {@code catalog}, default {@code shuffle}; see
 * {@link ShuffleCatalog}): that catalog's functions are what lets Spark see how the rows are
 * partitioned.
 */
public final class ShuffleTableProvider implements SupportsCatalogOptions, DataSourceRegister {
  @Override
  public String shortName() {
    return "kafka-shuffle-jvm";
  }

  private static String topic(CaseInsensitiveStringMap options) {
    String topic = options.get("topic");
    if (topic == null || topic.isEmpty()) {
      throw ShuffleException.option("kafka-shuffle-jvm: option 'topic' is required");
    }
    return topic;
  }

  private static boolean withMetadata(Map<String, String> options) {
    String dflt = OptionTables.SHUFFLE_JVM.option("with_metadata").defaultValue;
    String v = options.getOrDefault("with_metadata", dflt).trim().toLowerCase();
    if (!v.equals("true") && !v.equals("false")) {
      throw ShuffleException.option(
          "kafka-shuffle-jvm: option 'with_metadata' must be 'true' or 'false', got '" + v + "'");
    }
    return v.equals("true");
  }

  @Override
  public Identifier extractIdentifier(CaseInsensitiveStringMap options) {
    SparkVersionCheck.require();
    // Before 'topic' is looked for: a misspelled 'topic' is named as such.
    OptionTables.SHUFFLE_JVM.check(options.asCaseSensitiveMap().keySet(), null);
    String[] ns =
        withMetadata(options) ? new String[] {ShuffleCatalog.WITH_METADATA} : new String[0];
    return Identifier.of(ns, topic(options));
  }

  @Override
  public String extractCatalog(CaseInsensitiveStringMap options) {
    String c = options.get("catalog");
    if (c == null || c.isEmpty()) {
      return OptionTables.SHUFFLE_JVM.option("catalog").defaultValue;
    }
    return c;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    SparkVersionCheck.require();
    return ShuffleTable.schemaOf(layoutOption(options), withMetadata(options));
  }

  @Override
  public Table getTable(
      StructType schema, Transform[] partitioning, Map<String, String> properties) {
    SparkVersionCheck.require();
    CaseInsensitiveStringMap options = new CaseInsensitiveStringMap(properties);
    return new ShuffleTable(
        layoutOption(options), KafkaOptions.fromOptions(options), withMetadata(options), null);
  }

  private static Layout layoutOption(CaseInsensitiveStringMap options) {
    String layout = options.get("layout");
    if (layout == null || layout.isEmpty()) {
      throw ShuffleException.option(
          "kafka-shuffle-jvm: shuffle '"
              + topic(options)
              + "' needs option 'layout' when read without a catalog");
    }
    return Layout.parse(layout, "kafka-shuffle-jvm: option 'layout'");
  }
}
