package io.kafkashuffle.spark;

import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/**
 * The merged watermark of one partition over a run's producer subtasks, with the rules of
 * {@code orchestration/shuffle/core/watermarks.py}: the minimum of the subtasks' latest
 * watermarks once each has reported (ended ones no longer hold it back); a subtask's watermark
 * going back, or one from a subtask outside the run, is an error.
 */
final class WatermarkMerger {
  private final Set<Integer> expected;
  private final Map<Integer, Long> latest = new HashMap<>();
  private final Set<Integer> ended = new HashSet<>();
  private final String where;
  private Long current;

  WatermarkMerger(Set<Integer> subtasks, String where) {
    this.expected = Set.copyOf(subtasks);
    this.where = where;
  }

  void observe(int subtask, long eventTime) {
    checkKnown(subtask);
    Long previous = latest.get(subtask);
    if (previous != null && eventTime < previous) {
      throw new ShuffleException(
          ShuffleException.Kind.WATERMARK,
          "watermark of producer subtask "
              + subtask
              + " went back from "
              + previous
              + " to "
              + eventTime
              + " on "
              + where);
    }
    latest.put(subtask, eventTime);
    advance();
  }

  void end(int subtask) {
    checkKnown(subtask);
    ended.add(subtask);
    advance();
  }

  private void checkKnown(int subtask) {
    if (!expected.contains(subtask)) {
      throw new ShuffleException(
          ShuffleException.Kind.WATERMARK,
          "watermark from producer subtask "
              + subtask
              + ", which is not one of "
              + new TreeSet<>(expected)
              + " on "
              + where);
    }
  }

  private void advance() {
    Long merged = null;
    boolean anyLive = false;
    for (int s : expected) {
      if (ended.contains(s)) {
        continue;
      }
      anyLive = true;
      Long w = latest.get(s);
      if (w == null) {
        return;
      }
      merged = merged == null ? w : Math.min(merged, w);
    }
    if (!anyLive) {
      for (long w : latest.values()) {
        merged = merged == null ? w : Math.max(merged, w);
      }
    }
    if (merged != null && (current == null || merged > current)) {
      current = merged;
    }
  }
}
