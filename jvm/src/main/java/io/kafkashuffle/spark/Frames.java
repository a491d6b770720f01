package io.kafkashuffle.spark;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.UUID;
import java.util.zip.CRC32;

/**
 * Frame formats v1 and v2 ({@code orchestration/shuffle/core/frames.py}): a big-endian header
 * (magic "KSHF", version, type, flags, run id, subtask, attempt, sequence; 40 bytes, and in v2
 * a CRC-32 of the payload, 44), then a payload: DATA an Arrow IPC stream, WATERMARK one int64,
 * END two uint64 (rows, data frames).
 */
final class Frames {
  static final int VERSION = 2; // the newest this reader understands
  static final int HEADER_SIZE_V1 = 40;
  static final int HEADER_SIZE = 44;
  static final int DATA = 1;
  static final int WATERMARK = 2;
  static final int END = 3;
  static final String KEY_GROUP_COLUMN = "_key_group";
  private static final int MAGIC = 0x4B534846; // "KSHF"

  private Frames() {}

  /** A decoded header; the payload is the value's bytes after {@link #headerSize}. */
  static final class Header {
    final int type;
    final String runId;
    final int subtask;
    final int attempt;
    final int version;

    Header(int type, String runId, int subtask, int attempt, int version) {
      this.type = type;
      this.runId = runId;
      this.subtask = subtask;
      this.attempt = attempt;
      this.version = version;
    }
  }

  /** The header size of the frame {@code value} (its version's). */
  static int headerSize(ByteBuffer value) {
    return (value.get(value.position() + 4) & 0xFF) == 1 ? HEADER_SIZE_V1 : HEADER_SIZE;
  }

  /**
   * Parses the header of the frame {@code value} (its bytes from its position to its limit);
   * {@code where} (topic, partition, offset) goes into errors.
   */
  static Header decode(ByteBuffer value, String where) {
    if (value == null || value.remaining() < HEADER_SIZE_V1) {
      throw ShuffleException.format(
          "message at "
              + where
              + " is "
              + (value == null ? 0 : value.remaining())
              + " bytes, shorter than a frame header");
    }
    ByteBuffer b = value.slice().order(ByteOrder.BIG_ENDIAN);
    int magic = b.getInt(0);
    if (magic != MAGIC) {
      throw ShuffleException.format(
          "message at " + where + " is not a shuffle frame (magic " + hex(b) + ")");
    }
    int version = b.get(4) & 0xFF;
    if (version != 1 && version != 2) {
      throw ShuffleException.format(
          "frame at "
              + where
              + " has format version "
              + version
              + "; this reader understands versions 1 and 2");
    }
    int type = b.get(5) & 0xFF;
    if (type != DATA && type != WATERMARK && type != END) {
      throw ShuffleException.format("frame at " + where + " has unknown frame type " + type);
    }
    String run = new UUID(b.getLong(8), b.getLong(16)).toString();
    int subtask = b.getInt(24);
    int attempt = b.getInt(28);
    int header = version == 1 ? HEADER_SIZE_V1 : HEADER_SIZE;
    if (b.remaining() < header) {
      throw ShuffleException.format(
          "message at " + where + " is " + b.remaining() + " bytes, shorter than a frame header");
    }
    int payload = b.remaining() - header;
    int expected = type == WATERMARK ? 8 : type == END ? 16 : -1;
    if (expected >= 0 && payload != expected) {
      throw ShuffleException.format(
          (type == WATERMARK ? "WATERMARK" : "END")
              + " frame at "
              + where
              + " has a "
              + payload
              + "-byte payload, expected "
              + expected);
    }
    return new Header(type, run, subtask, attempt, version);
  }

  /**
   * Refuses a v2 frame whose payload does not match its header's CRC-32 (the same check and
   * message as {@code decode} in frames.py); a v1 frame has no checksum.
   */
  static void verify(ByteBuffer value, Header h, String where) {
    if (h.version == 1) {
      return;
    }
    long expected =
        value.duplicate().order(ByteOrder.BIG_ENDIAN).getInt(value.position() + HEADER_SIZE_V1)
            & 0xFFFFFFFFL;
    CRC32 crc = new CRC32();
    ByteBuffer payload = payload(value);
    int size = payload.remaining();
    crc.update(payload);
    long actual = crc.getValue();
    if (actual != expected) {
      String kind = h.type == DATA ? "DATA" : h.type == WATERMARK ? "WATERMARK" : "END";
      throw ShuffleException.format(
          String.format(
              "%s frame at %s (run %s subtask %d attempt %d) fails its checksum: its %d-byte "
                  + "payload has CRC-32 %08x, its header says %08x (the frame was changed after "
                  + "it was written)",
              kind, where, h.runId, h.subtask, h.attempt, size, actual, expected));
    }
  }

  static long watermark(ByteBuffer value) {
    return value.slice().order(ByteOrder.BIG_ENDIAN).getLong(headerSize(value));
  }

  /** (rows, data frames) of an END frame. */
  static long[] endCounts(ByteBuffer value) {
    ByteBuffer b = value.slice().order(ByteOrder.BIG_ENDIAN);
    int at = headerSize(value);
    return new long[] {b.getLong(at), b.getLong(at + 8)};
  }

  /** The payload of a frame: its bytes after the header. */
  static ByteBuffer payload(ByteBuffer value) {
    ByteBuffer b = value.slice();
    b.position(headerSize(value));
    return b.slice();
  }

  private static String hex(ByteBuffer value) {
    StringBuilder s = new StringBuilder("b'");
    for (int i = 0; i < 4; i++) {
      int c = value.get(i) & 0xFF;
      if (c >= 0x20 && c < 0x7F && c != '\'' && c != '\\') {
        s.append((char) c);
      } else {
        s.append(String.format("\\x%02x", c));
      }
    }
    return s.append("', expected b'KSHF'").toString();
  }
}
