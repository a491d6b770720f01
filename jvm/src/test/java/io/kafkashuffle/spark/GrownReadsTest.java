package io.kafkashuffle.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.expressions.FieldReference;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.partitioning.KeyGroupedPartitioning;
import org.apache.spark.sql.connector.read.partitioning.UnknownPartitioning;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * Reads of a shuffle whose partitions grew: runs written under 4 partitions read beside runs
 * written under 8 (or 6), each split keeping its own key groups of the older runs, read from
 * the partitions they were written to; by default as many splits as the smallest count, each
 * of whole partitions of both counts; the read stays keyed, its sorted runs merge, and an
 * aggregation is left to Spark.
 */
class GrownReadsTest {
  private static final String TOPIC = "grown";
  private static final ArrowType INT64 = new ArrowType.Int(64, true);
  private static final Schema SCHEMA =
      new Schema(List.of(Field.nullable("k", INT64), Field.nullable("n", INT64)));
  private static final UUID OLD = UUID.fromString("00000000-0000-0000-0000-00000000000a");
  private static final UUID NEW = UUID.fromString("00000000-0000-0000-0000-00000000000b");

  private final BufferAllocator allocator = new RootAllocator();
  private final List<AutoCloseable> live = new ArrayList<>();
  private long offset;

  @AfterEach
  void noLeaks() throws Exception {
    Fixtures.release(live, allocator);
  }

  /** A commit of {@code run} under {@code version}: partition p at offsets from {@code base}. */
  private static String commit(
      UUID run, long version, int partitions, long base, long rows, boolean sorted) {
    ObjectNode d = Layout.JSON.createObjectNode();
    d.put("run_id", run.toString());
    d.put("window", version == 1 ? "2013-01-01" : "2013-01-02");
    d.put("committed_at", "2013-01-02T00:00:00+00:00");
    d.putArray("tasks").addArray().add(0).add(0);
    ObjectNode ps = d.putObject("partitions");
    for (int p = 0; p < partitions; p++) {
      ps.putArray(String.valueOf(p)).add(base + 2L * p).add(base + 2L * p + 1).add(rows).add(1);
    }
    d.put("rows", rows * partitions);
    d.put("bytes", 100);
    d.put("frames", partitions);
    if (sorted) {
      d.putArray("sort_by").add("n");
    }
    if (version != 1) {
      d.put("layout_version", version);
    }
    return d.toString();
  }

  /**
   * A shuffle of 16 key groups created with 4 partitions (a run "old" in each), grown to {@code
   * grownTo} (a run "new" in each); {@code sorted}: with {@code sort_by} n, both runs sorted.
   */
  private static CommitLog log(int grownTo, boolean sorted) throws Exception {
    ObjectNode layout =
        (ObjectNode) Layout.JSON.readTree(Fixtures.layoutJson(TOPIC, SCHEMA, List.of("k"), 4, 16));
    if (sorted) {
      layout.putArray("sort_by").add("n");
    }
    CommitLog log = new CommitLog(TOPIC);
    log.apply("layout", layout.toString(), 0);
    log.apply("commit/" + OLD, commit(OLD, 1, 4, 0, 100, sorted), 1);
    log.apply(
        "change/2/c2",
        SchemaResolutionTest.change(2, SCHEMA, new long[] {1, 2}, grownTo),
        2);
    log.apply("commit/" + NEW, commit(NEW, 2, grownTo, 10, 50, sorted), 3);
    return log;
  }

  private static List<SplitPlan> plan(CommitLog log, Object parallelism, List<String> runs) {
    return ReadPlanner.plan(log, new ReadPlanner.Selection(null, runs, null, null, parallelism));
  }

  private static ReadSpec spec(Layout layout, String... columns) {
    return new ReadSpec(TOPIC, Map.of(), layout, columns, null, null);
  }

  private static ShuffleScan scan(Layout layout, List<SplitPlan> splits) {
    return new ShuffleScan(
        spec(layout, "k", "n"),
        () -> splits,
        ShuffleTable.schemaOf(layout, false),
        Map.of(),
        List.of());
  }

