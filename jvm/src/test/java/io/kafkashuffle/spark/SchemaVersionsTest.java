package io.kafkashuffle.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.math.BigDecimal;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.DateDayVector;
import org.apache.arrow.vector.DecimalVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.Float8Vector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.SmallIntVector;
import org.apache.arrow.vector.TimeStampVector;
import org.apache.arrow.vector.TinyIntVector;
import org.apache.arrow.vector.types.DateUnit;
import org.apache.arrow.vector.types.FloatingPointPrecision;
import org.apache.arrow.vector.types.TimeUnit;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.FieldType;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

/**
 * The JVM's commit log and column resolution held to the vectors the Python ones are made from
 * ({@code tests/vectors/schema_versions.json}, written by {@code schema_versions.py}):
 * commit-log records in, layout versions, skipped records and resolutions out; and each type
 * promotion's answer and widened values.
 */
class SchemaVersionsTest {
  private static JsonNode vectors() throws IOException {
    Path dir = Path.of(System.getProperty("kafkashuffle.vectors", "../tests/vectors"));
    Path file = dir.resolve("schema_versions.json");
    assumeTrue(Files.isRegularFile(file), "no schema-version vectors at " + file.toAbsolutePath());
    return Layout.JSON.readTree(file.toFile());
  }

  private static String text(JsonNode n) {
    return n.isNull() ? null : n.asText();
  }

  /** Numbers as the vectors' JSON holds them (an int where it fits), for equality. */
  private static JsonNode normalized(JsonNode n) throws IOException {
    return Layout.JSON.readTree(Layout.JSON.writeValueAsString(n));
  }

  @TestFactory
  Stream<DynamicTest> logs() throws IOException {
    JsonNode all = vectors().get("logs");
    assertTrue(all.isArray() && all.size() > 0, "schema_versions.json holds no logs");
    List<DynamicTest> out = new ArrayList<>();
    for (JsonNode v : all) {
      out.add(
          DynamicTest.dynamicTest(
              v.get("name").asText(),
              () -> assertEquals(v.get("expected"), normalized(log(v)))));
    }
    return out.stream();
  }

  private static ArrayNode columns(Schema schema) {
    ArrayNode out = Layout.JSON.createArrayNode();
    for (Field f : schema.getFields()) {
      out.addArray()
          .add(f.getName())
          .add(SchemaResolution.typeName(f.getType()))
          .add(f.isNullable());
    }
    return out;
  }

  /** What the JVM makes of a case's records, in the file's form. */
  private static ObjectNode log(JsonNode v) {
    CommitLog log = new CommitLog(v.get("topic").asText());
    long offset = 0;
    for (JsonNode r : v.get("records")) {
      log.apply(text(r.get(0)), text(r.get(1)), offset++);
    }
    ObjectNode out = Layout.JSON.createObjectNode();
    Layout layout;
    try {
      layout = log.layout();
    } catch (ShuffleException e) {
      out.putObject("error").put("kind", e.kind().pythonName);
      return out;
    }
    ArrayNode bad = out.putArray("bad_records");
    for (CommitLog.BadRecord b : log.badRecords()) {
      int cut = b.reason.indexOf(" (");
      bad.addArray()
          .add(b.offset)
          .add(b.key)
          .add(cut < 0 ? b.reason : b.reason.substring(0, cut));
    }
    ArrayNode commits = out.putArray("commits");
    for (CommitLog.Commit c : log.commits()) {
      commits.addArray().add(c.runId).add(c.layoutVersion);
    }
    if (layout == null) {
      out.putNull("latest");
      return out;
    }
    // What executors read: the layout as a read hands it to them, parsed again.
    layout = Layout.parse(layout.json, "test");
    ArrayNode versions = out.putArray("versions");
    for (LayoutVersion lv : layout.versions) {
      ObjectNode o = versions.addObject();
      o.put("version", lv.version);
      o.put("num_partitions", lv.numPartitions);
      ArrayNode ids = o.putArray("field_ids");
      for (long id : lv.fieldIds) {
        ids.add(id);
      }
      o.put("last_field_id", lv.lastFieldId);
      o.put("change_id", lv.changeId);
      o.set("columns", columns(lv.schema));
    }
    ObjectNode latest = out.putObject("latest");
    latest.put("version", layout.version());
    latest.put("num_partitions", layout.numPartitions);
    latest.set("columns", columns(layout.schema));
    ArrayNode resolutions = out.putArray("resolutions");
    for (LayoutVersion lv : layout.versions) {
      SchemaResolution r = SchemaResolution.resolve(lv, layout.latest());
      ObjectNode o = resolutions.addObject();
      o.put("version", lv.version);
      o.put("identity", r.identity);
      ArrayNode cs = o.putArray("columns");
      for (Map.Entry<String, SchemaResolution.Source> e : r.sources().entrySet()) {
        cs.addArray()
            .add(e.getKey())
            .add(e.getValue().name)
            .add(SchemaResolution.typeName(e.getValue().field.getType()));
      }
    }
    ArrayNode unknown = out.putArray("unknown_versions");
    for (long n : new long[] {layout.version() + 1, 99}) {
      try {
        layout.layoutVersion(n);
      } catch (ShuffleException e) {
        ObjectNode o = unknown.addObject();
        o.put("version", n);
        o.putObject("error")
            .put("kind", e.kind().pythonName)
            .put("message", e.getMessage().substring(e.kind().pythonName.length() + 2));
      }
    }
    return out;
  }

