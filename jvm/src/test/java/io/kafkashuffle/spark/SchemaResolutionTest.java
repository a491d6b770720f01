package io.kafkashuffle.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayOutputStream;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.DateDayVector;
import org.apache.arrow.vector.DecimalVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.SmallIntVector;
import org.apache.arrow.vector.TinyIntVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.WriteChannel;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.DateUnit;
import org.apache.arrow.vector.types.FloatingPointPrecision;
import org.apache.arrow.vector.types.TimeUnit;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * Frames of runs written under older layout versions read as the latest version: widened,
 * renamed and added columns, the frame's own vectors kept where nothing changed, and runs of an
 * earlier partition count planned from their own partitions (more in {@link GrownReadsTest}).
 */
class SchemaResolutionTest {
  private static final String TOPIC = "orders";
  private static final ArrowType STRING = ArrowType.Utf8.INSTANCE;
  private static final ArrowType INT16 = new ArrowType.Int(16, true);
  private static final ArrowType INT32 = new ArrowType.Int(32, true);
  private static final ArrowType INT64 = new ArrowType.Int(64, true);
  private static final ArrowType FLOAT = new ArrowType.FloatingPoint(FloatingPointPrecision.SINGLE);
  private static final ArrowType DOUBLE =
      new ArrowType.FloatingPoint(FloatingPointPrecision.DOUBLE);
  private static final ArrowType DEC_10_2 = new ArrowType.Decimal(10, 2, 128);
  private static final ArrowType DEC_12_2 = new ArrowType.Decimal(12, 2, 128);
  private static final ArrowType DEC_14_4 = new ArrowType.Decimal(14, 4, 128);
  private static final ArrowType DEC_38_4 = new ArrowType.Decimal(38, 4, 128);
  private static final ArrowType DATE = new ArrowType.Date(DateUnit.DAY);
  private static final ArrowType TS_NTZ = new ArrowType.Timestamp(TimeUnit.MICROSECOND, null);

  // Version 1: k, n, f, d, day, old, gone (field ids 1 to 7).
  private static final Schema V1 =
      new Schema(
          List.of(
              Field.notNullable("k", STRING),
              Field.nullable("n", INT32),
              Field.nullable("f", FLOAT),
              Field.nullable("d", DEC_10_2),
              Field.nullable("day", DATE),
              Field.nullable("old", STRING),
              Field.nullable("gone", INT16)));
  // Version 2: n, f, d and day widened, old renamed label, gone dropped, extra added (id 8).
  private static final Schema V2 =
      new Schema(
          List.of(
              Field.notNullable("k", STRING),
              Field.nullable("n", INT64),
              Field.nullable("f", DOUBLE),
              Field.nullable("d", DEC_12_2),
              Field.nullable("day", TS_NTZ),
              Field.nullable("label", STRING),
              Field.nullable("extra", INT64)));
  private static final long[] V2_IDS = {1, 2, 3, 4, 5, 6, 8};
  private static final String[] LATEST = {"k", "n", "f", "d", "day", "label", "extra"};
  private static final UUID OLD_RUN = UUID.fromString("00000000-0000-0000-0000-000000000001");
  private static final UUID NEW_RUN = UUID.fromString("00000000-0000-0000-0000-000000000002");

  private final BufferAllocator allocator = new RootAllocator();
  private final List<AutoCloseable> live = new ArrayList<>();
  private long offset;

  @AfterEach
  void noLeaks() throws Exception {
    Fixtures.release(live, allocator);
  }

  static String b64(Schema schema) throws Exception {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    MessageSerializer.serialize(new WriteChannel(Channels.newChannel(out)), schema);
    return Base64.getEncoder().encodeToString(out.toByteArray());
  }

  /** A change record's value, as commitlog.py's version_to_json writes one. */
  static String change(long version, Schema schema, long[] ids, int partitions) throws Exception {
    ObjectNode d = Layout.JSON.createObjectNode();
    d.put("type", "change");
    d.put("version", version);
    d.put("change_id", "c" + version);
    d.put("num_partitions", partitions);
    d.put("schema", b64(schema));
    ArrayNode fids = d.putArray("field_ids");
    long last = 0;
    for (long id : ids) {
      fids.add(id);
      last = Math.max(last, id);
    }
    d.put("last_field_id", last);
    d.putArray("changes");
    return d.toString();
  }

