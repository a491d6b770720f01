package io.kafkashuffle.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.List;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.LiteralValue;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.Avg;
import org.apache.spark.sql.connector.expressions.aggregate.Count;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.expressions.aggregate.GeneralAggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Max;
import org.apache.spark.sql.connector.expressions.aggregate.Min;
import org.apache.spark.sql.connector.expressions.aggregate.Sum;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.Test;

/** Which aggregations a keyed read takes whole, and the types it gives their results. */
class PushedAggregationTest {
  private static final StructType SCHEMA =
      new StructType()
          .add("k", DataTypes.StringType)
          .add("g", DataTypes.IntegerType)
          .add("f", DataTypes.DoubleType)
          .add("i", DataTypes.IntegerType)
          .add("b", DataTypes.ByteType)
          .add("r", DataTypes.FloatType)
          .add("d", DataTypes.DateType)
          .add("ts", DataTypes.TimestampType)
          .add("dec", DataTypes.createDecimalType(10, 2))
          .add("s", DataTypes.StringType);
  private static final List<String> KEY = List.of("k");

  /** A column as Spark names one to a source (Expressions.column would need Spark's parser). */
  private static Expression col(String name) {
    return new NamedReference() {
      @Override
      public String[] fieldNames() {
        return new String[] {name};
      }

      @Override
      public String toString() {
        return name;
      }
    };
  }

  private static PushedAggregation of(String[] groups, AggregateFunc... funcs) {
    Expression[] by = new Expression[groups.length];
    for (int i = 0; i < groups.length; i++) {
      by[i] = col(groups[i]);
    }
    return PushedAggregation.of(new Aggregation(funcs, by), SCHEMA, KEY, true);
  }

  @Test
  void takesEveryAggregateOfItsKindsGroupedByTheKey() {
    PushedAggregation p =
        of(
            new String[] {"k", "g"},
            new CountStar(),
            new Count(col("s"), false),
            new Sum(col("i"), false),
            new Sum(col("r"), false),
            new Avg(col("b"), false),
            new Min(col("f")),
            new Max(col("ts")),
            new Min(col("d")));
    assertNotNull(p);
    // The group columns first, then each other input once.
    assertArrayEquals(new String[] {"k", "g", "s", "i", "r", "b", "f", "ts", "d"}, p.columns);
    DataType[] types = new DataType[p.output.fields().length];
    for (int i = 0; i < types.length; i++) {
      types[i] = p.output.fields()[i].dataType();
    }
    assertArrayEquals(
        new DataType[] {
          DataTypes.StringType,
          DataTypes.IntegerType,
          DataTypes.LongType, // count(*)
          DataTypes.LongType, // count(s)
          DataTypes.LongType, // sum of an int
          DataTypes.DoubleType, // sum of a float
          DataTypes.DoubleType, // avg of a byte
          DataTypes.DoubleType, // min of a double
          DataTypes.TimestampType, // max of a timestamp
          DataTypes.DateType // min of a date
        },
        types);
    // Counts are never null; the others are for a group with no values.
    assertEquals(false, p.output.fields()[2].nullable());
    assertEquals(true, p.output.fields()[4].nullable());
    assertArrayEquals(new int[] {-1, 2, 3, 4, 5, 6, 7, 8}, p.inputs);
  }

  @Test
  void leavesToSparkGroupsWithoutTheKey() {
    assertNull(of(new String[] {"g"}, new CountStar()));
    assertNull(of(new String[] {}, new CountStar()));
  }

  @Test
  void leavesToSparkFloatingPointGroupsWhoseZerosAndNaNsSparkNormalizes() {
    assertNull(of(new String[] {"k", "f"}, new CountStar()));
    assertNull(of(new String[] {"k", "r"}, new CountStar()));
  }

  @Test
  void leavesToSparkDistinctAggregatesExpressionsAndOtherFunctions() {
    String[] k = {"k"};
    assertNull(of(k, new Count(col("i"), true)));
    assertNull(of(k, new Sum(col("i"), true)));
    assertNull(of(k, new Avg(col("i"), true)));
    assertNull(of(k, new Sum(new LiteralValue<>(1, DataTypes.IntegerType), false)));
    assertNull(of(k, new GeneralAggregateFunc("STDDEV_SAMP", false, new Expression[] {col("i")})));
    assertNull(of(new String[] {"k", "nope"}, new CountStar()));
  }

  @Test
  void leavesToSparkSumsAndOrdersOfTypesItDoesNotAddOrOrder() {
    String[] k = {"k"};
    assertNull(of(k, new Sum(col("dec"), false)));
    assertNull(of(k, new Avg(col("dec"), false)));
    assertNull(of(k, new Min(col("s"))));
    assertNull(of(k, new Max(col("dec"))));
    assertNull(of(k, new Sum(col("d"), false)));
    // A count takes any column.
    assertNotNull(of(k, new Count(col("dec"), false)));
  }
}
