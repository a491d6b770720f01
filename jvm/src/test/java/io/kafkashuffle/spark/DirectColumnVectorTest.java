package io.kafkashuffle.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.function.BiConsumer;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.BitVector;
import org.apache.arrow.vector.DateDayVector;
import org.apache.arrow.vector.DecimalVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.Float8Vector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.SmallIntVector;
import org.apache.arrow.vector.TimeStampMicroTZVector;
import org.apache.arrow.vector.TinyIntVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** Each flat type read at its addresses gives what Spark's own ArrowColumnVector gives. */
class DirectColumnVectorTest {
  private static final int ROWS = 21; // more than two bytes of validity bits
  private final BufferAllocator allocator = new RootAllocator();

  @AfterEach
  void noLeaks() {
    allocator.close();
  }

  /** Fills {@code v} with {@code set(v, row)} on rows not divisible by {@code nullEvery}. */
  private static <V extends FieldVector> V fill(V v, int nullEvery, BiConsumer<V, Integer> set) {
    v.allocateNew();
    for (int i = 0; i < ROWS; i++) {
      if (nullEvery > 0 && i % nullEvery == 0) {
        v.setNull(i);
      } else {
        set.accept(v, i);
      }
    }
    v.setValueCount(ROWS);
    return v;
  }

  /** Every row of {@code direct} against Spark's reading of the same vector. */
  private static void assertSameAsArrow(FieldVector v, java.util.function.BiFunction<ColumnVector, Integer, Object> get) {
    ColumnVector direct = DirectColumnVector.of(v);
    ColumnVector spark = new ArrowColumnVector(v);
    assertInstanceOf(DirectColumnVector.class, direct);
    assertEquals(spark.dataType(), direct.dataType());
    assertEquals(spark.hasNull(), direct.hasNull());
    assertEquals(spark.numNulls(), direct.numNulls());
    for (int i = 0; i < ROWS; i++) {
      assertEquals(spark.isNullAt(i), direct.isNullAt(i), "null at " + i);
      if (!spark.isNullAt(i)) {
        Object want = get.apply(spark, i);
        Object got = get.apply(direct, i);
        if (want instanceof byte[]) {
          assertArrayEquals((byte[]) want, (byte[]) got, "row " + i);
        } else {
          assertEquals(want, got, "row " + i);
        }
      }
    }
  }

  @Test
  void integersAndFloatingPoint() {
    try (TinyIntVector b = fill(new TinyIntVector("b", allocator), 3, (v, i) -> v.set(i, -i));
        SmallIntVector s = fill(new SmallIntVector("s", allocator), 4, (v, i) -> v.set(i, i * -1000));
        IntVector n = fill(new IntVector("i", allocator), 5, (v, i) -> v.set(i, i * 100_000_007));
        BigIntVector l = fill(new BigIntVector("l", allocator), 2, (v, i) -> v.set(i, -3L << (2 * i)));
        Float4Vector f = fill(new Float4Vector("f", allocator), 7, (v, i) -> v.set(i, i / 3f));
        Float8Vector d = fill(new Float8Vector("d", allocator), 6, (v, i) -> v.set(i, -i / 7.0))) {
      assertSameAsArrow(b, ColumnVector::getByte);
      assertSameAsArrow(s, ColumnVector::getShort);
      assertSameAsArrow(n, ColumnVector::getInt);
      assertSameAsArrow(l, ColumnVector::getLong);
      assertSameAsArrow(f, ColumnVector::getFloat);
      assertSameAsArrow(d, ColumnVector::getDouble);
      assertEquals(DataTypes.ByteType, DirectColumnVector.of(b).dataType());
      assertEquals(-4, DirectColumnVector.of(b).getByte(4));
      assertTrue(DirectColumnVector.of(l).isNullAt(20));
      assertEquals(-3L << 2, DirectColumnVector.of(l).getLong(1));
    }
  }

  @Test
  void booleansDatesAndTimestamps() {
    try (BitVector b = fill(new BitVector("b", allocator), 5, (v, i) -> v.set(i, i % 3 == 1 ? 1 : 0));
        DateDayVector d = fill(new DateDayVector("d", allocator), 4, (v, i) -> v.set(i, 15706 + i));
        TimeStampMicroTZVector t =
            fill(new TimeStampMicroTZVector("t", allocator, "UTC"), 3, (v, i) -> v.set(i, i * 1_000_001L))) {
      assertSameAsArrow(b, ColumnVector::getBoolean);
      assertSameAsArrow(d, ColumnVector::getInt);
      assertSameAsArrow(t, ColumnVector::getLong);
      assertEquals(DataTypes.DateType, DirectColumnVector.of(d).dataType());
      assertEquals(DataTypes.TimestampType, DirectColumnVector.of(t).dataType());
      assertTrue(DirectColumnVector.of(b).getBoolean(19));
      assertFalse(DirectColumnVector.of(b).getBoolean(18));
    }
  }

  @Test
  void stringsAndBinary() {
    String[] words = {"", "a", "é日本🎉", "longer than eight bytes"};
    try (VarCharVector s =
            fill(new VarCharVector("s", allocator), 5, (v, i) -> v.setSafe(i, words[i % 4].getBytes(StandardCharsets.UTF_8)));
        VarBinaryVector b =
            fill(new VarBinaryVector("b", allocator), 0, (v, i) -> v.setSafe(i, new byte[] {(byte) (int) i, 0, (byte) -i}))) {
      assertSameAsArrow(s, (c, i) -> c.getUTF8String(i).toString());
      assertSameAsArrow(b, ColumnVector::getBinary);
      ColumnVector direct = DirectColumnVector.of(s);
      assertNull(direct.getUTF8String(0));
      assertEquals("é日本🎉", direct.getUTF8String(2).toString());
      assertEquals("", direct.getUTF8String(4 + 4).toString());
    }
  }

  @Test
  void aColumnWithoutNullsSaysSo() {
    try (IntVector n = fill(new IntVector("i", allocator), 0, (v, i) -> v.set(i, i))) {
      ColumnVector c = DirectColumnVector.of(n);
      assertFalse(c.hasNull());
      assertEquals(0, c.numNulls());
      for (int i = 0; i < ROWS; i++) {
        assertFalse(c.isNullAt(i));
        assertEquals(i, c.getInt(i));
      }
    }
  }

  @Test
  void anEmptyColumn() {
    try (VarCharVector s = new VarCharVector("s", allocator)) {
      s.allocateNew();
      s.setValueCount(0);
      ColumnVector c = DirectColumnVector.of(s);
      assertFalse(c.hasNull());
      assertEquals(DataTypes.StringType, c.dataType());
    }
  }

  @Test
  void otherTypesAreReadThroughArrow() {
    try (DecimalVector d = new DecimalVector("price", allocator, 10, 2)) {
      d.allocateNew();
      d.set(0, 12345L);
      d.setValueCount(1);
      ColumnVector c = DirectColumnVector.of(d);
      assertInstanceOf(ArrowColumnVector.class, c);
      assertEquals("123.45", c.getDecimal(0, 10, 2).toString());
    }
    try (IntVector n = fill(new IntVector("qty", allocator), 0, (v, i) -> v.set(i, i))) {
      UnsupportedOperationException e =
          assertThrows(UnsupportedOperationException.class, () -> DirectColumnVector.of(n).getArray(0));
      assertEquals("column 'qty' of kind INT has no such value", e.getMessage());
    }
  }
}