  @Test
  void byDefaultEachSplitHoldsWholePartitionsOfBothCounts() throws Exception {
    CommitLog log = log(8, false);
    Layout layout = log.layout();
    List<SplitPlan> splits = plan(log, null, null);
    assertEquals(4, splits.size());
    Set<String> fetched = new HashSet<>();
    for (int i = 0; i < 4; i++) {
      List<SplitPlan.PartitionRead> reads = splits.get(i).reads;
      assertEquals(3, reads.size());
      // Partitions 2i and 2i + 1 of 8, and partition i of 4: key groups [4i, 4i + 4) of each.
      for (int k = 0; k < 3; k++) {
        SplitPlan.PartitionRead r = reads.get(k);
        assertTrue(r.full);
        int count = ShuffleScan.partitionCount(r, layout);
        assertEquals(k < 2 ? 8 : 4, count);
        assertEquals(k < 2 ? 2 * i + k : i, r.partition);
        assertEquals(k < 2 ? 4 * i + 2 * k : 4 * i, r.keyGroupStart);
        assertEquals(k < 2 ? 4 * i + 2 * k + 2 : 4 * i + 4, r.keyGroupEnd);
        // No Kafka partition of either count is fetched by two splits.
        assertTrue(fetched.add(count + "/" + r.partition));
      }
    }
    assertTrue(ShuffleScan.keyedSplits(splits, layout));
    // The older run alone reads the same way.
    List<SplitPlan> older = plan(log, null, List.of(OLD.toString()));
    assertEquals(4, older.size());
    assertTrue(ShuffleScan.keyedSplits(older, layout));
  }

  @Test
  void eachSplitReadsItsKeyGroupsOfTheOlderRunsFromTheirPartitions() throws Exception {
    CommitLog log = log(8, false);
    Layout layout = log.layout();
    List<SplitPlan> splits = plan(log, 8, null);
    assertEquals(8, splits.size());
    for (int i = 0; i < 8; i++) {
      SplitPlan s = splits.get(i);
      assertEquals(2, s.reads.size());
      SplitPlan.PartitionRead now = s.reads.get(0);
      SplitPlan.PartitionRead before = s.reads.get(1);
      assertEquals(i, now.partition);
      assertTrue(now.full);
      assertEquals(NEW.toString(), now.segments.get(0).runId);
      // Key groups [2i, 2i + 2) were in partition i / 2 of 4.
      assertEquals(i / 2, before.partition);
      assertEquals(2 * i, before.keyGroupStart);
      assertEquals(2 * i + 2, before.keyGroupEnd);
      assertFalse(before.full);
      assertEquals(OLD.toString(), before.segments.get(0).runId);
      assertEquals(4, ShuffleScan.partitionCount(before, layout));
      assertEquals(8, ShuffleScan.partitionCount(now, layout));
    }
    assertTrue(ShuffleScan.keyedSplits(splits, layout));
  }

  @Test
  void aGrownReadIsReportedKeyedByItsSplits() throws Exception {
    CommitLog log = log(8, false);
    Layout layout = log.layout();
    // Split i holds key groups [4i, 4i + 4): those of partition i of a shuffle of 4.
    ShuffleScan scan = scan(layout, plan(log, null, null));
    KeyGroupedPartitioning p =
        assertInstanceOf(KeyGroupedPartitioning.class, scan.outputPartitioning());
    assertEquals(4, p.numPartitions());
    assertEquals(PartitionFunction.name(16, 4) + "(k)", p.keys()[0].toString());
    InputPartition[] parts = scan.planInputPartitions();
    assertEquals(4, parts.length);
    for (int i = 0; i < parts.length; i++) {
      ShuffleInputPartition.Keyed k = assertInstanceOf(ShuffleInputPartition.Keyed.class, parts[i]);
      assertEquals(i, k.partitionKey().getInt(0));
    }
    assertEquals(4 * 100 + 8 * 50, scan.estimateStatistics().numRows().getAsLong());
    assertTrue(scan.description().contains("splits=4 keyed"), scan.description());
  }

