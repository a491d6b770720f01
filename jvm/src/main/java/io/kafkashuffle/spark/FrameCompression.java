package io.kafkashuffle.spark;

import java.nio.ByteBuffer;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.util.MemoryUtil;
import org.apache.arrow.vector.compression.AbstractCompressionCodec;
import org.apache.arrow.vector.compression.CompressionCodec;
import org.apache.arrow.vector.compression.CompressionUtil;
import org.apache.arrow.vector.compression.NoCompressionCodec;

/**
 * The body codecs of DATA frames: LZ4 frames decoded here, zstd with zstd-jni.
 *
 * <p>Arrow's {@code CommonsCompressionFactory} decodes LZ4 frames with commons-compress, whose
 * stream hands bytes over one at a time: measured on 2M rows (lz4, 8 partitions), a plain read
 * took 7.9 s, nearly all of it there, against 0.85 s for the Python source (pyarrow).
 * lz4-java's frame stream refuses the linked blocks Arrow C++ writes, so frames are decoded
 * here (the LZ4 frame and block formats), every block into one output buffer, where a linked
 * block's matches find the blocks before it.
 */
final class FrameCompression implements CompressionCodec.Factory {
  static final FrameCompression INSTANCE = new FrameCompression();

  private FrameCompression() {}

  @Override
  public CompressionCodec createCodec(CompressionUtil.CodecType codecType) {
    switch (codecType) {
      case LZ4_FRAME:
        return Lz4Frame.INSTANCE;
      case ZSTD:
        return ZstdBody.INSTANCE;
      case NO_COMPRESSION:
        return NoCompressionCodec.INSTANCE;
      default:
        throw new IllegalArgumentException("no codec for Arrow body compression " + codecType);
    }
  }

  @Override
  public CompressionCodec createCodec(CompressionUtil.CodecType codecType, int level) {
    return createCodec(codecType);
  }

  /**
   * Zstandard bodies (reads only), decoded by zstd-jni, which Spark ships on every line it
   * runs on. Arrow's own codec lives in arrow-compression, which Spark 4.0 does not ship.
   *
   * <p>The length the buffer declares must be the length the zstd frame's header declares
   * (pyarrow writes it), so a corrupt length is refused before its buffer is allocated; a
   * frame without one is bounded by what one Arrow buffer may hold.
   */
  static final class ZstdBody extends AbstractCompressionCodec {
    static final ZstdBody INSTANCE = new ZstdBody();
    // ZSTD_CONTENTSIZE_UNKNOWN and ZSTD_CONTENTSIZE_ERROR, as signed longs.
    private static final long SIZE_UNKNOWN = -1;

    @Override
    protected ArrowBuf doCompress(BufferAllocator allocator, ArrowBuf uncompressedBuffer) {
      throw new UnsupportedOperationException("kafka-shuffle-jvm only reads frames");
    }

    @Override
    protected ArrowBuf doDecompress(BufferAllocator allocator, ArrowBuf compressedBuffer) {
      long length = readUncompressedLength(compressedBuffer);
      long skip = CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH;
      long inLength = compressedBuffer.writerIndex() - skip;
      if (inLength < 0 || inLength > Integer.MAX_VALUE) {
        throw new IllegalArgumentException("a zstd buffer of " + inLength + " bytes");
      }
      ByteBuffer frame = compressedBuffer.nioBuffer(skip, (int) inLength);
      long declared =
          com.github.luben.zstd.Zstd.getDirectByteBufferFrameContentSize(frame, 0, (int) inLength);
      boolean known = declared >= 0;
      if (length < 0
          || (known && declared != length)
          || (!known && declared != SIZE_UNKNOWN)
          || length > Integer.MAX_VALUE) {
        throw new IllegalArgumentException(
            "a zstd buffer says it holds " + length + " bytes, its frame " + declared);
      }
      ArrowBuf buf = allocator.buffer(Math.max(length, 1));
      try {
        long written =
            com.github.luben.zstd.Zstd.decompressUnsafe(
                buf.memoryAddress(), length, compressedBuffer.memoryAddress() + skip, inLength);
        if (com.github.luben.zstd.Zstd.isError(written)) {
          throw new IllegalArgumentException(
              "a corrupt zstd frame: " + com.github.luben.zstd.Zstd.getErrorName(written));
        }
        if (written != length) {
          throw new IllegalArgumentException(
              "a zstd frame holds " + written + " bytes, its buffer says " + length);
        }
        return buf;
      } catch (RuntimeException e) {
        buf.close();
        throw e;
      }
    }

