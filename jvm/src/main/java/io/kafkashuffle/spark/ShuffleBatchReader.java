package io.kafkashuffle.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ReadableByteChannel;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.TimeStampVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.vector.TypeLayout;
import org.apache.arrow.vector.VectorLoader;
import org.apache.arrow.vector.ipc.ReadChannel;
import org.apache.arrow.vector.ipc.message.ArrowFieldNode;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;
import org.apache.arrow.vector.ipc.message.MessageChannelReader;
import org.apache.arrow.vector.ipc.message.MessageResult;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.flatbuf.MessageHeader;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.util.TransferPair;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Reads one split: for each Kafka partition of it, seeks to the merged committed offset
 * ranges, keeps the DATA frames of the segments' runs and committed (subtask, attempt) pairs,
 * merges the producers' watermarks, and checks each committed attempt's END frame against what
 * was read, as {@code orchestration/shuffle/spark/reader.py} {@code _read_partition} does.
 *
 * <p>Each DATA frame becomes one {@link ColumnarBatch} of its Arrow vectors wrapped as they are;
 * rows are copied only when a filter (a key-group sub-range, an event-time range) removes some.
 * A batch's memory is released when Spark asks for the next one.
 */
final class ShuffleBatchReader implements PartitionReader<ColumnarBatch> {
  static final String OWNER = "kafka-shuffle-jvm";
  // How long a partition may send nothing while offsets remain to be read.
  private static final long IDLE_TIMEOUT_MS = 30_000;
  // How long a read waits without data before it looks whether its topic is still there
  // (kafka/client.py GONE_CHECK_S): waiting out the timeout on a deleted topic only delays
  // the error, in every attempt of the task.
  private static final long GONE_CHECK_MS = 2_000;

  private final ReadSpec spec;
  private final SplitPlan split;
  private final Layout layout;
  private final BufferAllocator allocator;
  // The read's order relies on each sorted run having one writer per partition: checked.
  private final boolean sorted;
  private final List<AutoCloseable> live = new ArrayList<>();
  private static final ArrowType KEY_GROUP_TYPE = new ArrowType.Int(32, true);
  private KafkaConsumer<byte[], ByteBuffer> consumer;
  private int readIndex = -1;
  private PartitionState state;
  private ColumnarBatch current;
  private boolean failed;

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
    this.layout = spec.layout();
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
      if (state == null) {
        readIndex++;
        if (readIndex >= split.reads.size()) {
          return false;
        }
        state = new PartitionState(split.reads.get(readIndex));
      }
      ConsumerRecord<byte[], ByteBuffer> rec = state.nextRecord();
      if (rec == null) {
        state.finish();
        state = null;
        continue;
      }
      ColumnarBatch batch = state.handle(rec);
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
      Properties p = KafkaSettings.consumer(spec.kafka, OWNER);
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

  private static int nodeCount(Field f) {
    int n = 1;
    for (Field c : f.getChildren()) {
      n += nodeCount(c);
    }
    return n;
  }

  private static int bufferCount(Field f) {
    int n = TypeLayout.getTypeBufferCount(f.getType());
    for (Field c : f.getChildren()) {
      n += bufferCount(c);
    }
    return n;
  }

  private static String pair(int subtask, int attempt) {
    return subtask + "/" + attempt;
  }

  /** The reading of one Kafka partition of the split. */
  private final class PartitionState {
    final SplitPlan.PartitionRead read;
    final TopicPartition tp;
    final String quotedTopic;
    final Map<String, Set<String>> allowed = new HashMap<>();
    final Map<String, String> windows = new HashMap<>();
    final Map<String, WatermarkMerger> mergers = new HashMap<>();
    final Map<String, long[]> seen = new HashMap<>();
    final Map<String, long[]> ended = new HashMap<>();
    final Map<String, Integer> writers = new HashMap<>(); // sorted run -> its one subtask
    final Iterator<long[]> intervals;
    // The frame columns this read decompresses: its output's, and those its filters read.
    final Set<String> needed = new HashSet<>();
    long start;
    long stop = -1; // exclusive end of the interval being read; -1: none
    Iterator<ConsumerRecord<byte[], ByteBuffer>> pending;
    long idleSince;
    long checkedAt; // ms idle when the topic was last looked at
    long next; // the offset after the last record handed out

