package io.kafkashuffle.spark;

import java.io.IOException;
import java.util.Arrays;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.array.ByteArrayMethods;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Runs a {@link PushedAggregation} over one split: reads its batches (only the group and input
 * columns decoded), gives each row its group's number, a batch at a time, then updates each
 * aggregate's accumulators (arrays indexed by group) over the batch, and at the end hands over
 * one row per group.
 *
 * <p>Every group's rows are in one Kafka partition, so the groups of each partition the split
 * reads are numbered and accumulated apart ({@link Part}): a table of a partition's groups is a
 * fraction of the split's, and stays in the processor's caches longer. Groups of one string
 * column, or of one integer, date or timestamp column, are found in an open-addressing table
 * of their values; other groups by their columns' bytes (an {@link UnsafeRow}, as Spark's own
 * hash aggregation keys them).
 */
final class AggregatingReader implements PartitionReader<InternalRow> {
  private final ShuffleBatchReader in;
  private final PushedAggregation agg;
  private final int groupColumns;
  private final int[] kinds; // per aggregate, the K_ constant of what it does with a row
  private final int[] widths; // per aggregate, how its input reads as a long (W_ constants)
  private final List<Part> parts = new ArrayList<>();
  private int part; // the part being handed over
  private int next = -1; // the next group of that part to hand over; -1: not aggregated yet
  private InternalRow current;

  /** The groups of one Kafka partition and their accumulators. */
  private final class Part {
    final Groups groups;
    long[][] longs; // per aggregate, per group
    double[][] doubles;
    long[][] counts; // per aggregate, per group: the values seen (rows for count(*))

    Part() {
      DataType only = groupColumns == 1 ? agg.groupTypes[0] : null;
      if (only != null && only.equals(DataTypes.StringType)) {
        groups = new StringGroups();
      } else if (only != null && PushedAggregation.longLike(only)) {
        groups = new LongGroups(width(only));
      } else {
        groups = new RowGroups(agg.groupTypes);
      }
      int n = kinds.length;
      longs = new long[n][16];
      doubles = new double[n][16];
      counts = new long[n][16];
    }

    void grow(int size) {
      int have = counts.length == 0 ? size : counts[0].length;
      if (size <= have) {
        return;
      }
      int capacity = Math.max(size, have * 2);
      for (int i = 0; i < kinds.length; i++) {
        longs[i] = Arrays.copyOf(longs[i], capacity);
        doubles[i] = Arrays.copyOf(doubles[i], capacity);
        counts[i] = Arrays.copyOf(counts[i], capacity);
      }
    }
  }

  private static final int K_COUNT_STAR = 0;
  private static final int K_COUNT = 1;
  private static final int K_SUM_LONG = 2;
  private static final int K_SUM_DOUBLE = 3;
  private static final int K_AVG = 4;
  private static final int K_MIN_LONG = 5;
  private static final int K_MAX_LONG = 6;
  private static final int K_MIN_DOUBLE = 7;
  private static final int K_MAX_DOUBLE = 8;

  private static final int W_BYTE = 0;
  private static final int W_SHORT = 1;
  private static final int W_INT = 2; // int, date
  private static final int W_LONG = 3; // long, timestamp
  private static final int W_FLOAT = 4;
  private static final int W_DOUBLE = 5;

  AggregatingReader(ShuffleBatchReader in, PushedAggregation agg) {
    this.in = in;
    this.agg = agg;
    this.groupColumns = agg.groupTypes.length;
    int n = agg.fns.length;
    this.kinds = new int[n];
    this.widths = new int[n];
    for (int i = 0; i < n; i++) {
      DataType t = agg.inputTypes[i];
      boolean floating = t != null && PushedAggregation.floating(t);
      widths[i] = t == null ? W_LONG : width(t);
      kinds[i] =
          switch (agg.fns[i]) {
            case COUNT_STAR -> K_COUNT_STAR;
            case COUNT -> K_COUNT;
            case SUM -> floating ? K_SUM_DOUBLE : K_SUM_LONG;
            case AVG -> K_AVG;
            case MIN -> floating ? K_MIN_DOUBLE : K_MIN_LONG;
            case MAX -> floating ? K_MAX_DOUBLE : K_MAX_LONG;
          };
    }
  }

  private static int width(DataType t) {
    if (t instanceof ByteType) {
      return W_BYTE;
    }
    if (t instanceof ShortType) {
      return W_SHORT;
    }
    if (t instanceof IntegerType || t instanceof DateType) {
      return W_INT;
    }
    if (t instanceof FloatType) {
      return W_FLOAT;
    }
    if (PushedAggregation.floating(t)) {
      return W_DOUBLE;
    }
    return W_LONG;
  }