  /** A commit record of {@code run} written under {@code version}, in the given partitions. */
  static String commit(String run, long version, int... partitions) {
    ObjectNode d = Layout.JSON.createObjectNode();
    d.put("run_id", run);
    d.putNull("window");
    d.put("committed_at", "2013-01-02T00:00:00+00:00");
    d.putArray("tasks").addArray().add(0).add(0);
    ObjectNode ps = d.putObject("partitions");
    for (int p : partitions) {
      ps.putArray(String.valueOf(p)).add(0).add(9).add(3).add(1);
    }
    d.put("rows", 3L * partitions.length);
    d.put("bytes", 100);
    d.put("frames", partitions.length);
    if (version != 1) {
      d.put("layout_version", version);
    }
    return d.toString();
  }

  /** The log: a layout of version 1 (4 partitions), version 2, and a run of each. */
  private static CommitLog log(int v2Partitions) throws Exception {
    CommitLog log = new CommitLog(TOPIC);
    log.apply("layout", Fixtures.layoutJson(TOPIC, V1, List.of("k"), 4, 16));
    log.apply("commit/" + OLD_RUN, commit(OLD_RUN.toString(), 1, 0, 1));
    log.apply("change/2/c2", change(2, V2, V2_IDS, v2Partitions));
    log.apply("commit/" + NEW_RUN, commit(NEW_RUN.toString(), 2, 1, 3));
    return log;
  }

  private static ReadSpec spec(Layout layout, String... columns) {
    return new ReadSpec(TOPIC, Map.of(), layout, columns, null, null);
  }

  @Test
  void theLogsLayoutIsTheLatestVersionWithEveryVersion() throws Exception {
    Layout layout = log(4).layout();
    assertEquals(2, layout.version());
    assertEquals(V2, layout.schema);
    assertEquals(2, layout.versions.size());
    assertEquals(V1, layout.layoutVersion(1).schema);
    // Tasks parse the layout again from its JSON: the versions come along.
    Layout again = Layout.parse(layout.json, "test");
    assertEquals(V2, again.schema);
    assertEquals(V1, again.layoutVersion(1).schema);
    assertTrue(again.layoutVersion(2).sameColumns(layout.latest()));
  }

  private static FieldVector filled(FieldVector v, Object... values) {
    v.allocateNew();
    for (int i = 0; i < values.length; i++) {
      Object x = values[i];
      if (x == null) {
        v.setNull(i);
      } else if (v instanceof TinyIntVector t) {
        t.setSafe(i, ((Number) x).byteValue());
      } else if (v instanceof SmallIntVector s) {
        s.setSafe(i, ((Number) x).shortValue());
      } else if (v instanceof IntVector n) {
        n.setSafe(i, ((Number) x).intValue());
      } else if (v instanceof BigIntVector b) {
        b.setSafe(i, ((Number) x).longValue());
      } else if (v instanceof Float4Vector f) {
        f.setSafe(i, ((Number) x).floatValue());
      } else if (v instanceof DecimalVector d) {
        d.setSafe(i, new BigDecimal((String) x));
      } else if (v instanceof DateDayVector d) {
        d.setSafe(i, ((Number) x).intValue());
      } else if (v instanceof VarCharVector s) {
        s.setSafe(i, ((String) x).getBytes(StandardCharsets.UTF_8));
      }
    }
    v.setValueCount(values.length);
    return v;
  }

  /** A frame of version 1's columns (and key groups 4, 5, 6), rows a, b, c. */
  private VectorSchemaRoot v1Frame(BufferAllocator a) {
    List<FieldVector> vs = new ArrayList<>();
    for (Field f : V1.getFields()) {
      vs.add(f.createVector(a));
    }
    filled(vs.get(0), "a", "b", "c");
    filled(vs.get(1), Integer.MIN_VALUE, null, 7);
    filled(vs.get(2), 1.5f, -0.25f, null);
    filled(vs.get(3), "12345678.90", null, "-0.01");
    filled(vs.get(4), 0, 19_000, null);
    filled(vs.get(5), "x", null, "z");
    filled(vs.get(6), 1, 2, 3);
    vs.add(filled(new IntVector(Frames.KEY_GROUP_COLUMN, a), 4, 5, 6));
    VectorSchemaRoot root = new VectorSchemaRoot(vs);
    root.setRowCount(3);
    return root;
  }