    @Override
    public CompressionUtil.CodecType getCodecType() {
      return CompressionUtil.CodecType.ZSTD;
    }
  }

  /**
   * LZ4 frame decompression (reads only: the JVM path never writes frames).
   *
   * <p>Decodes from the compressed buffer's memory straight into the new buffer's: an earlier
   * version copied both through arrays each thread kept, and on the buffers of 1.26M rows of
   * the benchmark's columns (20 frames) this takes a frame's load from 2.6 to 3.5 GB/s of
   * decompressed bytes (pyarrow's C++ decoder: 4.3 GB/s on the same frames).
   *
   * <p>Short literal runs and matches are copied eight bytes at a time past their end, as
   * LZ4's reference decoder does, instead of one copy call per sequence: into {@link #SLACK}
   * bytes allocated past the output's end, or bytes a later step overwrites. Every read and
   * write is checked against the buffers' bounds first: a corrupt block is an {@code
   * IllegalArgumentException}, never an access outside them.
   */
  static final class Lz4Frame extends AbstractCompressionCodec {
    static final Lz4Frame INSTANCE = new Lz4Frame();
    // Bytes past the end of the output that the decoder may write.
    static final int SLACK = 32;
    // More output bytes per input byte than any LZ4 frame holds.
    private static final long MAX_RATIO = 256;

    @Override
    protected ArrowBuf doCompress(BufferAllocator allocator, ArrowBuf uncompressedBuffer) {
      throw new UnsupportedOperationException("kafka-shuffle-jvm only reads frames");
    }

    @Override
    protected ArrowBuf doDecompress(BufferAllocator allocator, ArrowBuf compressedBuffer) {
      long length = readUncompressedLength(compressedBuffer);
      long in = compressedBuffer.memoryAddress();
      long inEnd = in + compressedBuffer.writerIndex();
      // LZ4 expands its input at most 255-fold: a larger length is corrupt, and refused
      // before its buffer is allocated.
      if (length < 0 || length > MAX_RATIO * compressedBuffer.writerIndex()) {
        throw new IllegalArgumentException(
            "an LZ4 buffer of "
                + compressedBuffer.writerIndex()
                + " bytes says it holds "
                + length);
      }
      ArrowBuf buf = allocator.buffer(length + SLACK);
      try {
        long out = buf.memoryAddress();
        long written =
            decodeFrames(in + CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH, inEnd, out, out + length);
        if (written != length) {
          throw new IllegalArgumentException(
              "an LZ4 frame holds " + written + " bytes, its buffer says " + length);
        }
        return buf;
      } catch (RuntimeException e) {
        buf.close();
        throw e;
      }
    }

    @Override
    public CompressionUtil.CodecType getCodecType() {
      return CompressionUtil.CodecType.LZ4_FRAME;
    }

    private static IllegalArgumentException corrupt(String what) {
      return new IllegalArgumentException("a corrupt LZ4 block (" + what + ")");
    }

    private static int byteAt(long address) {
      return MemoryUtil.getByte(address) & 0xFF;
    }

    /** The little-endian int at {@code address} (the frame format's byte order). */
    private static int le32(long address) {
      int v = MemoryUtil.getInt(address);
      return MemoryUtil.LITTLE_ENDIAN ? v : Integer.reverseBytes(v);
    }

