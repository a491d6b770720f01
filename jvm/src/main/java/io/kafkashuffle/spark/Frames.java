package io.kafkashuffle.spark;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.UUID;

/**
 * Frame format v1 ({@code orchestration/shuffle/core/frames.py}): a 40-byte big-endian header
 * (magic "KSHF", version, type, flags, run id, subtask, attempt, sequence), then a payload:
 * DATA an Arrow IPC stream, WATERMARK one int64, END two uint64 (rows, data frames).
 */
final class Frames {
  static final int VERSION = 1;
  static final int HEADER_SIZE = 40;
  static final int DATA = 1;
  static final int WATERMARK = 2;
  static final int END = 3;
  static final String KEY_GROUP_COLUMN = "_key_group";
  private static final int MAGIC = 0x4B534846; // "KSHF"

  private Frames() {}

  /** A decoded header; the payload is {@code value[HEADER_SIZE:]}. */
  static final class Header {
    final int type;
    final String runId;
    final int subtask;
    final int attempt;

    Header(int type, String runId, int subtask, int attempt) {
      this.type = type;
      this.runId = runId;
      this.subtask = subtask;
      this.attempt = attempt;
    }
  }

  /**
   * Parses the header of the frame {@code value} (its bytes from its position to its limit);
   * {@code where} (topic, partition, offset) goes into errors.
   */
  static Header decode(ByteBuffer value, String where) {
    if (value == null || value.remaining() < HEADER_SIZE) {
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
    if (version != VERSION) {
      throw ShuffleException.format(
          "frame at "
              + where
              + " has format version "
              + version
              + "; this reader understands version "
              + VERSION);
    }
    int type = b.get(5) & 0xFF;
    if (type != DATA && type != WATERMARK && type != END) {
      throw ShuffleException.format("frame at " + where + " has unknown frame type " + type);
    }
    String run = new UUID(b.getLong(8), b.getLong(16)).toString();
    int subtask = b.getInt(24);
    int attempt = b.getInt(28);
    int payload = b.remaining() - HEADER_SIZE;
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
    return new Header(type, run, subtask, attempt);
  }

  static long watermark(ByteBuffer value) {
    return value.slice().order(ByteOrder.BIG_ENDIAN).getLong(HEADER_SIZE);
  }

  /** (rows, data frames) of an END frame. */
  static long[] endCounts(ByteBuffer value) {
    ByteBuffer b = value.slice().order(ByteOrder.BIG_ENDIAN);
    return new long[] {b.getLong(HEADER_SIZE), b.getLong(HEADER_SIZE + 8)};
  }

  /** The payload of a frame: its bytes after the header. */
  static ByteBuffer payload(ByteBuffer value) {
    ByteBuffer b = value.slice();
    b.position(HEADER_SIZE);
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