    PartitionState(SplitPlan.PartitionRead read) {
      this.read = read;
      this.tp = new TopicPartition(spec.topic, read.partition);
      this.quotedTopic = "'" + spec.topic + "'";
      for (SplitPlan.Segment s : read.segments) {
        Set<String> tasks = new HashSet<>();
        Set<Integer> subtasks = new HashSet<>();
        for (int[] t : s.tasks) {
          tasks.add(pair(t[0], t[1]));
          subtasks.add(t[0]);
        }
        allowed.put(s.runId, tasks);
        windows.put(s.runId, s.window);
        mergers.put(
            s.runId,
            new WatermarkMerger(
                subtasks,
                "topic " + quotedTopic + " partition " + read.partition + " run " + s.runId));
      }
      this.intervals = read.mergedIntervals().iterator();
      for (String c : spec.columns) {
        needed.add(c);
      }
      if (!read.full) {
        needed.add(Frames.KEY_GROUP_COLUMN);
      }
      if (spec.filtersEventTime() && layout.eventTime != null) {
        needed.add(layout.eventTime);
      }
    }

    String where(long offset) {
      return "topic " + quotedTopic + " partition " + read.partition + " offset " + offset;
    }

    /** The next record of the partition's intervals, or null when they are read. */
    ConsumerRecord<byte[], ByteBuffer> nextRecord() {
      KafkaConsumer<byte[], ByteBuffer> c = consumer();
      while (true) {
        if (stop < 0) {
          if (!intervals.hasNext()) {
            return null;
          }
          long[] iv = intervals.next();
          start = iv[0];
          c.assign(List.of(tp));
          long end = endOffset(c, iv[1] + 1);
          // Offsets may have gaps (e.g. transaction markers): stop at the partition's end.
          stop = Math.min(iv[1] + 1, end);
          if (start >= stop) {
            stop = -1;
            continue;
          }
          c.seek(tp, start);
          pending = null;
          idleSince = System.currentTimeMillis();
          checkedAt = 0;
          next = start;
        }
        if (pending != null && pending.hasNext()) {
          ConsumerRecord<byte[], ByteBuffer> rec = pending.next();
          if (rec.offset() >= stop) {
            pending = null;
            stop = -1;
            continue;
          }
          if (rec.offset() == stop - 1) {
            pending = null;
            stop = -1;
          }
          next = rec.offset() + 1;
          return rec;
        }
        if (c.position(tp) >= stop) {
          stop = -1;
          continue;
        }
        List<ConsumerRecord<byte[], ByteBuffer>> got;
        try {
          got = c.poll(Duration.ofMillis(200)).records(tp);
        } catch (OffsetOutOfRangeException e) {
          throw ShuffleException.format(
              "topic "
                  + quotedTopic
                  + " partition "
                  + read.partition
                  + ": committed offsets from "
                  + start
                  + " are no longer in the topic; the topic lost data or was truncated");
        } catch (KafkaException e) {
          throw new ShuffleException(
              ShuffleException.Kind.CONNECTION,
              "reading topic " + quotedTopic + " partition " + read.partition + ": " + e,
              e);
        }
        if (got.isEmpty()) {
          long idle = System.currentTimeMillis() - idleSince;
          if (idle > checkedAt + GONE_CHECK_MS) {
            checkedAt = idle;
            refuseGone(c);
          }
          if (idle > IDLE_TIMEOUT_MS) {
            throw new ShuffleException(
                ShuffleException.Kind.CONNECTION,
                "no data from topic "
                    + quotedTopic
                    + " partition "
                    + read.partition
                    + " for "
                    + IDLE_TIMEOUT_MS / 1000
                    + "s while reading offsets ["
                    + start
                    + ", "
                    + stop
                    + ")");
          }
          continue;
        }
        idleSince = System.currentTimeMillis();
        checkedAt = 0;
        pending = got.iterator();
      }
    }