  @Test
  void aColumnOfTheLatestTypeIsTheFramesOwnVectorUnderItsNewName() throws Exception {
    Layout layout = log(4).layout();
    SchemaResolution r = SchemaResolution.of(layout, 1);
    try (VectorSchemaRoot root = v1Frame(allocator)) {
      long before = allocator.getAllocatedMemory();
      ColumnVector k = r.column(root, "k", null, 3, allocator, live, "here");
      ColumnVector label = r.column(root, "label", null, 3, allocator, live, "here");
      assertTrue(live.isEmpty(), "nothing allocated for a column read as it is");
      assertEquals(before, allocator.getAllocatedMemory());
      assertEquals("b", k.getUTF8String(1).toString());
      assertEquals("z", label.getUTF8String(2).toString());
      assertTrue(label.isNullAt(1));
      assertEquals(DataTypes.StringType, label.dataType());
    }
  }

  @Test
  void narrowerColumnsReadWidenedAndAddedOnesAsNulls() throws Exception {
    Layout layout = log(4).layout();
    SchemaResolution r = SchemaResolution.of(layout, 1);
    assertFalse(r.identity);
    assertNull(r.frameName("extra"));
    assertEquals("old", r.frameName("label"));
    assertEquals(
        java.util.Set.of("n", "old"), r.frameColumns(List.of("n", "label", "extra", "_run_id")));
    try (VectorSchemaRoot root = v1Frame(allocator)) {
      ColumnVector n = r.column(root, "n", null, 3, allocator, live, "here");
      assertEquals(DataTypes.LongType, n.dataType());
      assertEquals(Integer.MIN_VALUE, n.getLong(0));
      assertTrue(n.isNullAt(1));
      assertEquals(7L, n.getLong(2));

      ColumnVector f = r.column(root, "f", null, 3, allocator, live, "here");
      assertEquals(DataTypes.DoubleType, f.dataType());
      assertEquals(1.5, f.getDouble(0));
      assertEquals(-0.25, f.getDouble(1));
      assertTrue(f.isNullAt(2));

      ColumnVector d = r.column(root, "d", null, 3, allocator, live, "here");
      assertEquals(DecimalType.apply(12, 2), d.dataType());
      assertEquals(new BigDecimal("12345678.90"), d.getDecimal(0, 12, 2).toJavaBigDecimal());
      assertTrue(d.isNullAt(1));
      assertEquals(new BigDecimal("-0.01"), d.getDecimal(2, 12, 2).toJavaBigDecimal());

      ColumnVector day = r.column(root, "day", null, 3, allocator, live, "here");
      assertEquals(DataTypes.TimestampNTZType, day.dataType());
      assertEquals(0L, day.getLong(0));
      assertEquals(19_000L * 86_400_000_000L, day.getLong(1));
      assertTrue(day.isNullAt(2));

      ColumnVector extra = r.column(root, "extra", null, 3, allocator, live, "here");
      assertEquals(DataTypes.LongType, extra.dataType());
      for (int i = 0; i < 3; i++) {
        assertTrue(extra.isNullAt(i));
      }
      assertEquals(3, extra.numNulls());
    }
  }

  @Test
  void aColumnTheFrameLeavesOutReadsAsNulls() throws Exception {
    Layout layout = log(4).layout();
    SchemaResolution r = SchemaResolution.of(layout, 2);
    assertTrue(r.identity);
    try (VectorSchemaRoot root = v1Frame(allocator)) {
      // A frame of version 2 without "label" (a run written with schema_mode="merge").
      ColumnVector label = r.column(root, "label", null, 3, allocator, live, "here");
      assertTrue(label.isNullAt(0) && label.isNullAt(2));
      assertEquals(DataTypes.StringType, label.dataType());
    }
  }