  @Test
  void aGrownReadOfOneSplitPerPartitionIsReportedKeyedByTheLatestPartitions() throws Exception {
    CommitLog log = log(8, false);
    Layout layout = log.layout();
    ShuffleScan scan = scan(layout, plan(log, 8, null));
    KeyGroupedPartitioning p =
        assertInstanceOf(KeyGroupedPartitioning.class, scan.outputPartitioning());
    assertEquals(8, p.numPartitions());
    assertEquals(PartitionFunction.name(16, 8) + "(k)", p.keys()[0].toString());
    InputPartition[] parts = scan.planInputPartitions();
    assertEquals(8, parts.length);
    for (int i = 0; i < parts.length; i++) {
      ShuffleInputPartition.Keyed k = assertInstanceOf(ShuffleInputPartition.Keyed.class, parts[i]);
      assertEquals(i, k.partitionKey().getInt(0));
    }
    // Rows from the commit records: a sub-range is its share of its own partition's key groups.
    assertEquals(4 * 100 + 8 * 50, scan.estimateStatistics().numRows().getAsLong());
  }

  @Test
  void partitionCountsThatDoNotNestStayKeyedByDefault() throws Exception {
    CommitLog log = log(6, false);
    Layout layout = log.layout();
    List<SplitPlan> splits = plan(log, null, null);
    // 4 splits of partitions [0, 1), [1, 3), [3, 4), [4, 6) of 6: key groups [0, 3), [3, 8),
    // [8, 11), [11, 16), not those of a shuffle of 4 partitions.
    assertEquals(4, splits.size());
    List<SplitPlan.PartitionRead> one = splits.get(1).reads;
    assertEquals(4, one.size());
    assertEquals(
        List.of(1, 2, 0, 1),
        List.of(one.get(0).partition, one.get(1).partition, one.get(2).partition,
            one.get(3).partition));
    assertEquals(3, one.get(2).keyGroupStart);
    assertEquals(4, one.get(2).keyGroupEnd);
    assertFalse(one.get(2).full);
    assertTrue(one.get(3).full);
    assertTrue(ShuffleScan.keyedSplits(splits, layout));
    ShuffleScan scan = scan(layout, splits);
    KeyGroupedPartitioning p =
        assertInstanceOf(KeyGroupedPartitioning.class, scan.outputPartitioning());
    assertEquals(4, p.numPartitions());
    assertEquals(PartitionFunction.name(16, 6) + "_in_4(k)", p.keys()[0].toString());
    // Every key group's value is the split holding it.
    for (int i = 0; i < splits.size(); i++) {
      for (SplitPlan.PartitionRead r : splits.get(i).reads) {
        for (int g = r.keyGroupStart; g < r.keyGroupEnd; g++) {
          assertEquals(i, PartitionFunction.valueOf(g, 16, 6, 4), "key group " + g);
        }
      }
    }
    assertEquals(4 * 100 + 6 * 50, scan.estimateStatistics().numRows().getAsLong());
  }

  @Test
  void partitionCountsThatDoNotNestStayKeyed() throws Exception {
    CommitLog log = log(6, false);
    Layout layout = log.layout();
    List<SplitPlan> splits = plan(log, 6, null);
    assertEquals(6, splits.size());
    // Partition 1 of 6 holds key groups [3, 6): 3 of partition 0 of 4, 4 and 5 of partition 1.
    List<SplitPlan.PartitionRead> reads = splits.get(1).reads;
    assertEquals(3, reads.size());
    assertEquals(
        List.of(1, 0, 1),
        List.of(reads.get(0).partition, reads.get(1).partition, reads.get(2).partition));
    assertEquals(3, reads.get(1).keyGroupStart);
    assertEquals(4, reads.get(1).keyGroupEnd);
    assertEquals(4, reads.get(2).keyGroupStart);
    assertEquals(6, reads.get(2).keyGroupEnd);
    assertTrue(ShuffleScan.keyedSplits(splits, layout));
    assertInstanceOf(KeyGroupedPartitioning.class, scan(layout, splits).outputPartitioning());
    assertEquals(
        4 * 100 + 6 * 50, scan(layout, splits).estimateStatistics().numRows().getAsLong());
  }

