package io.kafkashuffle.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

/**
 * The JVM planner and stream held to the checked-in vectors the Python planner and stream
 * reader are held to ({@code tests/vectors/read_plans.json}, {@code stream_plans.json}):
 * commit-log records and options in, the plan or the error out, compared as JSON.
 */
class PlanVectorsTest {
  /** The vectors' folder; a source distribution has none, and these tests are skipped. */
  private static Path vectors() {
    Path dir = Path.of(System.getProperty("kafkashuffle.vectors", "../tests/vectors"));
    assumeTrue(Files.isDirectory(dir), "no planner vectors at " + dir.toAbsolutePath());
    return dir;
  }

  private static Stream<DynamicTest> cases(String file, Case run) throws IOException {
    JsonNode all = Layout.JSON.readTree(vectors().resolve(file).toFile());
    assertTrue(all.isArray() && all.size() > 0, file + " holds no vectors");
    List<DynamicTest> out = new ArrayList<>();
    for (JsonNode v : all) {
      out.add(
          DynamicTest.dynamicTest(
              v.get("name").asText(),
              () -> {
                JsonNode got = Layout.JSON.readTree(Layout.JSON.writeValueAsString(run.apply(v)));
                assertEquals(v.get("expected"), got);
              }));
    }
    return out.stream();
  }

  interface Case {
    ObjectNode apply(JsonNode vector) throws IOException;
  }

  private static String text(JsonNode n) {
    return n.isNull() ? null : n.asText();
  }

  private static Map<String, String> options(JsonNode vector) {
    Map<String, String> out = new HashMap<>();
    vector.get("options").properties().forEach(e -> out.put(e.getKey(), e.getValue().asText()));
    return out;
  }

  /** The error as the vectors hold it: the Python class's name, and the message after it. */
  private static void error(ObjectNode result, ShuffleException e) {
    ObjectNode err = result.putObject("error");
    err.put("kind", e.kind().pythonName);
    err.put("message", e.getMessage().substring(e.kind().pythonName.length() + 2));
  }

  @TestFactory
  Stream<DynamicTest> readPlans() throws IOException {
    return cases("read_plans.json", PlanVectorsTest::plan);
  }

  @TestFactory
  Stream<DynamicTest> streamPlans() throws IOException {
    return cases("stream_plans.json", PlanVectorsTest::stream);
  }

  /**
   * {@code {"splits": [...]}} or {@code {"error": ...}}, with {@code "bad_records"} ({@code
   * [offset, key, window_known, window]}) when the log skipped any; record i at offset i.
   */
  private static ObjectNode plan(JsonNode v) {
    ObjectNode result = Layout.JSON.createObjectNode();
    ArrayNode bad = null;
    try {
      CommitLog log = new CommitLog(v.get("topic").asText());
      long offset = 0;
      for (JsonNode r : v.get("records")) {
        log.apply(text(r.get(0)), text(r.get(1)), offset++);
      }
      if (!log.badRecords().isEmpty()) {
        bad = result.putArray("bad_records");
        for (CommitLog.BadRecord b : log.badRecords()) {
          bad.addArray().add(b.offset).add(b.key).add(b.windowKnown).add(b.window);
        }
      }
      Map<String, String> options = options(v);
      OptionTables.SHUFFLE_JVM.check(options.keySet(), null);
      ArrayNode splits = result.putArray("splits");
      for (SplitPlan s :
          ReadPlanner.plan(log, ReadPlanner.Selection.parse(options, "kafka-shuffle-jvm"))) {
        splits.add(s.toJson());
      }
    } catch (ShuffleException e) {
      result.removeAll();
      if (bad != null) {
        result.set("bad_records", bad);
      }
      error(result, e);
    }
    return result;
  }

  /** A commit log of given records, of which the first {@code visible} are there so far. */
  private static final class CaseLog implements ShuffleStream.LogSource {
    final List<ShuffleStream.Record> records;
    int visible;

    CaseLog(List<ShuffleStream.Record> records) {
      this.records = records;
      this.visible = records.size();
    }

    @Override
    public ShuffleStream.Read read(long from) {
      List<ShuffleStream.Record> out = new ArrayList<>();
      for (ShuffleStream.Record r : records) {
        if (r.offset >= from && r.offset < visible) {
          out.add(r);
        }
      }
      return new ShuffleStream.Read(from, out, Math.max(visible, from));
    }

    @Override
    public long end() {
      return visible;
    }
  }

  /**
   * The initial offset with the log's first {@code first} records, then the micro-batches of
   * two {@code Trigger.AvailableNow} runs (over those records, then, restarted, over all), each
   * as {@code {"end", "runs", "splits"}}; or the option error.
   */
  private static ObjectNode stream(JsonNode v) throws IOException {
    ObjectNode result = Layout.JSON.createObjectNode();
    String topic = v.get("topic").asText();
    int first = v.get("first").asInt();
    try {
      List<ShuffleStream.Record> records = new ArrayList<>();
      CommitLog log = new CommitLog(topic);
      long i = 0;
      for (JsonNode r : v.get("records")) {
        records.add(new ShuffleStream.Record(i, text(r.get(0)), text(r.get(1))));
        log.apply(text(r.get(0)), text(r.get(1)), i++);
      }
      Map<String, String> options = options(v);
      Layout layout = Layout.parse(log.layoutJson(), "shuffle '" + topic + "' layout");
      ReadSpec spec = new ReadSpec(topic, Map.of(), layout, new String[0], null, null);
      CaseLog source = new CaseLog(records);
      source.visible = first;
      OptionTables.SHUFFLE.check(options.keySet(), null);
      ShuffleStream stream = new ShuffleStream(spec, options, "kafka-shuffle", source);
      ShuffleStream.Position start = ShuffleStream.Position.of(stream.initialOffset());
      result.set("initial", Layout.JSON.readTree(start.json()));
      ArrayNode batches = result.putArray("batches");
      for (int visible : new int[] {first, records.size()}) {
        if (visible != first) {
          stream = new ShuffleStream(spec, options, "kafka-shuffle", source); // restarted
        }
        source.visible = visible;
        stream.prepareForTriggerAvailableNow();
        ReadLimit limit = stream.getDefaultReadLimit();
        for (int n = 0; n < records.size() + 2; n++) {
          ShuffleStream.Position end = ShuffleStream.Position.of(stream.latestOffset(start, limit));
          if (end.log == start.log && end.snapshot == start.snapshot) {
            break;
          }
          JsonNode reported = Layout.JSON.readTree(stream.reportLatestOffset().json());
          ObjectNode batch = batches.addObject();
          batch.set("end", Layout.JSON.readTree(end.json()));
          batch.set("runs", reported.get(ShuffleStream.METRICS_KEY).get("runs"));
          ArrayNode skipped = batch.putArray("skipped");
          for (JsonNode b : reported.get(ShuffleStream.METRICS_KEY).get("skipped_records")) {
            skipped.add(b.get("offset").asLong());
          }
          ArrayNode splits = batch.putArray("splits");
          for (InputPartition p : stream.planInputPartitions(start, end)) {
            splits.add(((ShuffleInputPartition) p).split.toJson());
          }
          start = end;
        }
      }
    } catch (ShuffleException e) {
      result.removeAll();
      error(result, e);
    }
    return result;
  }
}
