package io.kafkashuffle.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.memory.util.MemoryUtil;
import org.apache.arrow.vector.compression.CompressionCodec;
import org.apache.arrow.vector.compression.CompressionUtil;
import org.apache.commons.compress.compressors.lz4.FramedLZ4CompressorOutputStream;
import org.apache.commons.compress.compressors.lz4.FramedLZ4CompressorOutputStream.BlockSize;
import org.junit.jupiter.api.Test;

class FrameCompressionTest {
  private static final CompressionCodec LZ4 =
      FrameCompression.INSTANCE.createCodec(CompressionUtil.CodecType.LZ4_FRAME);

  /** Byte strings of every shape a match can take, several 64 KiB blocks long at most. */
  private static List<byte[]> payloads(Random rnd) {
    List<byte[]> out = new ArrayList<>();
    for (int n : new int[] {1, 7, 8, 15, 16, 17, 31, 33, 100, 65_535, 65_536, 65_537, 300_000}) {
      byte[] noise = new byte[n];
      rnd.nextBytes(noise);
      out.add(noise); // stored raw
      byte[] zeros = new byte[n];
      out.add(zeros); // a period of 1
      for (int period = 2; period <= 24; period += 3) {
        byte[] p = new byte[n];
        for (int i = 0; i < n; i++) {
          p[i] = (byte) ('a' + i % period);
        }
        out.add(p);
      }
    }
    out.add(columnLike(rnd));
    return out;
  }

  /** Column-like bytes: short keys, small ints and noise mixed, repeats at every distance. */
  private static byte[] columnLike(Random rnd) {
    StringBuilder sb = new StringBuilder();
    while (sb.length() < 400_000) {
      int r = rnd.nextInt(100);
      sb.append("key-").append(r < 60 ? r % 7 : rnd.nextInt(100_000)).append(',');
      if (r < 10) {
        sb.append("x".repeat(rnd.nextInt(300)));
      }
    }
    return sb.toString().getBytes(StandardCharsets.US_ASCII);
  }

  private static byte[] encode(byte[] data, boolean linked, boolean checksums) throws IOException {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    FramedLZ4CompressorOutputStream.Parameters params =
        new FramedLZ4CompressorOutputStream.Parameters(BlockSize.K64, checksums, checksums, linked);
    try (FramedLZ4CompressorOutputStream out = new FramedLZ4CompressorOutputStream(bytes, params)) {
      out.write(data);
    }
    return bytes.toByteArray();
  }

  /** Arrow's compressed buffer: the uncompressed length (8 bytes, little-endian), then frames. */
  private static ArrowBuf arrowBuffer(BufferAllocator a, long length, byte[] frames) {
    ArrowBuf buf = a.buffer(8 + frames.length);
    buf.setLong(0, MemoryUtil.LITTLE_ENDIAN ? length : Long.reverseBytes(length));
    buf.setBytes(8, frames);
    buf.writerIndex(8 + frames.length);
    return buf;
  }

  private static final CompressionCodec ZSTD =
      FrameCompression.INSTANCE.createCodec(CompressionUtil.CodecType.ZSTD);

  private static byte[] decode(BufferAllocator a, long length, byte[] frames) {
    return decode(LZ4, a, length, frames);
  }

  private static byte[] decode(
      CompressionCodec codec, BufferAllocator a, long length, byte[] frames) {
    ArrowBuf in = arrowBuffer(a, length, frames);
    ArrowBuf decoded;
    try {
      decoded = codec.decompress(a, in); // releases `in`
    } catch (RuntimeException e) {
      in.close();
      throw e;
    }
    try (ArrowBuf out = decoded) {
      byte[] got = new byte[(int) length];
      out.getBytes(0, got);
      return got;
    }
  }

  @Test
  void decodesLinkedAndIndependentBlocksOfEveryMatchShape() throws IOException {
    Random rnd = new Random(11);
    try (BufferAllocator a = new RootAllocator()) {
      int checked = 0;
      for (byte[] data : payloads(rnd)) {
        for (boolean linked : new boolean[] {true, false}) {
          for (boolean checksums : new boolean[] {true, false}) {
            byte[] frames = encode(data, linked, checksums);
            assertArrayEquals(data, decode(a, data.length, frames), data.length + " bytes");
            checked++;
          }
        }
      }
      // Two frames back to back decode as one buffer.
      byte[] first = "first frame, ".repeat(20).getBytes(StandardCharsets.US_ASCII);
      byte[] second = "then the second".repeat(30).getBytes(StandardCharsets.US_ASCII);
      ByteArrayOutputStream both = new ByteArrayOutputStream();
      both.write(encode(first, true, false));
      both.write(encode(second, true, true));
      ByteArrayOutputStream want = new ByteArrayOutputStream();
      want.write(first);
      want.write(second);
      assertArrayEquals(want.toByteArray(), decode(a, want.size(), both.toByteArray()));
      assertTrue(checked > 500, "cases: " + checked);
      assertEquals(0, a.getAllocatedMemory());
    }
  }