  @Test
  void otherParallelismsAreNotKeyed() throws Exception {
    CommitLog log = log(8, false);
    Layout layout = log.layout();
    // Whole partitions in each split (2, 3), but not the default: not keyed, as a read of
    // the latest count alone with fewer splits than partitions is not.
    for (Object p : new Object[] {2, 3, 16}) {
      List<SplitPlan> splits = plan(log, p, null);
      assertFalse(ShuffleScan.keyedSplits(splits, layout));
      assertInstanceOf(UnknownPartitioning.class, scan(layout, splits).outputPartitioning());
    }
    List<SplitPlan> latest = plan(log, 4, List.of(NEW.toString()));
    assertFalse(ShuffleScan.keyedSplits(latest, layout));
  }

  @Test
  void aSplitHoldingKeyGroupsOfAnotherSplitIsNotKeyed() throws Exception {
    CommitLog log = log(8, false);
    Layout layout = log.layout();
    List<SplitPlan> splits = new ArrayList<>(plan(log, 8, null));
    SplitPlan.PartitionRead now = splits.get(0).reads.get(0);
    SplitPlan.PartitionRead before = splits.get(0).reads.get(1);
    // All of old partition 0 (key groups [0, 4)) in split 0, which holds [0, 2) now.
    splits.set(
        0,
        new SplitPlan(
            0,
            List.of(
                now,
                new SplitPlan.PartitionRead(
                    before.partition, 0, 4, true, before.segments))));
    assertFalse(ShuffleScan.keyedSplits(splits, layout));
    // A read of an earlier count claiming to be whole without being its partition's range.
    splits.set(
        0,
        new SplitPlan(
            0,
            List.of(
                now,
                new SplitPlan.PartitionRead(
                    before.partition, 0, 2, true, before.segments))));
    assertFalse(ShuffleScan.keyedSplits(splits, layout));
    // Of the default's 4 splits: one whose partitions of 8 are not its own range, and one
    // holding key groups of another split of an older partition.
    List<SplitPlan> four = new ArrayList<>(plan(log, null, null));
    SplitPlan zero = four.get(0);
    SplitPlan one = four.get(1);
    four.set(0, new SplitPlan(0, List.of(zero.reads.get(0), one.reads.get(0), zero.reads.get(2))));
    four.set(1, new SplitPlan(1, List.of(zero.reads.get(1), one.reads.get(1), one.reads.get(2))));
    assertFalse(ShuffleScan.keyedSplits(four, layout));
    four = new ArrayList<>(plan(log, null, null));
    SplitPlan.PartitionRead old1 = four.get(1).reads.get(2);
    four.set(
        0,
        new SplitPlan(
            0,
            List.of(
                zero.reads.get(0),
                zero.reads.get(1),
                zero.reads.get(2),
                new SplitPlan.PartitionRead(old1.partition, 4, 6, false, old1.segments))));
    assertFalse(ShuffleScan.keyedSplits(four, layout));
  }

