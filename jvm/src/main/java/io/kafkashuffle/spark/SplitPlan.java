package io.kafkashuffle.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

/**
 * What one Spark partition reads, as the Python planner ({@code
 * orchestration/shuffle/core/planner.py} {@code SplitPlan.to_json}) or {@link ReadPlanner}
 * computed it: per Kafka partition, its key-group range and the committed segments (run,
 * offsets, attempts).
 */
final class SplitPlan implements Serializable {
  private static final long serialVersionUID = 1L;

  /** One run's frames in one partition: offsets [first, last] and its committed attempts. */
  static final class Segment implements Serializable {
    private static final long serialVersionUID = 1L;
    final String runId;
    final long first;
    final long last;
    final int[][] tasks; // (subtask, attempt) pairs
    final String window;
    final long rows; // the run's rows in this partition (commit record); 0: not recorded
    // The run's rows here are one sequence in the layout's sort_by order, by one subtask.
    final boolean sorted;
    // The layout version the run was written under: the names and types its frames have.
    final long layoutVersion;

    Segment(
        String runId,
        long first,
        long last,
        int[][] tasks,
        String window,
        long rows,
        boolean sorted) {
      this(runId, first, last, tasks, window, rows, sorted, 1);
    }

    Segment(
        String runId,
        long first,
        long last,
        int[][] tasks,
        String window,
        long rows,
        boolean sorted,
        long layoutVersion) {
      this.layoutVersion = layoutVersion;
      this.runId = runId;
      this.sorted = sorted;
      this.first = first;
      this.last = last;
      this.tasks = tasks;
      this.window = window;
      this.rows = rows;
    }
  }

  /** What one Spark partition reads from one Kafka partition. */
  static final class PartitionRead implements Serializable {
    private static final long serialVersionUID = 1L;
    final int partition;
    final int keyGroupStart;
    final int keyGroupEnd; // exclusive
    final boolean full;
    final List<Segment> segments;

    PartitionRead(int partition, int start, int end, boolean full, List<Segment> segments) {
      this.partition = partition;
      this.keyGroupStart = start;
      this.keyGroupEnd = end;
      this.full = full;
      this.segments = segments;
    }

    /** The union of the segments' inclusive offset ranges, so each offset is fetched once. */
    List<long[]> mergedIntervals() {
      List<Segment> sorted = new ArrayList<>(segments);
      sorted.sort(Comparator.comparingLong(s -> s.first));
      List<long[]> out = new ArrayList<>();
      for (Segment s : sorted) {
        if (!out.isEmpty() && s.first <= out.get(out.size() - 1)[1] + 1) {
          long[] last = out.get(out.size() - 1);
          last[1] = Math.max(last[1], s.last);
        } else {
          out.add(new long[] {s.first, s.last});
        }
      }
      return out;
    }
  }

  final int index;
  final List<PartitionRead> reads;

  SplitPlan(int index, List<PartitionRead> reads) {
    this.index = index;
    this.reads = reads;
  }

  /** This split as {@code SplitPlan.to_json} in Python writes it (the vectors compare them). */
  ObjectNode toJson() {
    ObjectNode d = Layout.JSON.createObjectNode();
    d.put("index", index);
    ArrayNode rs = d.putArray("reads");
    for (PartitionRead r : reads) {
      ObjectNode o = rs.addObject();
      o.put("partition", r.partition);
      o.put("key_group_start", r.keyGroupStart);
      o.put("key_group_end", r.keyGroupEnd);
      o.put("full", r.full);
      ArrayNode ss = o.putArray("segments");
      for (Segment s : r.segments) {
        ObjectNode so = ss.addObject();
        so.put("run_id", s.runId);
        so.put("first", s.first);
        so.put("last", s.last);
        ArrayNode ts = so.putArray("tasks");
        for (int[] t : s.tasks) {
          ts.addArray().add(t[0]).add(t[1]);
        }
        if (s.window == null) {
          so.putNull("window");
        } else {
          so.put("window", s.window);
        }
        so.put("rows", s.rows);
        if (s.sorted) {
          so.put("sorted", true); // as Python writes it: only when true
        }
        if (s.layoutVersion != 1) {
          so.put("layout_version", s.layoutVersion); // as Python writes it: only when not 1
        }
      }
    }
    return d;
  }

  /** The splits of option {@code plan}: a JSON list of SplitPlan JSON texts. */
  static List<SplitPlan> parseAll(String text, String option) {
    JsonNode list;
    try {
      list = Layout.JSON.readTree(text);
    } catch (IOException e) {
      throw ShuffleException.option("option '" + option + "' is not JSON: " + e.getMessage());
    }
    if (list == null || !list.isArray()) {
      throw ShuffleException.option("option '" + option + "' must be a JSON list of splits");
    }
    List<SplitPlan> out = new ArrayList<>();
    for (JsonNode item : list) {
      try {
        JsonNode d = item.isTextual() ? Layout.JSON.readTree(item.asText()) : item;
        out.add(parse(d));
      } catch (IOException | RuntimeException e) {
        throw ShuffleException.option(
            "option '" + option + "': split " + out.size() + " is not a split plan: " + e);
      }
    }
    return out;
  }

  private static SplitPlan parse(JsonNode d) {
    List<PartitionRead> reads = new ArrayList<>();
    for (JsonNode r : d.get("reads")) {
      List<Segment> segs = new ArrayList<>();
      for (JsonNode s : r.get("segments")) {
        JsonNode tasks = s.get("tasks");
        int[][] pairs = new int[tasks.size()][];
        for (int i = 0; i < tasks.size(); i++) {
          pairs[i] = new int[] {tasks.get(i).get(0).asInt(), tasks.get(i).get(1).asInt()};
        }
        JsonNode w = s.get("window");
        JsonNode rows = s.get("rows");
        JsonNode sorted = s.get("sorted");
        JsonNode version = s.get("layout_version");
        segs.add(
            new Segment(
                s.get("run_id").asText(),
                s.get("first").asLong(),
                s.get("last").asLong(),
                pairs,
                w == null || w.isNull() ? null : w.asText(),
                rows == null || rows.isNull() ? 0 : rows.asLong(),
                sorted != null && sorted.asBoolean(),
                version == null || version.isNull() ? 1 : LayoutVersion.integer(version)));
      }
      reads.add(
          new PartitionRead(
              r.get("partition").asInt(),
              r.get("key_group_start").asInt(),
              r.get("key_group_end").asInt(),
              r.get("full").asBoolean(),
              List.copyOf(segs)));
    }
    return new SplitPlan(d.get("index").asInt(), List.copyOf(reads));
  }
}