    /**
     * Refuses a read whose partition no longer holds the offset it is at, as {@code
     * _refuse_gone} in kafka/client.py: the topic was deleted (asked twice, a second apart),
     * or created again, or its records up to past that offset were deleted. Says nothing when
     * the metadata cannot be had: the idle timeout still applies.
     */
    void refuseGone(KafkaConsumer<byte[], ByteBuffer> c) {
      String range = " offsets [" + start + ", " + stop + ")";
      refuseMissing(c, range);
      long low;
      long high;
      try {
        low = c.beginningOffsets(List.of(tp), Duration.ofMillis(8_000)).get(tp);
        high = c.endOffsets(List.of(tp), Duration.ofMillis(8_000)).get(tp);
      } catch (KafkaException e) {
        return;
      }
      if (high < next) {
        throw new ShuffleException(
            ShuffleException.Kind.NOT_FOUND,
            "topic "
                + quotedTopic
                + " was deleted while reading partition "
                + read.partition
                + range
                + " (and created again: it ends at offset "
                + high
                + ", the read was at "
                + next
                + ")");
      }
      if (low > next) {
        throw ShuffleException.format(
            "topic "
                + quotedTopic
                + " partition "
                + read.partition
                + ": the records at offsets ["
                + next
                + ", "
                + low
                + ") were deleted while reading"
                + range
                + " (the partition now starts at "
                + low
                + ")");
      }
    }

    /**
     * The partition's end offset before reading {@code [start, until)}. Asked in short tries:
     * a deleted topic makes the request time out (after 60 s in one try), so between tries
     * the topic is looked for and its absence reported at once.
     */
    long endOffset(KafkaConsumer<byte[], ByteBuffer> c, long until) {
      long deadline = System.currentTimeMillis() + 60_000;
      while (true) {
        try {
          return c.endOffsets(List.of(tp), Duration.ofMillis(GONE_CHECK_MS * 2)).get(tp);
        } catch (org.apache.kafka.common.errors.TimeoutException e) {
          refuseMissing(c, " offsets [" + start + ", " + until + ")");
          if (System.currentTimeMillis() > deadline) {
            throw new ShuffleException(
                ShuffleException.Kind.CONNECTION,
                "reading topic " + quotedTopic + " partition " + read.partition + ": " + e,
                e);
          }
        } catch (KafkaException e) {
          throw new ShuffleException(
              ShuffleException.Kind.CONNECTION,
              "reading topic " + quotedTopic + " partition " + read.partition + ": " + e,
              e);
        }
      }
    }

    /** Refuses a read whose topic (or partition) is gone; asked twice, a second apart. */
    void refuseMissing(KafkaConsumer<byte[], ByteBuffer> c, String range) {
      for (int attempt = 0; attempt < 2; attempt++) {
        Map<String, List<PartitionInfo>> topics;
        try {
          topics = c.listTopics(Duration.ofMillis(8_000));
        } catch (KafkaException e) {
          return;
        }
        List<PartitionInfo> parts = topics.get(spec.topic);
        boolean missing =
            parts == null || parts.stream().noneMatch(p -> p.partition() == read.partition);
        if (!missing) {
          break;
        }
        if (attempt == 0) {
          try {
            Thread.sleep(1_000);
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return;
          }
          continue;
        }
        throw new ShuffleException(
            ShuffleException.Kind.NOT_FOUND,
            "topic "
                + quotedTopic
                + " was deleted while reading partition "
                + read.partition
                + range);
      }
    }

