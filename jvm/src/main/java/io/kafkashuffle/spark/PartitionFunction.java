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
 * <p>{@code partition_of_<max_parallelism>_<num_partitions>_in_<splits>(key columns...)}: which
 * of {@code splits} contiguous groups of those partitions holds the key's, group i holding
 * partitions {@code [i * num_partitions / splits, (i + 1) * num_partitions / splits)}: how a
 * read of fewer splits than partitions, each of whole partitions, holds the keys (a read of runs
 * of several partition counts has as many splits as the smallest count by default). Where each
 * group's key groups are those of partition i of a shuffle of {@code splits} partitions, the
 * function is that shuffle's {@code partition_of_<max_parallelism>_<splits>} and is named so
 * ({@link #forSplits}), so that such a read is seen as keyed alike with a shuffle of that count.
 *
 * <p>The layout's numbers are part of the function's name, not arguments: Spark matches a
 * reported partitioning to a grouping by the partitioning expression's leaves, and literal
 * arguments would be leaves no grouping names. Two shuffles with the same layout report the same
 * function, so a join of them on the key needs no Exchange.
 */
final class PartitionFunction implements UnboundFunction {
  static final String PREFIX = "partition_of_";
  private static final Pattern NAME =
      Pattern.compile("partition_of_(\\d{1,9})_(\\d{1,9})(?:_in_(\\d{1,9}))?");
  static final int SEED = 42;

  private final int maxParallelism;
  private final int numPartitions;
  private final int splits; // numPartitions: a key's partition itself

  PartitionFunction(int maxParallelism, int numPartitions) {
    this(maxParallelism, numPartitions, numPartitions);
  }

  private PartitionFunction(int maxParallelism, int numPartitions, int splits) {
    this.maxParallelism = maxParallelism;
    this.numPartitions = numPartitions;
    this.splits = splits;
  }

  /**
   * The function giving a key's split of a read of {@code splits} splits of whole partitions
   * (of {@code numPartitions}), each of a contiguous range of them: {@code
   * partition_of_<m>_<splits>} when the splits hold the key groups a shuffle of that many
   * partitions does, else {@code partition_of_<m>_<n>_in_<splits>}.
   */
  static PartitionFunction forSplits(int maxParallelism, int numPartitions, int splits) {
    if (splits <= 0 || splits > numPartitions) {
      throw new IllegalArgumentException(
          splits + " splits of " + numPartitions + " whole partitions");
    }
    for (int i = 0; i < splits; i++) {
      int first = (int) ((long) i * numPartitions / splits);
      int start = ReadPlanner.keyGroupRange(first, maxParallelism, numPartitions)[0];
      if (start != ReadPlanner.keyGroupRange(i, maxParallelism, splits)[0]) {
        return new PartitionFunction(maxParallelism, numPartitions, splits);
      }
    }
    return new PartitionFunction(maxParallelism, splits);
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
    if (m.group(3) == null) {
      return new PartitionFunction(mp, n);
    }
    int p = Integer.parseInt(m.group(3));
    if (p <= 0 || p >= n) {
      return null;
    }
    return new PartitionFunction(mp, n, p);
  }

  /** How many values the function has: a key's partition, or its split. */
  int numValues() {
    return splits;
  }

  /** The value of a key in key group {@code keyGroup}. */
  static int valueOf(int keyGroup, int maxParallelism, int numPartitions, int splits) {
    int partition = (int) ((long) keyGroup * numPartitions / maxParallelism);
    if (splits == numPartitions) {
      return partition;
    }
    // The last split whose first partition is at most this one: split i starts at partition
    // floor(i * n / p), and floor(i * n / p) <= j holds exactly for i * n < (j + 1) * p.
    return (int) (((long) partition + 1) * splits - 1) / numPartitions;
  }

  @Override
  public String name() {
    String base = name(maxParallelism, numPartitions);
    return splits == numPartitions ? base : base + "_in_" + splits;
  }

  @Override
  public String description() {
    return name()
        + "(key columns...): "
        + (splits == numPartitions ? "the Kafka partition" : "which of " + splits + " splits")
        + " of a key in a shuffle with "
        + maxParallelism
        + " key groups over "
        + numPartitions
        + " partitions"
        + (splits == numPartitions ? "" : ", each split a contiguous range of whole partitions");
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
    return new Bound(maxParallelism, numPartitions, splits, types);
  }

  /** The function bound to the key columns' types. */
  static final class Bound implements ScalarFunction<Integer> {
    private static final long serialVersionUID = 1L;
    private final int maxParallelism;
    private final int numPartitions;
    private final int splits;
    private final DataType[] types;

    Bound(int maxParallelism, int numPartitions, int splits, DataType[] types) {
      this.maxParallelism = maxParallelism;
      this.numPartitions = numPartitions;
      this.splits = splits;
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
      return new PartitionFunction(maxParallelism, numPartitions, splits).name();
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
      return valueOf(keyGroup, maxParallelism, numPartitions, splits);
    }
  }
}
