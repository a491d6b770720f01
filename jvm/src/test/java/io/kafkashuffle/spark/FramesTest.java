package io.kafkashuffle.spark;

import static io.kafkashuffle.spark.Fixtures.RUN;
import static io.kafkashuffle.spark.Fixtures.frame;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

class FramesTest {
  private static final String WHERE = "topic 't' partition 3 offset 17";

  private static ShuffleException refused(byte[] value) {
    ShuffleException e =
        assertThrows(
            ShuffleException.class, () -> Frames.decode(ByteBuffer.wrap(value), WHERE));
    assertEquals(ShuffleException.Kind.FORMAT, e.kind());
    assertTrue(e.getMessage().contains(WHERE), e.getMessage());
    return e;
  }

  private static byte[] bytes(ByteBuffer b) {
    byte[] out = new byte[b.remaining()];
    b.duplicate().get(out);
    return out;
  }

  @Test
  void v2DataHeaderAndPayload() {
    byte[] payload = "arrow bytes".getBytes(StandardCharsets.US_ASCII);
    ByteBuffer value = ByteBuffer.wrap(frame(2, Frames.DATA, RUN, 5, 2, payload));
    Frames.Header h = Frames.decode(value, WHERE);
    assertEquals(Frames.DATA, h.type);
    assertEquals(RUN.toString(), h.runId);
    assertEquals(5, h.subtask);
    assertEquals(2, h.attempt);
    assertEquals(2, h.version);
    assertEquals(Frames.HEADER_SIZE, Frames.headerSize(value));
    assertArrayEquals(payload, bytes(Frames.payload(value)));
    Frames.verify(value, h, WHERE);
  }

  @Test
  void framesAreReadFromTheBuffersPosition() {
    // A consumer hands a value as a view into its fetched bytes.
    byte[] f = frame(2, Frames.WATERMARK, RUN, 1, 0, Fixtures.watermarkPayload(-1234L));
    byte[] fetched = new byte[f.length + 10];
    System.arraycopy(f, 0, fetched, 6, f.length);
    ByteBuffer value = ByteBuffer.wrap(fetched, 6, f.length);
    Frames.Header h = Frames.decode(value, WHERE);
    Frames.verify(value, h, WHERE);
    assertEquals(-1234L, Frames.watermark(value));
    assertEquals(6, value.position());
  }

  @Test
  void v1FramesAreStillRead() {
    ByteBuffer end = ByteBuffer.wrap(frame(1, Frames.END, RUN, 0, 1, Fixtures.endPayload(40, 3)));
    Frames.Header h = Frames.decode(end, WHERE);
    assertEquals(1, h.version);
    assertEquals(Frames.END, h.type);
    assertEquals(Frames.HEADER_SIZE_V1, Frames.headerSize(end));
    assertArrayEquals(new long[] {40, 3}, Frames.endCounts(end));
    ByteBuffer wm = ByteBuffer.wrap(frame(1, Frames.WATERMARK, RUN, 0, 1, Fixtures.watermarkPayload(99)));
    assertEquals(99L, Frames.watermark(wm));
  }

  @Test
  void v1FramesHaveNoChecksumToFail() {
    byte[] f = frame(1, Frames.END, RUN, 0, 1, Fixtures.endPayload(40, 3));
    f[f.length - 1] ^= 1;
    ByteBuffer value = ByteBuffer.wrap(f);
    Frames.verify(value, Frames.decode(value, WHERE), WHERE);
    assertArrayEquals(new long[] {40, 2}, Frames.endCounts(value));
  }

  @Test
  void aChangedV2PayloadFailsItsChecksum() {
    byte[] f = frame(2, Frames.END, RUN, 4, 1, Fixtures.endPayload(40, 3));
    f[f.length - 1] ^= 1;
    ByteBuffer value = ByteBuffer.wrap(f);
    Frames.Header h = Frames.decode(value, WHERE);
    ShuffleException e =
        assertThrows(ShuffleException.class, () -> Frames.verify(value, h, WHERE));
    assertEquals(ShuffleException.Kind.FORMAT, e.kind());
    String m = e.getMessage();
    assertTrue(m.startsWith("ShuffleFormatError: END frame at " + WHERE), m);
    assertTrue(m.contains("(run " + RUN + " subtask 4 attempt 1) fails its checksum"), m);
    assertTrue(m.contains("its 16-byte payload has CRC-32 "), m);
  }

  @Test
  void aChangedChecksumFailsToo() {
    byte[] f = frame(2, Frames.DATA, RUN, 0, 0, new byte[] {1, 2, 3});
    f[Frames.HEADER_SIZE_V1] ^= (byte) 0x80;
    ByteBuffer value = ByteBuffer.wrap(f);
    Frames.Header h = Frames.decode(value, WHERE);
    assertThrows(ShuffleException.class, () -> Frames.verify(value, h, WHERE));
  }

  @Test
  void shortMessages() {
    assertTrue(refused(new byte[10]).getMessage().contains("is 10 bytes, shorter than a frame header"));
    // Long enough for a v1 header, not for v2's checksum.
    byte[] v2 = frame(2, Frames.DATA, RUN, 0, 0, new byte[0]);
    byte[] cut = java.util.Arrays.copyOf(v2, Frames.HEADER_SIZE - 2);
    assertTrue(refused(cut).getMessage().contains("is 42 bytes, shorter than a frame header"));
    ShuffleException none =
        assertThrows(ShuffleException.class, () -> Frames.decode(null, WHERE));
    assertTrue(none.getMessage().contains("is 0 bytes"));
  }

  @Test
  void aMessageThatIsNotAFrameNamesItsMagic() {
    byte[] f = frame(2, Frames.DATA, RUN, 0, 0, new byte[4]);
    System.arraycopy("no'\u0001".getBytes(StandardCharsets.ISO_8859_1), 0, f, 0, 4);
    assertTrue(
        refused(f).getMessage().endsWith(
            "is not a shuffle frame (magic b'no\\x27\\x01', expected b'KSHF')"));
  }

  @Test
  void unknownVersionAndType() {
    byte[] v3 = frame(2, Frames.DATA, RUN, 0, 0, new byte[4]);
    v3[4] = 3;
    assertTrue(
        refused(v3).getMessage().endsWith(
            "has format version 3; this reader understands versions 1 and 2"));
    byte[] t9 = frame(2, Frames.DATA, RUN, 0, 0, new byte[4]);
    t9[5] = 9;
    assertTrue(refused(t9).getMessage().endsWith("has unknown frame type 9"));
  }

  @Test
  void fixedSizePayloadsAreChecked() {
    assertTrue(
        refused(frame(2, Frames.WATERMARK, RUN, 0, 0, new byte[4]))
            .getMessage()
            .endsWith("WATERMARK frame at " + WHERE + " has a 4-byte payload, expected 8"));
    assertTrue(
        refused(frame(1, Frames.END, RUN, 0, 0, new byte[8]))
            .getMessage()
            .endsWith("END frame at " + WHERE + " has a 8-byte payload, expected 16"));
  }
}