    /** A record of the partition: the rows of a DATA frame to output, or null. */
    ColumnarBatch handle(ConsumerRecord<byte[], ByteBuffer> rec) {
      String where = where(rec.offset());
      ByteBuffer value = rec.value();
      Frames.Header h = Frames.decode(value, where);
      Set<String> tasks = allowed.get(h.runId);
      if (tasks == null || !tasks.contains(pair(h.subtask, h.attempt))) {
        return null;
      }
      // Only the frames read are checked: those of other attempts are skipped unread.
      Frames.verify(value, h, where);
      String key = h.runId + "/" + h.subtask;
      long[] counts = seen.computeIfAbsent(key, k -> new long[2]);
      switch (h.type) {
        case Frames.DATA:
          if (sorted) {
            Integer writer = writers.putIfAbsent(h.runId, h.subtask);
            if (writer != null && writer != h.subtask) {
              throw ShuffleException.format(
                  "DATA frame at "
                      + where
                      + ": run "
                      + h.runId
                      + " was committed as sorted, one subtask per partition, but this "
                      + "partition holds frames of subtasks "
                      + writer
                      + " and "
                      + h.subtask);
            }
          }
          return data(value, h.runId, rec.offset(), where, counts);
        case Frames.WATERMARK:
          mergers.get(h.runId).observe(h.subtask, Frames.watermark(value));
          return null;
        default:
          ended.put(key, Frames.endCounts(value));
          mergers.get(h.runId).end(h.subtask);
          return null;
      }
    }

    /** END counts against what was read: a lost or extra frame is an error. */
    void finish() {
      for (SplitPlan.Segment s : read.segments) {
        for (int[] t : s.tasks) {
          String key = s.runId + "/" + t[0];
          long[] got = seen.getOrDefault(key, new long[2]);
          long[] want = ended.get(key);
          String where =
              "topic "
                  + quotedTopic
                  + " partition "
                  + read.partition
                  + ", run "
                  + s.runId
                  + " subtask "
                  + t[0];
          if (want == null) {
            throw ShuffleException.format(
                where
                    + " attempt "
                    + t[1]
                    + ": no END frame within committed offsets ["
                    + s.first
                    + ", "
                    + s.last
                    + "]; the topic lost data or was truncated");
          }
          if (got[0] != want[0] || got[1] != want[1]) {
            throw ShuffleException.format(
                where
                    + ": read "
                    + got[0]
                    + " rows in "
                    + got[1]
                    + " frames, the producer wrote "
                    + want[0]
                    + " rows in "
                    + want[1]
                    + " frames");
          }
        }
      }
    }

    private ColumnarBatch data(
        ByteBuffer value, String runId, long offset, String where, long[] counts) {
      VectorSchemaRoot root = load(value, where);
      boolean keep = false;
      try {
        int rows = root.getRowCount();
        counts[0] += rows;
        counts[1] += 1;
        FieldVector kg = root.getVector(Frames.KEY_GROUP_COLUMN); // null when not loaded
        int[] selected = select(root, kg, rows, where);
        int n = selected == null ? rows : selected.length;
        if (n == 0) {
          return null;
        }
        ColumnVector[] out = new ColumnVector[spec.columns.length];
        for (int i = 0; i < out.length; i++) {
          String name = spec.columns[i];
          switch (name) {
            case "_partition":
              out[i] = constantInt(n, read.partition);
              break;
            case "_run_id":
              out[i] = constantString(n, runId);
              break;
            case "_window":
              out[i] = constantString(n, windows.get(runId));
              break;
            case "_offset":
              ConstantColumnVector o = new ConstantColumnVector(n, DataTypes.LongType);
              o.setLong(offset);
              live.add(o);
              out[i] = o;
              break;
            case "_key_group":
              out[i] = DirectColumnVector.of(rowsOf(kg, selected, n));
              break;
            default:
              out[i] = DirectColumnVector.of(rowsOf(column(root, name, where), selected, n));
          }
        }
        if (selected == null) {
          keep = true; // the batch wraps the frame's own vectors
        }
        return new ColumnarBatch(out, n);
      } finally {
        if (keep) {
          live.add(root);
        } else {
          root.close();
        }
      }
    }

