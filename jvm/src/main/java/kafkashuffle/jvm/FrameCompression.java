package kafkashuffle.jvm;

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

  /** LZ4 frame decompression (reads only: the JVM path never writes frames). */
  static final class Lz4Frame extends AbstractCompressionCodec {
    static final Lz4Frame INSTANCE = new Lz4Frame();

    @Override
    protected ArrowBuf doCompress(BufferAllocator allocator, ArrowBuf uncompressedBuffer) {
      throw new UnsupportedOperationException("kafka-shuffle-jvm only reads frames");
    }

    @Override
    protected ArrowBuf doDecompress(BufferAllocator allocator, ArrowBuf compressedBuffer) {
      long length = readUncompressedLength(compressedBuffer);
      if (length > Integer.MAX_VALUE) {
        throw new IllegalArgumentException("an LZ4 buffer of " + length + " bytes is too large");
      }
      long offset = CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH;
      byte[] in = new byte[(int) (compressedBuffer.writerIndex() - offset)];
      compressedBuffer.getBytes(offset, in);
      byte[] out = new byte[(int) length];
      int written = decodeFrames(in, out);
      if (written != out.length) {
        throw new IllegalArgumentException(
            "an LZ4 frame holds " + written + " bytes, its buffer says " + length);
      }
      ArrowBuf buf = allocator.buffer(length);
      buf.setBytes(0, out);
      return buf;
    }

    @Override
    public CompressionUtil.CodecType getCodecType() {
      return CompressionUtil.CodecType.LZ4_FRAME;
    }

    private static int le32(byte[] b, int i) {
      return (b[i] & 0xFF) | (b[i + 1] & 0xFF) << 8 | (b[i + 2] & 0xFF) << 16 | (b[i + 3] & 0xFF) << 24;
    }

    /** Decodes the LZ4 frames of {@code in} into {@code out}; returns the bytes written. */
    static int decodeFrames(byte[] in, byte[] out) {
      int ip = 0;
      int op = 0;
      while (ip < in.length) {
        if (in.length - ip < 7 || le32(in, ip) != 0x184D2204) {
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
          int size = le32(in, ip);
          ip += 4;
          if (size == 0) {
            break;
          }
          boolean raw = size < 0; // the high bit: stored uncompressed
          size &= 0x7FFFFFFF;
          if (size > in.length - ip) {
            throw new IllegalArgumentException("an LZ4 block runs past the end of its buffer");
          }
          if (raw) {
            System.arraycopy(in, ip, out, op, size);
            op += size;
          } else {
            op = decodeBlock(in, ip, ip + size, out, op);
          }
          ip += size + (blockChecksum ? 4 : 0);
        }
        ip += contentChecksum ? 4 : 0;
      }
      return op;
    }

    /** One LZ4 block of {@code in[ip, end)} appended to {@code out} at {@code op}. */
    static int decodeBlock(byte[] in, int ip, int end, byte[] out, int op) {
      while (ip < end) {
        int token = in[ip++] & 0xFF;
        int literals = token >>> 4;
        if (literals == 15) {
          int b;
          do {
            b = in[ip++] & 0xFF;
            literals += b;
          } while (b == 255);
        }
        System.arraycopy(in, ip, out, op, literals);
        ip += literals;
        op += literals;
        if (ip >= end) {
          break; // the last sequence has literals only
        }
        int distance = (in[ip] & 0xFF) | (in[ip + 1] & 0xFF) << 8;
        ip += 2;
        if (distance == 0 || distance > op) {
          throw new IllegalArgumentException("a corrupt LZ4 block (match offset " + distance + ")");
        }
        int match = token & 0x0F;
        if (match == 15) {
          int b;
          do {
            b = in[ip++] & 0xFF;
            match += b;
          } while (b == 255);
        }
        match += 4;
        int from = op - distance;
        if (distance >= match) {
          System.arraycopy(out, from, out, op, match);
          op += match;
        } else {
          // An overlapping match repeats the last `distance` bytes.
          for (int i = 0; i < match; i++) {
            out[op++] = out[from + i];
          }
        }
      }
      return op;
    }
  }
}