  @Test
  void widenedAndAddedColumnsCopyNothing() throws Exception {
    Layout layout = log(4).layout();
    SchemaResolution r = SchemaResolution.of(layout, 1);
    try (VectorSchemaRoot root = v1Frame(allocator)) {
      long before = allocator.getAllocatedMemory();
      ColumnVector n = r.column(root, "n", null, 3, allocator, live, "here");
      ColumnVector f = r.column(root, "f", null, 3, allocator, live, "here");
      ColumnVector d = r.column(root, "d", null, 3, allocator, live, "here");
      ColumnVector day = r.column(root, "day", null, 3, allocator, live, "here");
      ColumnVector extra = r.column(root, "extra", null, 3, allocator, live, "here");
      assertTrue(live.isEmpty(), "nothing to release for a view or a null column");
      assertEquals(before, allocator.getAllocatedMemory());
      assertInstanceOf(WidenedColumnVector.class, n);
      assertInstanceOf(WidenedColumnVector.class, f);
      assertInstanceOf(WidenedColumnVector.class, d);
      assertInstanceOf(WidenedColumnVector.class, day);
      // One null column serves every batch of as many rows.
      assertSame(extra, r.column(root, "extra", null, 3, allocator, live, "here"));
      ColumnVector two = r.column(root, "extra", new int[] {0, 2}, 2, allocator, live, "here");
      assertEquals(2, two.numNulls());
    }
  }

  @Test
  void selectedRowsAreWidenedAlone() throws Exception {
    Layout layout = log(4).layout();
    SchemaResolution r = SchemaResolution.of(layout, 1);
    try (VectorSchemaRoot root = v1Frame(allocator)) {
      ColumnVector w = r.column(root, "n", new int[] {2, 0}, 2, allocator, live, "here");
      assertEquals(DataTypes.LongType, w.dataType());
      assertEquals(7L, w.getLong(0));
      assertEquals((long) Integer.MIN_VALUE, w.getLong(1));
      assertFalse(w.isNullAt(0) || w.isNullAt(1));
      // The kept rows of the narrower vector, copied as a selection always is.
      assertEquals(1, live.size());
      ColumnVector day = r.column(root, "day", new int[] {2, 1}, 2, allocator, live, "here");
      assertTrue(day.isNullAt(0));
      assertEquals(19_000L * 86_400_000_000L, day.getLong(1));
    }
  }

  @Test
  void integersWidenStepByStep() throws Exception {
    try (FieldVector b = filled(new TinyIntVector("b", allocator), -128, null, 127);
        FieldVector sv = filled(new SmallIntVector("s", allocator), -32768, null, 32767);
        FieldVector iv = filled(new IntVector("i", allocator), Integer.MIN_VALUE, null, 5)) {
      ColumnVector s = WidenedColumnVector.of(b, INT16, DataTypes.ShortType, "b");
      ColumnVector i = WidenedColumnVector.of(sv, INT32, DataTypes.IntegerType, "s");
      ColumnVector l = WidenedColumnVector.of(iv, INT64, DataTypes.LongType, "i");
      ColumnVector d = WidenedColumnVector.of(b, DOUBLE, DataTypes.DoubleType, "b");
      ColumnVector dec = WidenedColumnVector.of(b, DEC_10_2, DecimalType.apply(10, 2), "b");
      ColumnVector wide =
          WidenedColumnVector.of(iv, DEC_38_4, DecimalType.apply(38, 4), "i");
      assertEquals(-128, s.getShort(0));
      assertEquals(127, WidenedColumnVector.of(b, INT32, DataTypes.IntegerType, "b").getInt(2));
      assertEquals(32767, i.getInt(2));
      assertEquals((long) Integer.MIN_VALUE, l.getLong(0));
      assertTrue(s.isNullAt(1) && l.isNullAt(1) && d.isNullAt(1) && dec.isNullAt(1));
      assertEquals(1, l.numNulls());
      assertEquals(127.0, d.getDouble(2));
      assertEquals(new BigDecimal("-128.00"), dec.getDecimal(0, 10, 2).toJavaBigDecimal());
      assertNull(dec.getDecimal(1, 10, 2));
      assertEquals(
          new BigDecimal("-2147483648.0000"), wide.getDecimal(0, 38, 4).toJavaBigDecimal());
      assertEquals(new BigDecimal("5.0000"), wide.getDecimal(2, 38, 4).toJavaBigDecimal());
    }
  }