    /**
     * The record batch of a DATA frame, with only the columns this read needs: the buffers of
     * the others are not decompressed.
     */
    private VectorSchemaRoot load(ByteBuffer value, String where) {
      try (MessageChannelReader messages =
          new MessageChannelReader(
              new ReadChannel(new BufferChannel(Frames.payload(value))), allocator)) {
        MessageResult head = messages.readNext();
        if (head == null || head.getMessage().headerType() != MessageHeader.Schema) {
          throw ShuffleException.format(
              "DATA frame at " + where + " does not start with an Arrow schema");
        }
        Schema schema = MessageSerializer.deserializeSchema(head.getMessage());
        Field kg = null;
        for (Field f : schema.getFields()) {
          if (f.getDictionary() != null) {
            throw ShuffleException.format(
                "DATA frame at " + where + " has a dictionary-encoded column '" + f.getName() + "'");
          }
          if (f.getName().equals(Frames.KEY_GROUP_COLUMN)) {
            kg = f;
          }
        }
        if (kg == null || !kg.getType().equals(KEY_GROUP_TYPE)) {
          throw ShuffleException.format(
              "DATA frame at "
                  + where
                  + (kg == null ? " has no " : " has a non-int32 ")
                  + Frames.KEY_GROUP_COLUMN
                  + " column");
        }
        MessageResult body = messages.readNext();
        if (body == null || body.getMessage().headerType() != MessageHeader.RecordBatch) {
          throw ShuffleException.format("DATA frame at " + where + " holds no record batch");
        }
        ArrowBuf bodyBuffer = body.getBodyBuffer();
        // The batch takes over the body's reference (its buffers are slices of it).
        ArrowRecordBatch all =
            MessageSerializer.deserializeRecordBatch(
                body.getMessage(), bodyBuffer == null ? allocator.getEmpty() : bodyBuffer);
        try {
          List<Field> fields = new ArrayList<>();
          List<ArrowFieldNode> nodes = new ArrayList<>();
          List<ArrowBuf> buffers = new ArrayList<>();
          // Variadic buffers (view types) are counted per batch, not per type: load them all.
          boolean prune = all.getVariadicBufferCounts().isEmpty();
          int node = 0;
          int buffer = 0;
          for (Field f : schema.getFields()) {
            int fieldNodes = nodeCount(f);
            int fieldBuffers = bufferCount(f);
            if (!prune || needed.contains(f.getName())) {
              fields.add(f);
              nodes.addAll(all.getNodes().subList(node, node + fieldNodes));
              buffers.addAll(all.getBuffers().subList(buffer, buffer + fieldBuffers));
            }
            node += fieldNodes;
            buffer += fieldBuffers;
          }
          if (prune && (node != all.getNodes().size() || buffer != all.getBuffers().size())) {
            throw ShuffleException.format(
                "DATA frame at "
                    + where
                    + ": its record batch does not match its schema ("
                    + all.getNodes().size()
                    + " field nodes and "
                    + all.getBuffers().size()
                    + " buffers, the schema has "
                    + node
                    + " and "
                    + buffer
                    + ")");
          }
          VectorSchemaRoot root = VectorSchemaRoot.create(new Schema(fields), allocator);
          try (ArrowRecordBatch some =
              new ArrowRecordBatch(
                  all.getLength(),
                  nodes,
                  buffers,
                  all.getBodyCompression(),
                  all.getVariadicBufferCounts(),
                  true)) {
            new VectorLoader(root, FrameCompression.INSTANCE).load(some);
          } catch (RuntimeException e) {
            root.close();
            throw e;
          }
          return root;
        } finally {
          all.close();
        }
      } catch (IOException | RuntimeException e) {
        if (e instanceof ShuffleException) {
          throw (ShuffleException) e;
        }
        throw new ShuffleException(
            ShuffleException.Kind.FORMAT,
            "DATA frame at " + where + " is not a readable Arrow IPC stream: " + e,
            e);
      }
    }

