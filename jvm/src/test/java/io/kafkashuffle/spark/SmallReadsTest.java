package io.kafkashuffle.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.expressions.FieldReference;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.read.HasPartitionKey;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.partitioning.KeyGroupedPartitioning;
import org.apache.spark.sql.connector.read.partitioning.Partitioning;
import org.apache.spark.sql.connector.read.partitioning.UnknownPartitioning;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.junit.jupiter.api.Test;

/**
 * Small reads: a read planned one split per Kafka partition with at most {@code
 * small_read_rows} rows (by its commit records) is one split, still reported keyed, by {@code
 * partition_of_<max_parallelism>_1}; any other read keeps its splits.
 */
class SmallReadsTest {
  private static final String TOPIC = "few.rows";
  private static final Schema SCHEMA =
      new Schema(
          List.of(
              Field.nullable("k", new ArrowType.Utf8()),
              Field.nullable("n", new ArrowType.Int(64, true))));
  private static final UUID RUN = UUID.fromString("00000000-0000-0000-0000-00000000000c");

  /** A shuffle of 4 partitions and 16 key groups with one run of {@code rows} per partition. */
  private static CommitLog log(long rows) throws Exception {
    CommitLog log = new CommitLog(TOPIC);
    log.apply("layout", Fixtures.layoutJson(TOPIC, SCHEMA, List.of("k"), 4, 16), 0);
    ObjectNode d = Layout.JSON.createObjectNode();
    d.put("run_id", RUN.toString());
    d.put("window", "2013-01-01");
    d.put("committed_at", "2013-01-02T00:00:00+00:00");
    d.putArray("tasks").addArray().add(0).add(0);
    ObjectNode ps = d.putObject("partitions");
    for (int p = 0; p < 4; p++) {
      ps.putArray(String.valueOf(p)).add(2L * p).add(2L * p + 1).add(rows).add(1);
    }
    d.put("rows", rows * 4);
    d.put("bytes", 100);
    d.put("frames", 4);
    log.apply("commit/" + RUN, d.toString(), 1);
    return log;
  }

  /** The scan a catalog table of {@code log} builds for {@code options}. */
  private static Scan scan(CommitLog log, long smallReadRows, Map<String, String> options) {
    ShuffleTable table = new ShuffleTable(log.layout(), Map.of(), false, log, smallReadRows);
    return table.newScanBuilder(new CaseInsensitiveStringMap(options)).build();
  }

  private static Scan scan(CommitLog log, long smallReadRows) {
    return scan(log, smallReadRows, Map.of());
  }

  private static String function(Partitioning p) {
    Transform t = (Transform) ((KeyGroupedPartitioning) p).keys()[0];
    return t.name();
  }

  @Test
  void aReadOfFewRowsIsOneKeyedSplit() throws Exception {
    Scan scan = scan(log(100), 400);
    InputPartition[] parts = scan.toBatch().planInputPartitions();
    assertEquals(1, parts.length);
    // Every partition read, in one split whose partition key is 0.
    SplitPlan split = ((ShuffleInputPartition) parts[0]).split;
    List<Integer> partitions = new ArrayList<>();
    split.reads.forEach(r -> partitions.add(r.partition));
    assertEquals(List.of(0, 1, 2, 3), partitions);
    InternalRow key = ((HasPartitionKey) parts[0]).partitionKey();
    assertEquals(0, key.getInt(0));
    Partitioning p = ((ShuffleScan) scan).outputPartitioning();
    assertEquals(1, p.numPartitions());
    assertEquals("partition_of_16_1", function(p));
    assertTrue(scan.description().contains("splits=1 small keyed"), scan.description());
  }

  @Test
  void aReadOfMoreRowsKeepsOneSplitPerPartition() throws Exception {
    for (long threshold : new long[] {399, 0}) {
      Scan scan = scan(log(100), threshold);
      assertEquals(4, scan.toBatch().planInputPartitions().length);
      Partitioning p = ((ShuffleScan) scan).outputPartitioning();
      assertEquals("partition_of_16_4", function(p));
      assertFalse(scan.description().contains("small"), scan.description());
    }
  }

  @Test
  void commitRecordsWithoutRowCountsAreNotSmall() throws Exception {
    assertEquals(4, scan(log(0), 1_000_000).toBatch().planInputPartitions().length);
  }

