package io.kafkashuffle.spark;

import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;

/**
 * The Java client's settings for the {@code kafka.*} options the Python side hands over (as
 * {@code orchestration/shuffle/core/options.py} {@code kafka_to_options} writes them). A user
 * gives them in either client's names: the Java client's, as a Spark {@code format("kafka")}
 * job has them, pass through unchanged (a {@code sasl.jaas.config} included); the librdkafka
 * spellings of security settings are translated; other librdkafka-only settings (tuning,
 * debugging) are dropped, but an unknown {@code ssl.*} or {@code sasl.*} one is refused, since
 * dropping it could change whom the client trusts. The Python side has checked that the two
 * spellings of one setting, when both are given, agree.
 */
final class KafkaOptions {
  static final String PREFIX = "kafka.";

  private KafkaOptions() {}

  /** The {@code kafka.*} entries of {@code options}, without the prefix (keys lower-case). */
  static Map<String, String> fromOptions(Map<String, String> options) {
    Map<String, String> out = new HashMap<>();
    for (Map.Entry<String, String> e : options.entrySet()) {
      String k = e.getKey().toLowerCase(Locale.ROOT);
      if (k.startsWith(PREFIX)) {
        out.put(k.substring(PREFIX.length()), e.getValue());
      }
    }
    return out;
  }

  /** Java consumer properties for librdkafka settings {@code rd}; {@code owner} names errors. */
  static Properties consumer(Map<String, String> rd, String owner) {
    return settings(rd, owner, ConsumerConfig.configNames());
  }

  /** Java producer properties for librdkafka settings {@code rd}; {@code owner} names errors. */
  static Properties producer(Map<String, String> rd, String owner) {
    return settings(rd, owner, ProducerConfig.configNames());
  }

  /** The Java client's properties of {@code rd}, {@code known} the client's own names. */
  private static Properties settings(Map<String, String> rd, String owner, Set<String> known) {
    if (rd.get("bootstrap.servers") == null || rd.get("bootstrap.servers").isEmpty()) {
      throw ShuffleException.option(owner + ": option 'kafka.bootstrap.servers' is required");
    }
    Properties p = new Properties();
    String mechanism = rd.getOrDefault("sasl.mechanism", rd.get("sasl.mechanisms"));
    for (Map.Entry<String, String> e : rd.entrySet()) {
      String k = e.getKey();
      String v = e.getValue();
      switch (k) {
        case "sasl.mechanisms":
        case "sasl.mechanism":
          p.setProperty("sasl.mechanism", v);
          break;
        case "sasl.username":
        case "sasl.password":
          break; // below, as the JAAS configuration
        case "ssl.ca.location":
          p.setProperty("ssl.truststore.type", "PEM");
          p.setProperty("ssl.truststore.location", v);
          break;
        case "ssl.endpoint.identification.algorithm":
          p.setProperty(k, "none".equalsIgnoreCase(v) ? "" : v);
          break;
        case "security.protocol":
          p.setProperty(k, v.toUpperCase(Locale.ROOT));
          break;
        default:
          if (known.contains(k)) {
            p.setProperty(k, v);
          } else if (k.startsWith("ssl.") || k.startsWith("sasl.")) {
            throw ShuffleException.option(
                owner
                    + ": option 'kafka."
                    + k
                    + "' has no equivalent in the Java Kafka client");
          }
      }
    }
    String user = rd.get("sasl.username");
    // A JAAS line given as it is may hold login options the one built here would lose.
    if (user != null && !rd.containsKey("sasl.jaas.config")) {
      String module;
      if (mechanism == null || mechanism.equalsIgnoreCase("PLAIN")) {
        module = "org.apache.kafka.common.security.plain.PlainLoginModule";
      } else if (mechanism.toUpperCase(Locale.ROOT).startsWith("SCRAM-")) {
        module = "org.apache.kafka.common.security.scram.ScramLoginModule";
      } else {
        throw ShuffleException.option(
            owner + ": option 'kafka.sasl.username' with SASL mechanism " + mechanism);
      }
      String password = rd.getOrDefault("sasl.password", "");
      p.setProperty(
          "sasl.jaas.config",
          module + " required username=" + quoted(user) + " password=" + quoted(password) + ";");
    }
    return p;
  }

  private static String quoted(String s) {
    return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }
}
