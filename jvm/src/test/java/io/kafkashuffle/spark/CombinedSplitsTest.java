package io.kafkashuffle.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** How an aggregated read puts whole partitions together: one split per core, balanced. */
class CombinedSplitsTest {
  private static SplitPlan.PartitionRead read(int partition, long rows, boolean full) {
    SplitPlan.Segment g =
        new SplitPlan.Segment("r", 0, Math.max(0, rows - 1), new int[][] {{0, 0}}, "w", rows, false);
    return new SplitPlan.PartitionRead(partition, 0, full ? 8 : 4, full, List.of(g));
  }

  private static List<SplitPlan> onePerPartition(long... rows) {
    List<SplitPlan> out = new ArrayList<>();
    for (int p = 0; p < rows.length; p++) {
      out.add(new SplitPlan(p, List.of(read(p, rows[p], true))));
    }
    return out;
  }

  private static long rows(SplitPlan s) {
    long n = 0;
    for (SplitPlan.PartitionRead r : s.reads) {
      n += r.segments.get(0).rows;
    }
    return n;
  }

  @Test
  void wholePartitionsGoToTheSplitWithTheFewestRows() {
    List<SplitPlan> out = ShuffleScan.combined(onePerPartition(50, 10, 40, 30, 20, 10), 2);
    assertEquals(2, out.size());
    assertEquals(80, rows(out.get(0)));
    assertEquals(80, rows(out.get(1)));
    List<Integer> partitions = new ArrayList<>();
    for (SplitPlan s : out) {
      int last = -1;
      for (SplitPlan.PartitionRead r : s.reads) {
        assertTrue(r.partition > last, "a split's partitions in order");
        last = r.partition;
        partitions.add(r.partition);
      }
    }
    partitions.sort(null);
    assertEquals(List.of(0, 1, 2, 3, 4, 5), partitions);
  }

  @Test
  void asManySlotsAsSplitsLeavesThePlanAsItIs() {
    List<SplitPlan> plan = onePerPartition(5, 5, 5);
    assertSame(plan, ShuffleScan.combined(plan, 3));
    assertSame(plan, ShuffleScan.combined(plan, 8));
  }

  @Test
  void onlyReadsOfWholePartitionsEachOnceAreWhole() {
    assertTrue(ShuffleScan.wholePartitions(onePerPartition(1, 2, 3)));
    assertFalse(
        ShuffleScan.wholePartitions(
            List.of(new SplitPlan(0, List.of(read(0, 5, false))), new SplitPlan(1, List.of()))));
    assertFalse(
        ShuffleScan.wholePartitions(
            List.of(
                new SplitPlan(0, List.of(read(0, 5, true))),
                new SplitPlan(1, List.of(read(0, 5, true))))));
  }
}
