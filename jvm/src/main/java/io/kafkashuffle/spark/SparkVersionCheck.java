package io.kafkashuffle.spark;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;

/**
 * The Spark lines this jar runs on, and the refusal of any other.
 *
 * <p>The jar is compiled against one Spark release and uses internal API (column vectors,
 * key-grouped partitioning, the catalog's function binding) that changes between lines: on a
 * line it was not built for, a read would fail in a task with a {@code NoSuchMethodError}
 * far from its cause. The catalog and the sources call {@link #require()} before they do
 * anything, so such a session fails at once with the versions named. The list comes from the
 * pom ({@code spark.supported}), through {@code kafka-shuffle-spark.properties}. Public for
 * the tests that call it through py4j.
 */
public final class SparkVersionCheck {
  private static final String RESOURCE = "kafka-shuffle-spark.properties";
  static final String VERSION;
  static final List<String> SUPPORTED;

  static {
    Properties p = new Properties();
    try (InputStream in = SparkVersionCheck.class.getResourceAsStream(RESOURCE)) {
      if (in == null) {
        throw new IllegalStateException(RESOURCE + " is missing from the kafka-shuffle jar");
      }
      p.load(in);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    VERSION = p.getProperty("version");
    SUPPORTED = Arrays.asList(p.getProperty("spark.supported").split(","));
  }

  private SparkVersionCheck() {}

  /** "4.3" of "4.3.0", "4.3.1-SNAPSHOT" or "4.3". */
  static String line(String sparkVersion) {
    String[] parts = sparkVersion.trim().split("[.-]");
    return parts.length < 2 ? sparkVersion.trim() : parts[0] + "." + parts[1];
  }

  /** Refuses a Spark version outside the supported lines; the message names both. */
  public static void require(String sparkVersion) {
    if (!SUPPORTED.contains(line(sparkVersion))) {
      throw new ShuffleException(
          ShuffleException.Kind.SESSION,
          "kafka-shuffle-spark_2.13 "
              + VERSION
              + " runs on Spark "
              + String.join(", ", SUPPORTED)
              + "; this session runs Spark "
              + sparkVersion
              + ": install the kafka-shuffle release built for that Spark line");
    }
  }

  /** {@link #require(String)} for the Spark this JVM runs. */
  public static void require() {
    require(org.apache.spark.package$.MODULE$.SPARK_VERSION());
  }
}
