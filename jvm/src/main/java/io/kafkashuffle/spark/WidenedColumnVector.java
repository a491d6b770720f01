package io.kafkashuffle.spark;

import java.math.BigDecimal;
import java.nio.ByteOrder;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.DateDayVector;
import org.apache.arrow.vector.Decimal256Vector;
import org.apache.arrow.vector.DecimalVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.SmallIntVector;
import org.apache.arrow.vector.TinyIntVector;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A run's narrower column read as the latest version's wider type, with no copy: each value is
 * read from the narrower vector's memory when Spark asks for it, and widened then, exactly as
 * the promotions of {@link SchemaResolution#promotionProblem} allow: a wider integer, float or
 * a 32-bit-or-narrower integer as double, an integer or a decimal as a decimal with room for
 * it, a date as the timestamp of its midnight. Nulls are the narrower vector's.
 *
 * <p>A copy into a vector of the wider type costs an allocation of the batch's size and a pass
 * over its rows before Spark reads any; Spark then reads every value once more. Here the
 * widening is the read. The vector must stay open while Spark reads the batch (the reader
 * releases it when Spark asks for the next one), and Spark reads only rows below the batch's row
 * count.
 */
final class WidenedColumnVector extends ColumnVector {
  private enum From {
    BYTE,
    SHORT,
    INT,
    LONG,
    FLOAT,
    DECIMAL,
    DATE
  }

  private static final boolean LITTLE_ENDIAN = ByteOrder.nativeOrder() == ByteOrder.LITTLE_ENDIAN;
  private static final long[] POW10 = new long[19];

  static {
    POW10[0] = 1;
    for (int i = 1; i < POW10.length; i++) {
      POW10[i] = POW10[i - 1] * 10;
    }
  }

  private final FieldVector vector;
  private final From from;
  private final int nulls;
  private final long validity;
  private final long data;
  private final long perDay; // a date's midnight in the timestamp's unit
  private final int fromScale; // of a decimal read
  private final boolean longDecimal; // a decimal of at most 18 digits: its low 64 bits

  private WidenedColumnVector(FieldVector vector, From from, DataType type, long perDay) {
    super(type);
    this.vector = vector;
    this.from = from;
    this.nulls = vector.getNullCount();
    this.validity = nulls == 0 ? 0 : vector.getValidityBufferAddress();
    this.data = vector.getValueCount() == 0 ? 0 : vector.getDataBufferAddress();
    this.perDay = perDay;
    if (vector.getField().getType() instanceof ArrowType.Decimal d) {
      this.fromScale = d.getScale();
      this.longDecimal = vector instanceof DecimalVector && d.getPrecision() <= 18 && LITTLE_ENDIAN;
    } else {
      this.fromScale = 0;
      this.longDecimal = false;
    }
  }

  /**
   * {@code narrow} read as {@code to} (Spark type {@code type}), a promotion {@link
   * SchemaResolution#promotionProblem} allows. A date outside the timestamp's range fails here,
   * naming the date and {@code column}, before Spark reads any row.
   */
  static ColumnVector of(FieldVector narrow, ArrowType to, DataType type, String column) {
    From from = fromOf(narrow);
    long perDay = 0;
    if (from == From.DATE) {
      ArrowType.Timestamp t = (ArrowType.Timestamp) to;
      perDay =
          switch (t.getUnit()) {
            case SECOND -> 86_400L;
            case MILLISECOND -> 86_400_000L;
            case MICROSECOND -> 86_400_000_000L;
            case NANOSECOND -> 86_400_000_000_000L;
          };
      checkDates((DateDayVector) narrow, perDay, t, column);
    }
    return new WidenedColumnVector(narrow, from, type, perDay);
  }

  private static From fromOf(FieldVector v) {
    if (v instanceof TinyIntVector) {
      return From.BYTE;
    } else if (v instanceof SmallIntVector) {
      return From.SHORT;
    } else if (v instanceof IntVector) {
      return From.INT;
    } else if (v instanceof BigIntVector) {
      return From.LONG;
    } else if (v instanceof Float4Vector) {
      return From.FLOAT;
    } else if (v instanceof DecimalVector || v instanceof Decimal256Vector) {
      return From.DECIMAL;
    } else if (v instanceof DateDayVector) {
      return From.DATE;
    }
    throw new IllegalStateException("no widening of " + v.getField().getType());
  }

  /** Refuses a date whose midnight the timestamp's unit cannot hold. */
  private static void checkDates(
      DateDayVector d, long perDay, ArrowType.Timestamp t, String column) {
    long lowest = Long.MIN_VALUE / perDay;
    long highest = Long.MAX_VALUE / perDay;
    for (int i = 0; i < d.getValueCount(); i++) {
      if (d.isNull(i)) {
        continue;
      }
      int day = d.get(i);
      if (day < lowest || day > highest) {
        throw ShuffleException.format(
            "date "
                + d.getObject(i)
                + " of column '"
                + column
                + "' is outside "
                + SchemaResolution.typeName(t));
      }
    }
  }

  /** The value of an integer or date column at {@code rowId}, as a long. */
  private long integral(int rowId) {
    return switch (from) {
      case BYTE -> Platform.getByte(null, data + rowId);
      case SHORT -> Platform.getShort(null, data + 2L * rowId);
      case INT, DATE -> Platform.getInt(null, data + 4L * rowId);
      case LONG -> Platform.getLong(null, data + 8L * rowId);
      default -> throw unsupported();
    };
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
    return nulls != 0
        && (Platform.getByte(null, validity + (rowId >> 3)) & (1 << (rowId & 7))) == 0;
  }

  @Override
  public boolean getBoolean(int rowId) {
    throw unsupported();
  }

  @Override
  public byte getByte(int rowId) {
    throw unsupported();
  }

  @Override
  public short getShort(int rowId) {
    return (short) integral(rowId);
  }

  @Override
  public int getInt(int rowId) {
    return (int) integral(rowId);
  }

  @Override
  public long getLong(int rowId) {
    long v = integral(rowId);
    return from == From.DATE ? v * perDay : v;
  }

  @Override
  public float getFloat(int rowId) {
    throw unsupported();
  }

  @Override
  public double getDouble(int rowId) {
    if (from == From.FLOAT) {
      return Platform.getFloat(null, data + 4L * rowId);
    }
    return (double) integral(rowId);
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    if (isNullAt(rowId)) {
      return null;
    }
    if (from == From.DECIMAL) {
      if (longDecimal) {
        // Two's complement, little-endian: a value of at most 18 digits is its low 64 bits.
        long unscaled = Platform.getLong(null, data + 16L * rowId);
        return decimal(unscaled, scale - fromScale, fromScale, precision, scale);
      }
      BigDecimal b =
          vector instanceof DecimalVector d
              ? d.getObject(rowId)
              : ((Decimal256Vector) vector).getObject(rowId);
      return Decimal.apply(b.setScale(scale), precision, scale);
    }
    return decimal(integral(rowId), scale, 0, precision, scale);
  }

  /** {@code unscaled} (of scale {@code ownScale}) as a decimal of {@code scale}, exactly. */
  private static Decimal decimal(long unscaled, int gain, int ownScale, int precision, int scale) {
    if (precision <= 18) {
      // The promotion leaves room for every value: times 10^gain it still has at most
      // `precision` digits, within a long.
      return Decimal.apply(unscaled * POW10[gain], precision, scale);
    }
    return Decimal.apply(BigDecimal.valueOf(unscaled, ownScale).setScale(scale), precision, scale);
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    throw unsupported();
  }

  @Override
  public byte[] getBinary(int rowId) {
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
        "column '"
            + vector.getField().getName()
            + "' read widened from "
            + from
            + " as "
            + dataType()
            + " has no such value");
  }
}
