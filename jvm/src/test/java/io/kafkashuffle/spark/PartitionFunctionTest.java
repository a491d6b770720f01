package io.kafkashuffle.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.functions.ScalarFunction;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;

/**
 * A key's partition against Spark SQL's {@code hash()}: the hashes below are what Spark printed
 * for {@code SELECT hash(...)} of these literals (the same values tests/unit/test_keygroups.py
 * holds the Python hash to).
 */
class PartitionFunctionTest {
  // A prime above every hash's key group: with as many partitions, a key's partition is
  // pmod(hash, this), so the hash itself shows through.
  private static final int WIDE = 999_999_937;
  private static final int DATE_2013_01_01 = 15706; // days since the epoch
  private static final long TS_2013_01_01_0515 = 1357017300000000L; // microseconds, UTC

  private static int partition(int maxParallelism, int partitions, DataType[] types, Object... key) {
    StructType input = new StructType();
    for (int i = 0; i < types.length; i++) {
      input = input.add("k" + i, types[i]);
    }
    @SuppressWarnings("unchecked")
    ScalarFunction<Integer> f =
        (ScalarFunction<Integer>) new PartitionFunction(maxParallelism, partitions).bind(input);
    InternalRow row = new GenericInternalRow(key);
    return f.produceResult(row);
  }

  private static void assertHash(int sparkHash, DataType type, Object value) {
    assertEquals(
        Math.floorMod(sparkHash, WIDE),
        partition(WIDE, WIDE, new DataType[] {type}, value),
        () -> type + " " + value);
  }

  @Test
  void hashesAsSparkSqlDoes() {
    assertHash(1853464548, DataTypes.StringType, UTF8String.fromString("N14228"));
    assertHash(142593372, DataTypes.StringType, UTF8String.fromString(""));
    assertHash(-1845002317, DataTypes.StringType, UTF8String.fromString("é日本🎉"));
    assertHash(1607884268, DataTypes.LongType, 5L);
    assertHash(-559580957, DataTypes.BooleanType, true);
    assertHash(-1477305664, DataTypes.DateType, DATE_2013_01_01);
    assertHash(-1188171685, DataTypes.TimestampType, TS_2013_01_01_0515);
    // An int column hashes its 32 bits: not as the bigint of the same value.
    assertHash(-1618159745, DataTypes.IntegerType, -7);
  }

  @Test
  void aCompositeKeyChainsTheSeed() {
    DataType[] types = {DataTypes.StringType, DataTypes.LongType, DataTypes.DateType};
    assertEquals(
        Math.floorMod(430199340, WIDE),
        partition(WIDE, WIDE, types, UTF8String.fromString("N14228"), 5L, DATE_2013_01_01));
  }

  @Test
  void aNullColumnLeavesTheSeedAsItIs() {
    DataType[] two = {DataTypes.StringType, DataTypes.StringType};
    assertEquals(
        Math.floorMod(1853464548, WIDE),
        partition(WIDE, WIDE, two, null, UTF8String.fromString("N14228")));
  }

  @Test
  void keyGroupIsPmodThenPartitionsAreContiguousRanges() {
    DataType[] s = {DataTypes.StringType};
    // hash 1853464548 is key group 100 of 128; -1845002317 is key group 51 (pmod, not %).
    assertEquals(100, partition(128, 128, s, UTF8String.fromString("N14228")));
    assertEquals(51, partition(128, 128, s, UTF8String.fromString("é日本🎉")));
    // Four partitions of 32 key groups each.
    assertEquals(3, partition(128, 4, s, UTF8String.fromString("N14228")));
    assertEquals(1, partition(128, 4, s, UTF8String.fromString("é日本🎉")));
    // 128 key groups over 3 partitions: [0, 43), [43, 86), [86, 128).
    assertEquals(1, partition(128, 3, s, UTF8String.fromString("é日本🎉")));
    assertEquals(2, partition(128, 3, s, UTF8String.fromString("N14228")));
  }

