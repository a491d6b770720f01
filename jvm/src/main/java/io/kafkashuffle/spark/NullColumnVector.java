package io.kafkashuffle.spark;

import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A column of {@code rows} nulls, of any type: a column a run does not have (added since, or
 * left out of its frames). It holds no memory and never changes, so one serves every batch of
 * that many rows ({@link SchemaResolution} keeps it). Spark reads a value only where {@link
 * #isNullAt} is false, which is nowhere; were it asked, it gets the type's zero.
 */
final class NullColumnVector extends ColumnVector {
  private final int rows;

  NullColumnVector(DataType type, int rows) {
    super(type);
    this.rows = rows;
  }

  int rows() {
    return rows;
  }

  @Override
  public void close() {}

  @Override
  public boolean hasNull() {
    return rows > 0;
  }

  @Override
  public int numNulls() {
    return rows;
  }

  @Override
  public boolean isNullAt(int rowId) {
    return true;
  }

  @Override
  public boolean getBoolean(int rowId) {
    return false;
  }

  @Override
  public byte getByte(int rowId) {
    return 0;
  }

  @Override
  public short getShort(int rowId) {
    return 0;
  }

  @Override
  public int getInt(int rowId) {
    return 0;
  }

  @Override
  public long getLong(int rowId) {
    return 0;
  }

  @Override
  public float getFloat(int rowId) {
    return 0;
  }

  @Override
  public double getDouble(int rowId) {
    return 0;
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    return null;
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    return null;
  }

  @Override
  public byte[] getBinary(int rowId) {
    return null;
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    return null;
  }

  @Override
  public ColumnarMap getMap(int ordinal) {
    return null;
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    // A struct's fields: null as the struct is, and as many rows.
    return new NullColumnVector(((StructType) dataType()).fields()[ordinal].dataType(), rows);
  }
}
