package io.kafkashuffle.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.function.Supplier;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Expressions;
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
 * the key with no Exchange; otherwise it reports nothing. It reports its rows (from the commit
 * records) and an estimate of their size, so Spark can choose to broadcast a small read.
 *
 * <p>A keyed read of a shuffle with {@code sort_by}, every one of whose runs was written sorted
 * (its commit says so), also reports that each partition's rows are in that order (the longest
 * prefix of {@code sort_by} the read outputs; ascending, nulls first): a split of one such run
 * is one sorted sequence, read as it is; a split of several is merged ({@link
 * SortedMergeReader}, rows instead of columnar batches), unless it has more than {@link
 * #MAX_MERGED_RUNS} runs with rows, when no order is reported and Spark sorts.
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
  private List<String> ordered; // the sort columns whose order every split keeps
  private boolean merged; // some split merges sorted runs: the scan reads rows

  ShuffleScan(
      ReadSpec spec,
      Supplier<List<SplitPlan>> planner,
      StructType readSchema,
      Map<String, String> options,
      List<String> given) {
    this.spec = spec;
    this.options = options;
    this.planner = planner;
    this.readSchema = readSchema;
    this.given = given;
  }

  private synchronized List<SplitPlan> splits() {
    if (splits == null) {
      splits = planner.get();
      keyed = keyedSplits(splits, spec.layout().numPartitions);
      ordered = keyed ? orderedColumns(splits, spec.layout(), readSchema) : List.of();
      merged = !ordered.isEmpty() && runsWithRows(splits) > 1;
    }
    return splits;
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

  /** The most runs with rows that one Kafka partition read of the splits holds. */
  static int runsWithRows(List<SplitPlan> splits) {
    int most = 0;
    for (SplitPlan s : splits) {
      for (SplitPlan.PartitionRead r : s.reads) {
        int n = 0;
        for (SplitPlan.Segment g : r.segments) {
          // A sorted run records its rows per partition: 0 is none, not "not recorded".
          if (g.rows > 0) {
            n++;
          }
        }
        most = Math.max(most, n);
      }
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

  private static Expression column(String name) {
    return Expressions.column("`" + name.replace("`", "``") + "`");
  }

  private boolean keyed() {
    splits();
    return keyed;
  }

  /** Whether split i reads exactly all of Kafka partition i, for every partition. */
  static boolean keyedSplits(List<SplitPlan> splits, int numPartitions) {
    if (splits.size() != numPartitions) {
      return false;
    }
    for (int i = 0; i < splits.size(); i++) {
      SplitPlan s = splits.get(i);
      if (s.reads.size() != 1 || !s.reads.get(0).full || s.reads.get(0).partition != i) {
        return false;
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
                + (keyed ? " keyed" : "")
                + (ordered.isEmpty() ? "" : " ordered=" + ordered + (merged ? " merged" : "")))
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
    String fn = PartitionFunction.name(layout.maxParallelism, layout.numPartitions);
    return new KeyGroupedPartitioning(
        new Expression[] {Expressions.apply(fn, keys)}, layout.numPartitions);
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
        // A key-group sub-range: its share of the partition's key groups.
        rows +=
            r.full
                ? partition
                : partition
                    * (double) (r.keyGroupEnd - r.keyGroupStart)
                    * layout.numPartitions
                    / layout.maxParallelism;
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

    ReaderFactory(ReadSpec spec) {
      this(spec, false, null, new DataType[0]);
    }

    ReaderFactory(ReadSpec spec, boolean ordered, int[] mergeOrdinals, DataType[] mergeTypes) {
      this.spec = spec;
      this.ordered = ordered;
      this.mergeOrdinals = mergeOrdinals;
      this.mergeTypes = mergeTypes;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      if (mergeOrdinals == null) {
        throw new UnsupportedOperationException("kafka-shuffle-jvm reads columnar batches only");
      }
      return new SortedMergeReader(
          spec, ((ShuffleInputPartition) partition).split, mergeOrdinals, mergeTypes);
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return new ShuffleBatchReader(spec, ((ShuffleInputPartition) partition).split, ordered);
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return mergeOrdinals == null;
    }
  }
}
