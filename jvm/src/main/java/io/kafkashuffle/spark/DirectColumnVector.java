package io.kafkashuffle.spark;

import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.BitVector;
import org.apache.arrow.vector.DateDayVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.Float8Vector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.SmallIntVector;
import org.apache.arrow.vector.TimeStampMicroTZVector;
import org.apache.arrow.vector.TimeStampMicroVector;
import org.apache.arrow.vector.TinyIntVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A Spark column over an Arrow vector's memory, read at its addresses.
 *
 * <p>{@link ArrowColumnVector} reads every value through Arrow's checked accessors (a bounds
 * and reference-count check per value, and a validity-bit lookup even in a column without
 * nulls). For the flat types a shuffle mostly holds (booleans, integers, floating point, dates,
 * timestamps, strings and binary) this reads the buffers directly, and a column without nulls
 * answers {@code isNullAt} without reading anything; other types keep {@link
 * ArrowColumnVector}. The vector must stay open while Spark reads the batch (the reader
 * releases it when Spark asks for the next one), and Spark reads only rows below the batch's
 * row count.
 */
final class DirectColumnVector extends ColumnVector {
  private enum Kind {
    BOOLEAN,
    BYTE,
    SHORT,
    INT,
    LONG,
    FLOAT,
    DOUBLE,
    STRING,
    BINARY
  }

  private final FieldVector vector;
  private final Kind kind;
  private final int nulls;
  private final long validity;
  private final long data;
  private final long offsets;

  private DirectColumnVector(FieldVector vector, Kind kind) {
    super(ArrowUtils.fromArrowField(vector.getField()));
    this.vector = vector;
    this.kind = kind;
    this.nulls = vector.getNullCount();
    this.validity = nulls == 0 ? 0 : vector.getValidityBufferAddress();
    this.data = vector.getValueCount() == 0 ? 0 : vector.getDataBufferAddress();
    this.offsets =
        (kind == Kind.STRING || kind == Kind.BINARY) && vector.getValueCount() > 0
            ? vector.getOffsetBufferAddress()
            : 0;
  }

  /** A column over {@code v}: read directly when its type allows, else through Arrow. */
  static ColumnVector of(FieldVector v) {
    Kind k = kindOf(v);
    return k == null ? new ArrowColumnVector(v) : new DirectColumnVector(v, k);
  }

  private static Kind kindOf(FieldVector v) {
    if (v instanceof BitVector) {
      return Kind.BOOLEAN;
    } else if (v instanceof TinyIntVector) {
      return Kind.BYTE;
    } else if (v instanceof SmallIntVector) {
      return Kind.SHORT;
    } else if (v instanceof IntVector || v instanceof DateDayVector) {
      return Kind.INT;
    } else if (v instanceof BigIntVector
        || v instanceof TimeStampMicroTZVector
        || v instanceof TimeStampMicroVector) {
      return Kind.LONG;
    } else if (v instanceof Float4Vector) {
      return Kind.FLOAT;
    } else if (v instanceof Float8Vector) {
      return Kind.DOUBLE;
    } else if (v instanceof VarCharVector) {
      return Kind.STRING;
    } else if (v instanceof VarBinaryVector) {
      return Kind.BINARY;
    }
    return null;
  }

  @Override
  public void close() {
    // The reader owns the vector and releases it with the batch.
  }

  @Override
  public boolean hasNull() {
    return nulls > 0;
  }

  @Override
  public int numNulls() {
    return nulls;
  }

  @Override
  public boolean isNullAt(int rowId) {
    return nulls != 0 && (Platform.getByte(null, validity + (rowId >> 3)) & (1 << (rowId & 7))) == 0;
  }

  @Override
  public boolean getBoolean(int rowId) {
    return (Platform.getByte(null, data + (rowId >> 3)) & (1 << (rowId & 7))) != 0;
  }

  @Override
  public byte getByte(int rowId) {
    return Platform.getByte(null, data + rowId);
  }

  @Override
  public short getShort(int rowId) {
    return Platform.getShort(null, data + 2L * rowId);
  }

  @Override
  public int getInt(int rowId) {
    return Platform.getInt(null, data + 4L * rowId);
  }

  @Override
  public long getLong(int rowId) {
    return Platform.getLong(null, data + 8L * rowId);
  }

  @Override
  public float getFloat(int rowId) {
    return Platform.getFloat(null, data + 4L * rowId);
  }

  @Override
  public double getDouble(int rowId) {
    return Platform.getDouble(null, data + 8L * rowId);
  }

  /** Where value {@code rowId} of a string or binary column starts in its data buffer. */
  private int start(int rowId) {
    return Platform.getInt(null, offsets + 4L * rowId);
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    if (isNullAt(rowId)) {
      return null;
    }
    int start = start(rowId);
    return UTF8String.fromAddress(null, data + start, start(rowId + 1) - start);
  }

  @Override
  public byte[] getBinary(int rowId) {
    if (isNullAt(rowId)) {
      return null;
    }
    int start = start(rowId);
    byte[] out = new byte[start(rowId + 1) - start];
    Platform.copyMemory(null, data + start, out, Platform.BYTE_ARRAY_OFFSET, out.length);
    return out;
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    throw unsupported();
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    throw unsupported();
  }

  @Override
  public ColumnarMap getMap(int ordinal) {
    throw unsupported();
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    throw unsupported();
  }

  private UnsupportedOperationException unsupported() {
    return new UnsupportedOperationException(
        "column '" + vector.getField().getName() + "' of kind " + kind + " has no such value");
  }
}
