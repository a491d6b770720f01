package io.kafkashuffle.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * A shuffle's layout, as the commit log's {@code layout} record holds it (JSON written by
 * {@code orchestration/shuffle/core/commitlog.py}): key columns, key groups, partitions, the
 * event-time column and the Arrow schema of the shuffled columns (base64 IPC).
 *
 * <p>A layout read from a commit log with change records is the latest of its versions: {@link
 * #schema} and {@link #numPartitions} are the latest version's, and its JSON carries every
 * version ({@code "versions"}, as {@code Layout.to_json} writes a layout handed to tasks), so
 * that a run is read by the columns it was written with. Key, key groups, event time and order
 * are the same in every version.
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
  /** The versions, oldest first; the last is the one {@link #schema} is of. Never empty. */
  final List<LayoutVersion> versions;

  private final ObjectNode node;

  private Layout(String json, JsonNode d, Schema schema, List<LayoutVersion> versions) {
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
    this.node = (ObjectNode) d;
    this.versions =
        versions.isEmpty()
            ? List.of(
                LayoutVersion.first(
                    schema, d.get("schema").asText(), d.get("schema_text"), numPartitions))
            : List.copyOf(versions);
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
      schema = LayoutVersion.schema(d.get("schema"));
    } catch (IllegalArgumentException e) {
      throw ShuffleException.option(
          where
              + ": the layout's 'schema' is not a base64 Arrow IPC schema: "
              + (e.getCause() == null ? e.getMessage() : e.getCause().getMessage()));
    }
    List<LayoutVersion> versions = new ArrayList<>();
    JsonNode listed = d.get("versions");
    if (listed != null && !listed.isNull()) {
      if (!listed.isArray()) {
        throw ShuffleException.format(where + ": the layout's 'versions' is not a list");
      }
      for (JsonNode v : listed) {
        try {
          versions.add(LayoutVersion.of(v));
        } catch (IllegalArgumentException e) {
          throw ShuffleException.format(
              where
                  + ": version "
                  + (versions.size() + 1)
                  + " of the layout's 'versions' is not a layout version ("
                  + e.getMessage()
                  + ")");
        }
      }
    }
    Layout layout = new Layout(json, d, schema, versions);
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

  /** The latest version: the one a read outputs the columns of. */
  LayoutVersion latest() {
    return versions.get(versions.size() - 1);
  }

  /** The latest version's number (1: never changed). */
  long version() {
    return latest().version;
  }

  /**
   * Version {@code version} (0: the latest), as {@code Layout.layout_version} in commitlog.py:
   * a run naming a version the commit log does not hold cannot be read.
   */
  LayoutVersion layoutVersion(long version) {
    if (version == 0) {
      return latest();
    }
    for (LayoutVersion v : versions) {
      if (v.version == version) {
        return v;
      }
    }
    throw ShuffleException.format(
        "shuffle "
            + ReadPlanner.repr(topic)
            + ": layout version "
            + version
            + " is not in its commit log "
            + ReadPlanner.repr(topic + ShuffleCatalog.COMMITS_SUFFIX)
            + " (versions 1 to "
            + version()
            + "); a run written under it cannot be read");
  }

  /**
   * This layout with {@code later} (the versions after its own, in order) applied: the latest's
   * schema and partition count, every version listed. {@code where} goes into errors.
   */
  Layout evolved(List<LayoutVersion> later, String where) {
    if (later.isEmpty()) {
      return this;
    }
    LayoutVersion last = later.get(later.size() - 1);
    ObjectNode d = node.deepCopy();
    d.set("schema", last.json.get("schema"));
    if (last.json.has("schema_text")) {
      d.set("schema_text", last.json.get("schema_text"));
    } else {
      d.remove("schema_text");
    }
    d.put("num_partitions", last.numPartitions);
    ArrayNode all = d.putArray("versions");
    for (LayoutVersion v : versions) {
      all.add(v.json);
    }
    for (LayoutVersion v : later) {
      all.add(v.json);
    }
    return parse(d.toString(), where);
  }
}
