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
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A shuffle's commit log as read: the latest layout, the commits in log order, the
 * retention markers and the records it skipped. The same rules as {@code
 * ShuffleLog.from_records}, {@code ShuffleLog.visible} and {@code ShuffleLog.require_readable}
 * in {@code orchestration/shuffle/core/commitlog.py} (whose docstrings give the reasons); both
 * are checked against the vectors in {@code tests/vectors/read_plans.json}, and the layout's
 * versions (its change records) against {@code tests/vectors/schema_versions.json}.
 */
public final class CommitLog {
  static final String LAYOUT_KEY = "layout";
  static final String COMMIT_PREFIX = "commit/";
  static final String EXPIRED_PREFIX = "expired/";
  static final String CHANGE_PREFIX = "change/";
  // evolution.py's version_of_key: the version a change record's key names.
  private static final Pattern CHANGE_KEY =
      Pattern.compile("change/([1-9][0-9]{0,8})/[A-Za-z0-9_.-]+");

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
    final long layoutVersion; // the layout version the run was written under

    /** The commit a record of the commit log holds ({@code key} names it in errors). */
    static Commit parse(String value, String key) {
      try {
        return new Commit(Layout.JSON.readTree(value));
      } catch (IOException | RuntimeException e) {
        throw ShuffleException.format("commit record '" + key + "' is not a commit: " + e);
      }
    }

