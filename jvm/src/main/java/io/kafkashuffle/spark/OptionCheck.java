package io.kafkashuffle.spark;

import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeSet;

/**
 * The options one data source takes, as {@code orchestration/shuffle/core/optiondefs.py}
 * declares them ({@link OptionTables} is written from it): their names, the kind of read each
 * applies to, and what the source refuses and why. {@link #check} refuses what the source does
 * not take with the Python parser's messages, word for word, so both read paths refuse an
 * option the same way ({@code tests/vectors} holds both to it). {@code kafka.*} options are
 * Kafka client settings and are not checked here.
 */
final class OptionCheck {
  static final String BATCH = "batch";
  static final String STREAM = "stream";
  static final String KAFKA_PREFIX = "kafka.";

  /**
   * A declared option: the reads it applies to, whether a user sets it ({@code listed}), its
   * default (null: none) and, for an integer, its least value (null: none).
   */
  static final class Option {
    final String name;
    final boolean batch;
    final boolean stream;
    final boolean listed;
    final String defaultValue;
    final Long minimum;

    Option(
        String name,
        boolean batch,
        boolean stream,
        boolean listed,
        String defaultValue,
        Long minimum) {
      this.name = name;
      this.batch = batch;
      this.stream = stream;
      this.listed = listed;
      this.defaultValue = defaultValue;
      this.minimum = minimum;
    }
  }

  /** An option refused with a reason; {@code sparkKafka}: one of Spark's kafka source. */
  static final class Refused {
    final String name;
    final String reason;
    final boolean sparkKafka;

    Refused(String name, String reason, boolean sparkKafka) {
      this.name = name;
      this.reason = reason;
      this.sparkKafka = sparkKafka;
    }
  }

  /** An option that was renamed. */
  static final class Renamed {
    final String name;
    final String newName;
    final String reason;

    Renamed(String name, String newName, String reason) {
      this.name = name;
      this.newName = newName;
      this.reason = reason;
    }
  }

  final String source;
  private final List<Option> options;
  private final Map<String, Option> declared = new HashMap<>();
  private final Map<String, Refused> refused = new HashMap<>();
  private final Map<String, Renamed> renamed = new HashMap<>();

  OptionCheck(String source, Option[] options, Refused[] refused, Renamed[] renamed) {
    this.source = source;
    this.options = List.of(options);
    for (Option o : options) {
      declared.put(lower(o.name), o);
    }
    for (Refused r : refused) {
      this.refused.put(lower(r.name), r);
    }
    for (Renamed r : renamed) {
      this.renamed.put(lower(r.name), r);
    }
  }

  /** The declaration of {@code name}: the parsers read declared options only. */
  Option option(String name) {
    Option o = declared.get(lower(name));
    if (o == null) {
      throw new IllegalArgumentException(source + ": option '" + name + "' is not declared");
    }
    return o;
  }

  /** The declared default of a boolean option. */
  boolean flagDefault(String name) {
    return "true".equals(option(name).defaultValue);
  }

  /** The declared least value of an integer option (0 when none is declared). */
  long minimum(String name) {
    Long m = option(name).minimum;
    return m == null ? 0 : m;
  }

  private static String lower(String s) {
    return s.toLowerCase(Locale.ROOT);
  }

  /**
   * What is wrong with options {@code names} for a read in {@code mode} ({@link #BATCH},
   * {@link #STREAM}, or null when the kind of read is not known yet), one sentence each, in the
   * order of the names lower-cased.
   */
  List<String> problems(Collection<String> names, String mode) {
    TreeSet<String> sorted =
        new TreeSet<>(
            Comparator.comparing(OptionCheck::lower).thenComparing(Comparator.naturalOrder()));
    sorted.addAll(names);
    List<String> out = new ArrayList<>();
    for (String given : sorted) {
      String l = lower(given);
      if (l.startsWith(KAFKA_PREFIX)) {
        continue;
      }
      Option d = declared.get(l);
      if (d != null) {
        if (mode != null && !(mode.equals(BATCH) ? d.batch : d.stream)) {
          out.add(modeProblem(d, mode));
        }
      } else if (renamed.containsKey(l)) {
        Renamed r = renamed.get(l);
        out.add(
            "option "
                + ReadPlanner.repr(given)
                + " was renamed "
                + ReadPlanner.repr(r.newName)
                + " ("
                + r.reason
                + ")");
      } else if (refused.containsKey(l)) {
        Refused r = refused.get(l);
        out.add(
            "option "
                + ReadPlanner.repr(r.name)
                + (r.sparkKafka ? " of Spark's kafka source" : "")
                + " is not supported: "
                + r.reason);
      } else {
        out.add(unknownProblem(given));
      }
    }
    return out;
  }

  /** Throws the ShuffleOptionError naming every option of {@code names} this source refuses. */
  void check(Collection<String> names, String mode) {
    List<String> found = problems(names, mode);
    if (!found.isEmpty()) {
      throw ShuffleException.option(source + ": " + String.join("; ", found));
    }
  }

  private static String modeProblem(Option d, String mode) {
    String only = d.batch ? "batch reads" : "streaming reads";
    String read = mode.equals(STREAM) ? "a streaming read" : "a batch read";
    return "option " + ReadPlanner.repr(d.name) + " applies to " + only + " only, not to " + read;
  }

  private String unknownProblem(String given) {
    List<String> candidates = new ArrayList<>();
    List<String> listed = new ArrayList<>();
    for (Option o : options) {
      candidates.add(o.name);
      if (o.listed) {
        listed.add(o.name);
      }
    }
    String near = nearest(given, candidates);
    if (near != null) {
      return "unknown option "
          + ReadPlanner.repr(given)
          + ", did you mean "
          + ReadPlanner.repr(near)
          + "?";
    }
    if (given.contains(".")) {
      // librdkafka names have dots: a client setting given without its prefix.
      return "unknown option "
          + ReadPlanner.repr(given)
          + ", a Kafka client setting is given as '"
          + KAFKA_PREFIX
          + given
          + "'";
    }
    return "unknown option "
        + ReadPlanner.repr(given)
        + " (options: "
        + String.join(", ", listed)
        + ")";
  }

  /**
   * Edits (insert, delete, replace, swap two adjacent letters) between {@code a} and {@code b},
   * case-insensitively, as {@code distance} in {@code optiondefs.py}.
   */
  static int distance(String a, String b) {
    a = lower(a);
    b = lower(b);
    int[][] d = new int[a.length() + 1][b.length() + 1];
    for (int j = 0; j <= b.length(); j++) {
      d[0][j] = j;
    }
    for (int i = 1; i <= a.length(); i++) {
      d[i][0] = i;
      for (int j = 1; j <= b.length(); j++) {
        int cost = a.charAt(i - 1) == b.charAt(j - 1) ? 0 : 1;
        d[i][j] = Math.min(Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1), d[i - 1][j - 1] + cost);
        if (i > 1
            && j > 1
            && a.charAt(i - 1) == b.charAt(j - 2)
            && a.charAt(i - 2) == b.charAt(j - 1)) {
          d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
        }
      }
    }
    return d[a.length()][b.length()];
  }

  /**
   * The candidate closest to {@code given} within a third of its length in edits (at least
   * one), the first such on a tie; null if none is that close.
   */
  static String nearest(String given, List<String> candidates) {
    String best = null;
    int bestDistance = Integer.MAX_VALUE;
    for (String c : candidates) {
      int d = distance(given, c);
      if (d <= Math.max(1, c.length() / 3) && d < bestDistance) {
        best = c;
        bestDistance = d;
      }
    }
    return best;
  }
}
