package io.kafkashuffle.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The read planner on the JVM, for reads that no Python planner prepared (SQL over a catalog
 * table): which commits a read sees and which offsets each split fetches. The same rules,
 * step by step and with the same error messages, as {@code plan_read} and {@code
 * plan_splits} in {@code orchestration/shuffle/core/planner.py}; both planners are tested
 * against the checked-in vectors {@code tests/vectors/read_plans.json} (commit-log records
 * in, plan out).
 */
public final class ReadPlanner {
  /** Rows a task of an "auto" read is given at least (reader.py {@code AUTO_TASK_ROWS}). */
  static final long AUTO_TASK_ROWS = 500_000L;

  static final String AUTO = "auto";

  private ReadPlanner() {}

  private static final Pattern MILLIS =
      Pattern.compile("[ \\t]*(-?[0-9]+(?:\\.[0-9]{1,3})?)[ \\t]*");

  /** What a read selects: each null means "not given", as the Python options. */
  static final class Selection {
    final List<String> windows;
    final List<String> runs;
    final Long eventTimeStart;
    final Long eventTimeEnd;
    final Object parallelism; // null: the default (see planSplits); AUTO; or an Integer

    Selection(
        List<String> windows,
        List<String> runs,
        Long eventTimeStart,
        Long eventTimeEnd,
        Object parallelism) {
      this.windows = windows;
      this.runs = runs;
      this.eventTimeStart = eventTimeStart;
      this.eventTimeEnd = eventTimeEnd;
      this.parallelism = parallelism;
    }

    /** The selection of a data source's string options (errors name the option). */
    static Selection parse(Map<String, String> options, String owner) {
      return new Selection(
          jsonList(options, "windows", owner),
          jsonList(options, "runs", owner),
          millisAsMicros(options, "event_time_start_ms", owner),
          millisAsMicros(options, "event_time_end_ms", owner),
          parallelism(options, owner));
    }

    private static String get(Map<String, String> options, String name) {
      String v = options.get(name);
      return v == null || v.isEmpty() ? null : v;
    }

    private static ShuffleException bad(String owner, String name, String what, String value) {
      return ShuffleException.option(
          owner + ": option '" + name + "' must be " + what + ", got '" + value + "'");
    }

    private static List<String> jsonList(Map<String, String> options, String name, String owner) {
      String v = get(options, name);
      if (v == null) {
        return null;
      }
      JsonNode n;
      try {
        n = Layout.JSON.readTree(v);
      } catch (IOException e) {
        n = null;
      }
      if (n == null || !n.isArray()) {
        throw bad(owner, name, "a JSON list of strings", v);
      }
      List<String> out = new ArrayList<>();
      for (JsonNode item : n) {
        out.add(item.isTextual() ? item.asText() : item.toString());
      }
      return out;
    }

    private static Long integer(
        Map<String, String> options, String name, long minimum, String owner) {
      String v = get(options, name);
      if (v == null) {
        return null;
      }
      long parsed;
      try {
        parsed = Long.parseLong(v.trim());
      } catch (NumberFormatException e) {
        throw bad(owner, name, "an integer", v);
      }
      if (parsed < minimum) {
        throw bad(owner, name, "an integer >= " + minimum, v);
      }
      return parsed;
    }

    /**
     * Epoch milliseconds (an integer, or up to three decimals) as epoch microseconds, as
     * {@code Options.millis_as_micros} in {@code core/options.py}; null when not given.
     */
    static Long millisAsMicros(Map<String, String> options, String name, String owner) {
      String v = get(options, name);
      if (v == null) {
        return null;
      }
      Matcher m = MILLIS.matcher(v);
      if (m.matches()) {
        try {
          return new BigDecimal(m.group(1)).movePointRight(3).longValueExact();
        } catch (ArithmeticException e) {
          // outside a long's microseconds: refused below
        }
      }
      throw ShuffleException.option(
          owner
              + ": option "
              + repr(name)
              + " must be epoch milliseconds (an integer, or a decimal of up to 3 places), got "
              + repr(v));
    }

    private static Object parallelism(Map<String, String> options, String owner) {
      String v = get(options, "parallelism");
      if (v == null) {
        return null;
      }
      if (v.trim().equalsIgnoreCase(AUTO)) {
        return AUTO;
      }
      Long n = integer(options, "parallelism", 1, owner);
      if (n > Integer.MAX_VALUE) {
        throw bad(owner, "parallelism", "an integer <= " + Integer.MAX_VALUE, v);
      }
      return n.intValue();
    }
  }