  @Test
  void decimalsWidenOnBothSidesOfThePoint() throws Exception {
    try (DecimalVector small = new DecimalVector("d", allocator, 10, 2);
        DecimalVector big = new DecimalVector("b", allocator, 30, 2)) {
      small.allocateNew();
      small.setSafe(0, new BigDecimal("-12345678.99"));
      small.setNull(1);
      small.setSafe(2, new BigDecimal("0.05"));
      small.setValueCount(3);
      big.allocateNew();
      big.setSafe(0, new BigDecimal("-1234567890123456789012345678.91"));
      big.setSafe(1, new BigDecimal("7.00"));
      big.setValueCount(2);
      ColumnVector a = WidenedColumnVector.of(small, DEC_14_4, DecimalType.apply(14, 4), "d");
      assertEquals(new BigDecimal("-12345678.9900"), a.getDecimal(0, 14, 4).toJavaBigDecimal());
      assertNull(a.getDecimal(1, 14, 4));
      assertEquals(new BigDecimal("0.0500"), a.getDecimal(2, 14, 4).toJavaBigDecimal());
      ColumnVector b = WidenedColumnVector.of(small, DEC_38_4, DecimalType.apply(38, 4), "d");
      assertEquals(new BigDecimal("-12345678.9900"), b.getDecimal(0, 38, 4).toJavaBigDecimal());
      ColumnVector c = WidenedColumnVector.of(big, DEC_38_4, DecimalType.apply(38, 4), "b");
      assertEquals(
          new BigDecimal("-1234567890123456789012345678.9100"),
          c.getDecimal(0, 38, 4).toJavaBigDecimal());
      assertEquals(new BigDecimal("7.0000"), c.getDecimal(1, 38, 4).toJavaBigDecimal());
    }
  }

  @Test
  void aDateBeyondTheTimestampsRangeIsRefusedBeforeAnyRowIsRead() throws Exception {
    try (FieldVector d = filled(new DateDayVector("day", allocator), 0, null, 200_000)) {
      ArrowType ns = new ArrowType.Timestamp(TimeUnit.NANOSECOND, null);
      ShuffleException e =
          assertThrows(
              ShuffleException.class,
              () -> WidenedColumnVector.of(d, ns, DataTypes.TimestampNTZType, "day"));
      assertEquals(
          "ShuffleFormatError: date 200000 of column 'day' is outside timestamp[ns]",
          e.getMessage());
    }
  }

  @Test
  void aTypeThatIsNoPromotionIsRefused() throws Exception {
    Schema v2 =
        new Schema(List.of(Field.notNullable("k", STRING), Field.nullable("n", INT16)));
    Schema v1 =
        new Schema(List.of(Field.notNullable("k", STRING), Field.nullable("n", INT32)));
    CommitLog log = new CommitLog(TOPIC);
    log.apply("layout", Fixtures.layoutJson(TOPIC, v1, List.of("k"), 4, 16));
    log.apply("change/2/c2", change(2, v2, new long[] {1, 2}, 4));
    SchemaResolution r = SchemaResolution.of(log.layout(), 1);
    try (VectorSchemaRoot root = v1Frame(allocator)) {
      ShuffleException e =
          assertThrows(
              ShuffleException.class,
              () -> r.column(root, "n", null, 3, allocator, live, "topic 'orders' offset 3"));
      assertEquals(
          "ShuffleFormatError: DATA frame at topic 'orders' offset 3 has column 'n' of type"
              + " int32, the layout says int16 (layout version 2): int32 -> int16 narrows the"
              + " integer",
          e.getMessage());
    }
  }

  private ConsumerRecord<byte[], ByteBuffer> record(byte[] value) {
    return new ConsumerRecord<>(TOPIC, 1, offset++, null, ByteBuffer.wrap(value));
  }