  @Test
  void aggregationIsLeftToSparkWhileOlderRunsAreRead() throws Exception {
    CommitLog log = log(8, false);
    Layout layout = log.layout();
    assertFalse(ShuffleScan.latestPartitionCount(plan(log, null, null), layout));
    // Whole partitions, each read once, but of 4 partitions: a key's rows of a later run would
    // be in another partition, so the check is by partition count, not only by wholeness.
    List<SplitPlan> older = new ArrayList<>();
    for (SplitPlan.PartitionRead r : plan(log, 4, List.of(OLD.toString())).get(0).reads) {
      if (!r.segments.isEmpty()) {
        older.add(new SplitPlan(older.size(), List.of(r)));
      }
    }
    assertEquals(1, older.size());
    assertTrue(ShuffleScan.wholePartitions(older));
    assertFalse(ShuffleScan.latestPartitionCount(older, layout));
    assertTrue(ShuffleScan.latestPartitionCount(plan(log, null, List.of(NEW.toString())), layout));
    Aggregation count =
        new Aggregation(
            new AggregateFunc[] {new CountStar()},
            new org.apache.spark.sql.connector.expressions.Expression[] {
              FieldReference.column("k")
            });
    ShuffleTable table = new ShuffleTable(layout, Map.of(), false, log);
    SupportsPushDownAggregates both =
        (SupportsPushDownAggregates)
            table.newScanBuilder(new CaseInsensitiveStringMap(Map.of()));
    assertFalse(both.supportCompletePushDown(count));
    assertFalse(both.pushAggregation(count));
    Map<String, String> options = new HashMap<>();
    options.put("runs", "[\"" + NEW + "\"]");
    SupportsPushDownAggregates latest =
        (SupportsPushDownAggregates) table.newScanBuilder(new CaseInsensitiveStringMap(options));
    assertTrue(latest.supportCompletePushDown(count));
  }

  @Test
  void aPartitionReadTwiceInASplitIsNotPrefetched() throws Exception {
    CommitLog log = log(8, false);
    // Split 0 of 8 reads partition 0 of 8 and partition 0 of 4; split 0 of 3 reads partitions
    // 0 and 1 of 8 and partition 0 of 4.
    assertTrue(PartitionFetch.firstIntervals(plan(log, 8, null).get(0).reads).isEmpty());
    Map<Integer, long[]> first = PartitionFetch.firstIntervals(plan(log, 3, null).get(0).reads);
    assertEquals(List.of(1), new ArrayList<>(first.keySet()));
    assertEquals(12, first.get(1)[0]);
    assertEquals(13, first.get(1)[1]);
  }

  /** A DATA frame of {@code run}: rows (k, n) with key groups {@code groups}. */
  private ConsumerRecord<byte[], ByteBuffer> data(UUID run, int partition, long[] n, int[] groups)
      throws Exception {
    try (BufferAllocator a = new RootAllocator()) {
      List<FieldVector> vs = new ArrayList<>();
      BigIntVector k = new BigIntVector("k", a);
      BigIntVector nv = new BigIntVector("n", a);
      IntVector kg = new IntVector(Frames.KEY_GROUP_COLUMN, a);
      for (int i = 0; i < n.length; i++) {
        k.setSafe(i, 1000L + groups[i]);
        nv.setSafe(i, n[i]);
        kg.setSafe(i, groups[i]);
      }
      vs.add(k);
      vs.add(nv);
      vs.add(kg);
      try (VectorSchemaRoot root = new VectorSchemaRoot(vs)) {
        root.setRowCount(n.length);
        return record(
            partition, Fixtures.frame(2, Frames.DATA, run, 0, 0, Fixtures.arrowStream(root)));
      }
    }
  }

  private ConsumerRecord<byte[], ByteBuffer> end(UUID run, int partition, long rows, long frames) {
    return record(
        partition, Fixtures.frame(2, Frames.END, run, 0, 0, Fixtures.endPayload(rows, frames)));
  }

  private ConsumerRecord<byte[], ByteBuffer> record(int partition, byte[] value) {
    return new ConsumerRecord<>(TOPIC, partition, offset++, null, ByteBuffer.wrap(value));
  }

  private static List<Long> longs(ColumnarBatch b, int ordinal) {
    List<Long> out = new ArrayList<>();
    for (int i = 0; i < b.numRows(); i++) {
      out.add(b.column(ordinal).getLong(i));
    }
    return out;
  }

