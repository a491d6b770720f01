package io.kafkashuffle.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.HasPartitionKey;
import org.apache.spark.sql.connector.read.InputPartition;

/** One Spark partition of a read: the split the Python planner made for it. */
class ShuffleInputPartition implements InputPartition {
  private static final long serialVersionUID = 1L;
  final SplitPlan split;

  ShuffleInputPartition(SplitPlan split) {
    this.split = split;
  }

  /**
   * A split of exactly the key groups of its Kafka partitions (all of each, and those key groups
   * of runs written before the shuffle grew): its key is its index, the value of the scan's
   * partitioning function for every row it holds (a key's partition when each split is one).
   */
  static final class Keyed extends ShuffleInputPartition implements HasPartitionKey {
    private static final long serialVersionUID = 1L;
    final int partition;

    Keyed(SplitPlan split, int partition) {
      super(split);
      this.partition = partition;
    }

    @Override
    public InternalRow partitionKey() {
      return new GenericInternalRow(new Object[] {partition});
    }
  }
}