  private ConsumerRecord<byte[], ByteBuffer> v1Data(UUID run) throws Exception {
    try (BufferAllocator a = new RootAllocator();
        VectorSchemaRoot root = v1Frame(a)) {
      return record(Fixtures.frame(2, Frames.DATA, run, 0, 0, Fixtures.arrowStream(root)));
    }
  }

  private ConsumerRecord<byte[], ByteBuffer> v2Data(UUID run) throws Exception {
    try (BufferAllocator a = new RootAllocator()) {
      List<FieldVector> vs = new ArrayList<>();
      for (Field f : V2.getFields()) {
        vs.add(f.createVector(a));
      }
      filled(vs.get(0), "d", "e");
      filled(vs.get(1), 1L << 40, null);
      vs.get(2).allocateNew();
      ((org.apache.arrow.vector.Float8Vector) vs.get(2)).setSafe(0, 2.5);
      vs.get(2).setNull(1);
      vs.get(2).setValueCount(2);
      filled(vs.get(3), "1.00", "2.00");
      vs.get(4).allocateNew();
      ((org.apache.arrow.vector.TimeStampVector) vs.get(4)).setSafe(0, 5L);
      ((org.apache.arrow.vector.TimeStampVector) vs.get(4)).setSafe(1, 6L);
      vs.get(4).setValueCount(2);
      filled(vs.get(5), "p", "q");
      filled(vs.get(6), 10L, null);
      vs.add(filled(new IntVector(Frames.KEY_GROUP_COLUMN, a), 4, 7));
      try (VectorSchemaRoot root = new VectorSchemaRoot(vs)) {
        root.setRowCount(2);
        return record(Fixtures.frame(2, Frames.DATA, run, 0, 0, Fixtures.arrowStream(root)));
      }
    }
  }

  private static SplitPlan.PartitionRead read(int start, int end) {
    return new SplitPlan.PartitionRead(
        1,
        start,
        end,
        start == 4 && end == 8,
        List.of(
            new SplitPlan.Segment(
                OLD_RUN.toString(), 0, 99, new int[][] {{0, 0}}, null, 3, false, 1),
            new SplitPlan.Segment(
                NEW_RUN.toString(), 0, 99, new int[][] {{0, 0}}, null, 2, false, 2)));
  }

  @Test
  void aPartitionOfRunsOfTwoVersionsReadsAsTheLatest() throws Exception {
    Layout layout = log(4).layout();
    PartitionFrames frames =
        new PartitionFrames(spec(layout, LATEST), read(4, 8), false, allocator, live);
    ColumnarBatch old = frames.handle(v1Data(OLD_RUN));
    assertEquals(3, old.numRows());
    assertEquals(7, old.numCols());
    assertEquals("c", old.column(0).getUTF8String(2).toString());
    assertEquals(7L, old.column(1).getLong(2));
    assertEquals(1.5, old.column(2).getDouble(0));
    assertEquals(19_000L * 86_400_000_000L, old.column(4).getLong(1));
    assertEquals("x", old.column(5).getUTF8String(0).toString());
    assertTrue(old.column(6).isNullAt(0));
    ColumnarBatch now = frames.handle(v2Data(NEW_RUN));
    assertEquals(1L << 40, now.column(1).getLong(0));
    assertEquals("q", now.column(5).getUTF8String(1).toString());
    assertEquals(10L, now.column(6).getLong(0));
    assertTrue(now.column(6).isNullAt(1));
  }

  @Test
  void aKeyGroupSubRangeOfAnOlderRunReadsItsRowsWidened() throws Exception {
    Layout layout = log(4).layout();
    PartitionFrames frames =
        new PartitionFrames(
            spec(layout, "label", "n", "extra", "_key_group"), read(5, 7), false, allocator, live);
    ColumnarBatch b = frames.handle(v1Data(OLD_RUN));
    assertEquals(2, b.numRows());
    assertTrue(b.column(0).isNullAt(0));
    assertEquals("z", b.column(0).getUTF8String(1).toString());
    assertTrue(b.column(1).isNullAt(0));
    assertEquals(7L, b.column(1).getLong(1));
    assertTrue(b.column(2).isNullAt(1));
    assertEquals(6, b.column(3).getInt(1));
  }

