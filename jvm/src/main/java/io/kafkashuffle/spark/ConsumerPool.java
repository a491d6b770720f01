package io.kafkashuffle.spark;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.function.Function;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteBufferDeserializer;

/**
 * Idle Kafka consumers of one JVM, kept between reads of the same settings. Values come as
 * the consumer received them (a view of the fetched bytes, not a copy).
 *
 * <p>A new consumer costs a connection, a metadata request and, at the first fetch of a
 * partition, a round of leader lookups: at 2M rows over 8 partitions, a task with a new
 * consumer spent about half of its time waiting rather than on CPU (Spark's task metrics). Reads here assign partitions and seek to
 * offsets (no group, no committed position), so a consumer carries nothing from one read to
 * the next once it is unassigned. A consumer idle for more than {@link #IDLE_MS} is closed the
 * next time the pool is used; a read that failed closes its consumer instead of returning it.
 *
 * <p>Five minutes by default: a pipeline's next step, a sensor's next run or a notebook's next
 * cell often comes a minute or more after the last read, and with consumers kept for only a
 * minute each of its tasks paid for a new one again. That is within the Kafka client's own
 * idle limit for a connection ({@code connections.max.idle.ms}, 9 minutes by default). The
 * JVM system property {@value #IDLE_PROPERTY} sets another time, in milliseconds.
 */
final class ConsumerPool {
  static final String IDLE_PROPERTY = "kafkashuffle.consumer.idle.ms";
  static final long IDLE_MS = Long.getLong(IDLE_PROPERTY, 300_000L);

  private static final class Idle {
    final KafkaConsumer<byte[], ByteBuffer> consumer;
    final long since;

    Idle(KafkaConsumer<byte[], ByteBuffer> consumer, long since) {
      this.consumer = consumer;
      this.since = since;
    }
  }

  private static final Map<String, Deque<Idle>> IDLE = new HashMap<>();
  private static final Map<KafkaConsumer<byte[], ByteBuffer>, String> KEYS =
      new java.util.IdentityHashMap<>();

  private static final java.util.concurrent.atomic.AtomicLong CREATED =
      new java.util.concurrent.atomic.AtomicLong();

  private ConsumerPool() {}

  private static String key(Properties p) {
    return new TreeMap<>(p).toString();
  }

  /**
   * A consumer for {@code p} (byte-array keys, buffer values): an idle one, or a new one whose
   * {@code client.id} is {@code clientId} and a number.
   */
  static KafkaConsumer<byte[], ByteBuffer> borrow(Properties p, String clientId) {
    Properties props = new Properties();
    props.putAll(p);
    props.setProperty("key.deserializer", ByteArrayDeserializer.class.getName());
    props.setProperty("value.deserializer", ByteBufferDeserializer.class.getName());
    // Unless given: the socket's receive buffer sized by the OS (the Java client's default
    // fixes it at 64 KiB, which holds a read of megabyte frames to a fraction of what the
    // broker can send), and up to 8 MiB of a partition per fetch (several frames a trip).
    props.putIfAbsent("receive.buffer.bytes", "-1");
    props.putIfAbsent("max.partition.fetch.bytes", String.valueOf(8 << 20));
    String key = key(props);
    List<KafkaConsumer<byte[], ByteBuffer>> expired = new ArrayList<>();
    KafkaConsumer<byte[], ByteBuffer> c = null;
    synchronized (IDLE) {
      long now = System.currentTimeMillis();
      for (Iterator<Deque<Idle>> it = IDLE.values().iterator(); it.hasNext(); ) {
        Deque<Idle> q = it.next();
        q.removeIf(
            i -> {
              if (now - i.since > IDLE_MS) {
                expired.add(i.consumer);
                KEYS.remove(i.consumer);
                return true;
              }
              return false;
            });
        if (q.isEmpty()) {
          it.remove();
        }
      }
      Deque<Idle> q = IDLE.get(key);
      if (q != null && !q.isEmpty()) {
        c = q.pollLast().consumer;
      }
    }
    closeAll(expired);
    if (c == null) {
      // Each client of a JVM needs its own id (its metrics are registered by it), unless the
      // user gave one: brokers apply quotas and ACL audit logs by the id as given, as for a
      // Spark kafka source given kafka.client.id.
      if (p.getProperty("client.id") == null) {
        props.setProperty("client.id", clientId + "-" + CREATED.incrementAndGet());
      }
      c = new KafkaConsumer<>(props);
      synchronized (IDLE) {
        KEYS.put(c, key);
      }
    }
    return c;
  }

  /** Gives {@code c} back for a later read of the same settings. */
  static void giveBack(KafkaConsumer<byte[], ByteBuffer> c) {
    String key;
    synchronized (IDLE) {
      key = KEYS.get(c);
    }
    if (key == null) {
      discard(c);
      return;
    }
    try {
      c.unsubscribe(); // drops the assignment and whatever it had fetched
    } catch (RuntimeException e) {
      discard(c);
      return;
    }
    synchronized (IDLE) {
      IDLE.computeIfAbsent(key, k -> new ArrayDeque<>())
          .addLast(new Idle(c, System.currentTimeMillis()));
    }
  }

  /**
   * {@code use} applied to a consumer borrowed for {@code p}: the consumer is given back when
   * {@code use} returns and closed when it throws.
   */
  static <T> T with(
      Properties p, String clientId, Function<KafkaConsumer<byte[], ByteBuffer>, T> use) {
    KafkaConsumer<byte[], ByteBuffer> c = borrow(p, clientId);
    boolean ok = false;
    try {
      T out = use.apply(c);
      ok = true;
      return out;
    } finally {
      release(c, ok);
    }
  }

  /** Gives {@code c} back when the read that used it ended well, else closes it. */
  static void release(KafkaConsumer<byte[], ByteBuffer> c, boolean endedWell) {
    if (endedWell) {
      giveBack(c);
    } else {
      discard(c);
    }
  }

  /** Closes {@code c} (after a failure, or when it cannot be reused). */
  static void discard(KafkaConsumer<byte[], ByteBuffer> c) {
    synchronized (IDLE) {
      KEYS.remove(c);
    }
    closeAll(List.of(c));
  }

  private static void closeAll(List<KafkaConsumer<byte[], ByteBuffer>> consumers) {
    for (KafkaConsumer<byte[], ByteBuffer> c : consumers) {
      try {
        c.close(Duration.ofSeconds(5));
      } catch (RuntimeException ignored) {
        // Closing only releases sockets and threads; a failure here loses no data.
      }
    }
  }
}