  @Test
  void aParallelismAskedForIsKept() throws Exception {
    for (String parallelism : new String[] {"2", "4", "8"}) {
      Map<String, String> options = Map.of("parallelism", parallelism);
      Scan scan = scan(log(100), 1_000_000, options);
      assertEquals(
          Integer.parseInt(parallelism), scan.toBatch().planInputPartitions().length, parallelism);
    }
    // "auto" plans a small read as one split itself: keyed, as any read of one split is.
    Scan auto = scan(log(100), 0, Map.of("parallelism", "auto"));
    assertEquals(1, auto.toBatch().planInputPartitions().length);
    assertEquals("partition_of_16_1", function(((ShuffleScan) auto).outputPartitioning()));
  }

  @Test
  void theOptionOverridesTheTablesDefault() throws Exception {
    Map<String, String> options = new HashMap<>();
    options.put("small_read_rows", "0");
    assertEquals(4, scan(log(100), 1_000_000, options).toBatch().planInputPartitions().length);
    options.put("small_read_rows", "1000");
    assertEquals(1, scan(log(100), 0, options).toBatch().planInputPartitions().length);
    options.put("small_read_rows", "-1");
    ShuffleException e =
        assertThrows(ShuffleException.class, () -> scan(log(100), 0, options).toBatch());
    assertTrue(
        e.getMessage()
            .endsWith(
                "kafka-shuffle-jvm: option 'small_read_rows' must be an integer >= 0, got '-1'"),
        e.getMessage());
  }

  @Test
  void splitsCutByKeyGroupOrOfSeveralPartitionsAreNotMerged() throws Exception {
    Layout layout = log(100).layout();
    List<SplitPlan> cut =
        ReadPlanner.plan(log(100), new ReadPlanner.Selection(null, null, null, null, 8));
    assertFalse(ShuffleScan.small(cut, layout, 1_000_000));
    List<SplitPlan> two =
        ReadPlanner.plan(log(100), new ReadPlanner.Selection(null, null, null, null, 2));
    assertFalse(ShuffleScan.small(two, layout, 1_000_000));
    List<SplitPlan> each =
        ReadPlanner.plan(log(100), new ReadPlanner.Selection(null, null, null, null, null));
    assertTrue(ShuffleScan.small(each, layout, 400));
    assertFalse(ShuffleScan.small(each, layout, 399));
    assertFalse(ShuffleScan.small(each, layout, 0));
    // One split is small already: nothing to merge.
    assertFalse(ShuffleScan.small(List.of(ShuffleScan.oneSplit(each)), layout, 1_000_000));
  }

  @Test
  void anySingleSplitIsKeyedAndEveryKeyIsInIt() throws Exception {
    Layout layout = log(100).layout();
    List<SplitPlan> cut =
        ReadPlanner.plan(log(100), new ReadPlanner.Selection(null, null, null, null, 8));
    assertFalse(ShuffleScan.keyedSplits(cut, layout));
    assertTrue(ShuffleScan.keyedSplits(List.of(ShuffleScan.oneSplit(cut)), layout));
    PartitionFunction one = PartitionFunction.forSplits(16, 4, 1);
    assertEquals("partition_of_16_1", one.name());
    for (int g = 0; g < 16; g++) {
      assertEquals(0, PartitionFunction.valueOf(g, 16, 1, 1));
    }
  }

  @Test
  void aSmallAggregatedReadIsOneSplitTooAndReportsNothing() throws Exception {
    Aggregation count =
        new Aggregation(
            new AggregateFunc[] {new CountStar()},
            new org.apache.spark.sql.connector.expressions.Expression[] {
              FieldReference.column("k")
            });
    ShuffleTable table = new ShuffleTable(log(100).layout(), Map.of(), false, log(100), 400);
    ScanBuilder b = table.newScanBuilder(new CaseInsensitiveStringMap(Map.of()));
    assertTrue(((SupportsPushDownAggregates) b).pushAggregation(count));
    Scan scan = b.build();
    // One task aggregates it all (a larger read: one per core, the session's).
    assertEquals(1, scan.toBatch().planInputPartitions().length);
    assertInstanceOf(UnknownPartitioning.class, ((ShuffleScan) scan).outputPartitioning());
    assertTrue(scan.description().contains("splits=1 small aggregated="), scan.description());
  }
}
