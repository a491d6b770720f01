package io.kafkashuffle.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.function.Supplier;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Expressions;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.Statistics;
import org.apache.spark.sql.connector.read.SupportsReportPartitioning;
import org.apache.spark.sql.connector.read.SupportsReportStatistics;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.partitioning.KeyGroupedPartitioning;
import org.apache.spark.sql.connector.read.partitioning.Partitioning;
import org.apache.spark.sql.connector.read.partitioning.UnknownPartitioning;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * A planned read: one Spark partition per split of the plan. When each split is one whole
 * Kafka partition (the plan's default parallelism), the scan reports that its rows are grouped
 * by {@code partition_of_<m>_<n>(key columns)}, so Spark plans grouping, windows and joins by
 * the key with no Exchange; otherwise it reports nothing. It reports its rows (from the commit
 * records) and an estimate of their size, so Spark can choose to broadcast a small read.
 */
final class ShuffleScan
    implements Scan, Batch, SupportsReportPartitioning, SupportsReportStatistics {
  private final ReadSpec spec;
  private final Supplier<List<SplitPlan>> planner;
  private final StructType readSchema;
  private final Map<String, String> options;
  private final List<String> given; // the option names as given, for the kind-of-read check
  private List<SplitPlan> splits; // planned when a batch read first needs them
  private boolean keyed;

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
    }
    return splits;
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
        + (planned == null ? "" : " splits=" + planned.size() + (keyed ? " keyed" : ""))
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
    return new ReaderFactory(spec);
  }

  @Override
  public Partitioning outputPartitioning() {
    if (!keyed()) {
      return new UnknownPartitioning(splits().size());
    }
    Layout layout = spec.layout();
    Expression[] keys = new Expression[layout.key.size()];
    for (int i = 0; i < keys.length; i++) {
      keys[i] = Expressions.column("`" + layout.key.get(i).replace("`", "``") + "`");
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

  /** Creates the columnar reader of a split on the executor. */
  static final class ReaderFactory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final ReadSpec spec;

    ReaderFactory(ReadSpec spec) {
      this.spec = spec;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      throw new UnsupportedOperationException("kafka-shuffle-jvm reads columnar batches only");
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return new ShuffleBatchReader(spec, ((ShuffleInputPartition) partition).split);
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return true;
    }
  }
}