  /** The splits of the read {@code selection} makes of {@code log}, one per Spark partition. */
  static List<SplitPlan> plan(CommitLog log, Selection selection) {
    String topic = log.topic;
    Layout layout = log.layout();
    if (layout == null) {
      throw new ShuffleException(
          ShuffleException.Kind.LAYOUT,
          "shuffle "
              + repr(topic)
              + " has no layout record in "
              + repr(topic + ShuffleCatalog.COMMITS_SUFFIX));
    }
    checkPartitions(log, layout);
    Set<String> windows = selection.windows == null ? null : new LinkedHashSet<>(selection.windows);
    Set<String> runs = selection.runs == null ? null : new LinkedHashSet<>(selection.runs);
    log.requireReadable(windows, runs);
    List<CommitLog.Commit> commits = log.visible(windows, runs);
    if (windows != null) {
      TreeSet<String> missing = new TreeSet<>(windows);
      for (CommitLog.Commit c : commits) {
        missing.remove(c.window);
      }
      if (!missing.isEmpty()) {
        throw new ShuffleException(
            ShuffleException.Kind.WINDOW_NOT_FOUND,
            missingWindowsMessage(log, new ArrayList<>(missing)));
      }
    }
    if (runs != null) {
      TreeSet<String> missing = new TreeSet<>(runs);
      for (CommitLog.Commit c : commits) {
        missing.remove(c.runId);
      }
      List<String> expired = new ArrayList<>();
      for (String r : missing) {
        CommitLog.Expired e = log.expired().get(r);
        if (e != null) {
          expired.add(
              r
                  + " (window "
                  + repr(e.window)
                  + ", expired "
                  + e.expiredAt
                  + ": "
                  + e.reason
                  + ")");
        }
      }
      if (!expired.isEmpty()) {
        throw new ShuffleException(
            ShuffleException.Kind.WINDOW_NOT_FOUND,
            "shuffle " + repr(topic) + ": run(s) " + repr(expired) + " were removed by retention");
      }
      if (!missing.isEmpty()) {
        throw new ShuffleException(
            ShuffleException.Kind.WINDOW_NOT_FOUND,
            "shuffle " + repr(topic) + " has no committed run(s) " + repr(new ArrayList<>(missing)));
      }
    }
    Long start = selection.eventTimeStart;
    Long end = selection.eventTimeEnd;
    if (start != null || end != null) {
      if (layout.eventTime == null) {
        throw ShuffleException.option(
            "shuffle "
                + repr(topic)
                + " has no event_time column; an event-time range cannot apply");
      }
      List<CommitLog.Commit> kept = new ArrayList<>();
      for (CommitLog.Commit c : commits) {
        if (overlaps(c, start, end)) {
          kept.add(c);
        }
      }
      commits = kept;
    }
    return planSplits(layout, commits, selection.parallelism);
  }

  /**
   * Refuses a data topic whose partition count is not the layout's, as {@code
   * check_partitions} in {@code orchestration/shuffle/kafka/commitlog.py} does.
   */
  static void checkPartitions(CommitLog log, Layout layout) {
    int n = log.dataPartitions;
    if (n < 0 || n == layout.numPartitions) {
      return;
    }
    if (n == 0) {
      throw new ShuffleException(
          ShuffleException.Kind.NOT_FOUND,
          "the data topic "
              + repr(layout.topic)
              + " of the shuffle is missing (its commit log exists)");
    }
    throw new ShuffleException(
        ShuffleException.Kind.LAYOUT,
        "data topic "
            + repr(layout.topic)
            + " has "
            + n
            + " partitions but the shuffle was created with "
            + layout.numPartitions
            + "; partitions were added behind its back, so key groups would land in the wrong "
            + "partitions. Record them with alter_shuffle(topic, num_partitions="
            + n
            + ") if they were meant to grow the shuffle, else create a new shuffle topic.");
  }

  /** Why {@code windows} have no visible run: expired by retention, or never committed. */
  static String missingWindowsMessage(CommitLog log, List<String> windows) {
    Map<String, CommitLog.Expired> last = log.expiredWindows();
    List<String> expired = new ArrayList<>();
    List<String> never = new ArrayList<>();
    for (String w : windows) {
      (last.containsKey(w) ? expired : never).add(w);
    }
    List<String> parts = new ArrayList<>();
    if (!expired.isEmpty()) {
      List<String> why = new ArrayList<>();
      for (String w : expired) {
        CommitLog.Expired e = last.get(w);
        why.add(
            "window "
                + repr(w)
                + " (run "
                + e.runId
                + ", expired "
                + e.expiredAt
                + ": "
                + e.reason
                + ")");
      }
      parts.add("window(s) " + repr(expired) + " expired: " + String.join("; ", why));
    }
    if (!never.isEmpty()) {
      parts.add("no committed run for window(s) " + repr(never));
    }
    return "shuffle " + repr(log.topic) + ": " + String.join("; ", parts);
  }