    private FieldVector column(VectorSchemaRoot root, String name, String where) {
      FieldVector v = root.getVector(name);
      if (v == null) {
        throw ShuffleException.format("DATA frame at " + where + " has no column '" + name + "'");
      }
      Field want = layout.schema.findField(name);
      if (!v.getField().getType().equals(want.getType())) {
        throw ShuffleException.format(
            "DATA frame at "
                + where
                + " has column '"
                + name
                + "' of type "
                + v.getField().getType()
                + ", the layout says "
                + want.getType());
      }
      return v;
    }

    /** The rows to keep (null: all): the read's key groups and the event-time range. */
    private int[] select(VectorSchemaRoot root, FieldVector kgVector, int rows, String where) {
      IntVector kg = (IntVector) kgVector;
      boolean byGroup = !read.full;
      boolean byTime = spec.filtersEventTime() && layout.eventTime != null;
      if (!byGroup && !byTime) {
        return null;
      }
      FieldVector et = byTime ? column(root, layout.eventTime, where) : null;
      int[] keep = new int[rows];
      int n = 0;
      for (int i = 0; i < rows; i++) {
        if (byGroup) {
          if (kg.isNull(i)) {
            continue;
          }
          int g = kg.get(i);
          if (g < read.keyGroupStart || g >= read.keyGroupEnd) {
            continue;
          }
        }
        if (byTime) {
          if (et.isNull(i)) {
            continue;
          }
          long t = eventTime(et, i, where);
          if (spec.eventTimeStart != null && t < spec.eventTimeStart) {
            continue;
          }
          if (spec.eventTimeEnd != null && t >= spec.eventTimeEnd) {
            continue;
          }
        }
        keep[n++] = i;
      }
      if (n == rows) {
        return null;
      }
      return java.util.Arrays.copyOf(keep, n);
    }

    private long eventTime(FieldVector v, int i, String where) {
      if (v instanceof TimeStampVector) {
        return ((TimeStampVector) v).get(i);
      }
      if (v instanceof BigIntVector) {
        return ((BigIntVector) v).get(i);
      }
      if (v instanceof IntVector) {
        return ((IntVector) v).get(i);
      }
      throw ShuffleException.format(
          "DATA frame at "
              + where
              + ": event-time column '"
              + layout.eventTime
              + "' has type "
              + v.getField().getType()
              + ", not a timestamp or integer");
    }

    /** {@code v} itself (all rows), or a copy of its selected rows. */
    private FieldVector rowsOf(FieldVector v, int[] selected, int n) {
      if (selected == null) {
        return v;
      }
      FieldVector copy = v.getField().createVector(allocator);
      live.add(copy);
      copy.setInitialCapacity(n);
      copy.allocateNew();
      TransferPair tp = v.makeTransferPair(copy);
      for (int j = 0; j < n; j++) {
        tp.copyValueSafe(selected[j], j);
      }
      copy.setValueCount(n);
      return copy;
    }

    private ColumnVector constantInt(int n, int value) {
      ConstantColumnVector c = new ConstantColumnVector(n, DataTypes.IntegerType);
      c.setInt(value);
      live.add(c);
      return c;
    }

    private ColumnVector constantString(int n, String value) {
      ConstantColumnVector c = new ConstantColumnVector(n, DataTypes.StringType);
      if (value == null) {
        c.setNull();
      } else {
        c.setUtf8String(UTF8String.fromString(value));
      }
      live.add(c);
      return c;
    }
  }

  /**
   * A channel over a frame's payload as the consumer received it, so Arrow reads the message
   * straight from the fetched bytes.
   */
  private static final class BufferChannel implements ReadableByteChannel {
    private final ByteBuffer data;
    private boolean open = true;

    BufferChannel(ByteBuffer data) {
      this.data = data;
    }

    @Override
    public int read(ByteBuffer dst) {
      if (!data.hasRemaining()) {
        return -1;
      }
      int n = Math.min(dst.remaining(), data.remaining());
      ByteBuffer part = data.slice();
      part.limit(n);
      dst.put(part);
      data.position(data.position() + n);
      return n;
    }

    @Override
    public boolean isOpen() {
      return open;
    }

    @Override
    public void close() {
      open = false;
    }
  }
}
