package io.kafkashuffle.spark;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.Channels;
import java.util.Base64;
import java.util.List;
import java.util.UUID;
import java.util.zip.CRC32;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamWriter;
import org.apache.arrow.vector.ipc.WriteChannel;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.pojo.Schema;

/** Frames and layouts written as the Python writer writes them (core/frames.py, commitlog.py). */
final class Fixtures {
  static final UUID RUN = UUID.fromString("0b6a3c1e-52f4-4d3a-9c8e-1f2a3b4c5d6e");

  private Fixtures() {}

  /** A frame of {@code version} (1 or 2), its v2 checksum the payload's. */
  static byte[] frame(int version, int type, UUID run, int subtask, int attempt, byte[] payload) {
    int header = version == 1 ? Frames.HEADER_SIZE_V1 : Frames.HEADER_SIZE;
    ByteBuffer b = ByteBuffer.allocate(header + payload.length).order(ByteOrder.BIG_ENDIAN);
    b.put("KSHF".getBytes(java.nio.charset.StandardCharsets.US_ASCII));
    b.put((byte) version).put((byte) type).putShort((short) 0);
    b.putLong(run.getMostSignificantBits()).putLong(run.getLeastSignificantBits());
    b.putInt(subtask).putInt(attempt).putLong(7L);
    if (version != 1) {
      CRC32 crc = new CRC32();
      crc.update(payload);
      b.putInt((int) crc.getValue());
    }
    b.put(payload);
    return b.array();
  }

  static byte[] watermarkPayload(long micros) {
    return ByteBuffer.allocate(8).putLong(micros).array();
  }

  static byte[] endPayload(long rows, long frames) {
    return ByteBuffer.allocate(16).putLong(rows).putLong(frames).array();
  }

  /** An Arrow IPC stream of {@code root}'s schema and its rows as one record batch. */
  static byte[] arrowStream(VectorSchemaRoot root) throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    try (ArrowStreamWriter w = new ArrowStreamWriter(root, null, Channels.newChannel(out))) {
      w.start();
      w.writeBatch();
      w.end();
    }
    return out.toByteArray();
  }

  /** A layout record of {@code schema}, keyed by {@code key}. */
  static String layoutJson(
      String topic, Schema schema, List<String> key, int partitions, int maxParallelism)
      throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    MessageSerializer.serialize(new WriteChannel(Channels.newChannel(out)), schema);
    var d = Layout.JSON.createObjectNode();
    d.put("topic", topic);
    var k = d.putArray("key");
    key.forEach(k::add);
    d.put("num_partitions", partitions);
    d.put("max_parallelism", maxParallelism);
    d.putNull("event_time");
    d.put("format_version", 1);
    d.put("schema", Base64.getEncoder().encodeToString(out.toByteArray()));
    return d.toString();
  }

  /** Closes what a reader left live, then the allocator: a leak fails the test. */
  static void release(List<AutoCloseable> live, BufferAllocator allocator) throws Exception {
    for (AutoCloseable c : live) {
      c.close();
    }
    live.clear();
    allocator.close();
  }
}
