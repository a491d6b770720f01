package io.kafkashuffle.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Reads one split: for each Kafka partition of it, seeks to the merged committed offset
 * ranges, keeps the DATA frames of the segments' runs and committed (subtask, attempt) pairs,
 * merges the producers' watermarks, and checks each committed attempt's END frame against what
 * was read, as {@code orchestration/shuffle/spark/reader.py} {@code _read_partition} does.
 *
 * <p>Each DATA frame becomes one {@link ColumnarBatch} of its Arrow vectors wrapped as they are;
 * rows are copied only when a filter (a key-group sub-range, an event-time range) removes some.
 * A batch's memory is released when Spark asks for the next one. {@link PartitionFetch} fetches
 * a partition's records, {@link PartitionFrames} makes batches of them.
 */
final class ShuffleBatchReader implements PartitionReader<ColumnarBatch> {
  static final String OWNER = "kafka-shuffle-jvm";

  private final ReadSpec spec;
  private final SplitPlan split;
  private final BufferAllocator allocator;
  // The read's order relies on each sorted run having one writer per partition: checked.
  private final boolean sorted;
  private final List<AutoCloseable> live = new ArrayList<>();
  private KafkaConsumer<byte[], ByteBuffer> consumer;
  private int readIndex = -1;
  private PartitionFetch fetch; // of the partition being read; null between partitions
  private PartitionFrames frames;
  private ColumnarBatch current;
  private boolean failed;
  // The first interval of each partition, fetched at once when the split has several.
  private Map<Integer, List<ConsumerRecord<byte[], ByteBuffer>>> prefetched;
  // The most value bytes the prefetch holds, and how long it waits for them.
  private static final long PREFETCH_BYTES = 16L << 20;
  private static final long PREFETCH_WAIT_MS = 500;

  ShuffleBatchReader(ReadSpec spec, SplitPlan split) {
    this(spec, split, false);
  }

  /**
   * A reader whose split's order Spark was told of ({@code sorted}): a sorted run's DATA frames
   * in a partition must then all come from one subtask, or the read fails.
   */
  ShuffleBatchReader(ReadSpec spec, SplitPlan split, boolean sorted) {
    this.sorted = sorted;
    this.spec = spec;
    this.split = split;
    spec.layout(); // a layout that cannot be read fails here, before any fetch
    this.allocator = new RootAllocator(Long.MAX_VALUE);
  }

  @Override
  public boolean next() throws IOException {
    try {
      return advance();
    } catch (ShuffleException e) {
      failed = true;
      // The driver rebuilds a task's failure from its exception's class; a session that
      // added this jar at run time (ADD JAR) cannot load ours there and reports the task as
      // lost for an unknown reason. A JDK class with the same message always crosses.
      throw new IOException(e.getMessage());
    } catch (RuntimeException e) {
      failed = true;
      throw e;
    }
  }

  private boolean advance() {
    release();
    while (true) {
      if (fetch == null) {
        readIndex++;
        if (readIndex >= split.reads.size()) {
          return false;
        }
        SplitPlan.PartitionRead read = split.reads.get(readIndex);
        frames = new PartitionFrames(spec, read, sorted, allocator, live);
        fetch = new PartitionFetch(spec.topic, read, this::consumer);
        if (prefetched == null) {
          prefetched =
              split.reads.size() > 1
                  ? PartitionFetch.prefetch(
                      consumer(), spec.topic, split.reads, PREFETCH_BYTES, PREFETCH_WAIT_MS)
                  : new HashMap<>();
        }
        List<ConsumerRecord<byte[], ByteBuffer>> head = prefetched.remove(read.partition);
        if (head != null) {
          fetch.prefetched(head);
        }
      }
      ConsumerRecord<byte[], ByteBuffer> rec = fetch.nextRecord();
      if (rec == null) {
        frames.finish();
        fetch = null;
        frames = null;
        continue;
      }
      ColumnarBatch batch = frames.handle(rec);
      if (batch != null) {
        current = batch;
        return true;
      }
    }
  }

  @Override
  public ColumnarBatch get() {
    return current;
  }

  /** Which of the split's partition reads the current batch is of (their index). */
  int readIndex() {
    return readIndex;
  }

  @Override
  public void close() throws IOException {
    release();
    try {
      if (consumer != null) {
        ConsumerPool.release(consumer, !failed);
        consumer = null;
      }
    } finally {
      try {
        allocator.close();
      } catch (IllegalStateException leak) {
        // Arrow frees nothing of a batch whose loading failed: after a failure, what it held
        // goes with the allocator, and the failure is what the task reports.
        if (!failed) {
          throw leak;
        }
      }
    }
  }

  private void release() {
    current = null;
    RuntimeException first = null;
    for (AutoCloseable c : live) {
      try {
        c.close();
      } catch (Exception e) {
        if (first == null) {
          first = new IllegalStateException("releasing a batch's Arrow memory", e);
        }
      }
    }
    live.clear();
    if (first != null) {
      throw first;
    }
  }

  private KafkaConsumer<byte[], ByteBuffer> consumer() {
    if (consumer == null) {
      Properties p = KafkaOptions.consumer(spec.kafka, OWNER);
      // Reads are planned by offsets: no group, no committed position, no reset.
      p.setProperty("enable.auto.commit", "false");
      p.setProperty("auto.offset.reset", "none");
      p.setProperty("isolation.level", "read_committed");
      // A frame is up to a few MiB; fetch a few at a time, and do not let a fetch at a
      // partition's end (a read usually stops there) wait the default 500 ms.
      p.setProperty("max.partition.fetch.bytes", String.valueOf(8 << 20));
      p.setProperty("fetch.max.bytes", String.valueOf(16 << 20));
      p.setProperty("fetch.max.wait.ms", "1");
      p.setProperty("max.poll.records", "16");
      consumer = ConsumerPool.borrow(p, OWNER);
    }
    return consumer;
  }
}