  @Test
  void aSplitReadsItsKeyGroupsOfAnOlderPartitionAndAllOfItsOwn() throws Exception {
    CommitLog log = log(8, false);
    Layout layout = log.layout();
    SplitPlan three = plan(log, 8, null).get(3);
    ReadSpec spec = spec(layout, "k", "n", "_key_group", "_partition", "_run_id");
    // Partition 3 of 8: every row is split 3's.
    PartitionFrames now =
        new PartitionFrames(spec, three.reads.get(0), false, allocator, live);
    ColumnarBatch b = now.handle(data(NEW, 3, new long[] {1, 2}, new int[] {6, 7}));
    assertEquals(List.of(1L, 2L), longs(b, 1));
    assertEquals(3, b.column(3).getInt(0));
    assertNull(now.handle(end(NEW, 3, 2, 1)));
    now.finish();
    // Partition 1 of 4 holds key groups [4, 8); split 3 keeps 6 and 7.
    PartitionFrames before =
        new PartitionFrames(spec, three.reads.get(1), false, allocator, live);
    ColumnarBatch o =
        before.handle(data(OLD, 1, new long[] {10, 11, 12, 13, 14}, new int[] {4, 6, 5, 7, 6}));
    assertEquals(List.of(11L, 13L, 14L), longs(o, 1));
    assertEquals(List.of(1006L, 1007L, 1006L), longs(o, 0));
    assertEquals(6, o.column(2).getInt(0));
    assertEquals(7, o.column(2).getInt(1));
    assertEquals(1, o.column(3).getInt(0));
    assertEquals(OLD.toString(), o.column(4).getUTF8String(0).toString());
    // A frame of none of the split's key groups gives nothing; the END check counts every row.
    assertNull(before.handle(data(OLD, 1, new long[] {15}, new int[] {5})));
    assertNull(before.handle(end(OLD, 1, 6, 2)));
    before.finish();
  }

  /** Batches handed over as a reader of one run hands them over. */
  private static final class Batches implements PartitionReader<ColumnarBatch> {
    private final List<ColumnarBatch> batches;
    private int at = -1;

    Batches(List<ColumnarBatch> batches) {
      this.batches = batches;
    }

    @Override
    public boolean next() {
      return ++at < batches.size();
    }

    @Override
    public ColumnarBatch get() {
      return batches.get(at);
    }

    @Override
    public void close() {}
  }

  @Test
  void sortedRunsOfBothCountsMergeIntoOneOrder() throws Exception {
    CommitLog log = log(8, true);
    Layout layout = log.layout();
    // By default each split merges three sorted sequences: two partitions of 8 and one of 4.
    ShuffleScan byDefault = scan(layout, plan(log, null, null));
    assertEquals(1, byDefault.outputOrdering().length);
    assertEquals(3, ShuffleScan.runsWithRows(plan(log, null, null)));
    List<SplitPlan> splits = plan(log, 8, null);
    assertTrue(splits.get(5).reads.get(1).segments.get(0).sorted);
    ShuffleScan scan = scan(layout, splits);
    assertEquals(1, scan.outputOrdering().length);
    assertEquals(2, ShuffleScan.runsWithRows(splits));
    scan.createReaderFactory();
    assertTrue(scan.description().contains("merged"), scan.description());
    // Split 5: key groups [10, 12), all of partition 5 of 8 and part of partition 2 of 4.
    SplitPlan five = splits.get(5);
    ReadSpec spec = spec(layout, "k", "n");
    PartitionFrames now = new PartitionFrames(spec, five.reads.get(0), true, allocator, live);
    PartitionFrames before = new PartitionFrames(spec, five.reads.get(1), true, allocator, live);
    List<ColumnarBatch> newRun =
        List.of(
            now.handle(data(NEW, 5, new long[] {2, 5}, new int[] {10, 11})),
            now.handle(data(NEW, 5, new long[] {9}, new int[] {10})));
    List<ColumnarBatch> oldRun = new ArrayList<>();
    oldRun.add(before.handle(data(OLD, 2, new long[] {1, 3, 4, 6}, new int[] {10, 8, 11, 9})));
    assertNull(before.handle(data(OLD, 2, new long[] {7}, new int[] {9})));
    oldRun.add(before.handle(data(OLD, 2, new long[] {8, 10}, new int[] {11, 10})));
    SortedMergeReader merge =
        new SortedMergeReader(
            List.of(new Batches(newRun), new Batches(oldRun)),
            new int[] {1},
            new DataType[] {DataTypes.LongType});
    List<Long> got = new ArrayList<>();
    while (merge.next()) {
      InternalRow row = merge.get();
      got.add(row.getLong(1));
    }
    merge.close();
    assertEquals(List.of(1L, 2L, 4L, 5L, 8L, 9L, 10L), got);
  }

