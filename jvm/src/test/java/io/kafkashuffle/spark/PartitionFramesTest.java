package io.kafkashuffle.spark;

import static io.kafkashuffle.spark.Fixtures.RUN;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.TimeUnit;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** What a split keeps of a partition's frames, and the END checks, without Kafka. */
class PartitionFramesTest {
  private static final String TOPIC = "orders";
  private static final Schema SCHEMA =
      new Schema(
          List.of(
              Field.nullable("n", new ArrowType.Int(64, true)),
              Field.nullable(Frames.KEY_GROUP_COLUMN, new ArrowType.Int(32, true))));
  private final BufferAllocator allocator = new RootAllocator();
  private final List<AutoCloseable> live = new ArrayList<>();
  private long offset;

  @AfterEach
  void noLeaks() throws Exception {
    Fixtures.release(live, allocator);
  }

  private static ReadSpec spec(String... columns) throws Exception {
    Layout layout =
        Layout.parse(Fixtures.layoutJson(TOPIC, SCHEMA, List.of("n"), 2, 8), "test layout");
    return new ReadSpec(TOPIC, Map.of(), layout, columns, null, null);
  }

  /** Partition 1, key groups [start, end) of 8 over 2 partitions; run RUN by (0, 1), (1, 0). */
  private static SplitPlan.PartitionRead read(int start, int end, boolean sorted) {
    return new SplitPlan.PartitionRead(
        1,
        start,
        end,
        start == 4 && end == 8,
        List.of(
            new SplitPlan.Segment(
                RUN.toString(), 0, 99, new int[][] {{0, 1}, {1, 0}}, "w1", 0, sorted)));
  }

  /** A DATA frame of rows {@code n} with key groups {@code groups}. */
  private ConsumerRecord<byte[], ByteBuffer> data(
      UUID run, int subtask, int attempt, long[] n, int[] groups) throws Exception {
    try (BufferAllocator a = new RootAllocator();
        VectorSchemaRoot root = VectorSchemaRoot.create(SCHEMA, a)) {
      BigIntVector nv = (BigIntVector) root.getVector("n");
      IntVector kg = (IntVector) root.getVector(Frames.KEY_GROUP_COLUMN);
      for (int i = 0; i < n.length; i++) {
        nv.setSafe(i, n[i]);
        kg.setSafe(i, groups[i]);
      }
      root.setRowCount(n.length);
      return record(Fixtures.frame(2, Frames.DATA, run, subtask, attempt, Fixtures.arrowStream(root)));
    }
  }

  private ConsumerRecord<byte[], ByteBuffer> end(int subtask, int attempt, long rows, long frames) {
    return record(
        Fixtures.frame(2, Frames.END, RUN, subtask, attempt, Fixtures.endPayload(rows, frames)));
  }

  private ConsumerRecord<byte[], ByteBuffer> record(byte[] value) {
    return new ConsumerRecord<>(TOPIC, 1, offset++, null, ByteBuffer.wrap(value));
  }

  private static List<Long> column(ColumnarBatch b, int ordinal) {
    List<Long> out = new ArrayList<>();
    for (int i = 0; i < b.numRows(); i++) {
      out.add(b.column(ordinal).getLong(i));
    }
    return out;
  }

  @Test
  void keepsTheCommittedAttemptsAndChecksTheirEnds() throws Exception {
    PartitionFrames frames =
        new PartitionFrames(spec("n", "_run_id", "_partition"), read(4, 8, false), false, allocator, live);
    ColumnarBatch b = frames.handle(data(RUN, 0, 1, new long[] {1, 2, 3}, new int[] {4, 5, 6}));
    assertNotNull(b);
    assertEquals(List.of(1L, 2L, 3L), column(b, 0));
    assertEquals(RUN.toString(), b.column(1).getUTF8String(2).toString());
    assertEquals(1, b.column(2).getInt(0));
    // An attempt that was not committed, and a run the split does not read: skipped.
    assertNull(frames.handle(data(RUN, 0, 0, new long[] {9}, new int[] {4})));
    assertNull(frames.handle(data(UUID.randomUUID(), 0, 1, new long[] {9}, new int[] {4})));
    assertNull(frames.handle(end(0, 1, 3, 1)));
    assertNull(frames.handle(end(1, 0, 0, 0)));
    frames.finish();
  }