  @Test
  void agreesWithSparksHashExpressionOnRandomKeys() {
    java.util.Random rng = new java.util.Random(7);
    DataType[] types = {DataTypes.StringType, DataTypes.LongType, DataTypes.IntegerType};
    for (int i = 0; i < 300; i++) {
      char[] chars = new char[rng.nextInt(20)];
      for (int j = 0; j < chars.length; j++) {
        chars[j] = (char) (0x20 + rng.nextInt(0x2000));
      }
      Object[] key = {
        UTF8String.fromString(new String(chars)), rng.nextLong(), rng.nextBoolean() ? null : rng.nextInt()
      };
      java.util.List<org.apache.spark.sql.catalyst.expressions.Expression> literals =
          new java.util.ArrayList<>();
      for (int j = 0; j < key.length; j++) {
        literals.add(new org.apache.spark.sql.catalyst.expressions.Literal(key[j], types[j]));
      }
      int spark =
          (Integer)
              new org.apache.spark.sql.catalyst.expressions.Murmur3Hash(
                      scala.jdk.javaapi.CollectionConverters.asScala(literals).toSeq(),
                      PartitionFunction.SEED)
                  .eval(null);
      assertEquals(Math.floorMod(spark, WIDE), partition(WIDE, WIDE, types, key));
    }
  }

  @Test
  void namesCarryTheLayout() {
    PartitionFunction f = PartitionFunction.parse("partition_of_128_4");
    assertEquals("partition_of_128_4", f.name());
    assertEquals(PartitionFunction.name(128, 4), f.name());
    assertNull(PartitionFunction.parse("partition_of_4_8")); // fewer key groups than partitions
    assertNull(PartitionFunction.parse("partition_of_8_0"));
    assertNull(PartitionFunction.parse("partition_of_8"));
    assertNull(PartitionFunction.parse("hash"));
    assertThrows(UnsupportedOperationException.class, () -> f.bind(new StructType()));
    PartitionFunction in = PartitionFunction.parse("partition_of_16_6_in_4");
    assertEquals("partition_of_16_6_in_4", in.name());
    assertEquals(4, in.numValues());
    assertNull(PartitionFunction.parse("partition_of_16_6_in_6")); // that is partition_of_16_6
    assertNull(PartitionFunction.parse("partition_of_16_6_in_8"));
    assertNull(PartitionFunction.parse("partition_of_16_6_in_0"));
  }

  /** The split holding partition j of n, split i holding partitions [i * n / p, (i + 1) * n / p). */
  private static int splitOf(int j, int n, int p) {
    for (int i = 0; i < p; i++) {
      if ((long) i * n / p <= j && j < (long) (i + 1) * n / p) {
        return i;
      }
    }
    throw new AssertionError(j + " of " + n);
  }

  @Test
  void aKeysSplitOfWholePartitions() {
    for (int m : new int[] {16, 32, 128, 100}) {
      for (int n = 1; n <= 16; n++) {
        for (int p = 1; p <= n; p++) {
          PartitionFunction f = PartitionFunction.forSplits(m, n, p);
          assertEquals(p, f.numValues());
          boolean likeCountP = true;
          for (int g = 0; g < m; g++) {
            int want = splitOf((int) ((long) g * n / m), n, p);
            assertEquals(want, PartitionFunction.valueOf(g, m, n, p), m + " " + n + " " + p);
            likeCountP &= want == (int) ((long) g * p / m);
          }
          // Named as a shuffle of p partitions exactly when it is that shuffle's function.
          assertEquals(
              likeCountP ? PartitionFunction.name(m, p) : PartitionFunction.name(m, n) + "_in_" + p,
              f.name());
          assertEquals(f.name(), PartitionFunction.parse(f.name()).name());
        }
      }
    }
    assertEquals("partition_of_32_4", PartitionFunction.forSplits(32, 8, 4).name());
    assertEquals("partition_of_16_6_in_4", PartitionFunction.forSplits(16, 6, 4).name());
    assertThrows(IllegalArgumentException.class, () -> PartitionFunction.forSplits(16, 4, 8));
    // The bound function gives the split.
    StructType input = new StructType().add("k", DataTypes.LongType);
    @SuppressWarnings("unchecked")
    ScalarFunction<Integer> bound =
        (ScalarFunction<Integer>) PartitionFunction.forSplits(16, 6, 4).bind(input);
    @SuppressWarnings("unchecked")
    ScalarFunction<Integer> keyGroup =
        (ScalarFunction<Integer>) new PartitionFunction(16, 16).bind(input);
    for (long k = 0; k < 200; k++) {
      InternalRow row = new GenericInternalRow(new Object[] {k});
      int g = keyGroup.produceResult(row);
      assertEquals(splitOf(g * 6 / 16, 6, 4), bound.produceResult(row));
    }
    assertEquals("partition_of_16_6_in_4", bound.name());
  }
}