    /**
     * Decodes the LZ4 frames at memory {@code [ip, inEnd)} into memory from {@code out} up to
     * {@code outEnd}, which has {@link #SLACK} writable bytes past it; returns the bytes
     * written.
     */
    static long decodeFrames(long ip, long inEnd, long out, long outEnd) {
      long start = ip;
      long op = out;
      while (ip < inEnd) {
        if (inEnd - ip < 7 || le32(ip) != 0x184D2204) {
          throw new IllegalArgumentException("not an LZ4 frame at byte " + (ip - start));
        }
        int flg = byteAt(ip + 4);
        if ((flg >> 6) != 1) {
          throw new IllegalArgumentException("an LZ4 frame of unknown version " + (flg >> 6));
        }
        boolean blockChecksum = (flg & 0x10) != 0;
        boolean contentSize = (flg & 0x08) != 0;
        boolean contentChecksum = (flg & 0x04) != 0;
        boolean dictId = (flg & 0x01) != 0;
        ip += 6 + (contentSize ? 8 : 0) + (dictId ? 4 : 0) + 1; // magic, FLG, BD, ..., HC
        while (true) {
          if (inEnd - ip < 4) {
            throw new IllegalArgumentException("an LZ4 frame ends without its end mark");
          }
          int size = le32(ip);
          ip += 4;
          if (size == 0) {
            break;
          }
          boolean raw = size < 0; // the high bit: stored uncompressed
          size &= 0x7FFFFFFF;
          if (size > inEnd - ip) {
            throw new IllegalArgumentException("an LZ4 block runs past the end of its buffer");
          }
          if (raw) {
            if (size > outEnd - op) {
              throw corrupt("more bytes than the buffer says");
            }
            MemoryUtil.copyMemory(ip, op, size);
            op += size;
          } else {
            op = decodeBlock(ip, ip + size, inEnd, out, op, outEnd);
          }
          ip += size + (blockChecksum ? 4 : 0);
        }
        ip += contentChecksum ? 4 : 0;
      }
      return op - out;
    }

    /**
     * One LZ4 block at memory {@code [ip, end)} (readable up to {@code inEnd}) appended at
     * {@code op} to the output that starts at {@code out}, at most up to {@code limit}; a match
     * may reach back into the blocks before it (linked blocks), never before {@code out}.
     */
    static long decodeBlock(long ip, long end, long inEnd, long out, long op, long limit) {
      while (ip < end) {
        int token = byteAt(ip++);
        long literals = token >>> 4;
        if (literals == 15) {
          int b;
          do {
            if (ip >= end) {
              throw corrupt("a literal length runs past the block");
            }
            b = byteAt(ip++);
            literals += b;
          } while (b == 255);
        }
        if (literals > end - ip || literals > limit - op) {
          throw corrupt("literals past the end");
        }
        if (literals <= 16 && inEnd - ip >= 16) {
          // 16 bytes read within the input, written within the output's slack.
          MemoryUtil.putLong(op, MemoryUtil.getLong(ip));
          MemoryUtil.putLong(op + 8, MemoryUtil.getLong(ip + 8));
        } else {
          MemoryUtil.copyMemory(ip, op, literals);
        }
        ip += literals;
        op += literals;
        if (ip >= end) {
          break; // the last sequence has literals only
        }
        if (end - ip < 2) {
          throw corrupt("a match offset runs past the block");
        }
        int distance = byteAt(ip) | byteAt(ip + 1) << 8;
        ip += 2;
        if (distance == 0 || distance > op - out) {
          throw corrupt("match offset " + distance);
        }
        long match = token & 0x0F;
        if (match == 15) {
          int b;
          do {
            if (ip >= end) {
              throw corrupt("a match length runs past the block");
            }
            b = byteAt(ip++);
            match += b;
          } while (b == 255);
        }
        match += 4;
        if (match > limit - op) {
          throw corrupt("a match past the end");
        }
        long from = op - distance;
        long stop = op + match;
        if (distance >= 8) {
          // Each 8 bytes read lie before the 8 written: whole-word copies repeat correctly.
          for (long d = op, f = from; d < stop; d += 8, f += 8) {
            MemoryUtil.putLong(d, MemoryUtil.getLong(f));
          }
        } else {
          // A short period: bytes one by one until the pattern, repeated to a period of at
          // least 8 bytes, is written; then words from that period back.
          long k = Math.min(match, 16);
          for (long i = 0; i < k; i++) {
            MemoryUtil.putByte(op + i, MemoryUtil.getByte(from + i));
          }
          long period = distance * ((8 + distance - 1) / distance);
          for (long d = op + k; d < stop; d += 8) {
            MemoryUtil.putLong(d, MemoryUtil.getLong(d - period));
          }
        }
        op = stop;
      }
      return op;
    }
  }
}