  @Test
  void aLostFrameFailsTheEndCheck() throws Exception {
    PartitionFrames frames = new PartitionFrames(spec("n"), read(4, 8, false), false, allocator, live);
    frames.handle(data(RUN, 0, 1, new long[] {1, 2}, new int[] {4, 4}));
    frames.handle(end(0, 1, 5, 2));
    frames.handle(end(1, 0, 0, 0));
    ShuffleException e = assertThrows(ShuffleException.class, frames::finish);
    assertEquals(
        "ShuffleFormatError: topic 'orders' partition 1, run "
            + RUN
            + " subtask 0: read 2 rows in 1 frames, the producer wrote 5 rows in 2 frames",
        e.getMessage());
  }

  @Test
  void aMissingEndFrameFails() throws Exception {
    PartitionFrames frames = new PartitionFrames(spec("n"), read(4, 8, false), false, allocator, live);
    frames.handle(end(0, 1, 0, 0));
    ShuffleException e = assertThrows(ShuffleException.class, frames::finish);
    assertTrue(
        e.getMessage()
            .endsWith(
                "subtask 1 attempt 0: no END frame within committed offsets [0, 99]; the topic"
                    + " lost data or was truncated"),
        e.getMessage());
  }

  @Test
  void aKeyGroupSubRangeKeepsItsRowsOnly() throws Exception {
    PartitionFrames frames =
        new PartitionFrames(spec("n", "_key_group"), read(5, 7, false), false, allocator, live);
    ColumnarBatch b =
        frames.handle(data(RUN, 1, 0, new long[] {10, 11, 12, 13}, new int[] {4, 5, 6, 7}));
    assertEquals(List.of(11L, 12L), column(b, 0));
    assertEquals(6, b.column(1).getInt(1));
    // No row of the range: no batch; the frame still counts for the END check.
    assertNull(frames.handle(data(RUN, 1, 0, new long[] {14}, new int[] {7})));
    frames.handle(end(1, 0, 5, 2));
    frames.handle(end(0, 1, 0, 0));
    frames.finish();
  }

  @Test
  void aSortedRunWithTwoWritersInAPartitionIsRefused() throws Exception {
    PartitionFrames frames = new PartitionFrames(spec("n"), read(4, 8, true), true, allocator, live);
    frames.handle(data(RUN, 0, 1, new long[] {1}, new int[] {4}));
    ShuffleException e =
        assertThrows(
            ShuffleException.class,
            () -> frames.handle(data(RUN, 1, 0, new long[] {2}, new int[] {4})));
    assertTrue(
        e.getMessage().contains("holds frames of subtasks 0 and 1"), e.getMessage());
  }

  @Test
  void aCorruptedFrameOfACommittedAttemptIsRefused() throws Exception {
    PartitionFrames frames = new PartitionFrames(spec("n"), read(4, 8, false), false, allocator, live);
    ConsumerRecord<byte[], ByteBuffer> r = data(RUN, 0, 1, new long[] {1, 2}, new int[] {4, 4});
    ByteBuffer v = r.value();
    v.put(v.limit() - 9, (byte) (v.get(v.limit() - 9) ^ 4));
    ShuffleException e = assertThrows(ShuffleException.class, () -> frames.handle(r));
    assertTrue(
        e.getMessage().contains("DATA frame at topic 'orders' partition 1 offset 0 (run "),
        e.getMessage());
    assertTrue(e.getMessage().contains("fails its checksum"), e.getMessage());
  }

  @Test
  void timestampsInAnotherZoneHoldTheSameValues() {
    ArrowType utc = new ArrowType.Timestamp(TimeUnit.MICROSECOND, "UTC");
    ArrowType ny =
        new ArrowType.Timestamp(
            TimeUnit.MICROSECOND, "America/New_York");
    ArrowType local = new ArrowType.Timestamp(TimeUnit.MICROSECOND, null);
    ArrowType millis =
        new ArrowType.Timestamp(TimeUnit.MILLISECOND, "UTC");
    assertTrue(PartitionFrames.sameValues(ny, utc));
    assertTrue(PartitionFrames.sameValues(utc, utc));
    assertTrue(!PartitionFrames.sameValues(local, utc), "a zone-less timestamp is another type");
    assertTrue(!PartitionFrames.sameValues(millis, utc), "another unit is another type");
    assertTrue(!PartitionFrames.sameValues(new ArrowType.Int(64, true), utc));
  }
}
