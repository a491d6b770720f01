package io.kafkashuffle.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.junit.jupiter.api.Test;

/** The k-way merge of sorted runs, over runs given as batches of (key, tag) rows. */
class SortedMergeReaderTest {
  private static final DataType[] KEY = {DataTypes.IntegerType};

  /** One run: its batches in order, each a list of keys (null: a null key). */
  private static class Run implements PartitionReader<ColumnarBatch> {
    final List<ColumnarBatch> batches = new ArrayList<>();
    int at = -1;
    boolean drained;
    boolean closed;
    IOException failAtEnd;

    Run(String tag, Integer[]... batches) {
      for (Integer[] keys : batches) {
        OnHeapColumnVector key = new OnHeapColumnVector(Math.max(keys.length, 1), DataTypes.IntegerType);
        OnHeapColumnVector name = new OnHeapColumnVector(Math.max(keys.length, 1), DataTypes.StringType);
        for (int i = 0; i < keys.length; i++) {
          if (keys[i] == null) {
            key.putNull(i);
          } else {
            key.putInt(i, keys[i]);
          }
          name.putByteArray(i, (tag + i).getBytes(java.nio.charset.StandardCharsets.UTF_8));
        }
        this.batches.add(new ColumnarBatch(new ColumnVector[] {key, name}, keys.length));
      }
    }

    @Override
    public boolean next() throws IOException {
      if (++at < batches.size()) {
        return true;
      }
      if (failAtEnd != null) {
        throw failAtEnd; // as a reader whose END check fails after its last frame
      }
      drained = true;
      return false;
    }

    @Override
    public ColumnarBatch get() {
      return batches.get(at);
    }

    @Override
    public void close() {
      closed = true;
      batches.forEach(ColumnarBatch::close);
    }
  }

  /** (key or null, tag) of every row the merge gives. */
  private static List<String> merged(SortedMergeReader r) throws IOException {
    List<String> out = new ArrayList<>();
    while (r.next()) {
      InternalRow row = r.get();
      out.add((row.isNullAt(0) ? "null" : String.valueOf(row.getInt(0))) + ":" + row.getUTF8String(1));
    }
    return out;
  }

  @Test
  void mergesRunsOfAnyBatchingIntoOneOrder() throws IOException {
    Run a = new Run("a", new Integer[] {1, 4}, new Integer[] {}, new Integer[] {7, 10});
    Run b = new Run("b", new Integer[] {2, 3, 9});
    Run empty = new Run("e");
    Run c = new Run("c", new Integer[] {0}, new Integer[] {5}, new Integer[] {11});
    SortedMergeReader r = new SortedMergeReader(List.of(a, b, empty, c), new int[] {0}, KEY);
    assertEquals(
        List.of("0:c0", "1:a0", "2:b0", "3:b1", "4:a1", "5:c0", "7:a0", "9:b2", "10:a1", "11:c0"),
        merged(r));
    // Every run was read to its end, where a shuffle reader checks its END frames.
    for (Run run : List.of(a, b, empty, c)) {
      assertTrue(run.drained);
    }
    assertFalse(r.next());
    r.close();
  }

  @Test
  void equalKeysKeepTheRunsOrderAndNullsComeFirst() throws IOException {
    Run a = new Run("a", new Integer[] {null, 3, 3});
    Run b = new Run("b", new Integer[] {null, 2, 3});
    SortedMergeReader r = new SortedMergeReader(List.of(a, b), new int[] {0}, KEY);
    assertEquals(List.of("null:a0", "null:b0", "2:b1", "3:a1", "3:a2", "3:b2"), merged(r));
  }

  @Test
  void ordersByEverySortColumn() throws IOException {
    // Sorted by (key, tag): equal keys are ordered by the second column, not by run.
    Run a = new Run("y", new Integer[] {1, 2});
    Run b = new Run("x", new Integer[] {1, 2});
    SortedMergeReader r =
        new SortedMergeReader(
            List.of(a, b), new int[] {0, 1}, new DataType[] {DataTypes.IntegerType, DataTypes.StringType});
    assertEquals(List.of("1:x0", "1:y0", "2:x1", "2:y1"), merged(r));
  }

  @Test
  void aRunsFailureIsTheReadsAndCloseClosesEveryRun() throws IOException {
    Run a = new Run("a", new Integer[] {1, 2});
    Run b = new Run("b", new Integer[] {3});
    b.failAtEnd = new IOException("END check failed");
    SortedMergeReader r = new SortedMergeReader(List.of(a, b), new int[] {0}, KEY);
    IOException e = assertThrows(IOException.class, () -> merged(r));
    assertEquals("END check failed", e.getMessage());
    r.close();
    assertTrue(a.closed && b.closed);
  }

  @Test
  void closeGoesOnPastAFailingRunAndReportsTheFirstFailure() {
    PartitionReader<ColumnarBatch> bad =
        new Run("x") {
          @Override
          public void close() {
            super.close();
            throw new IllegalStateException("releasing a batch's Arrow memory");
          }
        };
    Run good = new Run("g", new Integer[] {1});
    SortedMergeReader r = new SortedMergeReader(Arrays.asList(bad, good), new int[] {0}, KEY);
    IOException e = assertThrows(IOException.class, r::close);
    assertTrue(e.getCause() instanceof IllegalStateException);
    assertTrue(good.closed);
  }
}