  @Test
  void aStreamPlansOlderRunsFromTheirPartitions() throws Exception {
    CommitLog log = log(8, false);
    List<ShuffleStream.Record> records = new ArrayList<>();
    String layout = Fixtures.layoutJson(TOPIC, SCHEMA, List.of("k"), 4, 16);
    records.add(new ShuffleStream.Record(0, "layout", layout));
    records.add(new ShuffleStream.Record(1, "commit/" + OLD, commit(OLD, 1, 4, 0, 100, false)));
    records.add(
        new ShuffleStream.Record(
            2, "change/2/c2", SchemaResolutionTest.change(2, SCHEMA, new long[] {1, 2}, 8)));
    records.add(new ShuffleStream.Record(3, "commit/" + NEW, commit(NEW, 2, 8, 10, 50, false)));
    ShuffleStream.LogSource source =
        new ShuffleStream.LogSource() {
          @Override
          public ShuffleStream.Read read(long from) {
            List<ShuffleStream.Record> out = new ArrayList<>();
            for (ShuffleStream.Record r : records) {
              if (r.offset >= from) {
                out.add(r);
              }
            }
            return new ShuffleStream.Read(from, out, Math.max(records.size(), from));
          }

          @Override
          public long end() {
            return records.size();
          }
        };
    ShuffleStream stream =
        new ShuffleStream(spec(log.layout(), "k", "n"), Map.of(), "kafka-shuffle", source);
    InputPartition[] parts =
        stream.planInputPartitions(
            new ShuffleStream.Position(0, 0), new ShuffleStream.Position(4, 0));
    // As many splits as the smallest count: partitions 2i and 2i + 1 of 8, i of 4, whole.
    assertEquals(4, parts.length);
    for (int i = 0; i < parts.length; i++) {
      SplitPlan s = ((ShuffleInputPartition) parts[i]).split;
      assertEquals(3, s.reads.size());
      assertEquals(2 * i + 1, s.reads.get(1).partition);
      assertEquals(i, s.reads.get(2).partition);
      assertEquals(4 * i, s.reads.get(2).keyGroupStart);
      assertTrue(s.reads.get(2).full);
    }
    // The older run alone: a micro-batch of it is read from its 4 partitions.
    InputPartition[] first =
        stream.planInputPartitions(
            new ShuffleStream.Position(0, 0), new ShuffleStream.Position(2, 0));
    assertEquals(4, first.length);
    SplitPlan s = ((ShuffleInputPartition) first[3]).split;
    assertTrue(s.reads.get(0).segments.isEmpty());
    assertEquals(3, s.reads.get(2).partition);
    assertEquals(12, s.reads.get(2).keyGroupStart);
    // A stream asked for one split per partition reads older key groups per split.
    ShuffleStream eight =
        new ShuffleStream(
            spec(log.layout(), "k", "n"), Map.of("parallelism", "8"), "kafka-shuffle", source);
    InputPartition[] each =
        eight.planInputPartitions(
            new ShuffleStream.Position(0, 0), new ShuffleStream.Position(4, 0));
    assertEquals(8, each.length);
    for (int i = 0; i < each.length; i++) {
      SplitPlan e = ((ShuffleInputPartition) each[i]).split;
      assertEquals(2, e.reads.size());
      assertEquals(i / 2, e.reads.get(1).partition);
      assertEquals(2 * i, e.reads.get(1).keyGroupStart);
    }
  }
}