  @TestFactory
  Stream<DynamicTest> casts() throws IOException {
    JsonNode all = vectors().get("casts");
    assertTrue(all.isArray() && all.size() > 0, "schema_versions.json holds no casts");
    List<DynamicTest> out = new ArrayList<>();
    for (JsonNode c : all) {
      String name = c.get("from").asText() + " -> " + c.get("to").asText();
      out.add(DynamicTest.dynamicTest(name, () -> cast(c)));
    }
    return out.stream();
  }

  private static void cast(JsonNode c) throws IOException {
    ArrowType from = type(c.get("from").asText());
    ArrowType to = type(c.get("to").asText());
    assertEquals(text(c.get("problem")), SchemaResolution.promotionProblem(from, to));
    if (!c.has("values")) {
      return;
    }
    if (to instanceof ArrowType.Timestamp t && t.getUnit() != TimeUnit.MICROSECOND) {
      // No Spark type holds it: a column the JVM path never reads, the latest schema being one
      // Spark writes.
      return;
    }
    DataType type = ArrowUtils.fromArrowType(to);
    try (BufferAllocator allocator = new RootAllocator();
        FieldVector in = vector(allocator, from, c.get("values"))) {
      ColumnVector got = WidenedColumnVector.of(in, to, type, "col");
      assertEquals(type, got.dataType());
      assertEquals(c.get("expected"), normalized(values(got, in.getValueCount())));
    }
  }

  /** A Spark column's values as the vectors hold them (decimals as text, timestamps as ints). */
  static ArrayNode values(ColumnVector v, int rows) {
    ArrayNode out = Layout.JSON.createArrayNode();
    DataType t = v.dataType();
    for (int i = 0; i < rows; i++) {
      if (v.isNullAt(i)) {
        out.addNull();
      } else if (t.equals(DataTypes.ShortType)) {
        out.add(v.getShort(i));
      } else if (t.equals(DataTypes.IntegerType)) {
        out.add(v.getInt(i));
      } else if (t.equals(DataTypes.LongType)
          || t.equals(DataTypes.TimestampType)
          || t.equals(DataTypes.TimestampNTZType)) {
        out.add(v.getLong(i));
      } else if (t.equals(DataTypes.DoubleType)) {
        out.add(v.getDouble(i));
      } else if (t instanceof DecimalType d) {
        out.add(
            v.getDecimal(i, d.precision(), d.scale()).toJavaBigDecimal().toPlainString());
      } else {
        throw new IllegalArgumentException("no values of " + t + " here");
      }
    }
    return out;
  }

  private static final Pattern DECIMAL = Pattern.compile("decimal128\\((\\d+), (\\d+)\\)");
  private static final Pattern TIMESTAMP = Pattern.compile("timestamp\\[(s|ms|us|ns)(, tz=(.+))?\\]");

  /** A type as pyarrow writes it, for the types the vectors hold. */
  static ArrowType type(String name) {
    switch (name) {
      case "int8":
        return new ArrowType.Int(8, true);
      case "int16":
        return new ArrowType.Int(16, true);
      case "int32":
        return new ArrowType.Int(32, true);
      case "int64":
        return new ArrowType.Int(64, true);
      case "float":
        return new ArrowType.FloatingPoint(FloatingPointPrecision.SINGLE);
      case "double":
        return new ArrowType.FloatingPoint(FloatingPointPrecision.DOUBLE);
      case "date32[day]":
        return new ArrowType.Date(DateUnit.DAY);
      case "string":
        return ArrowType.Utf8.INSTANCE;
      case "large_string":
        return ArrowType.LargeUtf8.INSTANCE;
      default:
        break;
    }
    Matcher d = DECIMAL.matcher(name);
    if (d.matches()) {
      return new ArrowType.Decimal(Integer.parseInt(d.group(1)), Integer.parseInt(d.group(2)), 128);
    }
    Matcher t = TIMESTAMP.matcher(name);
    if (t.matches()) {
      TimeUnit unit =
          switch (t.group(1)) {
            case "s" -> TimeUnit.SECOND;
            case "ms" -> TimeUnit.MILLISECOND;
            case "us" -> TimeUnit.MICROSECOND;
            default -> TimeUnit.NANOSECOND;
          };
      return new ArrowType.Timestamp(unit, t.group(3));
    }
    throw new IllegalArgumentException("no such type in the vectors: " + name);
  }

  /** A vector of {@code type} holding {@code values} (JSON; null is a null). */
  static FieldVector vector(BufferAllocator allocator, ArrowType type, JsonNode values) {
    FieldVector v = new Field("col", FieldType.nullable(type), null).createVector(allocator);
    v.allocateNew();
    int i = 0;
    for (JsonNode x : values) {
      if (x.isNull()) {
        v.setNull(i++);
        continue;
      }
      if (v instanceof TinyIntVector t) {
        t.setSafe(i, (byte) x.asLong());
      } else if (v instanceof SmallIntVector s) {
        s.setSafe(i, (short) x.asLong());
      } else if (v instanceof IntVector n) {
        n.setSafe(i, (int) x.asLong());
      } else if (v instanceof BigIntVector b) {
        b.setSafe(i, x.asLong());
      } else if (v instanceof Float4Vector f) {
        f.setSafe(i, (float) x.asDouble());
      } else if (v instanceof Float8Vector f) {
        f.setSafe(i, x.asDouble());
      } else if (v instanceof DecimalVector dv) {
        dv.setSafe(i, new BigDecimal(x.asText()));
      } else if (v instanceof DateDayVector dd) {
        dd.setSafe(i, (int) x.asLong());
      } else {
        throw new IllegalArgumentException("no values of " + type + " in the vectors");
      }
      i++;
    }
    v.setValueCount(i);
    return v;
  }
}
