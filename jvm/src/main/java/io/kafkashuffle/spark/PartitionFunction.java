package io.kafkashuffle.spark;

import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Murmur3HashFunction;
import org.apache.spark.sql.connector.catalog.functions.BoundFunction;
import org.apache.spark.sql.connector.catalog.functions.ScalarFunction;
import org.apache.spark.sql.connector.catalog.functions.UnboundFunction;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * {@code partition_of_<max_parallelism>_<num_partitions>(key columns...)}: the Kafka partition
 * of a key, as the writer places it ({@code orchestration/shuffle/core/keygroups.py}): Spark
 * SQL's {@code hash} of the key columns (Murmur3, seed 42, each column's hash the seed of the
 * next), its key group {@code pmod(hash, max_parallelism)}, and the partition {@code key_group
 * * num_partitions / max_parallelism}.
 *
 * <p>The layout's two numbers are part of the function's name, not arguments: Spark matches a
 * reported partitioning to a grouping by the partitioning expression's leaves, and literal
 * arguments would be leaves no grouping names. Two shuffles with the same layout report the same
 * function, so a join of them on the key needs no Exchange.
 */
final class PartitionFunction implements UnboundFunction {
  static final String PREFIX = "partition_of_";
  private static final Pattern NAME = Pattern.compile("partition_of_(\\d{1,9})_(\\d{1,9})");
  static final int SEED = 42;

  private final int maxParallelism;
  private final int numPartitions;

  PartitionFunction(int maxParallelism, int numPartitions) {
    this.maxParallelism = maxParallelism;
    this.numPartitions = numPartitions;
  }

  static String name(int maxParallelism, int numPartitions) {
    return PREFIX + maxParallelism + "_" + numPartitions;
  }

  /** The function a name denotes, or null. */
  static PartitionFunction parse(String name) {
    Matcher m = NAME.matcher(name);
    if (!m.matches()) {
      return null;
    }
    int mp = Integer.parseInt(m.group(1));
    int n = Integer.parseInt(m.group(2));
    if (n <= 0 || mp < n) {
      return null;
    }
    return new PartitionFunction(mp, n);
  }

  @Override
  public String name() {
    return name(maxParallelism, numPartitions);
  }

  @Override
  public String description() {
    return name()
        + "(key columns...): the Kafka partition of a key in a shuffle with "
        + maxParallelism
        + " key groups over "
        + numPartitions
        + " partitions";
  }

  @Override
  public BoundFunction bind(StructType inputType) {
    if (inputType.fields().length == 0) {
      throw new UnsupportedOperationException(name() + " needs at least one key column");
    }
    DataType[] types = new DataType[inputType.fields().length];
    int i = 0;
    for (StructField f : inputType.fields()) {
      types[i++] = f.dataType();
    }
    return new Bound(maxParallelism, numPartitions, types);
  }

  /** The function bound to the key columns' types. */
  static final class Bound implements ScalarFunction<Integer> {
    private static final long serialVersionUID = 1L;
    private final int maxParallelism;
    private final int numPartitions;
    private final DataType[] types;

    Bound(int maxParallelism, int numPartitions, DataType[] types) {
      this.maxParallelism = maxParallelism;
      this.numPartitions = numPartitions;
      this.types = types;
    }

    @Override
    public DataType[] inputTypes() {
      return types;
    }

    @Override
    public DataType resultType() {
      return DataTypes.IntegerType;
    }

    @Override
    public boolean isResultNullable() {
      return false;
    }

    @Override
    public String name() {
      return PartitionFunction.name(maxParallelism, numPartitions);
    }

    @Override
    public String canonicalName() {
      return "io.kafkashuffle.spark." + name();
    }

    @Override
    public Integer produceResult(InternalRow input) {
      int h = SEED;
      for (int i = 0; i < types.length; i++) {
        if (!input.isNullAt(i)) {
          h = (int) Murmur3HashFunction.hash(input.get(i, types[i]), types[i], h);
        }
      }
      int keyGroup = Math.floorMod(h, maxParallelism);
      return (int) ((long) keyGroup * numPartitions / maxParallelism);
    }
  }
}
