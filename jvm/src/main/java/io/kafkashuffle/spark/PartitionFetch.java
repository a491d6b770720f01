package io.kafkashuffle.spark;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

/**
 * The records of one Kafka partition of a split, at its committed offsets: each merged
 * interval is fetched once, and a partition that stops answering, or whose topic was deleted
 * or truncated under the read, fails with an error saying which.
 */
final class PartitionFetch {
  // How long a partition may send nothing while offsets remain to be read.
  private static final long IDLE_TIMEOUT_MS = 30_000;
  // How long a read waits without data before it looks whether its topic is still there
  // (kafka/client.py GONE_CHECK_S): waiting out the timeout on a deleted topic only delays
  // the error, in every attempt of the task.
  private static final long GONE_CHECK_MS = 2_000;

  private final String topic;
  private final SplitPlan.PartitionRead read;
  // The reader's consumer, made at the first fetch.
  private final Supplier<KafkaConsumer<byte[], ByteBuffer>> consumer;
  private final TopicPartition tp;
  private final String quotedTopic;
  private final Iterator<long[]> intervals;
  private long start;
  private long stop = -1; // exclusive end of the interval being read; -1: none
  private Iterator<ConsumerRecord<byte[], ByteBuffer>> pending;
  private long idleSince;
  // ms idle when the topic was last looked at: the first poll that brings nothing looks at
  // once, then every GONE_CHECK_MS idle.
  private long checkedAt = -GONE_CHECK_MS;
  private long next; // the offset after the last record handed out
  // Records of the first interval fetched with the split's other partitions (prefetch), or
  // null; the consumer is positioned on this partition only once they are used up.
  private List<ConsumerRecord<byte[], ByteBuffer>> head;
  private boolean positioned;

  PartitionFetch(
      String topic,
      SplitPlan.PartitionRead read,
      Supplier<KafkaConsumer<byte[], ByteBuffer>> consumer) {
    this.topic = topic;
    this.read = read;
    this.consumer = consumer;
    this.tp = new TopicPartition(topic, read.partition);
    this.quotedTopic = "'" + topic + "'";
    this.intervals = read.mergedIntervals().iterator();
  }

  /**
   * Fetches the first interval of each of {@code reads} at once, in as many polls as the
   * records the consumer holds take, up to {@code maxBytes} of values or {@code waitMs}: a
   * split of several partitions then waits for one fetch, not one per partition (a small
   * window's split fetched its 8 partitions in turn, 5-10 ms each). What each partition got,
   * by partition, in offset order; the consumer is left with nothing assigned.
   */
  static Map<Integer, List<ConsumerRecord<byte[], ByteBuffer>>> prefetch(
      KafkaConsumer<byte[], ByteBuffer> c,
      String topic,
      List<SplitPlan.PartitionRead> reads,
      long maxBytes,
      long waitMs) {
    Map<TopicPartition, Long> ends = new HashMap<>();
    Map<TopicPartition, Long> starts = new HashMap<>();
    firstIntervals(reads)
        .forEach(
            (p, iv) -> {
              TopicPartition tp = new TopicPartition(topic, p);
              starts.put(tp, iv[0]);
              ends.put(tp, iv[1]);
            });
    Map<Integer, List<ConsumerRecord<byte[], ByteBuffer>>> out = new HashMap<>();
    if (starts.size() < 2) {
      return out;
    }
    c.assign(new ArrayList<>(starts.keySet()));
    starts.forEach(c::seek);
    long bytes = 0;
    long deadline = System.currentTimeMillis() + waitMs;
    try {
      while (!ends.isEmpty() && bytes < maxBytes && System.currentTimeMillis() < deadline) {
        for (ConsumerRecord<byte[], ByteBuffer> rec : c.poll(Duration.ofMillis(20))) {
          TopicPartition tp = new TopicPartition(rec.topic(), rec.partition());
          out.computeIfAbsent(rec.partition(), k -> new ArrayList<>()).add(rec);
          bytes += rec.serializedValueSize();
          Long end = ends.get(tp);
          if (end != null && rec.offset() >= end) {
            ends.remove(tp);
            c.pause(List.of(tp)); // its first interval is in: fetch no further
          }
        }
      }
    } catch (KafkaException e) {
      out.clear(); // each partition's own fetch reports what is wrong, naming it
    } finally {
      c.resume(c.paused());
      c.assign(List.of());
    }
    return out;
  }

  /**
   * The first interval of each partition {@code reads} read, by partition: those {@link
   * #prefetch} fetches. A partition read twice (runs written before the shuffle grew, read
   * beside later runs of the same partition number) is left out: the records of one position
   * cannot be the start of both of its reads, and each read then fetches its own.
   */
  static Map<Integer, long[]> firstIntervals(List<SplitPlan.PartitionRead> reads) {
    Map<Integer, long[]> out = new HashMap<>();
    Map<Integer, Integer> times = new HashMap<>();
    for (SplitPlan.PartitionRead r : reads) {
      times.merge(r.partition, 1, Integer::sum);
      List<long[]> ivs = r.mergedIntervals();
      if (!ivs.isEmpty() && ivs.get(0)[0] <= ivs.get(0)[1]) {
        out.put(r.partition, ivs.get(0));
      }
    }
    times.forEach(
        (p, n) -> {
          if (n > 1) {
            out.remove(p);
          }
        });
    return out;
  }

  /** Records of this partition from its first offset on, fetched beside the split's others. */
  void prefetched(List<ConsumerRecord<byte[], ByteBuffer>> records) {
    head = records;
  }

