package io.kafkashuffle.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.Avg;
import org.apache.spark.sql.connector.expressions.aggregate.Count;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.expressions.aggregate.Max;
import org.apache.spark.sql.connector.expressions.aggregate.Min;
import org.apache.spark.sql.connector.expressions.aggregate.Sum;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;

/**
 * A {@code groupBy(...).agg(...)} Spark pushed whole into a keyed read
 * (SupportsPushDownAggregates, complete push-down): every row of a group is in one split when the
 * groups include the shuffle's key columns and each split reads whole Kafka partitions, so each
 * task aggregates its split ({@link AggregatingReader}) and Spark adds neither an Exchange nor an
 * aggregate of its own. Such a read runs one task per core ({@link ShuffleScan#combined}).
 *
 * <p>Taken: {@code count(*)}, {@code count}, {@code sum}, {@code avg} of numeric columns, {@code
 * min} and {@code max} of numeric, date and timestamp columns, none distinct, grouped by columns
 * (not expressions) that are not floating point (whose zeros and NaNs Spark normalizes before
 * grouping) nor strings of a non-binary collation. Anything else is left to Spark, which then
 * aggregates the read as before. Results follow Spark's: {@code sum} of integers is a long that
 * fails on overflow under ANSI mode and wraps otherwise, {@code avg} a double, NaN the largest
 * value for {@code min} and {@code max}, nulls skipped, no rows a null (0 for counts).
 */
final class PushedAggregation implements Serializable {
  private static final long serialVersionUID = 1L;

  enum Fn {
    COUNT_STAR,
    COUNT,
    SUM,
    AVG,
    MIN,
    MAX
  }

  final String[] columns; // the columns decoded: the group columns, then the other inputs
  final DataType[] groupTypes; // of columns[0 .. groupTypes.length)
  final Fn[] fns;
  final int[] inputs; // per aggregate, its column's index in columns; -1 for count(*)
  final DataType[] inputTypes; // per aggregate; null for count(*)
  final StructType output; // the group columns, then one column per aggregate
  final boolean ansi; // integer sums fail on overflow
  final String description;

  private PushedAggregation(
      String[] columns,
      DataType[] groupTypes,
      Fn[] fns,
      int[] inputs,
      DataType[] inputTypes,
      StructType output,
      boolean ansi,
      String description) {
    this.columns = columns;
    this.groupTypes = groupTypes;
    this.fns = fns;
    this.inputs = inputs;
    this.inputTypes = inputTypes;
    this.output = output;
    this.ansi = ansi;
    this.description = description;
  }

  /**
   * The aggregation as this read can run it whole, or null when it cannot: a group column, an
   * aggregate or a type outside what the class comment lists, or groups without every column of
   * {@code key}. Whether each split is a whole partition is the caller's to check.
   */
  static PushedAggregation of(Aggregation a, StructType schema, List<String> key, boolean ansi) {
    List<String> columns = new ArrayList<>();
    List<DataType> groupTypes = new ArrayList<>();
    StructType output = new StructType();
    for (Expression e : a.groupByExpressions()) {
      StructField f = field(e, schema);
      if (f == null || !groupable(f.dataType()) || columns.contains(f.name())) {
        return null;
      }
      columns.add(f.name());
      groupTypes.add(f.dataType());
      output = output.add(f);
    }
    if (!columns.containsAll(key)) {
      return null;
    }
    AggregateFunc[] funcs = a.aggregateExpressions();
    Fn[] fns = new Fn[funcs.length];
    int[] inputs = new int[funcs.length];
    DataType[] inputTypes = new DataType[funcs.length];
    for (int i = 0; i < funcs.length; i++) {
      AggregateFunc fn = funcs[i];
      Expression column;
      if (fn instanceof CountStar) {
        fns[i] = Fn.COUNT_STAR;
        column = null;
      } else if (fn instanceof Count c && !c.isDistinct()) {
        fns[i] = Fn.COUNT;
        column = c.column();
      } else if (fn instanceof Sum s && !s.isDistinct()) {
        fns[i] = Fn.SUM;
        column = s.column();
      } else if (fn instanceof Avg v && !v.isDistinct()) {
        fns[i] = Fn.AVG;
        column = v.column();
      } else if (fn instanceof Min m) {
        fns[i] = Fn.MIN;
        column = m.column();
      } else if (fn instanceof Max m) {
        fns[i] = Fn.MAX;
        column = m.column();
      } else {
        return null;
      }
      DataType result;
      if (column == null) {
        inputs[i] = -1;
        result = DataTypes.LongType;
      } else {
        StructField f = field(column, schema);
        if (f == null) {
          return null;
        }
        DataType t = f.dataType();
        result = resultType(fns[i], t);
        if (result == null) {
          return null;
        }
        int at = columns.indexOf(f.name());
        if (at < 0) {
          at = columns.size();
          columns.add(f.name());
        }
        inputs[i] = at;
        inputTypes[i] = t;
      }
      boolean counts = fns[i] == Fn.COUNT || fns[i] == Fn.COUNT_STAR;
      output = output.add("agg_" + i + "_" + fn, result, !counts);
    }
    return new PushedAggregation(
        columns.toArray(new String[0]),
        groupTypes.toArray(new DataType[0]),
        fns,
        inputs,
        inputTypes,
        output,
        ansi,
        describe(funcs, columns.subList(0, groupTypes.size())));
  }

  private static String describe(AggregateFunc[] funcs, List<String> groups) {
    List<String> out = new ArrayList<>();
    for (AggregateFunc f : funcs) {
      out.add(f.toString());
    }
    return "[" + String.join(", ", out) + "] by " + groups;
  }

  private static StructField field(Expression e, StructType schema) {
    if (!(e instanceof NamedReference r) || r.fieldNames().length != 1) {
      return null;
    }
    String name = r.fieldNames()[0];
    for (StructField f : schema.fields()) {
      if (f.name().equals(name)) {
        return f;
      }
    }
    return null;
  }

  /** Whether a column of type {@code t} groups by its bytes as Spark groups it. */
  static boolean groupable(DataType t) {
    return t.equals(DataTypes.StringType) // the binary collation only
        || t instanceof BooleanType
        || integral(t)
        || t instanceof DateType
        || t instanceof TimestampType
        || t instanceof TimestampNTZType
        || t instanceof DecimalType
        || t instanceof BinaryType;
  }

  static boolean integral(DataType t) {
    return t instanceof ByteType
        || t instanceof ShortType
        || t instanceof IntegerType
        || t instanceof LongType;
  }

  static boolean floating(DataType t) {
    return t instanceof FloatType || t instanceof DoubleType;
  }

  /** Orderable as a long by {@link AggregatingReader}: integers, dates and timestamps. */
  static boolean longLike(DataType t) {
    return integral(t)
        || t instanceof DateType
        || t instanceof TimestampType
        || t instanceof TimestampNTZType;
  }

  /** The type of {@code fn} over a column of type {@code t}, as Spark types it; null: not taken. */
  static DataType resultType(Fn fn, DataType t) {
    switch (fn) {
      case COUNT:
        return DataTypes.LongType;
      case SUM:
        return integral(t) ? DataTypes.LongType : floating(t) ? DataTypes.DoubleType : null;
      case AVG:
        return integral(t) || floating(t) ? DataTypes.DoubleType : null;
      case MIN:
      case MAX:
        return longLike(t) || floating(t) ? t : null;
      default:
        return null;
    }
  }
}