  /** Whether a commit may hold rows with event time in {@code [start, end)}. */
  static boolean overlaps(CommitLog.Commit c, Long start, Long end) {
    if (start == null && end == null) {
      return true;
    }
    if (c.eventTimeMin == null || c.eventTimeMax == null) {
      return false;
    }
    if (end != null && c.eventTimeMin >= end) {
      return false;
    }
    return !(start != null && c.eventTimeMax < start);
  }

  /** The key groups {@code [start, end)} partition {@code p} holds. */
  static int[] keyGroupRange(int p, int maxParallelism, int numPartitions) {
    return new int[] {
      ceilDiv((long) p * maxParallelism, numPartitions),
      ceilDiv((long) (p + 1) * maxParallelism, numPartitions)
    };
  }

  private static int ceilDiv(long a, long b) {
    return (int) -Math.floorDiv(-a, b);
  }

  /** {@code [start, end)} cut into {@code pieces} contiguous, near-equal ranges. */
  static List<int[]> splitRange(int start, int end, int pieces) {
    int n = end - start;
    List<int[]> out = new ArrayList<>();
    for (int i = 0; i < pieces; i++) {
      out.add(
          new int[] {
            start + (int) ((long) i * n / pieces), start + (int) ((long) (i + 1) * n / pieces)
          });
    }
    return out;
  }

  /**
   * Splits a read of {@code commits} into Spark partitions, as {@code plan_splits} does. Runs
   * written before the shuffle's partitions grew (their layout version has fewer) are read with
   * the others, keyed: a split keeps the same key groups of them, read from their own Kafka
   * partitions with those key groups kept ({@link #earlierReads}). Such a read has, by default,
   * as many splits as the smallest partition count it reads.
   */
  static List<SplitPlan> planSplits(
      Layout layout, List<CommitLog.Commit> commits, Object parallelism) {
    if (parallelism != null
        && !AUTO.equals(parallelism)
        && !(parallelism instanceof Integer && (Integer) parallelism > 0)) {
      throw ShuffleException.option(
          "parallelism must be a positive integer or 'auto', got " + parallelism);
    }
    int n = layout.numPartitions;
    int m = layout.maxParallelism;
    Map<Integer, List<CommitLog.Commit>> byCount = new LinkedHashMap<>();
    for (CommitLog.Commit c : commits) {
      int count = (int) layout.layoutVersion(c.layoutVersion).numPartitions;
      byCount.computeIfAbsent(count, k -> new ArrayList<>()).add(c);
    }
    List<CommitLog.Commit> latest = byCount.remove(n);
    List<List<SplitPlan.Segment>> segs =
        segmentsByPartition(latest == null ? List.of() : latest, n, layout.sortBy);
    TreeMap<Integer, List<List<SplitPlan.Segment>>> earlier = new TreeMap<>();
    for (Map.Entry<Integer, List<CommitLog.Commit>> e : new TreeMap<>(byCount).entrySet()) {
      earlier.put(e.getKey(), segmentsByPartition(e.getValue(), e.getKey(), layout.sortBy));
    }
    int p;
    if (AUTO.equals(parallelism)) {
      long rows = 0;
      boolean any = false;
      for (List<SplitPlan.Segment> s : segs) {
        any |= !s.isEmpty();
        for (SplitPlan.Segment x : s) {
          rows += x.rows;
        }
      }
      p =
          rows == 0 && any
              ? n
              : (int) Math.max(1, Math.min(n, -Math.floorDiv(-rows, AUTO_TASK_ROWS)));
    } else if (parallelism == null && !earlier.isEmpty()) {
      // Runs of several partition counts: by default as many splits as the smallest count,
      // each holding whole partitions of every count, so that no Kafka partition is fetched
      // twice (a split of the latest count would fetch an older partition once for each of
      // its sub-ranges); more splits are asked for with the parallelism option.
      p = earlier.firstKey();
    } else {
      p = parallelism == null ? n : (Integer) parallelism;
    }
    List<SplitPlan> out = new ArrayList<>();
    if (p <= n) {
      for (int i = 0; i < p; i++) {
        List<SplitPlan.PartitionRead> reads = new ArrayList<>();
        int first = (int) ((long) i * n / p);
        int stop = (int) ((long) (i + 1) * n / p);
        for (int j = first; j < stop; j++) {
          int[] full = keyGroupRange(j, m, n);
          reads.add(
              new SplitPlan.PartitionRead(j, full[0], full[1], true, List.copyOf(segs.get(j))));
        }
        if (!earlier.isEmpty() && first < stop) {
          reads.addAll(
              earlierReads(
                  earlier, m, keyGroupRange(first, m, n)[0], keyGroupRange(stop - 1, m, n)[1]));
        }
        out.add(new SplitPlan(i, List.copyOf(reads)));
      }
      return out;
    }
    Map<Integer, List<Integer>> owners = new HashMap<>();
    for (int i = 0; i < p; i++) {
      owners.computeIfAbsent((int) ((long) i * n / p), k -> new ArrayList<>()).add(i);
    }
    SplitPlan[] byIndex = new SplitPlan[p];
    for (int j = 0; j < n; j++) {
      int[] full = keyGroupRange(j, m, n);
      List<Integer> mine = owners.get(j);
      List<int[]> pieces = splitRange(full[0], full[1], mine.size());
      for (int k = 0; k < mine.size(); k++) {
        int[] g = pieces.get(k);
        boolean whole = g[0] == full[0] && g[1] == full[1];
        List<SplitPlan.PartitionRead> reads = new ArrayList<>();
        reads.add(new SplitPlan.PartitionRead(j, g[0], g[1], whole, List.copyOf(segs.get(j))));
        reads.addAll(earlierReads(earlier, m, g[0], g[1]));
        byIndex[mine.get(k)] = new SplitPlan(mine.get(k), List.copyOf(reads));
      }
    }
    return List.of(byIndex);
  }

