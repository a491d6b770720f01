package io.kafkashuffle.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ReadableByteChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import org.apache.arrow.flatbuf.MessageHeader;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.TypeLayout;
import org.apache.arrow.vector.VectorLoader;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ReadChannel;
import org.apache.arrow.vector.ipc.message.ArrowFieldNode;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;
import org.apache.arrow.vector.ipc.message.MessageChannelReader;
import org.apache.arrow.vector.ipc.message.MessageResult;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * The payload of a DATA frame: an Arrow IPC stream of a schema and one record batch, loaded
 * straight from the fetched bytes, and only the columns a read needs.
 */
final class DataPayload {
  private static final ArrowType KEY_GROUP_TYPE = new ArrowType.Int(32, true);

  private DataPayload() {}

  /**
   * The record batch of the DATA frame {@code value}, with only the {@code needed} columns:
   * the buffers of the others are not decompressed. {@code where} goes into errors.
   */
  static VectorSchemaRoot load(
      ByteBuffer value, String where, Set<String> needed, BufferAllocator allocator) {
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
