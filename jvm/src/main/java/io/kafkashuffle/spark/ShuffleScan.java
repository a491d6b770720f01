package io.kafkashuffle.spark;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.Set;
import java.util.function.Supplier;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Expressions;
import org.apache.spark.sql.connector.expressions.FieldReference;
import org.apache.spark.sql.connector.expressions.NullOrdering;
import org.apache.spark.sql.connector.expressions.SortDirection;
import org.apache.spark.sql.connector.expressions.SortOrder;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.Statistics;
import org.apache.spark.sql.connector.read.SupportsReportOrdering;
import org.apache.spark.sql.connector.read.SupportsReportPartitioning;
import org.apache.spark.sql.connector.read.SupportsReportStatistics;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.partitioning.KeyGroupedPartitioning;
import org.apache.spark.sql.connector.read.partitioning.Partitioning;
import org.apache.spark.sql.connector.read.partitioning.UnknownPartitioning;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * A planned read: one Spark partition per split of the plan. When each split is one whole
 * Kafka partition (the plan's default parallelism), the scan reports that its rows are grouped
 * by {@code partition_of_<m>_<n>(key columns)}, so Spark plans grouping, windows and joins by
 * the key with no Exchange; otherwise it reports nothing. Runs written before the shuffle's
 * partitions grew keep it keyed: a split reads of them only its own key groups, from the
 * partitions they were written to ({@link ReadPlanner#earlierReads}). Such a read has by
 * default as many splits as the smallest partition count it reads, each holding a contiguous
 * range of whole partitions of the latest count: it reports the split of a key's partition
 * ({@link PartitionFunction#forSplits}). It reports its rows (from the commit records) and an
 * estimate of their size, so Spark can choose to broadcast a small read.
 *
 * <p>A small read (at most {@code small_read_rows} rows by its commit records, planned that
 * default way) is read as one split holding all of its partition reads: one task, whose reader
 * fetches the first range of every partition at once, instead of one task per partition each
 * waiting for its own fetch. Any read of one split is keyed: every row's value of {@code
 * partition_of_<max_parallelism>_1(key)} is 0, the split's partition key, and Spark takes a
 * {@code KeyGroupedPartitioning} by it as clustered by the key, so grouping, windows and a join
 * with another read of one split by the key (of a shuffle with the same {@code max_parallelism})
 * still plan no Exchange. A join with a read of more splits has two partitionings Spark cannot
 * match; it broadcasts the small side when it is small enough, else it shuffles.
 *
 * <p>A keyed read of a shuffle with {@code sort_by}, every one of whose runs was written sorted
 * (its commit says so), also reports that each partition's rows are in that order (the longest
 * prefix of {@code sort_by} the read outputs; ascending, nulls first): a split of one such run
 * is one sorted sequence, read as it is (a key-group sub-range of it too); a split of several
 * (runs of earlier partition counts included, each partition read of each run a sequence of
 * its own) is merged ({@link SortedMergeReader}, rows instead of columnar batches), unless it
 * has more than {@link #MAX_MERGED_RUNS} such sequences with rows, when no order is reported
 * and Spark sorts.
 */
final class ShuffleScan
    implements Scan,
        Batch,
        SupportsReportPartitioning,
        SupportsReportOrdering,
        SupportsReportStatistics {
  /** The most sorted runs a split merges (a consumer each); beyond, no order is reported. */
  static final int MAX_MERGED_RUNS = 32;

  private final ReadSpec spec;
  private final Supplier<List<SplitPlan>> planner;
  private final StructType readSchema;
  private final Map<String, String> options;
  private final List<String> given; // the option names as given, for the kind-of-read check
  private List<SplitPlan> splits; // planned when a batch read first needs them
  private boolean keyed;
  private PartitionFunction partitioning; // of a keyed read: each row's split
  private List<String> ordered; // the sort columns whose order every split keeps
  private boolean merged; // some split merges sorted runs: the scan reads rows
  private final PushedAggregation aggregation; // null: rows as they were written
  // A read planned one split per partition with at most this many rows is one split; 0: never.
  private final long smallReadRows;
  private boolean small; // read as one split for that

  ShuffleScan(
      ReadSpec spec,
      Supplier<List<SplitPlan>> planner,
      StructType readSchema,
      Map<String, String> options,
      List<String> given) {
    this(spec, planner, readSchema, options, given, null, 0);
  }

  /**
   * A read whose splits each run {@code aggregation} (see {@link PushedAggregation}), read as
   * one split when it has at most {@code smallReadRows} rows ({@link #small}).
   */
  ShuffleScan(
      ReadSpec spec,
      Supplier<List<SplitPlan>> planner,
      StructType readSchema,
      Map<String, String> options,
      List<String> given,
      PushedAggregation aggregation,
      long smallReadRows) {
    this.smallReadRows = smallReadRows;
    this.aggregation = aggregation;
    this.spec = spec;
    this.options = options;
    this.planner = planner;
    this.readSchema = readSchema;
    this.given = given;
  }

  private synchronized List<SplitPlan> splits() {
    if (splits == null) {
      splits = planner.get();
      small = small(splits, spec.layout(), smallReadRows);
      if (small && aggregation == null) {
        splits = List.of(oneSplit(splits));
      }
      keyed = keyedSplits(splits, spec.layout());
      partitioning =
          keyed
              ? PartitionFunction.forSplits(
                  spec.layout().maxParallelism, spec.layout().numPartitions, splits.size())
              : null;
      if (aggregation != null) {
        // Each group's rows are in one whole partition: the splits may hold several, and one
        // task per core aggregates them with the fewest tasks. What they output is one row
        // per group, reported as nothing in particular.
        splits = combined(splits, small ? 1 : taskSlots(splits.size()));
        keyed = false;
      }
      ordered =
          keyed && aggregation == null
              ? orderedColumns(splits, spec.layout(), readSchema)
              : List.of();
      merged = !ordered.isEmpty() && runsWithRows(splits) > 1;
    }
    return splits;
  }

  /**
   * Whether {@code splits} are a small read, to be read as one split: more than one, planned
   * the default way (one per Kafka partition, or per group of partitions for a shuffle that
   * grew: {@link #keyedSplits}), with at most {@code maxRows} rows by the commit records.
   * Commit records that give no row counts are not small: how large the read is, is not known.
   */
  static boolean small(List<SplitPlan> splits, Layout layout, long maxRows) {
    if (maxRows <= 0 || splits.size() < 2 || !keyedSplits(splits, layout)) {
      return false;
    }
    long rows = 0;
    boolean any = false;
    for (SplitPlan s : splits) {
      for (SplitPlan.PartitionRead r : s.reads) {
        for (SplitPlan.Segment g : r.segments) {
          any = true;
          rows += Math.max(0, g.rows);
        }
      }
    }
    return !(any && rows == 0) && rows <= maxRows;
  }

  /** One split of every partition read of {@code splits}, in their order. */
  static SplitPlan oneSplit(List<SplitPlan> splits) {
    List<SplitPlan.PartitionRead> reads = new ArrayList<>();
    for (SplitPlan s : splits) {
      reads.addAll(s.reads);
    }
    return new SplitPlan(0, List.copyOf(reads));
  }

  /**
   * The columns of {@code sort_by} (its longest prefix in {@code schema}) in whose order each
   * of {@code splits} can hand its rows over: every segment is of a run written sorted, and no
   * split has more than {@link #MAX_MERGED_RUNS} runs with rows to merge. Empty: no order.
   */
  static List<String> orderedColumns(List<SplitPlan> splits, Layout layout, StructType schema) {
    if (layout.sortBy.isEmpty()) {
      return List.of();
    }
    for (SplitPlan s : splits) {
      for (SplitPlan.PartitionRead r : s.reads) {
        for (SplitPlan.Segment g : r.segments) {
          if (!g.sorted) {
            return List.of();
          }
        }
      }
    }
    if (runsWithRows(splits) > MAX_MERGED_RUNS) {
      return List.of();
    }
    List<String> names = List.of(schema.fieldNames());
    List<String> out = new ArrayList<>();
    for (String c : layout.sortBy) {
      if (!names.contains(c)) {
        break;
      }
      out.add(c);
    }
    return out;
  }

  /**
   * The most sorted sequences one split merges: its segments with rows, over all its partition
   * reads (a keyed split reads, besides its own partition, the partitions of runs written
   * before the shuffle grew, each a sequence of its own).
   */
  static int runsWithRows(List<SplitPlan> splits) {
    int most = 0;
    for (SplitPlan s : splits) {
      int n = 0;
      for (SplitPlan.PartitionRead r : s.reads) {
        for (SplitPlan.Segment g : r.segments) {
          // A sorted run records its rows per partition: 0 is none, not "not recorded".
          if (g.rows > 0) {
            n++;
          }
        }
      }
      most = Math.max(most, n);
    }
    return most;
  }

  @Override
  public SortOrder[] outputOrdering() {
    splits();
    SortOrder[] out = new SortOrder[ordered.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] =
          Expressions.sort(
              column(ordered.get(i)), SortDirection.ASCENDING, NullOrdering.NULLS_FIRST);
    }
    return out;
  }

  // The name taken whole (a column name may hold dots), with no SQL parsing.
  private static Expression column(String name) {
    return FieldReference.column(name);
  }

  private boolean keyed() {
    splits();
    return keyed;
  }

  /** Whether every split reads whole Kafka partitions, none of them read by two splits. */
  static boolean wholePartitions(List<SplitPlan> splits) {
    Set<Integer> seen = new HashSet<>();
    for (SplitPlan s : splits) {
      for (SplitPlan.PartitionRead r : s.reads) {
        if (!r.full || !seen.add(r.partition)) {
          return false;
        }
      }
    }
    return true;
  }

  /**
   * {@code splits} as at most {@code slots} splits, their partition reads balanced by the rows
   * the commit records give them (by their offsets where a record has no row count), largest
   * first, each to the split with the fewest so far.
   */
  static List<SplitPlan> combined(List<SplitPlan> splits, int slots) {
    List<SplitPlan.PartitionRead> reads = new ArrayList<>();
    for (SplitPlan s : splits) {
      reads.addAll(s.reads);
    }
    int n = Math.max(1, Math.min(slots, reads.size()));
    if (n >= splits.size()) {
      return splits;
    }
    reads.sort(Comparator.comparingLong(ShuffleScan::weight).reversed());
    List<List<SplitPlan.PartitionRead>> parts = new ArrayList<>();
    long[] load = new long[n];
    for (int i = 0; i < n; i++) {
      parts.add(new ArrayList<>());
    }
    for (SplitPlan.PartitionRead r : reads) {
      int least = 0;
      for (int i = 1; i < n; i++) {
        if (load[i] < load[least]) {
          least = i;
        }
      }
      parts.get(least).add(r);
      load[least] += weight(r);
    }
    List<SplitPlan> out = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      List<SplitPlan.PartitionRead> part = parts.get(i);
      part.sort(Comparator.comparingInt(r -> r.partition));
      out.add(new SplitPlan(i, List.copyOf(part)));
    }
    return out;
  }

  private static long weight(SplitPlan.PartitionRead r) {
    long rows = 0;
    long offsets = 0;
    for (SplitPlan.Segment g : r.segments) {
      rows += Math.max(0, g.rows);
      offsets += g.last - g.first + 1;
    }
    return rows > 0 ? rows : offsets;
  }

  /** The cores the session's tasks run on (its default parallelism), else {@code fallback}. */
  private static int taskSlots(int fallback) {
    try {
      return SparkSession.active().sparkContext().defaultParallelism();
    } catch (RuntimeException e) {
      return fallback;
    }
  }

  /**
   * Whether split i holds the rows of exactly the key groups of its Kafka partitions of the
   * latest partition count, for every split: all of each of them, and of runs written before
   * the shuffle grew only reads of those key groups from their own partitions. Its partitions
   * are partition i alone when there are as many splits as partitions; when there are fewer
   * (the default of a read of runs of several partition counts: as many as the smallest), the
   * contiguous range {@code [i * n / p, (i + 1) * n / p)}. Every row of split i then has i as its
   * value of the scan's partitioning function ({@link PartitionFunction#forSplits}). Fewer
   * splits than that smallest count, or fewer than the partitions of a read of the latest count
   * alone, are not keyed: only a read's default is; but one split always is, whatever it holds
   * (every key's value of {@code partition_of_<m>_1} is 0).
   */
  static boolean keyedSplits(List<SplitPlan> splits, Layout layout) {
    int n = layout.numPartitions;
    int m = layout.maxParallelism;
    int p = splits.size();
    if (p == 1) {
      return true;
    }
    if (p == 0 || p > n) {
      return false;
    }
    if (p < n) {
      int smallest = n;
      for (SplitPlan s : splits) {
        for (SplitPlan.PartitionRead r : s.reads) {
          int count = partitionCount(r, layout);
          if (count >= 0) {
            smallest = Math.min(smallest, count);
          }
        }
      }
      if (p != smallest) {
        return false;
      }
    }
    for (int i = 0; i < p; i++) {
      int first = (int) ((long) i * n / p);
      int stop = (int) ((long) (i + 1) * n / p);
      int[] own = {
        ReadPlanner.keyGroupRange(first, m, n)[0], ReadPlanner.keyGroupRange(stop - 1, m, n)[1]
      };
      Set<Integer> latest = new HashSet<>();
      for (SplitPlan.PartitionRead r : splits.get(i).reads) {
        int count = partitionCount(r, layout);
        if (count == n) {
          if (!r.full || r.partition < first || r.partition >= stop || !latest.add(r.partition)) {
            return false;
          }
        } else if (count < 0 || r.keyGroupStart < own[0] || r.keyGroupEnd > own[1]) {
          return false;
        } else if (r.full) {
          // Read unfiltered: its rows are its whole partition's key groups.
          int[] whole = ReadPlanner.keyGroupRange(r.partition, m, count);
          if (whole[0] != r.keyGroupStart || whole[1] != r.keyGroupEnd) {
            return false;
          }
        }
      }
      if (latest.size() != stop - first) {
        return false;
      }
    }
    return true;
  }

  /**
   * The partition count {@code read}'s runs were written under (their layout versions'), the
   * count its partition number and key groups are of; the latest when it has no segments;
   * -1 when its segments disagree.
   */
  static int partitionCount(SplitPlan.PartitionRead read, Layout layout) {
    int count = -1;
    for (SplitPlan.Segment g : read.segments) {
      int c = (int) layout.layoutVersion(g.layoutVersion).numPartitions;
      if (count >= 0 && c != count) {
        return -1;
      }
      count = c;
    }
    return count < 0 ? layout.numPartitions : count;
  }

  /**
   * Whether every run {@code splits} read was written under the latest partition count: each
   * key's rows are then in one Kafka partition. A run written before the shuffle grew holds a
   * key's rows in another partition, read beside the latest one's.
   */
  static boolean latestPartitionCount(List<SplitPlan> splits, Layout layout) {
    for (SplitPlan s : splits) {
      for (SplitPlan.PartitionRead r : s.reads) {
        if (partitionCount(r, layout) != layout.numPartitions) {
          return false;
        }
      }
    }
    return true;
  }

  @Override
  public StructType readSchema() {
    return readSchema;
  }

  @Override
  public String description() {
    // Shown for streams too, which plan no splits here.
    List<SplitPlan> planned;
    synchronized (this) {
      planned = splits;
    }
    return "kafka-shuffle topic="
        + spec.topic
        + (planned == null
            ? ""
            : " splits="
                + planned.size()
                + (small ? " small" : "")
                + (keyed ? " keyed" : "")
                + (ordered.isEmpty() ? "" : " ordered=" + ordered + (merged ? " merged" : ""))
                + (aggregation == null ? "" : " aggregated=" + aggregation.description))
        + (spec.filtersEventTime()
            ? " event_time=[" + spec.eventTimeStart + ", " + spec.eventTimeEnd + ")"
            : "");
  }

  @Override
  public Batch toBatch() {
    OptionTables.SHUFFLE_JVM.check(given, OptionCheck.BATCH);
    return this;
  }

  /** A streaming read of the same table: micro-batches of the runs committed since the last. */
  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    if (aggregation != null) {
      throw new IllegalStateException("an aggregated read of a shuffle is a batch read");
    }
    OptionTables.SHUFFLE_JVM.check(given, OptionCheck.STREAM);
    return new ShuffleStream(spec, options);
  }

  @Override
  public InputPartition[] planInputPartitions() {
    List<SplitPlan> splits = splits();
    boolean keyed = keyed();
    List<InputPartition> out = new ArrayList<>();
    for (int i = 0; i < splits.size(); i++) {
      SplitPlan s = splits.get(i);
      out.add(keyed ? new ShuffleInputPartition.Keyed(s, i) : new ShuffleInputPartition(s));
    }
    return out.toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    splits();
    int[] ordinals = new int[ordered.size()];
    DataType[] types = new DataType[ordered.size()];
    for (int i = 0; i < ordinals.length; i++) {
      ordinals[i] = readSchema.fieldIndex(ordered.get(i));
      types[i] = readSchema.fields()[ordinals[i]].dataType();
    }
    if (aggregation != null) {
      return new ReaderFactory(spec, aggregation);
    }
    return new ReaderFactory(spec, !ordered.isEmpty(), merged ? ordinals : null, types);
  }

  @Override
  public Partitioning outputPartitioning() {
    if (!keyed()) {
      return new UnknownPartitioning(splits().size());
    }
    Layout layout = spec.layout();
    Expression[] keys = new Expression[layout.key.size()];
    for (int i = 0; i < keys.length; i++) {
      keys[i] = column(layout.key.get(i));
    }
    return new KeyGroupedPartitioning(
        new Expression[] {Expressions.apply(partitioning.name(), keys)},
        partitioning.numValues());
  }

  @Override
  public Statistics estimateStatistics() {
    Layout layout = spec.layout();
    double rows = 0;
    for (SplitPlan s : splits()) {
      for (SplitPlan.PartitionRead r : s.reads) {
        long partition = 0;
        for (SplitPlan.Segment g : r.segments) {
          if (g.rows <= 0) {
            return UNKNOWN; // commit records without row counts
          }
          partition += g.rows;
        }
        // A key-group sub-range: its share of the partition's key groups (of the partition
        // count the runs were written under).
        int count = partitionCount(r, layout);
        int[] whole =
            ReadPlanner.keyGroupRange(
                r.partition, layout.maxParallelism, count < 0 ? layout.numPartitions : count);
        rows +=
            r.full
                ? partition
                : partition
                    * (double) (r.keyGroupEnd - r.keyGroupStart)
                    / Math.max(1, whole[1] - whole[0]);
      }
    }
    long n = (long) Math.ceil(rows);
    // As Spark estimates a relation of unknown size: its columns' default widths per row.
    long size = n * Math.max(1, readSchema.defaultSize());
    return new Statistics() {
      @Override
      public OptionalLong sizeInBytes() {
        return OptionalLong.of(size);
      }

      @Override
      public OptionalLong numRows() {
        return OptionalLong.of(n);
      }
    };
  }

  private static final Statistics UNKNOWN =
      new Statistics() {
        @Override
        public OptionalLong sizeInBytes() {
          return OptionalLong.empty();
        }

        @Override
        public OptionalLong numRows() {
          return OptionalLong.empty();
        }
      };

  /**
   * Creates the reader of a split on the executor: columnar batches, or rows when the scan
   * merges sorted runs ({@code mergeOrdinals} set; Spark wants one kind for every split).
   */
  static final class ReaderFactory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final ReadSpec spec;
    private final boolean ordered;
    private final int[] mergeOrdinals; // null: no merge
    private final DataType[] mergeTypes;
    private final PushedAggregation aggregation; // null: rows as they were written

    ReaderFactory(ReadSpec spec) {
      this(spec, false, null, new DataType[0]);
    }

    ReaderFactory(ReadSpec spec, boolean ordered, int[] mergeOrdinals, DataType[] mergeTypes) {
      this.spec = spec;
      this.ordered = ordered;
      this.mergeOrdinals = mergeOrdinals;
      this.mergeTypes = mergeTypes;
      this.aggregation = null;
    }

    /** Rows of one group each: each split's batches aggregated ({@link AggregatingReader}). */
    ReaderFactory(ReadSpec spec, PushedAggregation aggregation) {
      this.spec = spec;
      this.ordered = false;
      this.mergeOrdinals = null;
      this.mergeTypes = new DataType[0];
      this.aggregation = aggregation;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      SplitPlan split = ((ShuffleInputPartition) partition).split;
      if (aggregation != null) {
        return new AggregatingReader(new ShuffleBatchReader(spec, split), aggregation);
      }
      if (mergeOrdinals == null) {
        throw new UnsupportedOperationException("kafka-shuffle-jvm reads columnar batches only");
      }
      return new SortedMergeReader(spec, split, mergeOrdinals, mergeTypes);
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return new ShuffleBatchReader(spec, ((ShuffleInputPartition) partition).split, ordered);
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return mergeOrdinals == null && aggregation == null;
    }
  }
}
