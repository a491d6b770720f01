package io.kafkashuffle.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

/**
 * A shuffle's commit log as read: the latest layout, the commits in log order and the
 * retention markers. The same rules as {@code ShuffleLog.from_records} and {@code
 * ShuffleLog.visible} in {@code orchestration/shuffle/core/commitlog.py}; both are checked
 * against the vectors in {@code tests/vectors/read_plans.json}.
 */
public final class CommitLog {
  static final String LAYOUT_KEY = "layout";
  static final String COMMIT_PREFIX = "commit/";
  static final String EXPIRED_PREFIX = "expired/";

  /** One committed producer run: the fields a read plan needs. */
  static final class Commit {
    final String runId;
    final String window;
    final int[][] tasks; // (subtask, attempt) pairs
    final TreeMap<Integer, long[]> partitions; // partition -> {first, last, rows, frames}
    final long rows;
    final long bytes;
    final String committedAt; // ISO 8601, as the writer wrote it
    final Long eventTimeMin;
    final Long eventTimeMax;
    final List<String> sortBy; // the order the run was written in; empty: none

    /** The commit a record of the commit log holds ({@code key} names it in errors). */
    static Commit parse(String value, String key) {
      try {
        return new Commit(Layout.JSON.readTree(value));
      } catch (IOException | RuntimeException e) {
        throw ShuffleException.format("commit record '" + key + "' is not a commit: " + e);
      }
    }

    private Commit(JsonNode d) {
      runId = d.get("run_id").asText();
      window = text(d.get("window"));
      committedAt = text(d.get("committed_at"));
      bytes = d.path("bytes").asLong(0);
      JsonNode t = d.get("tasks");
      tasks = new int[t.size()][];
      for (int i = 0; i < t.size(); i++) {
        tasks[i] = new int[] {t.get(i).get(0).asInt(), t.get(i).get(1).asInt()};
      }
      partitions = new TreeMap<>();
      d.get("partitions")
          .fields()
          .forEachRemaining(
              e -> {
                JsonNode r = e.getValue();
                long[] range = new long[4];
                for (int i = 0; i < 4 && i < r.size(); i++) {
                  range[i] = r.get(i).asLong();
                }
                partitions.put(Integer.parseInt(e.getKey()), range);
              });
      rows = d.get("rows").asLong();
      eventTimeMin = number(d.get("event_time_min"));
      eventTimeMax = number(d.get("event_time_max"));
      List<String> s = new ArrayList<>();
      d.path("sort_by").forEach(n -> s.add(n.asText()));
      sortBy = List.copyOf(s);
    }
  }

  /** A run that retention removed. */
  static final class Expired {
    final String runId;
    final String window;
    final String expiredAt;
    final String reason;

    private Expired(JsonNode d) {
      runId = d.get("run_id").asText();
      window = text(d.get("window"));
      expiredAt = d.get("expired_at").asText();
      JsonNode r = d.get("reason");
      reason = r == null || r.isNull() ? "" : r.asText();
    }
  }

  final String topic;
  // The data topic's partition count when the log was read (-1: not looked up).
  int dataPartitions = -1;
  private String layout;
  // Insertion order is log order: a run committed again is removed and added at the end.
  private final LinkedHashMap<String, Commit> commits = new LinkedHashMap<>();
  private final LinkedHashMap<String, Expired> expired = new LinkedHashMap<>();

  CommitLog(String topic) {
    this.topic = topic;
  }

  /** A copy that later {@link #apply} calls on this one do not change. */
  CommitLog copy() {
    CommitLog c = new CommitLog(topic);
    c.layout = layout;
    c.commits.putAll(commits);
    c.expired.putAll(expired);
    return c;
  }

  private String where() {
    return "commit log '" + topic + ShuffleCatalog.COMMITS_SUFFIX + "'";
  }

  /** Applies one record, in offset order; a null value is a delete. */
  void apply(String key, String value) {
    if (key == null) {
      throw ShuffleException.format(where() + " has a record without a key");
    }
    if (key.equals(LAYOUT_KEY)) {
      if (value != null) {
        layout = value;
      }
    } else if (key.startsWith(COMMIT_PREFIX)) {
      String run = key.substring(COMMIT_PREFIX.length());
      commits.remove(run);
      if (value != null) {
        commits.put(run, new Commit(parse(value, key)));
      }
    } else if (key.startsWith(EXPIRED_PREFIX)) {
      String run = key.substring(EXPIRED_PREFIX.length());
      if (value == null) {
        expired.remove(run);
      } else {
        expired.put(run, new Expired(parse(value, key)));
      }
    } else {
      throw ShuffleException.format(where() + " has a record with unknown key '" + key + "'");
    }
  }

  private JsonNode parse(String value, String key) {
    try {
      return Layout.JSON.readTree(value);
    } catch (IOException e) {
      throw ShuffleException.format(where() + ": record '" + key + "' is not JSON: " + e);
    }
  }

  /** The latest layout record's JSON, or null. */
  String layoutJson() {
    return layout;
  }

  /** The commits in log order. */
  Collection<Commit> commits() {
    return commits.values();
  }

  Map<String, Expired> expired() {
    return expired;
  }

  /** The visible commit of each window (runs without a window are not in here). */
  Map<String, Commit> latestByWindow() {
    Map<String, Commit> latest = new LinkedHashMap<>();
    for (Commit c : commits.values()) {
      if (c.window != null) {
        latest.put(c.window, c);
      }
    }
    return latest;
  }

  /**
   * The commits a reader sees, in log order: a run with a window only if it is its window's
   * latest; a run named in {@code runs} even if superseded. Null selects everything.
   */
  List<Commit> visible(Set<String> windows, Set<String> runs) {
    Set<String> latest = new java.util.HashSet<>();
    for (Commit c : latestByWindow().values()) {
      latest.add(c.runId);
    }
    List<Commit> out = new ArrayList<>();
    for (Commit c : commits.values()) {
      if (runs != null) {
        if (!runs.contains(c.runId)) {
          continue;
        }
      } else if (c.window != null && !latest.contains(c.runId)) {
        continue;
      }
      if (windows != null && !windows.contains(c.window)) {
        continue;
      }
      out.add(c);
    }
    return out;
  }

  /** Windows that retention left with no visible run, each with its last run's marker. */
  Map<String, Expired> expiredWindows() {
    Map<String, Commit> visible = latestByWindow();
    Map<String, Expired> last = new LinkedHashMap<>();
    for (Expired e : expired.values()) {
      if (e.window != null && !visible.containsKey(e.window)) {
        last.put(e.window, e);
      }
    }
    return last;
  }

  private static String text(JsonNode n) {
    return n == null || n.isNull() ? null : n.asText();
  }

  private static Long number(JsonNode n) {
    return n == null || n.isNull() ? null : n.asLong();
  }
}
