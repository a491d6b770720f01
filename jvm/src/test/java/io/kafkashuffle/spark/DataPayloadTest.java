package io.kafkashuffle.spark;

import static io.kafkashuffle.spark.Fixtures.RUN;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

class DataPayloadTest {
  private static final String WHERE = "topic 't' partition 0 offset 5";
  private final BufferAllocator allocator = new RootAllocator();

  @AfterEach
  void noLeaks() {
    allocator.close(); // throws when a test left Arrow memory allocated
  }

  /** A DATA frame of rows (key group, name, n). */
  private ByteBuffer dataFrame(String kgName, boolean kgInt32) throws Exception {
    try (BufferAllocator a = new RootAllocator()) {
      FieldVector kg =
          kgInt32 ? new IntVector(kgName, a) : new BigIntVector(kgName, a);
      VarCharVector name = new VarCharVector("name", a);
      BigIntVector n = new BigIntVector("n", a);
      String[] names = {"a", null, "ccc"};
      kg.allocateNew();
      name.allocateNew();
      n.allocateNew();
      for (int i = 0; i < 3; i++) {
        if (kg instanceof IntVector) {
          ((IntVector) kg).setSafe(i, i * 10);
        } else {
          ((BigIntVector) kg).setSafe(i, i * 10);
        }
        if (names[i] == null) {
          name.setNull(i);
        } else {
          name.setSafe(i, names[i].getBytes(java.nio.charset.StandardCharsets.UTF_8));
        }
        n.setSafe(i, 100 + i);
      }
      try (VectorSchemaRoot root = new VectorSchemaRoot(List.of(kg, name, n))) {
        root.setRowCount(3);
        byte[] payload = Fixtures.arrowStream(root);
        return ByteBuffer.wrap(Fixtures.frame(2, Frames.DATA, RUN, 0, 0, payload));
      }
    }
  }

  private static List<String> names(VectorSchemaRoot root) {
    List<String> out = new ArrayList<>();
    root.getFieldVectors().forEach(v -> out.add(v.getName()));
    return out;
  }

  @Test
  void loadsOnlyTheNeededColumns() throws Exception {
    ByteBuffer value = dataFrame(Frames.KEY_GROUP_COLUMN, true);
    try (VectorSchemaRoot root = DataPayload.load(value, WHERE, Set.of("n"), allocator)) {
      assertEquals(List.of("n"), names(root));
      assertEquals(3, root.getRowCount());
      BigIntVector n = (BigIntVector) root.getVector("n");
      assertEquals(100, n.get(0));
      assertEquals(102, n.get(2));
    }
    try (VectorSchemaRoot root =
        DataPayload.load(
            value, WHERE, Set.of(Frames.KEY_GROUP_COLUMN, "name", "n"), allocator)) {
      assertEquals(List.of(Frames.KEY_GROUP_COLUMN, "name", "n"), names(root));
      VarCharVector name = (VarCharVector) root.getVector("name");
      assertTrue(name.isNull(1));
      assertEquals("ccc", name.getObject(2).toString());
      assertEquals(20, ((IntVector) root.getVector(Frames.KEY_GROUP_COLUMN)).get(2));
    }
  }

  @Test
  void refusesAFrameWithoutAnInt32KeyGroup() throws Exception {
    ShuffleException none =
        assertThrows(
            ShuffleException.class,
            () -> DataPayload.load(dataFrame("kg", true), WHERE, Set.of("n"), allocator));
    assertEquals(
        "ShuffleFormatError: DATA frame at " + WHERE + " has no _key_group column",
        none.getMessage());
    ShuffleException wide =
        assertThrows(
            ShuffleException.class,
            () ->
                DataPayload.load(
                    dataFrame(Frames.KEY_GROUP_COLUMN, false), WHERE, Set.of("n"), allocator));
    assertTrue(wide.getMessage().endsWith("has a non-int32 _key_group column"), wide.getMessage());
  }

  @Test
  void refusesAPayloadThatIsNotArrow() {
    byte[] junk = new byte[64];
    java.util.Arrays.fill(junk, (byte) 0x5A);
    ByteBuffer value = ByteBuffer.wrap(Fixtures.frame(2, Frames.DATA, RUN, 0, 0, junk));
    ShuffleException e =
        assertThrows(
            ShuffleException.class, () -> DataPayload.load(value, WHERE, Set.of(), allocator));
    assertEquals(ShuffleException.Kind.FORMAT, e.kind());
    assertTrue(e.getMessage().startsWith("ShuffleFormatError: DATA frame at " + WHERE), e.getMessage());
  }

  @Test
  void refusesAStreamWithoutARecordBatch() throws Exception {
    // The schema message alone, then the stream's end marker.
    ByteBuffer schemaOnly;
    try (BufferAllocator a = new RootAllocator();
        VectorSchemaRoot empty =
            VectorSchemaRoot.create(
                new org.apache.arrow.vector.types.pojo.Schema(
                    List.of(
                        org.apache.arrow.vector.types.pojo.Field.nullable(
                            Frames.KEY_GROUP_COLUMN,
                            new org.apache.arrow.vector.types.pojo.ArrowType.Int(32, true)))),
                a)) {
      java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
      try (org.apache.arrow.vector.ipc.ArrowStreamWriter w =
          new org.apache.arrow.vector.ipc.ArrowStreamWriter(
              empty, null, java.nio.channels.Channels.newChannel(out))) {
        w.start();
        w.end();
      }
      schemaOnly =
          ByteBuffer.wrap(Fixtures.frame(2, Frames.DATA, RUN, 0, 0, out.toByteArray()));
    }
    ShuffleException e =
        assertThrows(
            ShuffleException.class,
            () -> DataPayload.load(schemaOnly, WHERE, Set.of(), allocator));
    assertEquals(
        "ShuffleFormatError: DATA frame at " + WHERE + " holds no record batch", e.getMessage());
  }
}