  @Override
  public boolean next() throws IOException {
    if (next < 0) {
      aggregate();
      next = 0;
    }
    while (part < parts.size() && next >= parts.get(part).groups.size()) {
      part++;
      next = 0;
    }
    if (part >= parts.size()) {
      current = null;
      return false;
    }
    current = row(parts.get(part), next++);
    return true;
  }

  @Override
  public InternalRow get() {
    return current;
  }

  @Override
  public void close() throws IOException {
    in.close();
  }

  private void aggregate() throws IOException {
    ColumnVector[] keys = new ColumnVector[groupColumns];
    int[] ids = new int[0];
    Part p = null;
    int read = -1;
    while (in.next()) {
      if (p == null || in.readIndex() != read) {
        read = in.readIndex();
        p = new Part();
        parts.add(p);
      }
      ColumnarBatch batch = in.get();
      int rows = batch.numRows();
      if (ids.length < rows) {
        ids = new int[rows];
      }
      for (int g = 0; g < groupColumns; g++) {
        keys[g] = batch.column(g);
      }
      p.groups.ids(keys, rows, ids);
      p.grow(p.groups.size());
      for (int i = 0; i < kinds.length; i++) {
        update(p, i, agg.inputs[i] < 0 ? null : batch.column(agg.inputs[i]), rows, ids);
      }
    }
  }

  /** Adds the batch's rows to aggregate {@code i}: one loop per kind, nulls skipped. */
  private void update(Part p, int i, ColumnVector v, int rows, int[] ids) {
    long[] l = p.longs[i];
    double[] d = p.doubles[i];
    long[] n = p.counts[i];
    int w = widths[i];
    switch (kinds[i]) {
      case K_COUNT_STAR:
        for (int r = 0; r < rows; r++) {
          n[ids[r]]++;
        }
        break;
      case K_COUNT:
        for (int r = 0; r < rows; r++) {
          if (!v.isNullAt(r)) {
            n[ids[r]]++;
          }
        }
        break;
      case K_SUM_LONG:
        for (int r = 0; r < rows; r++) {
          if (!v.isNullAt(r)) {
            int g = ids[r];
            long x = longAt(v, w, r);
            l[g] = agg.ansi ? addExact(l[g], x, i) : l[g] + x;
            n[g]++;
          }
        }
        break;
      case K_SUM_DOUBLE:
      case K_AVG:
        for (int r = 0; r < rows; r++) {
          if (!v.isNullAt(r)) {
            int g = ids[r];
            d[g] += doubleAt(v, w, r);
            n[g]++;
          }
        }
        break;
      case K_MIN_LONG:
        for (int r = 0; r < rows; r++) {
          if (!v.isNullAt(r)) {
            int g = ids[r];
            long x = longAt(v, w, r);
            if (n[g]++ == 0 || x < l[g]) {
              l[g] = x;
            }
          }
        }
        break;
      case K_MAX_LONG:
        for (int r = 0; r < rows; r++) {
          if (!v.isNullAt(r)) {
            int g = ids[r];
            long x = longAt(v, w, r);
            if (n[g]++ == 0 || x > l[g]) {
              l[g] = x;
            }
          }
        }
        break;
      case K_MIN_DOUBLE:
        // NaN is larger than any other value in Spark's order.
        for (int r = 0; r < rows; r++) {
          if (!v.isNullAt(r)) {
            int g = ids[r];
            double x = doubleAt(v, w, r);
            double m = d[g];
            if (n[g]++ == 0 || x < m || (Double.isNaN(m) && !Double.isNaN(x))) {
              d[g] = x;
            }
          }
        }
        break;
      case K_MAX_DOUBLE:
        for (int r = 0; r < rows; r++) {
          if (!v.isNullAt(r)) {
            int g = ids[r];
            double x = doubleAt(v, w, r);
            double m = d[g];
            if (n[g]++ == 0 || x > m || (Double.isNaN(x) && !Double.isNaN(m))) {
              d[g] = x;
            }
          }
        }
        break;
      default:
        throw new IllegalStateException("aggregate kind " + kinds[i]);
    }
  }