  /**
   * Each partition's segments of {@code commits} (a shuffle of {@code numPartitions}), in commit
   * order; a segment is sorted when its run was written in the layout's {@code sortBy} order.
   */
  private static List<List<SplitPlan.Segment>> segmentsByPartition(
      List<CommitLog.Commit> commits, int numPartitions, List<String> sortBy) {
    List<List<SplitPlan.Segment>> out = new ArrayList<>();
    for (int j = 0; j < numPartitions; j++) {
      out.add(new ArrayList<>());
    }
    for (CommitLog.Commit c : commits) {
      boolean sorted = !sortBy.isEmpty() && sortBy.equals(c.sortBy);
      for (Map.Entry<Integer, long[]> e : c.partitions.entrySet()) {
        int p = e.getKey();
        if (p < 0 || p >= numPartitions) {
          throw ShuffleException.option(
              "commit of run "
                  + c.runId
                  + " names partition "
                  + p
                  + ", outside [0, "
                  + numPartitions
                  + ")");
        }
        long[] r = e.getValue();
        out.get(p)
            .add(
                new SplitPlan.Segment(
                    c.runId, r[0], r[1], c.tasks, c.window, r[2], sorted, c.layoutVersion));
      }
    }
    return out;
  }

  /**
   * The reads of runs written under an earlier partition count that hold key groups {@code
   * [start, end)}, as {@code earlier_reads}: per count (smallest first), each of its partitions
   * with segments whose key groups meet the range, keeping only those in both. Growing keeps
   * the key groups, so each partition's key groups of the latest count lie in one or two
   * partitions of an earlier count.
   */
  static List<SplitPlan.PartitionRead> earlierReads(
      Map<Integer, List<List<SplitPlan.Segment>>> earlier,
      int maxParallelism,
      int start,
      int end) {
    List<SplitPlan.PartitionRead> out = new ArrayList<>();
    for (Map.Entry<Integer, List<List<SplitPlan.Segment>>> e : earlier.entrySet()) {
      int count = e.getKey();
      List<List<SplitPlan.Segment>> byPartition = e.getValue();
      for (int q = 0; q < byPartition.size(); q++) {
        List<SplitPlan.Segment> seg = byPartition.get(q);
        if (seg.isEmpty()) {
          continue;
        }
        int[] full = keyGroupRange(q, maxParallelism, count);
        int lo = Math.max(full[0], start);
        int hi = Math.min(full[1], end);
        if (lo < hi) {
          boolean whole = lo == full[0] && hi == full[1];
          out.add(new SplitPlan.PartitionRead(q, lo, hi, whole, List.copyOf(seg)));
        }
      }
    }
    return out;
  }

  /** A string as Python's {@code repr} writes it (None for null). */
  static String repr(String s) {
    if (s == null) {
      return "None";
    }
    char quote = s.indexOf('\'') >= 0 && s.indexOf('"') < 0 ? '"' : '\'';
    StringBuilder b = new StringBuilder().append(quote);
    for (char ch : s.toCharArray()) {
      if (ch == '\\') {
        b.append("\\\\");
      } else if (ch == quote) {
        b.append('\\').append(ch);
      } else if (ch == '\n') {
        b.append("\\n");
      } else if (ch == '\t') {
        b.append("\\t");
      } else {
        b.append(ch);
      }
    }
    return b.append(quote).toString();
  }

  /** A list of strings as Python's {@code repr} writes it. */
  static String repr(List<String> items) {
    List<String> parts = new ArrayList<>();
    for (String s : items) {
      parts.add(repr(s));
    }
    return "[" + String.join(", ", parts) + "]";
  }
}