  @Test
  void aLinkedBlockReachesBackIntoTheBlocksBeforeIt() throws IOException {
    // Noise repeated every 50,000 bytes, cut into 64 KiB blocks: the repeats that cross a block
    // boundary are found only by matches into the block before.
    byte[] unit = new byte[50_000];
    new Random(3).nextBytes(unit);
    byte[] data = new byte[unit.length * 4];
    for (int i = 0; i < 4; i++) {
      System.arraycopy(unit, 0, data, i * unit.length, unit.length);
    }
    byte[] linked = encode(data, true, false);
    byte[] independent = encode(data, false, false);
    assertTrue(linked.length < independent.length / 2, linked.length + " " + independent.length);
    try (BufferAllocator a = new RootAllocator()) {
      assertArrayEquals(data, decode(a, data.length, linked));
    }
  }

  @Test
  void aCorruptOrShortFrameIsAnErrorAndLeaksNothing() throws IOException {
    Random rnd = new Random(5);
    byte[] data = columnLike(new Random(7));
    byte[] frames = encode(data, true, false);
    try (BufferAllocator a = new RootAllocator()) {
      // A length the frames do not fill, or overflow.
      assertThrows(IllegalArgumentException.class, () -> decode(a, data.length + 1, frames));
      assertThrows(IllegalArgumentException.class, () -> decode(a, data.length - 1, frames));
      // A length no LZ4 frame of this size holds is refused before it is allocated (a
      // terabyte here, which the allocator would refuse only for want of memory).
      IllegalArgumentException huge =
          assertThrows(IllegalArgumentException.class, () -> decode(a, 1L << 40, frames));
      assertTrue(huge.getMessage().contains("says it holds 1099511627776"), huge.getMessage());
      // Cut short at many places.
      for (int cut = 0; cut < frames.length; cut += 1 + rnd.nextInt(997)) {
        byte[] shortened = java.util.Arrays.copyOf(frames, cut);
        assertThrows(IllegalArgumentException.class, () -> decode(a, data.length, shortened));
      }
      // Bytes changed at random: an error, or the buffer decoded (never an access outside the
      // buffers, which would end the JVM). The decoder refuses frames that do not fill the
      // length given; it does not verify checksums, so a changed literal decodes to other
      // bytes of that length.
      int refused = 0;
      int decoded = 0;
      for (int trial = 0; trial < 3_000; trial++) {
        byte[] bad = frames.clone();
        for (int k = 1 + rnd.nextInt(4); k > 0; k--) {
          bad[rnd.nextInt(bad.length)] = (byte) rnd.nextInt(256);
        }
        try {
          decode(a, data.length, bad);
          decoded++;
        } catch (IllegalArgumentException e) {
          refused++;
        }
      }
      assertTrue(refused > 1_000, "refused " + refused + " of 3000");
      assertTrue(decoded > 0, "decoded " + decoded + " of 3000");
      assertEquals(0, a.getAllocatedMemory());
    }
  }

  @Test
  void zstdBodiesDecodeWithTheZstdSparkShipsAndACorruptOneIsRefused() {
    // zstd-jni, not Arrow's arrow-compression (which Spark 4.0 does not ship).
    Random rnd = new Random(11);
    try (BufferAllocator a = new RootAllocator()) {
      for (byte[] data : payloads(rnd)) {
        byte[] frame = com.github.luben.zstd.Zstd.compress(data, 3);
        assertArrayEquals(data, decode(ZSTD, a, data.length, frame));
      }
      byte[] data = columnLike(new Random(3));
      byte[] frame = com.github.luben.zstd.Zstd.compress(data, 3);
      // A length other than the frame's own is refused before it is allocated.
      IllegalArgumentException huge =
          assertThrows(IllegalArgumentException.class, () -> decode(ZSTD, a, 1L << 40, frame));
      assertTrue(huge.getMessage().contains("says it holds 1099511627776"), huge.getMessage());
      assertThrows(IllegalArgumentException.class, () -> decode(ZSTD, a, data.length - 1, frame));
      // Cut short, or bytes changed: an error (zstd checks its blocks), never a crash.
      for (int cut = 0; cut < frame.length; cut += 1 + rnd.nextInt(301)) {
        byte[] shortened = java.util.Arrays.copyOf(frame, cut);
        assertThrows(IllegalArgumentException.class, () -> decode(ZSTD, a, data.length, shortened));
      }
      int refused = 0;
      for (int trial = 0; trial < 500; trial++) {
        byte[] bad = frame.clone();
        bad[4 + rnd.nextInt(bad.length - 4)] ^= (byte) (1 + rnd.nextInt(255));
        try {
          decode(ZSTD, a, data.length, bad);
        } catch (IllegalArgumentException e) {
          refused++;
        }
      }
      assertTrue(refused > 250, "refused " + refused + " of 500");
      assertEquals(0, a.getAllocatedMemory());
    }
  }
}
