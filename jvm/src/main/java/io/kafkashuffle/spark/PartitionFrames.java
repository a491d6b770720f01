package io.kafkashuffle.spark;

import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.TimeStampVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The frames of one Kafka partition of a split, record by record: keeps the DATA frames of
 * the segments' runs and committed (subtask, attempt) pairs, merges the producers'
 * watermarks, and at the end checks each committed attempt's END frame against what was read.
 * What a batch holds goes into {@code live}, which the reader releases with the batch.
 *
 * <p>Each run's frames are read by the layout version it was written under and output as the
 * latest version's columns ({@link SchemaResolution}). A read that is not {@code full} keeps the
 * rows of its key groups only: part of a partition, or the key groups of a partition of the
 * latest count that a partition of an earlier count (before the shuffle grew) holds among
 * others.
 */
final class PartitionFrames {
  private final ReadSpec spec;
  private final Layout layout;
  private final SplitPlan.PartitionRead read;
  // The read's order relies on each sorted run having one writer per partition: checked.
  private final boolean sorted;
  private final BufferAllocator allocator;
  private final List<AutoCloseable> live;
  private final String quotedTopic;
  private final Map<String, Set<String>> allowed = new HashMap<>();
  private final Map<String, String> windows = new HashMap<>();
  private final Map<String, WatermarkMerger> mergers = new HashMap<>();
  private final Map<String, long[]> seen = new HashMap<>();
  private final Map<String, long[]> ended = new HashMap<>();
  private final Map<String, Integer> writers = new HashMap<>(); // sorted run -> its one subtask
  // Per run: how its frames read as the latest version, and the frame columns this read
  // decompresses of them (its output's, and those its filters read).
  private final Map<String, SchemaResolution> resolutions = new HashMap<>();
  private final Map<String, Set<String>> needed = new HashMap<>();

  PartitionFrames(
      ReadSpec spec,
      SplitPlan.PartitionRead read,
      boolean sorted,
      BufferAllocator allocator,
      List<AutoCloseable> live) {
    this.spec = spec;
    this.layout = spec.layout();
    this.read = read;
    this.sorted = sorted;
    this.allocator = allocator;
    this.live = live;
    this.quotedTopic = "'" + spec.topic + "'";
    Set<String> wanted = new HashSet<>();
    for (String c : spec.columns) {
      wanted.add(c);
    }
    if (spec.filtersEventTime() && layout.eventTime != null) {
      wanted.add(layout.eventTime);
    }
    Map<Long, SchemaResolution> byVersion = new HashMap<>();
    for (SplitPlan.Segment s : read.segments) {
      SchemaResolution r =
          byVersion.computeIfAbsent(s.layoutVersion, v -> SchemaResolution.of(layout, v));
      resolutions.put(s.runId, r);
      Set<String> columns = r.frameColumns(wanted);
      if (!read.full || wanted.contains(Frames.KEY_GROUP_COLUMN)) {
        columns.add(Frames.KEY_GROUP_COLUMN);
      }
      needed.put(s.runId, columns);
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
  }

  private static String pair(int subtask, int attempt) {
    return subtask + "/" + attempt;
  }

  private String where(long offset) {
    return "topic " + quotedTopic + " partition " + read.partition + " offset " + offset;
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
    SchemaResolution resolution = resolutions.get(runId);
    VectorSchemaRoot root = DataPayload.load(value, where, needed.get(runId), allocator);
    boolean keep = false;
    try {
      int rows = root.getRowCount();
      counts[0] += rows;
      counts[1] += 1;
      FieldVector kg = root.getVector(Frames.KEY_GROUP_COLUMN); // null when not loaded
      int[] selected = select(root, kg, rows, resolution, where);
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
            out[i] =
                DirectColumnVector.of(SchemaResolution.rowsOf(kg, selected, n, allocator, live));
            break;
          default:
            out[i] = resolution.column(root, name, selected, n, allocator, live, where);
        }
      }
      if (selected == null) {
        keep = true; // the batch may wrap the frame's own vectors
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
   * The event-time column of a frame: the event-time column is the same column in every layout
   * version (no change may touch it), and every run has it.
   */
  private FieldVector eventTimeColumn(
      VectorSchemaRoot root, SchemaResolution resolution, String where) {
    String name = resolution.frameName(layout.eventTime);
    FieldVector v = name == null ? null : root.getVector(name);
    if (v == null) {
      throw ShuffleException.format(
          "DATA frame at " + where + " has no column '" + layout.eventTime + "'");
    }
    Field want = layout.schema.findField(layout.eventTime);
    if (!sameValues(v.getField().getType(), want.getType())) {
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

  /**
   * Whether a frame's column of type {@code got} holds values as the layout's {@code want}
   * does: the same type, where a timestamp's time zone does not count as long as both have
   * one (a zone only names how the instants are shown; a producer in a session of another
   * zone writes the same instants under that zone's name).
   */
  static boolean sameValues(ArrowType got, ArrowType want) {
    if (got instanceof ArrowType.Timestamp g && want instanceof ArrowType.Timestamp w) {
      return g.getUnit() == w.getUnit() && (g.getTimezone() == null) == (w.getTimezone() == null);
    }
    return got.equals(want);
  }

  /** The rows to keep (null: all): the read's key groups and the event-time range. */
  private int[] select(
      VectorSchemaRoot root,
      FieldVector kgVector,
      int rows,
      SchemaResolution resolution,
      String where) {
    IntVector kg = (IntVector) kgVector;
    boolean byGroup = !read.full;
    boolean byTime = spec.filtersEventTime() && layout.eventTime != null;
    if (!byGroup && !byTime) {
      return null;
    }
    FieldVector et = byTime ? eventTimeColumn(root, resolution, where) : null;
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
