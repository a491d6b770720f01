package io.kafkashuffle.spark;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reads one range of one partition into batches of up to {@link #BATCH_ROWS} records: keys,
 * values and headers are copied from the fetched bytes straight into column vectors, with no
 * row objects in between. Offsets may have gaps (compaction, transaction markers): the read
 * stops at the range's end or the partition's, whichever comes first. Offsets removed before
 * the read reached them are data loss, as in the Python reader.
 */
final class RecordsBatchReader implements PartitionReader<ColumnarBatch> {
  static final int BATCH_ROWS = 8192;
  private static final long IDLE_TIMEOUT_MS = 30_000;
  // How often a read that gets nothing looks whether its topic is still there (the first
  // empty poll looks at once), as PartitionFetch does: a deleted topic is reported in about
  // a second, not after the idle timeout, in every attempt of the task.
  private static final long GONE_CHECK_MS = 2_000;
  // How long the first ask for the partition's offsets waits before the topic is looked at.
  private static final long FIRST_ASK_MS = 500;
  private static final Logger LOG = LoggerFactory.getLogger(RecordsBatchReader.class);

  private final RecordsTableProvider.Settings settings;
  private final RecordsTableProvider.Range range;
  private final TopicPartition tp;
  private final String where;
  private final WritableColumnVector keys;
  private final WritableColumnVector values;
  private final WritableColumnVector offsets;
  private final WritableColumnVector timestamps;
  private final WritableColumnVector timestampTypes;
  private final WritableColumnVector headers;
  private KafkaConsumer<byte[], ByteBuffer> consumer;
  private long stop = -1; // exclusive end; -1 before the first poll
  private List<ConsumerRecord<byte[], ByteBuffer>> pending = List.of();
  private int pendingAt;
  private boolean done;
  private ColumnarBatch batch;

  RecordsBatchReader(RecordsTableProvider.Settings settings, RecordsTableProvider.Range range) {
    this.settings = settings;
    this.range = range;
    this.tp = new TopicPartition(range.topic, range.partition);
    this.where = "topic '" + range.topic + "' partition " + range.partition;
    StructType schema = RecordsTableProvider.schema(settings.headers);
    keys = new OnHeapColumnVector(BATCH_ROWS, DataTypes.BinaryType);
    values = new OnHeapColumnVector(BATCH_ROWS, DataTypes.BinaryType);
    offsets = new OnHeapColumnVector(BATCH_ROWS, DataTypes.LongType);
    timestamps = new OnHeapColumnVector(BATCH_ROWS, DataTypes.TimestampType);
    timestampTypes = new OnHeapColumnVector(BATCH_ROWS, DataTypes.IntegerType);
    headers =
        settings.headers
            ? new OnHeapColumnVector(BATCH_ROWS, schema.apply("headers").dataType())
            : null;
  }

  private KafkaConsumer<byte[], ByteBuffer> consumer() {
    if (consumer == null) {
      Properties p = KafkaOptions.consumer(settings.kafka, RecordsTableProvider.OWNER);
      p.setProperty("enable.auto.commit", "false");
      p.setProperty("auto.offset.reset", "none");
      // librdkafka's default, which the Python reader has: records of aborted transactions
      // are not read.
      p.putIfAbsent("isolation.level", "read_committed");
      // Small records: fetch much per request, hand over many per poll.
      p.putIfAbsent("max.partition.fetch.bytes", String.valueOf(16 << 20));
      p.putIfAbsent("fetch.max.bytes", String.valueOf(64 << 20));
      p.setProperty("max.poll.records", String.valueOf(BATCH_ROWS));
      p.setProperty("fetch.max.wait.ms", "1");
      consumer = ConsumerPool.borrow(p, RecordsTableProvider.OWNER + "-jvm");
    }
    return consumer;
  }

  private void start() {
    KafkaConsumer<byte[], ByteBuffer> c = consumer();
    c.assign(List.of(tp));
    long low;
    long high;
    try {
      try {
        // A short first ask: the offsets of a deleted topic are waited for until the
        // client's whole API timeout, in every attempt of the task. When it is not answered
        // in time, the topic is looked at, then asked again with the client's timeout.
        low = c.beginningOffsets(List.of(tp), Duration.ofMillis(FIRST_ASK_MS)).get(tp);
      } catch (org.apache.kafka.common.errors.TimeoutException e) {
        refuseDeleted(c, range.start);
        low = c.beginningOffsets(List.of(tp)).get(tp);
      }
      high = c.endOffsets(List.of(tp)).get(tp);
    } catch (KafkaException e) {
      throw new ShuffleException(
          ShuffleException.Kind.CONNECTION, "reading " + where + ": " + e, e);
    }
    long from = lossChecked(range.start, low);
    stop = Math.min(range.end, high);
    if (from >= stop) {
      done = true;
      return;
    }
    c.seek(tp, from);
  }

  /** Where the read can start, given the partition's lowest offset (as the Python reader). */
  private long lossChecked(long wanted, long low) {
    if (wanted >= low) {
      return wanted;
    }
    String what =
        RecordsTableProvider.OWNER
            + ": "
            + where
            + ": offsets ["
            + wanted
            + ", "
            + low
            + ") were removed (retention or delete_records) before they were read";
    if (settings.failOnDataLoss) {
      throw new ShuffleException(
          ShuffleException.Kind.DATA_LOSS, what + "; set failOnDataLoss=false to skip them");
    }
    LOG.warn("{}; skipped (failOnDataLoss=false)", what);
    return low;
  }

  /** The next record of the range, or null at its end. */
  private ConsumerRecord<byte[], ByteBuffer> nextRecord() {
    KafkaConsumer<byte[], ByteBuffer> c = consumer();
    long idleSince = System.currentTimeMillis();
    long checkedAt = -GONE_CHECK_MS;
    while (true) {
      if (pendingAt < pending.size()) {
        ConsumerRecord<byte[], ByteBuffer> rec = pending.get(pendingAt++);
        if (rec.offset() >= stop) {
          return null;
        }
        return rec;
      }
      long position = c.position(tp);
      if (position >= stop) {
        return null;
      }
      try {
        pending = c.poll(Duration.ofMillis(200)).records(tp);
        pendingAt = 0;
      } catch (OffsetOutOfRangeException e) {
        long low = c.beginningOffsets(List.of(tp)).get(tp);
        c.seek(tp, lossChecked(position, low));
        continue;
      } catch (KafkaException e) {
        throw new ShuffleException(
            ShuffleException.Kind.CONNECTION,
            "reading " + where + " near offset " + position + ": " + e,
            e);
      }
      if (!pending.isEmpty()) {
        idleSince = System.currentTimeMillis();
        checkedAt = -GONE_CHECK_MS;
        continue;
      }
      long idle = System.currentTimeMillis() - idleSince;
      if (idle > checkedAt + GONE_CHECK_MS) {
        checkedAt = idle;
        refuseDeleted(c, position);
      }
      if (idle > IDLE_TIMEOUT_MS) {
        throw new ShuffleException(
            ShuffleException.Kind.CONNECTION,
            "no data from "
                + where
                + " for "
                + IDLE_TIMEOUT_MS / 1000
                + "s while reading offsets ["
                + range.start
                + ", "
                + range.end
                + ")");
      }
    }
  }

  /** Refuses a read whose topic (or partition) is gone, as the shuffle reader does. */
  private void refuseDeleted(KafkaConsumer<byte[], ByteBuffer> c, long position) {
    if (!PartitionFetch.partitionGone(c, range.topic, range.partition)) {
      return;
    }
    throw new ShuffleException(
        ShuffleException.Kind.NOT_FOUND,
        "topic '"
            + range.topic
            + "' was deleted while reading partition "
            + range.partition
            + " offsets ["
            + range.start
            + ", "
            + range.end
            + ") near offset "
            + position);
  }

  private static void putBytes(WritableColumnVector v, int row, ByteBuffer b) {
    if (b == null) {
      v.putNull(row);
    } else if (b.hasArray()) {
      v.putByteArray(row, b.array(), b.arrayOffset() + b.position(), b.remaining());
    } else {
      byte[] copy = new byte[b.remaining()];
      b.duplicate().get(copy);
      v.putByteArray(row, copy);
    }
  }

  @Override
  public boolean next() {
    if (done) {
      return false;
    }
    if (stop < 0) {
      start();
      if (done) {
        return false;
      }
    }
    keys.reset();
    values.reset();
    offsets.reset();
    timestamps.reset();
    timestampTypes.reset();
    if (headers != null) {
      headers.reset();
    }
    int n = 0;
    while (n < BATCH_ROWS) {
      ConsumerRecord<byte[], ByteBuffer> rec = nextRecord();
      if (rec == null) {
        done = true;
        break;
      }
      byte[] key = rec.key();
      if (key == null) {
        keys.putNull(n);
      } else {
        keys.putByteArray(n, key);
      }
      putBytes(values, n, rec.value());
      offsets.putLong(n, rec.offset());
      long ms = rec.timestamp();
      if (ms < 0) {
        timestamps.putNull(n);
      } else {
        timestamps.putLong(n, ms * 1000);
      }
      int type = rec.timestampType().id; // -1 none, 0 create time, 1 log append time
      if (type < 0) {
        timestampTypes.putNull(n);
      } else {
        timestampTypes.putInt(n, type);
      }
      if (headers != null) {
        putHeaders(n, rec);
      }
      n++;
    }
    if (n == 0) {
      return false;
    }
    ConstantColumnVector topic = new ConstantColumnVector(n, DataTypes.StringType);
    topic.setUtf8String(UTF8String.fromString(range.topic));
    ConstantColumnVector partition = new ConstantColumnVector(n, DataTypes.IntegerType);
    partition.setInt(range.partition);
    ColumnVector[] cols =
        headers == null
            ? new ColumnVector[] {keys, values, topic, partition, offsets, timestamps, timestampTypes}
            : new ColumnVector[] {
              keys, values, topic, partition, offsets, timestamps, timestampTypes, headers
            };
    batch = new ColumnarBatch(cols, n);
    return true;
  }

  private void putHeaders(int row, ConsumerRecord<byte[], ByteBuffer> rec) {
    WritableColumnVector items = headers.arrayData();
    int first = items.getElementsAppended();
    int count = 0;
    for (Header h : rec.headers()) {
      items.appendStruct(false);
      byte[] k = h.key().getBytes(StandardCharsets.UTF_8);
      items.getChild(0).appendByteArray(k, 0, k.length);
      byte[] v = h.value();
      if (v == null) {
        items.getChild(1).appendNull();
      } else {
        items.getChild(1).appendByteArray(v, 0, v.length);
      }
      count++;
    }
    headers.putArray(row, first, count);
  }

  @Override
  public ColumnarBatch get() {
    return batch;
  }

  /** A read that reached its end gives its consumer back for another read. */
  @Override
  public void close() {
    if (consumer != null) {
      ConsumerPool.release(consumer, done);
      consumer = null;
    }
    keys.close();
    values.close();
    offsets.close();
    timestamps.close();
    timestampTypes.close();
    if (headers != null) {
      headers.close();
    }
  }
}