  private long addExact(long a, long b, int i) {
    try {
      return Math.addExact(a, b);
    } catch (ArithmeticException e) {
      throw new ArithmeticException(
          "[ARITHMETIC_OVERFLOW] long overflow in "
              + agg.output.fields()[groupColumns + i].name()
              + " of a read of a shuffle (spark.sql.ansi.enabled is true; try_sum, or setting"
              + " it to false, returns a wrapped sum instead)");
    }
  }

  private static long longAt(ColumnVector v, int width, int r) {
    return switch (width) {
      case W_BYTE -> v.getByte(r);
      case W_SHORT -> v.getShort(r);
      case W_INT -> v.getInt(r);
      default -> v.getLong(r);
    };
  }

  private static double doubleAt(ColumnVector v, int width, int r) {
    return switch (width) {
      case W_FLOAT -> v.getFloat(r);
      case W_DOUBLE -> v.getDouble(r);
      default -> longAt(v, width, r);
    };
  }

  private InternalRow row(Part p, int g) {
    Object[] values = new Object[groupColumns + kinds.length];
    p.groups.values(g, values);
    for (int i = 0; i < kinds.length; i++) {
      values[groupColumns + i] = result(p, i, g);
    }
    return new GenericInternalRow(values);
  }

  private Object result(Part p, int i, int g) {
    int kind = kinds[i];
    long n = p.counts[i][g];
    if (kind == K_COUNT_STAR || kind == K_COUNT) {
      return n;
    }
    if (n == 0) {
      return null;
    }
    return switch (kind) {
      case K_SUM_LONG -> p.longs[i][g];
      case K_SUM_DOUBLE -> p.doubles[i][g];
      case K_AVG -> p.doubles[i][g] / n;
      case K_MIN_LONG, K_MAX_LONG -> ofWidth(p.longs[i][g], widths[i]);
      default -> widths[i] == W_FLOAT ? (Object) (float) p.doubles[i][g] : p.doubles[i][g];
    };
  }

  /** A long as the boxed value Spark keeps for a column of that width. */
  private static Object ofWidth(long x, int width) {
    return switch (width) {
      case W_BYTE -> (byte) x;
      case W_SHORT -> (short) x;
      case W_INT -> (int) x;
      default -> x;
    };
  }

  /** Numbers the groups of a split's rows, 0, 1, ... in the order they are first seen. */
  private interface Groups {
    /** Sets {@code ids[r]} to the number of row {@code r}'s group, for each of {@code rows}. */
    void ids(ColumnVector[] keys, int rows, int[] ids);

    int size();

    /** Puts group {@code g}'s column values at the start of {@code row}. */
    void values(int g, Object[] row);
  }

  /**
   * An open-addressing table of group numbers, probed linearly: each slot holds a group's hash
   * (high half) and its number + 1 (low half; 0: empty), so a probe compares hashes without
   * leaving the table. A null value is a group of its own, outside the table.
   */
  private abstract static class Table implements Groups {
    long[] slots = new long[1024];
    int size;
    int nullGroup = -1;
    private int inTable;

    final int nullId() {
      if (nullGroup < 0) {
        nullGroup = size++;
        grownTo(size);
      }
      return nullGroup;
    }

    /** Room for values of groups [0, capacity). */
    abstract void grownTo(int capacity);

    /** The number of the group whose value has hash {@code h} and is equal per {@link #same}. */
    final int find(int h) {
      long tag = ((long) h) << 32;
      int mask = slots.length - 1;
      int at = h & mask;
      while (true) {
        long slot = slots[at];
        if (slot == 0) {
          int g = size++;
          grownTo(size);
          slots[at] = tag | (g + 1L);
          if (++inTable * 2 > slots.length) {
            rehash();
          }
          return -g - 1; // new: the caller keeps its value
        }
        if ((slot & 0xFFFFFFFF00000000L) == tag) {
          int g = (int) slot - 1;
          if (same(g)) {
            return g;
          }
        }
        at = (at + 1) & mask;
      }
    }

    /** Whether group {@code g}'s value is the one {@link #find} is looking for. */
    abstract boolean same(int g);

    private void rehash() {
      long[] bigger = new long[slots.length * 2];
      int mask = bigger.length - 1;
      for (long slot : slots) {
        if (slot != 0) {
          int s = ((int) (slot >>> 32)) & mask;
          while (bigger[s] != 0) {
            s = (s + 1) & mask;
          }
          bigger[s] = slot;
        }
      }
      slots = bigger;
    }

    @Override
    public int size() {
      return size;
    }
  }