    private Commit(JsonNode d) {
      // The fields commitlog.py's Commit.from_json cannot do without.
      for (String f : new String[] {"run_id", "committed_at", "tasks", "partitions"}) {
        if (!d.has(f)) {
          throw new IllegalArgumentException("KeyError: '" + f + "'");
        }
      }
      for (String f : new String[] {"rows", "bytes", "frames"}) {
        if (!d.path(f).isNumber() && !d.path(f).isTextual()) {
          throw new IllegalArgumentException("field '" + f + "' is not a number");
        }
      }
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
      // Absent in every commit written before layouts had versions: version 1.
      JsonNode v = d.get("layout_version");
      layoutVersion = v == null ? 1 : LayoutVersion.integer(v);
    }
  }

  /** A readable change record: where it is in the log, and the version it holds. */
  private static final class Change {
    final long offset;
    final String key;
    final LayoutVersion version;

    Change(long offset, String key, LayoutVersion version) {
      this.offset = offset;
      this.key = key;
      this.version = version;
    }
  }

  /**
   * The layout record with the change records applied, and the change records that are no
   * version (reported among the bad records); null layout: the log has no readable one.
   */
  private static final class Versions {
    final Layout layout;
    final ShuffleException error; // the layout record could not be read
    final Map<String, BadRecord> bad;
    // The key of each version applied (the first record of its number in the log).
    final Map<Long, String> keys;

    Versions(
        Layout layout, ShuffleException error, Map<String, BadRecord> bad, Map<Long, String> keys) {
      this.layout = layout;
      this.error = error;
      this.bad = bad;
      this.keys = keys;
    }

    Versions(Layout layout, ShuffleException error, Map<String, BadRecord> bad) {
      this(layout, error, bad, Map.of());
    }
  }

  /** The version a {@code change/<n>/<id>} key names; null: not such a key. */
  static Integer versionOfKey(String key) {
    Matcher m = CHANGE_KEY.matcher(key);
    return m.matches() ? Integer.valueOf(m.group(1)) : null;
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

  /**
   * A record the log skipped: a key the engine does not write (or none), or a value that is
   * not a record of its kind. For a commit record, whether its window could be read from its
   * text, and that window (null: a run without one).
   */
  static final class BadRecord {
    final long offset;
    final String key;
    final String reason;
    final boolean windowKnown;
    final String window;

    BadRecord(long offset, String key, String reason, boolean windowKnown, String window) {
      this.offset = offset;
      this.key = key;
      this.reason = reason;
      this.windowKnown = windowKnown;
      this.window = window;
    }

    boolean isCommit() {
      return key != null && key.startsWith(COMMIT_PREFIX);
    }

    String runId() {
      return isCommit() ? key.substring(COMMIT_PREFIX.length()) : null;
    }

    /** The record in words, as {@code BadRecord.describe} in commitlog.py. */
    String describe(String topic) {
      return "commit log '"
          + topic
          + ShuffleCatalog.COMMITS_SUFFIX
          + "' partition 0 offset "
          + offset
          + ": record "
          + (key == null ? "without a key" : ReadPlanner.repr(key))
          + " skipped: "
          + reason;
    }
  }

  // Where a commit record's window is said (commitlog.py's _WINDOW_FIELD, _WINDOW_VALUE).
  private static final Pattern WINDOW_FIELD = Pattern.compile("\"window\"\\s*:");
  private static final Pattern WINDOW_VALUE =
      Pattern.compile("\"window\"\\s*:\\s*(?:\"((?:[^\"\\\\]|\\\\.)*)\"|(null)\\b)");

  /**
   * The window a commit record that cannot be parsed names, read from its text, as {@code
   * recover_window} in commitlog.py: {@code {window}} (null inside: a run without one) when
   * the text has the field exactly once with a whole value; null when it cannot be told.
   */
  static String[] recoverWindow(String value) {
    if (value == null) {
      return null;
    }
    Matcher fields = WINDOW_FIELD.matcher(value);
    int count = 0;
    while (fields.find()) {
      count++;
    }
    if (count != 1) {
      return null;
    }
    Matcher m = WINDOW_VALUE.matcher(value);
    if (!m.find()) {
      return null;
    }
    if (m.group(2) != null) {
      return new String[] {null};
    }
    try {
      JsonNode n = Layout.JSON.readTree("\"" + m.group(1) + "\"");
      return n != null && n.isTextual() ? new String[] {n.asText()} : null;
    } catch (IOException | RuntimeException e) {
      return null;
    }
  }

  final String topic;
  // The data topic's partition count when the log was read (-1: not looked up).
  int dataPartitions = -1;
  private String layout;
  // Insertion order is log order: a run committed again is removed and added at the end.
  private final LinkedHashMap<String, Commit> commits = new LinkedHashMap<>();
  private final LinkedHashMap<String, Expired> expired = new LinkedHashMap<>();
  // The record offset of each commit, by run.
  private final Map<String, Long> commitOffsets = new java.util.HashMap<>();
  // The records skipped, the latest of each key (a record without a key: by its offset).
  private final Map<Object, BadRecord> bad = new LinkedHashMap<>();
  private String layoutError;
  private long applied;
  // The readable change records, by key: a later record of a key replaces the earlier.
  private final LinkedHashMap<String, Change> changes = new LinkedHashMap<>();
  private Versions versions; // computed when first asked for after the last record applied

  CommitLog(String topic) {
    this.topic = topic;
  }

  /** A copy that later {@link #apply} calls on this one do not change. */
  CommitLog copy() {
    CommitLog c = new CommitLog(topic);
    c.layout = layout;
    c.commits.putAll(commits);
    c.expired.putAll(expired);
    c.commitOffsets.putAll(commitOffsets);
    c.bad.putAll(bad);
    c.layoutError = layoutError;
    c.applied = applied;
    c.changes.putAll(changes);
    return c;
  }

  private String where() {
    return "commit log '" + topic + ShuffleCatalog.COMMITS_SUFFIX + "'";
  }

  /** Applies one record, in offset order, its index among those applied as its offset. */
  void apply(String key, String value) {
    apply(key, value, applied);
  }

  /**
   * Applies the record at {@code offset}, in offset order; a null value is a delete. A record
   * without a key, with a key the engine does not write, or whose value is not a record of
   * its kind is skipped and kept among {@link #badRecords} (a later record of the key replaces
   * it); a layout record that cannot be read makes {@link #layoutJson} refuse.
   */
  void apply(String key, String value, long offset) {
    applied++;
    versions = null;
    if (key == null) {
      bad.put(offset, new BadRecord(offset, null, "a record without a key", false, null));
      return;
    }
    bad.remove(key);
    if (key.equals(LAYOUT_KEY)) {
      if (value != null) {
        try {
          Layout.JSON.readTree(value).get("topic").asText();
          layout = value;
          layoutError = null;
        } catch (IOException | RuntimeException e) {
          layoutError =
              where()
                  + ": record 'layout' at partition 0 offset "
                  + offset
                  + " is not a readable layout record ("
                  + e
                  + ")";
        }
      }
    } else if (key.startsWith(COMMIT_PREFIX)) {
      String run = key.substring(COMMIT_PREFIX.length());
      commits.remove(run);
      commitOffsets.remove(run);
      if (value != null) {
        Commit c;
        try {
          c = new Commit(Layout.JSON.readTree(value));
        } catch (IOException | RuntimeException e) {
          String[] w = recoverWindow(value);
          bad.put(
              key,
              new BadRecord(
                  offset,
                  key,
                  "not a readable commit record (" + e + ")",
                  w != null,
                  w == null ? null : w[0]));
          return;
        }
        commits.put(run, c);
        commitOffsets.put(run, offset);
      }
    } else if (key.startsWith(CHANGE_PREFIX) && versionOfKey(key) != null) {
      changes.remove(key);
      if (value != null) {
        try {
          changes.put(key, new Change(offset, key, LayoutVersion.parse(value)));
        } catch (RuntimeException e) {
          bad.put(
              key,
              new BadRecord(
                  offset,
                  key,
                  "not a readable layoutversion record (" + e.getMessage() + ")",
                  false,
                  null));
        }
      }
    } else if (key.startsWith(EXPIRED_PREFIX)) {
      String run = key.substring(EXPIRED_PREFIX.length());
      expired.remove(run);
      if (value != null) {
        try {
          expired.put(run, new Expired(Layout.JSON.readTree(value)));
        } catch (IOException | RuntimeException e) {
          bad.put(
              key,
              new BadRecord(offset, key, "not a readable expired record (" + e + ")", false, null));
        }
      }
    } else if (value != null) {
      bad.put(key, new BadRecord(offset, key, "a key the engine does not write", false, null));
    }
  }

  /** The records skipped, in log order. */
  List<BadRecord> badRecords() {
    List<BadRecord> out = new ArrayList<>(bad.values());
    out.addAll(versions().bad.values());
    out.sort((a, b) -> Long.compare(a.offset, b.offset));
    return out;
  }

  /**
   * Refuses a read that a skipped commit record may change, with the rules and messages of
   * {@code ShuffleLog.require_readable} in commitlog.py: never is an older run of a window
   * shown in place of one whose commit cannot be read. Null selects everything.
   */
  void requireReadable(Set<String> windows, Set<String> runs) {
    List<BadRecord> commitsBad = new ArrayList<>();
    for (BadRecord b : badRecords()) {
      if (b.isCommit()) {
        commitsBad.add(b);
      }
    }
    if (commitsBad.isEmpty()) {
      return;
    }
    String ctopic = ReadPlanner.repr(topic + ShuffleCatalog.COMMITS_SUFFIX);
    String shuffle = "shuffle " + ReadPlanner.repr(topic);
    if (runs != null) {
      for (BadRecord b : commitsBad) {
        if (runs.contains(b.runId())) {
          throw ShuffleException.format(
              shuffle
                  + ": run "
                  + ReadPlanner.repr(b.runId())
                  + " cannot be read: its commit record at partition 0 offset "
                  + b.offset
                  + " of "
                  + ctopic
                  + " cannot be read");
        }
      }
      return;
    }
    Map<String, Long> latest = new java.util.HashMap<>();
    for (Map.Entry<String, Commit> e : latestByWindow().entrySet()) {
      latest.put(e.getKey(), commitOffsets.getOrDefault(e.getValue().runId, -1L));
    }
    TreeSet<String> wanted = windows == null ? null : new TreeSet<>(windows);
    for (BadRecord b : commitsBad) {
      String record =
          "record " + ReadPlanner.repr(b.key) + " at partition 0 offset " + b.offset + " of " + ctopic;
      if (b.windowKnown && b.window != null) {
        if ((wanted == null || wanted.contains(b.window))
            && latest.getOrDefault(b.window, -1L) < b.offset) {
          throw ShuffleException.format(
              shuffle
                  + ": window "
                  + ReadPlanner.repr(b.window)
                  + " cannot be read: "
                  + record
                  + " is a commit of it that cannot be read, and no later commit of the window"
                  + " replaces it");
        }
        continue;
      }
      if (wanted == null) {
        String what = b.windowKnown ? "a run without a window" : "a window it does not tell";
        throw ShuffleException.format(
            shuffle
                + ": a read of every run is refused: "
                + record
                + " is a commit (of "
                + what
                + ") that cannot be read; select windows to read the others");
      }
      if (b.windowKnown) {
        continue;
      }
      for (String w : wanted) {
        if (latest.getOrDefault(w, -1L) < b.offset) {
          throw ShuffleException.format(
              shuffle
                  + ": window "
                  + ReadPlanner.repr(w)
                  + " cannot be read: "
                  + record
                  + " is a commit that cannot be read nor its window told, and no commit of the"
                  + " window comes after it");
        }
      }
    }
  }

  /** The latest layout record's JSON, or null; refuses one that cannot be read. */
  String layoutJson() {
    if (layoutError != null) {
      throw ShuffleException.format(layoutError);
    }
    return layout;
  }

  /**
   * The layout in force: the layout record with its change records applied (its latest
   * version's schema and partitions, every version listed); null when the log has no layout
   * record. Refuses a layout record that cannot be read.
   */
  Layout layout() {
    if (layoutJson() == null) {
      return null;
    }
    Versions v = versions();
    if (v.error != null) {
      throw v.error;
    }
    return v.layout;
  }

  private String layoutWhere() {
    return "shuffle " + ReadPlanner.repr(topic) + " layout";
  }

  /**
   * The change records applied to the layout record, as {@code ShuffleLog._versions_applied}
   * in commitlog.py applies them: of the records of one version, the first in the log is the
   * version (a later one lost a race for it and its writer was refused); versions follow one
   * another from 2 up, and a record past a missing version is reported, not applied.
   */
  private Versions versions() {
    if (versions != null) {
      return versions;
    }
    Map<String, BadRecord> skipped = new LinkedHashMap<>();
    if (layout == null || layoutError != null) {
      return versions = new Versions(null, null, skipped);
    }
    Layout record;
    try {
      record = Layout.parse(layout, layoutWhere());
    } catch (ShuffleException e) {
      return versions = new Versions(null, e, skipped);
    }
    TreeMap<Long, Change> first = new TreeMap<>();
    for (Change c : changes.values()) {
      Change had = first.get(c.version.version);
      if (had == null || c.offset < had.offset) {
        first.put(c.version.version, c);
      }
    }
    List<LayoutVersion> later = new ArrayList<>();
    Map<Long, String> keys = new LinkedHashMap<>();
    long n = 2;
    while (first.containsKey(n)) {
      Change c = first.get(n);
      if (c.version.version != versionOfKey(c.key)) {
        skipped.put(
            c.key,
            new BadRecord(c.offset, c.key, "its key names another version than " + n, false, null));
        break;
      }
      later.add(c.version);
      keys.put(n, c.key);
      n++;
    }
    for (Change c : first.values()) {
      if (c.version.version >= n) {
        skipped.put(
            c.key,
            new BadRecord(
                c.offset,
                c.key,
                "layout version " + c.version.version + " follows a missing version " + n,
                false,
                null));
      }
    }
    try {
      return versions = new Versions(record.evolved(later, layoutWhere()), null, skipped, keys);
    } catch (ShuffleException e) {
      return versions = new Versions(null, e, skipped);
    }
  }

  /**
   * The key of the change record that is layout version {@code version} (the first record of
   * its number in the log), as {@code ShuffleLog.version_keys}; null: no such version.
   */
  String versionKey(long version) {
    return versions().keys.get(version);
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