  @Test
  void runsOfAnotherPartitionCountArePlannedFromTheirOwnPartitions() throws Exception {
    CommitLog log = log(8);
    Layout layout = log.layout();
    assertEquals(8, layout.numPartitions);
    // One split per partition of 8 (by default, a split per partition of 4).
    List<SplitPlan> splits =
        ReadPlanner.plan(log, new ReadPlanner.Selection(null, null, null, null, 8));
    assertEquals(8, splits.size());
    // Split 3 holds key groups [6, 8): partition 3 now, part of partition 1 of 4 before.
    SplitPlan three = splits.get(3);
    assertEquals(2, three.reads.size());
    SplitPlan.PartitionRead now = three.reads.get(0);
    assertEquals(3, now.partition);
    assertTrue(now.full);
    assertEquals(NEW_RUN.toString(), now.segments.get(0).runId);
    SplitPlan.PartitionRead before = three.reads.get(1);
    assertEquals(1, before.partition);
    assertEquals(6, before.keyGroupStart);
    assertEquals(8, before.keyGroupEnd);
    assertFalse(before.full);
    assertEquals(OLD_RUN.toString(), before.segments.get(0).runId);
    assertEquals(1, before.segments.get(0).layoutVersion);
    ObjectNode json = three.toJson();
    assertEquals(2, json.get("reads").get(0).get("segments").get(0).get("layout_version").asInt());
    assertFalse(json.get("reads").get(1).get("segments").get(0).has("layout_version"));
    SplitPlan back =
        SplitPlan.parseAll(
                Layout.JSON.createArrayNode().add(json.toString()).toString(), "plan")
            .get(0);
    assertEquals(2, back.reads.get(0).segments.get(0).layoutVersion);
    assertEquals(6, back.reads.get(1).keyGroupStart);
    assertTrue(ShuffleScan.keyedSplits(splits, layout));
  }

  @Test
  void aSegmentOfVersionOneHasNoVersionInItsJson() throws Exception {
    CommitLog log = log(4);
    List<SplitPlan> splits =
        ReadPlanner.plan(log, new ReadPlanner.Selection(null, null, null, null, null));
    ObjectNode p1 = splits.get(1).toJson();
    var segs = p1.get("reads").get(0).get("segments");
    assertEquals(OLD_RUN.toString(), segs.get(0).get("run_id").asText());
    assertFalse(segs.get(0).has("layout_version"));
    assertEquals(2, segs.get(1).get("layout_version").asInt());
  }

  @Test
  void aRunOfAVersionTheLogLacksCannotBePlanned() throws Exception {
    CommitLog log = log(4);
    log.apply("commit/r9", commit("r9", 9, 0));
    ShuffleException e =
        assertThrows(
            ShuffleException.class,
            () ->
                ReadPlanner.plan(
                    log, new ReadPlanner.Selection(null, null, null, null, null)));
    assertEquals(
        "ShuffleFormatError: shuffle 'orders': layout version 9 is not in its commit log"
            + " 'orders__commits' (versions 1 to 2); a run written under it cannot be read",
        e.getMessage());
  }

  /** A plan as the Python planner hands it: one split reading partition 1 of both runs. */
  private static String handedPlan() {
    SplitPlan split = new SplitPlan(0, List.of(read(4, 8)));
    return Layout.JSON.createArrayNode().add(split.toJson().toString()).toString();
  }

  private static org.apache.spark.sql.connector.read.Scan scan(
      CommitLog log, String layoutOption) {
    return scan(log, layoutOption, handedPlan());
  }

  private static org.apache.spark.sql.connector.read.Scan scan(
      CommitLog log, String layoutOption, String plan) {
    ShuffleTable table = new ShuffleTable(log.layout(), Map.of(), false, log);
    Map<String, String> options = new java.util.HashMap<>();
    options.put("plan", plan);
    options.put("layout", layoutOption);
    options.put("kafka.bootstrap.servers", "localhost:1");
    return table
        .newScanBuilder(new org.apache.spark.sql.util.CaseInsensitiveStringMap(options))
        .build();
  }