  /**
   * Groups of one string column (the binary collation: equal bytes, equal strings), their
   * bytes kept one after another in one array.
   */
  private static final class StringGroups extends Table {
    private byte[] bytes = new byte[1 << 12];
    private int used;
    private int[] starts = new int[16];
    private int[] lengths = new int[16];
    private UTF8String looking; // what find() compares with

    @Override
    void grownTo(int capacity) {
      if (capacity > starts.length) {
        starts = Arrays.copyOf(starts, Math.max(capacity, starts.length * 2));
        lengths = Arrays.copyOf(lengths, starts.length);
      }
    }

    @Override
    boolean same(int g) {
      UTF8String s = looking;
      int n = s.numBytes();
      return lengths[g] == n
          && ByteArrayMethods.arrayEquals(
              bytes,
              Platform.BYTE_ARRAY_OFFSET + starts[g],
              s.getBaseObject(),
              s.getBaseOffset(),
              n);
    }

    @Override
    public void ids(ColumnVector[] keys, int rows, int[] ids) {
      ColumnVector v = keys[0];
      for (int r = 0; r < rows; r++) {
        if (v.isNullAt(r)) {
          ids[r] = nullId();
          continue;
        }
        UTF8String s = v.getUTF8String(r);
        looking = s;
        int g = find(s.hashCode());
        if (g < 0) {
          g = -g - 1;
          keep(g, s);
        }
        ids[r] = g;
      }
      looking = null;
    }

    private void keep(int g, UTF8String s) {
      int n = s.numBytes();
      if (used + n > bytes.length) {
        bytes = Arrays.copyOf(bytes, Math.max(used + n, bytes.length * 2));
      }
      Platform.copyMemory(
          s.getBaseObject(), s.getBaseOffset(), bytes, Platform.BYTE_ARRAY_OFFSET + used, n);
      starts[g] = used;
      lengths[g] = n;
      used += n;
    }

    @Override
    public void values(int g, Object[] row) {
      row[0] = g == nullGroup ? null : UTF8String.fromBytes(bytes, starts[g], lengths[g]);
    }
  }

  /** Groups of one integer, date or timestamp column. */
  private static final class LongGroups extends Table {
    private final int width;
    private long[] values = new long[16];
    private long looking;

    LongGroups(int width) {
      this.width = width;
    }

    @Override
    void grownTo(int capacity) {
      if (capacity > values.length) {
        values = Arrays.copyOf(values, Math.max(capacity, values.length * 2));
      }
    }

    @Override
    boolean same(int g) {
      return values[g] == looking;
    }

    private static int hash(long x) {
      long h = x * 0x9E3779B97F4A7C15L;
      return (int) (h ^ (h >>> 32));
    }

    @Override
    public void ids(ColumnVector[] keys, int rows, int[] ids) {
      ColumnVector v = keys[0];
      for (int r = 0; r < rows; r++) {
        if (v.isNullAt(r)) {
          ids[r] = nullId();
          continue;
        }
        long x = longAt(v, width, r);
        looking = x;
        int g = find(hash(x));
        if (g < 0) {
          g = -g - 1;
          values[g] = x;
        }
        ids[r] = g;
      }
    }

    @Override
    public void values(int g, Object[] row) {
      row[0] = g == nullGroup ? null : ofWidth(values[g], width);
    }
  }

  /** Groups of several columns, or of one of another type: by their bytes. */
  private static final class RowGroups implements Groups {
    private final DataType[] types;
    private final UnsafeProjection project;
    private final Map<UnsafeRow, Integer> ids = new HashMap<>();
    private UnsafeRow[] rows = new UnsafeRow[16];

    RowGroups(DataType[] types) {
      this.types = types;
      this.project = UnsafeProjection.create(types);
    }

    @Override
    public void ids(ColumnVector[] keys, int count, int[] out) {
      ColumnarBatch view = new ColumnarBatch(keys, count);
      for (int r = 0; r < count; r++) {
        UnsafeRow key = project.apply(view.getRow(r));
        Integer g = ids.get(key);
        if (g == null) {
          g = ids.size();
          UnsafeRow kept = key.copy();
          ids.put(kept, g);
          if (g >= rows.length) {
            rows = Arrays.copyOf(rows, rows.length * 2);
          }
          rows[g] = kept;
        }
        out[r] = g;
      }
    }

    @Override
    public int size() {
      return ids.size();
    }

    @Override
    public void values(int g, Object[] row) {
      UnsafeRow key = rows[g];
      for (int c = 0; c < types.length; c++) {
        row[c] = key.isNullAt(c) ? null : key.get(c, types[c]);
      }
    }
  }
}
