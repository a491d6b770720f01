package io.kafkashuffle.spark;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import org.apache.arrow.compression.ZstdCompressionCodec;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.compression.AbstractCompressionCodec;
import org.apache.arrow.vector.compression.CompressionCodec;
import org.apache.arrow.vector.compression.CompressionUtil;
import org.apache.arrow.vector.compression.NoCompressionCodec;

/**
 * The body codecs of DATA frames: LZ4 frames decoded with lz4-java, zstd with Arrow's own
 * codec (zstd-jni).
 *
 * <p>Arrow's {@code CommonsCompressionFactory} decodes LZ4 frames with commons-compress, whose
 * stream hands bytes over one at a time: measured on 2M rows (lz4, 8 partitions), a plain read
 * took 7.9 s, nearly all of it there, against 0.85 s for the Python source (pyarrow).
 * lz4-java's frame stream refuses the linked blocks Arrow C++ writes, so frames are decoded
 * here (the LZ4 frame and block formats), every block into one output array, where a linked
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
        return new ZstdCompressionCodec();
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
   * LZ4 frame decompression (reads only: the JVM path never writes frames).
   *
   * <p>Short literal runs and matches are copied eight bytes at a time past their end (into
   * slack at the end of the output, or bytes a later step overwrites), as LZ4's reference
   * decoder does, instead of one copy call per sequence: decoding was a third of a task's time
   * in a profile of a 2M-row read, and on the buffers of 250k of those rows this decodes 2.1
   * GB/s against 1.0-1.5 GB/s. The compressed and decompressed bytes go through arrays each
   * thread keeps.
   */
  static final class Lz4Frame extends AbstractCompressionCodec {
    static final Lz4Frame INSTANCE = new Lz4Frame();
    // Bytes past the end of the input and output that the decoder may touch.
    static final int SLACK = 32;
    // Larger buffers are decoded through arrays that are not kept.
    private static final int KEEP_LIMIT = 64 << 20;
    private static final VarHandle LONG =
        MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
    private static final ThreadLocal<byte[][]> SCRATCH =
        ThreadLocal.withInitial(() -> new byte[][] {new byte[0], new byte[0]});

    @Override
    protected ArrowBuf doCompress(BufferAllocator allocator, ArrowBuf uncompressedBuffer) {
      throw new UnsupportedOperationException("kafka-shuffle-jvm only reads frames");
    }

    private static byte[] scratch(int which, int size) {
      if (size > KEEP_LIMIT) {
        return new byte[size];
      }
      byte[][] s = SCRATCH.get();
      if (s[which].length < size) {
        s[which] = new byte[Math.max(size, Math.min(KEEP_LIMIT, s[which].length * 2))];
      }
      return s[which];
    }

    @Override
    protected ArrowBuf doDecompress(BufferAllocator allocator, ArrowBuf compressedBuffer) {
      long length = readUncompressedLength(compressedBuffer);
      long offset = CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH;
      long inLength = compressedBuffer.writerIndex() - offset;
      if (length > Integer.MAX_VALUE - SLACK || inLength > Integer.MAX_VALUE - SLACK) {
        throw new IllegalArgumentException("an LZ4 buffer of " + length + " bytes is too large");
      }
      byte[] in = scratch(0, (int) inLength + SLACK);
      compressedBuffer.getBytes(offset, in, 0, (int) inLength);
      byte[] out = scratch(1, (int) length + SLACK);
      int written = decodeFrames(in, (int) inLength, out, (int) length);
      if (written != length) {
        throw new IllegalArgumentException(
            "an LZ4 frame holds " + written + " bytes, its buffer says " + length);
      }
      ArrowBuf buf = allocator.buffer(length);
      buf.setBytes(0, out, 0, length);
      return buf;
    }

    @Override
    public CompressionUtil.CodecType getCodecType() {
      return CompressionUtil.CodecType.LZ4_FRAME;
    }

    private static int le32(byte[] b, int i) {
      return (b[i] & 0xFF) | (b[i + 1] & 0xFF) << 8 | (b[i + 2] & 0xFF) << 16 | (b[i + 3] & 0xFF) << 24;
    }

    private static IllegalArgumentException corrupt(String what) {
      return new IllegalArgumentException("a corrupt LZ4 block (" + what + ")");
    }

    /**
     * Decodes the LZ4 frames of {@code in[0, inLength)} into {@code out[0, outLength)}; returns
     * the bytes written. Both arrays have {@link #SLACK} bytes past those lengths.
     */
    static int decodeFrames(byte[] in, int inLength, byte[] out, int outLength) {
      int ip = 0;
      int op = 0;
      while (ip < inLength) {
        if (inLength - ip < 7 || le32(in, ip) != 0x184D2204) {
          throw new IllegalArgumentException("not an LZ4 frame at byte " + ip);
        }
        int flg = in[ip + 4] & 0xFF;
        if ((flg >> 6) != 1) {
          throw new IllegalArgumentException("an LZ4 frame of unknown version " + (flg >> 6));
        }
        boolean blockChecksum = (flg & 0x10) != 0;
        boolean contentSize = (flg & 0x08) != 0;
        boolean contentChecksum = (flg & 0x04) != 0;
        boolean dictId = (flg & 0x01) != 0;
        ip += 6 + (contentSize ? 8 : 0) + (dictId ? 4 : 0) + 1; // magic, FLG, BD, ..., HC
        while (true) {
          if (inLength - ip < 4) {
            throw new IllegalArgumentException("an LZ4 frame ends without its end mark");
          }
          int size = le32(in, ip);
          ip += 4;
          if (size == 0) {
            break;
          }
          boolean raw = size < 0; // the high bit: stored uncompressed
          size &= 0x7FFFFFFF;
          if (size > inLength - ip) {
            throw new IllegalArgumentException("an LZ4 block runs past the end of its buffer");
          }
          if (raw) {
            if (size > outLength - op) {
              throw corrupt("more bytes than the buffer says");
            }
            System.arraycopy(in, ip, out, op, size);
            op += size;
          } else {
            op = decodeBlock(in, ip, ip + size, out, op, outLength);
          }
          ip += size + (blockChecksum ? 4 : 0);
        }
        ip += contentChecksum ? 4 : 0;
      }
      return op;
    }

    private static void copy8(byte[] src, int from, byte[] dst, int to) {
      LONG.set(dst, to, (long) LONG.get(src, from));
    }

    /**
     * One LZ4 block of {@code in[ip, end)} appended to {@code out} at {@code op}, at most up to
     * {@code limit}; a match may reach back into the blocks before it (linked blocks).
     */
    static int decodeBlock(byte[] in, int ip, int end, byte[] out, int op, int limit) {
      while (ip < end) {
        int token = in[ip++] & 0xFF;
        int literals = token >>> 4;
        if (literals == 15) {
          int b;
          do {
            if (ip >= end) {
              throw corrupt("a literal length runs past the block");
            }
            b = in[ip++] & 0xFF;
            literals += b;
          } while (b == 255);
        }
        if (literals > end - ip || literals > limit - op) {
          throw corrupt("literals past the end");
        }
        if (literals <= 16) {
          // The input has SLACK bytes past any block, the output past `limit`.
          copy8(in, ip, out, op);
          copy8(in, ip + 8, out, op + 8);
        } else {
          System.arraycopy(in, ip, out, op, literals);
        }
        ip += literals;
        op += literals;
        if (ip >= end) {
          break; // the last sequence has literals only
        }
        if (end - ip < 2) {
          throw corrupt("a match offset runs past the block");
        }
        int distance = (in[ip] & 0xFF) | (in[ip + 1] & 0xFF) << 8;
        ip += 2;
        if (distance == 0 || distance > op) {
          throw corrupt("match offset " + distance);
        }
        int match = token & 0x0F;
        if (match == 15) {
          int b;
          do {
            if (ip >= end) {
              throw corrupt("a match length runs past the block");
            }
            b = in[ip++] & 0xFF;
            match += b;
          } while (b == 255);
        }
        match += 4;
        if (match > limit - op) {
          throw corrupt("a match past the end");
        }
        int from = op - distance;
        int stop = op + match;
        if (distance >= 8) {
          // Each 8 bytes read lie before the 8 written: whole-word copies repeat correctly.
          for (int d = op, f = from; d < stop; d += 8, f += 8) {
            copy8(out, f, out, d);
          }
        } else {
          // A short period: bytes one by one until the pattern, repeated to a period of at
          // least 8 bytes, is written; then words from that period back.
          int k = Math.min(match, 16);
          for (int i = 0; i < k; i++) {
            out[op + i] = out[from + i];
          }
          int period = distance * ((8 + distance - 1) / distance);
          for (int d = op + k; d < stop; d += 8) {
            copy8(out, d - period, out, d);
          }
        }
        op = stop;
      }
      return op;
    }
  }
}
