package io.kafkashuffle.spark;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.PriorityQueue;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Ascending$;
import org.apache.spark.sql.catalyst.expressions.BoundReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.InterpretedOrdering;
import org.apache.spark.sql.catalyst.expressions.NullsFirst$;
import org.apache.spark.sql.catalyst.expressions.SortOrder;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Reads a split of several sorted runs as one sorted sequence: a k-way merge of the runs. Each
 * run of a Kafka partition is read by its own {@link ShuffleBatchReader} (its own consumer,
 * positioned at that run's offsets), so the merge holds one frame per run, whatever the runs'
 * sizes; rows are compared by Spark's own ordering of the sort columns (ascending, nulls first:
 * {@link InterpretedOrdering}), the order the writer's Spark sort gave each run and the order
 * the scan reports. Rows are handed over one at a time, as views into the runs' current batches.
 */
final class SortedMergeReader implements PartitionReader<InternalRow> {
  private final List<Run> runs = new ArrayList<>();
  private final PriorityQueue<Run> heap;
  private Run current;
  private boolean started;

  /** One run's reader and its position in its current batch. */
  private static final class Run {
    final PartitionReader<ColumnarBatch> reader;
    final int order;
    ColumnarBatch batch;
    int row;
    InternalRow head;

    Run(PartitionReader<ColumnarBatch> reader, int order) {
      this.reader = reader;
      this.order = order;
    }

    /** Moves to the run's next row; false when the run is read (its END checks passed). */
    boolean advance() throws IOException {
      while (true) {
        if (batch != null && ++row < batch.numRows()) {
          head = batch.getRow(row);
          return true;
        }
        head = null;
        if (!reader.next()) {
          batch = null;
          return false;
        }
        batch = reader.get();
        row = -1;
      }
    }
  }

  SortedMergeReader(ReadSpec spec, SplitPlan split, int[] ordinals, DataType[] types) {
    this(runReaders(spec, split), ordinals, types);
  }

  /**
   * A merge of {@code readers}, one per sorted run, by the columns at {@code ordinals} (of
   * {@code types}); of equal rows, the earlier reader's comes first.
   */
  SortedMergeReader(
      List<? extends PartitionReader<ColumnarBatch>> readers, int[] ordinals, DataType[] types) {
    List<SortOrder> orders = new ArrayList<>();
    List<Expression> none = List.of();
    for (int i = 0; i < ordinals.length; i++) {
      orders.add(
          new SortOrder(
              new BoundReference(ordinals[i], types[i], true),
              Ascending$.MODULE$,
              NullsFirst$.MODULE$,
              CollectionConverters.asScala(none).toSeq()));
    }
    InterpretedOrdering ordering =
        new InterpretedOrdering(CollectionConverters.asScala(orders).toSeq());
    this.heap =
        new PriorityQueue<>(
            (a, b) -> {
              int c = ordering.compare(a.head, b.head);
              return c != 0 ? c : Integer.compare(a.order, b.order);
            });
    for (PartitionReader<ColumnarBatch> r : readers) {
      runs.add(new Run(r, runs.size()));
    }
  }

  /** A reader of each run of each Kafka partition of {@code split}, in the split's order. */
  private static List<ShuffleBatchReader> runReaders(ReadSpec spec, SplitPlan split) {
    List<ShuffleBatchReader> out = new ArrayList<>();
    for (SplitPlan.PartitionRead r : split.reads) {
      for (SplitPlan.Segment s : r.segments) {
        SplitPlan one =
            new SplitPlan(
                split.index,
                List.of(
                    new SplitPlan.PartitionRead(
                        r.partition, r.keyGroupStart, r.keyGroupEnd, r.full, List.of(s))));
        out.add(new ShuffleBatchReader(spec, one, true));
      }
    }
    return out;
  }

  @Override
  public boolean next() throws IOException {
    if (!started) {
      started = true;
      for (Run r : runs) {
        if (r.advance()) {
          heap.add(r);
        }
      }
    } else if (current != null && current.advance()) {
      heap.add(current);
    }
    current = heap.poll();
    return current != null;
  }

  @Override
  public InternalRow get() {
    return current.head;
  }

  @Override
  public void close() throws IOException {
    IOException first = null;
    for (Run r : runs) {
      try {
        r.reader.close();
      } catch (IOException | RuntimeException e) {
        if (first == null) {
          first = e instanceof IOException ? (IOException) e : new IOException(e);
        }
      }
    }
    if (first != null) {
      throw first;
    }
  }
}