  @Test
  void aPlanMadeBeforeAChangeIsReadAsTheTablesLatestVersion() throws Exception {
    CommitLog log = log(4);
    // The planner's layout was read before version 2 was recorded.
    CommitLog before = new CommitLog(TOPIC);
    before.apply("layout", Fixtures.layoutJson(TOPIC, V1, List.of("k"), 4, 16));
    var s = scan(log, before.layout().json);
    assertEquals(7, s.readSchema().fields().length);
    assertEquals("label", s.readSchema().fields()[5].name());
  }

  @Test
  void aPlanOfALaterVersionThanTheTableIsRefused() throws Exception {
    CommitLog older = new CommitLog(TOPIC);
    older.apply("layout", Fixtures.layoutJson(TOPIC, V1, List.of("k"), 4, 16));
    ShuffleException e =
        assertThrows(ShuffleException.class, () -> scan(older, log(4).layout().json));
    assertTrue(e.getMessage().contains("the layout changed while the read was planned"), e.getMessage());
  }

  @Test
  void aHandedPlanOfRunsOfAnotherPartitionCountIsRead() throws Exception {
    CommitLog log = log(8);
    ArrayNode plan = Layout.JSON.createArrayNode();
    for (SplitPlan split :
        ReadPlanner.plan(log, new ReadPlanner.Selection(null, null, null, null, null))) {
      plan.add(split.toJson().toString());
    }
    var s = scan(log, log.layout().json, plan.toString());
    assertEquals(7, s.readSchema().fields().length);
    assertTrue(
        ((ShuffleScan) s).outputPartitioning()
            instanceof org.apache.spark.sql.connector.read.partitioning.KeyGroupedPartitioning);
  }

  @Test
  void aHandedPlanOfAVersionTheLogLacksIsRefused() throws Exception {
    CommitLog log = log(8);
    SplitPlan split =
        new SplitPlan(
            0,
            List.of(
                new SplitPlan.PartitionRead(
                    0,
                    0,
                    2,
                    true,
                    List.of(
                        new SplitPlan.Segment(
                            "r9", 0, 9, new int[][] {{0, 0}}, null, 3, false, 9)))));
    String plan = Layout.JSON.createArrayNode().add(split.toJson().toString()).toString();
    ShuffleException e =
        assertThrows(ShuffleException.class, () -> scan(log, log.layout().json, plan));
    assertTrue(e.getMessage().contains("layout version 9 is not in its commit log"), e.getMessage());
  }

  @Test
  void aStreamRefusesARunOfAVersionRecordedAfterItStarted() throws Exception {
    CommitLog started = new CommitLog(TOPIC);
    started.apply("layout", Fixtures.layoutJson(TOPIC, V1, List.of("k"), 4, 16));
    List<ShuffleStream.Record> records =
        List.of(
            new ShuffleStream.Record(0, "layout", Fixtures.layoutJson(TOPIC, V1, List.of("k"), 4, 16)),
            new ShuffleStream.Record(1, "commit/" + OLD_RUN, commit(OLD_RUN.toString(), 1, 0)),
            new ShuffleStream.Record(2, "change/2/c2", change(2, V2, V2_IDS, 4)),
            new ShuffleStream.Record(3, "commit/" + NEW_RUN, commit(NEW_RUN.toString(), 2, 1)));
    ShuffleStream.LogSource source =
        new ShuffleStream.LogSource() {
          @Override
          public ShuffleStream.Read read(long from) {
            List<ShuffleStream.Record> out = new ArrayList<>();
            for (ShuffleStream.Record r : records) {
              if (r.offset >= from) {
                out.add(r);
              }
            }
            return new ShuffleStream.Read(from, out, Math.max(records.size(), from));
          }

          @Override
          public long end() {
            return records.size();
          }
        };
    ShuffleStream stream =
        new ShuffleStream(spec(started.layout(), "k"), Map.of(), "kafka-shuffle", source);
    ShuffleStream.Position start = new ShuffleStream.Position(0, 0);
    assertEquals(4, stream.planInputPartitions(start, new ShuffleStream.Position(2, 0)).length);
    ShuffleException e =
        assertThrows(
            ShuffleException.class,
            () -> stream.planInputPartitions(start, new ShuffleStream.Position(4, 0)));
    assertTrue(e.getMessage().contains("restart the query"), e.getMessage());
  }
}
