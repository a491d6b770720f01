package io.kafkashuffle.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.channels.Channels;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import org.apache.arrow.vector.ipc.ReadChannel;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * A shuffle's layout, as the commit log's {@code layout} record holds it (JSON written by
 * {@code orchestration/shuffle/core/commitlog.py}): key columns, key groups, partitions, the
 * event-time column and the Arrow schema of the shuffled columns (base64 IPC).
 */
public final class Layout {
  static final ObjectMapper JSON = new ObjectMapper();

  public final String json;
  public final String topic;
  public final List<String> key;
  public final int numPartitions;
  public final int maxParallelism;
  public final String eventTime;
  public final int formatVersion;
  public final Schema schema;
  /** The order each sorted run's rows have in each partition; empty: none (old layouts). */
  public final List<String> sortBy;

  private Layout(String json, JsonNode d, Schema schema) {
    this.json = json;
    this.topic = d.path("topic").asText();
    List<String> k = new ArrayList<>();
    d.path("key").forEach(n -> k.add(n.asText()));
    this.key = List.copyOf(k);
    this.numPartitions = d.path("num_partitions").asInt();
    this.maxParallelism = d.path("max_parallelism").asInt();
    JsonNode et = d.get("event_time");
    this.eventTime = et == null || et.isNull() ? null : et.asText();
    this.formatVersion = d.path("format_version").asInt(1);
    this.schema = schema;
    List<String> s = new ArrayList<>();
    d.path("sort_by").forEach(n -> s.add(n.asText()));
    this.sortBy = List.copyOf(s);
  }

  /** Parses a layout record; {@code where} (e.g. the option or topic) goes into errors. */
  public static Layout parse(String json, String where) {
    JsonNode d;
    try {
      d = JSON.readTree(json);
    } catch (IOException e) {
      throw ShuffleException.option(where + " is not a layout JSON object: " + e.getMessage());
    }
    if (d == null || !d.isObject() || !d.hasNonNull("schema") || !d.hasNonNull("key")) {
      throw ShuffleException.option(where + " is not a layout (no 'schema' or 'key')");
    }
    Schema schema;
    try {
      byte[] bytes = Base64.getDecoder().decode(d.get("schema").asText());
      schema =
          MessageSerializer.deserializeSchema(
              new ReadChannel(Channels.newChannel(new ByteArrayInputStream(bytes))));
    } catch (IOException | IllegalArgumentException e) {
      throw ShuffleException.option(
          where + ": the layout's 'schema' is not a base64 Arrow IPC schema: " + e.getMessage());
    }
    Layout layout = new Layout(json, d, schema);
    if (layout.numPartitions <= 0 || layout.maxParallelism < layout.numPartitions) {
      throw new ShuffleException(
          ShuffleException.Kind.LAYOUT,
          where
              + ": layout has num_partitions "
              + layout.numPartitions
              + " and max_parallelism "
              + layout.maxParallelism);
    }
    // The layout record's own format (commitlog.py LAYOUT_FORMAT_VERSION): frames of versions
    // 1 and 2 alike, each frame saying which.
    if (layout.formatVersion != 1) {
      throw ShuffleException.format(
          where
              + ": shuffle "
              + layout.topic
              + " has frame format version "
              + layout.formatVersion
              + "; this reader understands version 1");
    }
    return layout;
  }
}