  /** The next record of the partition's intervals, or null when they are read. */
  ConsumerRecord<byte[], ByteBuffer> nextRecord() {
    KafkaConsumer<byte[], ByteBuffer> c = consumer.get();
    while (true) {
      if (stop < 0) {
        if (!intervals.hasNext()) {
          return null;
        }
        long[] iv = intervals.next();
        start = iv[0];
        // No end offset is asked for (a round trip per interval): the interval ends at a
        // record the commit names, and offsets with no record (transaction markers) move
        // the position past them as they are fetched. A partition that ends before the
        // interval does (deleted, truncated) sends nothing, and refuseGone says why.
        stop = iv[1] + 1;
        if (start >= stop) {
          stop = -1;
          continue;
        }
        pending = null;
        positioned = false;
        if (head != null) { // fetched from the first interval's start
          List<ConsumerRecord<byte[], ByteBuffer>> kept = new ArrayList<>();
          for (ConsumerRecord<byte[], ByteBuffer> rec : head) {
            if (rec.offset() >= start) {
              kept.add(rec);
            }
          }
          pending = kept.iterator();
        }
        head = null;
        idleSince = System.currentTimeMillis();
        checkedAt = -GONE_CHECK_MS;
        next = start;
      }
      if (pending != null && pending.hasNext()) {
        ConsumerRecord<byte[], ByteBuffer> rec = pending.next();
        if (rec.offset() >= stop) {
          pending = null;
          stop = -1;
          continue;
        }
        if (rec.offset() == stop - 1) {
          pending = null;
          stop = -1;
        }
        next = rec.offset() + 1;
        return rec;
      }
      if (!positioned) {
        c.assign(List.of(tp));
        c.seek(tp, next);
        positioned = true;
      }
      if (c.position(tp) >= stop) {
        stop = -1;
        continue;
      }
      List<ConsumerRecord<byte[], ByteBuffer>> got;
      try {
        got = c.poll(Duration.ofMillis(200)).records(tp);
      } catch (OffsetOutOfRangeException e) {
        throw ShuffleException.format(
            "topic "
                + quotedTopic
                + " partition "
                + read.partition
                + ": committed offsets from "
                + start
                + " are no longer in the topic; the topic lost data or was truncated");
      } catch (KafkaException e) {
        throw new ShuffleException(
            ShuffleException.Kind.CONNECTION,
            "reading topic " + quotedTopic + " partition " + read.partition + ": " + e,
            e);
      }
      if (got.isEmpty()) {
        long idle = System.currentTimeMillis() - idleSince;
        if (idle > checkedAt + GONE_CHECK_MS) {
          checkedAt = idle;
          refuseGone(c);
        }
        if (idle > IDLE_TIMEOUT_MS) {
          throw new ShuffleException(
              ShuffleException.Kind.CONNECTION,
              "no data from topic "
                  + quotedTopic
                  + " partition "
                  + read.partition
                  + " for "
                  + IDLE_TIMEOUT_MS / 1000
                  + "s while reading offsets ["
                  + start
                  + ", "
                  + stop
                  + ")");
        }
        continue;
      }
      idleSince = System.currentTimeMillis();
      checkedAt = -GONE_CHECK_MS;
      pending = got.iterator();
    }
  }

  /**
   * Refuses a read whose partition no longer holds the offset it is at, as {@code
   * _refuse_gone} in kafka/client.py: the topic was deleted (asked twice, a second apart),
   * or created again, or its records up to past that offset were deleted. Says nothing when
   * the metadata cannot be had: the idle timeout still applies.
   */
  void refuseGone(KafkaConsumer<byte[], ByteBuffer> c) {
    String range = " offsets [" + start + ", " + stop + ")";
    refuseMissing(c, range);
    long low;
    long high;
    try {
      low = c.beginningOffsets(List.of(tp), Duration.ofMillis(8_000)).get(tp);
      high = c.endOffsets(List.of(tp), Duration.ofMillis(8_000)).get(tp);
    } catch (KafkaException e) {
      return;
    }
    if (high < next) {
      throw new ShuffleException(
          ShuffleException.Kind.NOT_FOUND,
          deletedWhileReading(range)
              + " (and created again: it ends at offset "
              + high
              + ", the read was at "
              + next
              + ")");
    }
    if (low > next) {
      throw ShuffleException.format(
          "topic "
              + quotedTopic
              + " partition "
              + read.partition
              + ": the records at offsets ["
              + next
              + ", "
              + low
              + ") were deleted while reading"
              + range
              + " (the partition now starts at "
              + low
              + ")");
    }
  }

  /** Refuses a read whose topic (or partition) is gone; asked twice, a second apart. */
  void refuseMissing(KafkaConsumer<byte[], ByteBuffer> c, String range) {
    if (partitionGone(c, topic, read.partition)) {
      throw new ShuffleException(ShuffleException.Kind.NOT_FOUND, deletedWhileReading(range));
    }
  }

  /**
   * Whether {@code topic}'s partition is gone: missing from the cluster's metadata twice, a
   * second apart. False when the metadata cannot be had (the caller's idle timeout still
   * applies).
   */
  static boolean partitionGone(KafkaConsumer<?, ?> c, String topic, int partition) {
    for (int attempt = 0; attempt < 2; attempt++) {
      Map<String, List<PartitionInfo>> topics;
      try {
        topics = c.listTopics(Duration.ofMillis(8_000));
      } catch (KafkaException e) {
        return false;
      }
      List<PartitionInfo> parts = topics.get(topic);
      if (parts != null && parts.stream().anyMatch(p -> p.partition() == partition)) {
        return false;
      }
      if (attempt == 0) {
        try {
          Thread.sleep(1_000);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          return false;
        }
      }
    }
    return true;
  }

  private String deletedWhileReading(String range) {
    return "topic " + quotedTopic + " was deleted while reading partition " + read.partition
        + range;
  }
}
