package io.kafkashuffle.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.apache.arrow.vector.types.FloatingPointPrecision;
import org.apache.arrow.vector.types.TimeUnit;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * ALTER TABLE of a shuffle: Spark's table changes made into the next layout version as {@code
 * alter} in evolution.py makes it (the {@code alters} of {@code schema_versions.json}: the same
 * change record, or the same refusal), the changes it does not make, and how a version is
 * recorded when another change races it for its number.
 */
class TableAlterationTest {
  private static final String TOPIC = "vectors.evolving";

  private static JsonNode vectors() throws IOException {
    Path dir = Path.of(System.getProperty("kafkashuffle.vectors", "../tests/vectors"));
    Path file = dir.resolve("schema_versions.json");
    assumeTrue(Files.isRegularFile(file), "no schema-version vectors at " + file.toAbsolutePath());
    return Layout.JSON.readTree(file.toFile());
  }

  private static final Pattern DECIMAL = Pattern.compile("decimal\\((\\d+),(\\d+)\\)");

  /** The Spark type of a Spark SQL type name, as a statement's column would have it. */
  static DataType sparkType(String name) {
    Matcher m = DECIMAL.matcher(name);
    if (m.matches()) {
      return DataTypes.createDecimalType(
          Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2)));
    }
    return switch (name) {
      case "boolean" -> DataTypes.BooleanType;
      case "tinyint" -> DataTypes.ByteType;
      case "smallint" -> DataTypes.ShortType;
      case "int" -> DataTypes.IntegerType;
      case "bigint" -> DataTypes.LongType;
      case "float" -> DataTypes.FloatType;
      case "double" -> DataTypes.DoubleType;
      case "string" -> DataTypes.StringType;
      case "binary" -> DataTypes.BinaryType;
      case "date" -> DataTypes.DateType;
      case "timestamp" -> DataTypes.TimestampType;
      case "timestamp_ntz" -> DataTypes.TimestampNTZType;
      default -> throw new IllegalArgumentException("no Spark type for " + name);
    };
  }

  private static String[] column(String name) {
    return new String[] {name};
  }

  /** A vector's change as the table changes Spark hands the catalog for it. */
  private static TableChange[] changes(JsonNode change) {
    List<TableChange> out = new ArrayList<>();
    for (JsonNode r : change.path("rename")) {
      out.add(TableChange.renameColumn(column(r.get(0).asText()), r.get(1).asText()));
    }
    for (JsonNode d : change.path("drop")) {
      out.add(TableChange.deleteColumn(column(d.asText()), false));
    }
    for (JsonNode w : change.path("widen")) {
      out.add(
          TableChange.updateColumnType(column(w.get(0).asText()), sparkType(w.get(1).asText())));
    }
    for (JsonNode a : change.path("add")) {
      out.add(
          TableChange.addColumn(
              column(a.get(0).asText()), sparkType(a.get(1).asText()), a.get(2).asBoolean()));
    }
    return out.toArray(new TableChange[0]);
  }

  private static TableAlteration.Pinned pinned(JsonNode p) {
    List<String> key = new ArrayList<>();
    p.get("key").forEach(k -> key.add(k.asText()));
    List<String> sortBy = new ArrayList<>();
    p.get("sort_by").forEach(k -> sortBy.add(k.asText()));
    JsonNode et = p.get("event_time");
    return new TableAlteration.Pinned(key, sortBy, et == null || et.isNull() ? null : et.asText());
  }

  @TestFactory
  Stream<DynamicTest> alters() throws IOException {
    JsonNode all = vectors().get("alters");
    assertTrue(all != null && all.isArray() && all.size() > 0, "no alteration vectors");
    List<DynamicTest> out = new ArrayList<>();
    for (JsonNode v : all) {
      out.add(DynamicTest.dynamicTest(v.get("name").asText(), () -> alter(v)));
    }
    return out.stream();
  }

  private static void alter(JsonNode v) throws IOException {
    LayoutVersion current = LayoutVersion.of(v.get("current"));
    JsonNode expected = v.get("expected");
    String topic = v.get("topic").asText();
    if (expected.has("error")) {
      ShuffleException e =
          assertThrows(
              ShuffleException.class,
              () ->
                  TableAlteration.of("here", current, changes(v.get("change")))
                      .apply(topic, current, pinned(v.get("pinned"))));
      assertEquals(expected.get("error").get("kind").asText(), e.kind().pythonName);
      assertEquals(
          expected.get("error").get("kind").asText() + ": "
              + expected.get("error").get("message").asText(),
          e.getMessage());
      return;
    }
    JsonNode want = expected.get("record");
    LayoutVersion made =
        TableAlteration.of("here", current, changes(v.get("change")))
            .apply(topic, current, pinned(v.get("pinned")))
            .stamped(
                want.get("version").asLong(),
                want.get("made_at").asText(),
                want.get("made_by").asText(),
                want.get("change_id").asText());
    assertEquals(TableAlteration.MADE_BY, want.get("made_by").asText());
    ObjectNode got = (ObjectNode) Layout.JSON.readTree(made.recordJson());
    // The schema as Arrow reads it: the IPC bytes of two writers of one schema may differ.
    assertEquals(LayoutVersion.schema(want.get("schema")), LayoutVersion.schema(got.get("schema")));
    assertEquals(fieldNames(want), fieldNames(got));
    for (Iterator<String> it = want.fieldNames(); it.hasNext(); ) {
      String f = it.next();
      if (!f.equals("schema")) {
        assertEquals(want.get(f), got.get(f), f);
      }
    }
    // Read back as a change record, it is the version made.
    LayoutVersion back = LayoutVersion.parse(made.recordJson());
    assertEquals(made.version, back.version);
    assertEquals(made.schema, back.schema);
    assertEquals(made.changes(), back.changes());
  }

  private static List<String> fieldNames(JsonNode n) {
    List<String> out = new ArrayList<>();
    n.fieldNames().forEachRemaining(out::add);
    out.sort(null);
    return out;
  }

  private static final Schema V1 =
      new Schema(
          List.of(
              Field.notNullable("k", ArrowType.Utf8.INSTANCE),
              Field.nullable("ts", new ArrowType.Timestamp(TimeUnit.MICROSECOND, "UTC")),
              Field.nullable("n", new ArrowType.Int(32, true)),
              Field.nullable("f", new ArrowType.FloatingPoint(FloatingPointPrecision.SINGLE))));

  private static LayoutVersion v1() {
    return LayoutVersion.made(
        1, V1, new long[] {1, 2, 3, 4}, 4, 4, List.of(), null, null, null);
  }

  private static ShuffleException refusedChange(TableChange... changes) {
    return assertThrows(
        ShuffleException.class,
        () -> TableAlteration.of("catalog 'c': shuffle 't'", v1(), changes));
  }

  @Test
  void changesOtherThanColumnsAddedRenamedDroppedOrWidenedAreRefused() {
    ShuffleException e =
        refusedChange(
            TableChange.setProperty("owner", "me"),
            TableChange.updateColumnNullability(column("n"), true),
            TableChange.updateColumnComment(column("n"), "a count"),
            TableChange.updateColumnPosition(column("n"), TableChange.ColumnPosition.first()),
            TableChange.addColumn(column("c"), DataTypes.StringType, true, "a comment"),
            TableChange.addColumn(new String[] {"s", "x"}, DataTypes.StringType),
            TableChange.addColumn(
                column("l"), DataTypes.createArrayType(DataTypes.LongType), true),
            TableChange.updateColumnType(column("n"), DataTypes.createMapType(
                DataTypes.StringType, DataTypes.LongType)));
    assertEquals(ShuffleException.Kind.OPTION, e.kind());
    String m = e.getMessage();
    assertTrue(m.startsWith("ShuffleOptionError: catalog 'c': shuffle 't': ALTER TABLE refused,"
        + " nothing was changed: table properties: a shuffle has none"), m);
    for (String part :
        List.of(
            "the nullability of 'n': not changed by ALTER TABLE",
            "the comment of 'n': a shuffle keeps no column comments",
            "the position of 'n': a shuffle's columns keep their order",
            "ADD COLUMN 'c': a shuffle keeps no column comments",
            "'s.x': a field inside a column is not changed here",
            "ADD COLUMN 'l': array<bigint> is not a column type ALTER TABLE gives a shuffle",
            "ALTER COLUMN 'n' TYPE: map<string,bigint> is not a column type",
            "alter_shuffle takes any Arrow type")) {
      assertTrue(m.contains(part), part + " not in " + m);
    }
  }

  @Test
  void aColumnAddedAtAPositionIsRefused() {
    ShuffleException e =
        refusedChange(
            TableChange.addColumn(
                column("c"),
                DataTypes.StringType,
                true,
                null,
                TableChange.ColumnPosition.after("k"),
                null));
    assertTrue(
        e.getMessage().contains("ADD COLUMN 'c': a position is not given here"), e.getMessage());
  }

  @Test
  void dropIfExistsOfAMissingColumnChangesNothing() {
    TableAlteration a =
        TableAlteration.of("here", v1(), TableChange.deleteColumn(column("gone"), true));
    assertTrue(a.isEmpty());
    TableAlteration b =
        TableAlteration.of("here", v1(), TableChange.deleteColumn(column("f"), true));
    assertEquals(List.of("f"), b.drop);
  }

  @Test
  void typesAreStoredAsPythonWritesThem() {
    assertEquals(
        new ArrowType.Timestamp(TimeUnit.MICROSECOND, "UTC"),
        TableAlteration.arrowType(DataTypes.TimestampType));
    assertEquals(
        new ArrowType.Timestamp(TimeUnit.MICROSECOND, null),
        TableAlteration.arrowType(DataTypes.TimestampNTZType));
    assertEquals(ArrowType.Utf8.INSTANCE, TableAlteration.arrowType(DataTypes.StringType));
    assertEquals(
        new ArrowType.Decimal(38, 10, 128),
        TableAlteration.arrowType(DataTypes.createDecimalType(38, 10)));
    assertNull(TableAlteration.arrowType(DataTypes.CalendarIntervalType));
  }

  @Test
  void aRecordedTimeIsPythonsIsoFormat() {
    assertTrue(
        TableAlteration.now()
            .matches("\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d(\\.\\d{6})?\\+00:00"),
        TableAlteration.now());
  }

  /**
   * A commit log in memory: records appended in order, and before each of our writes, the
   * records another change writes first ({@code racing}, taken one list per write).
   */
  private static class Log implements TableAlteration.ChangeLog {
    final List<String[]> records = new ArrayList<>();
    final List<List<String[]>> racing = new ArrayList<>();

    Log() throws Exception {
      records.add(new String[] {"layout", Fixtures.layoutJson("t", V1, List.of("k"), 4, 16)});
    }

    @Override
    public void write(String key, String value) {
      if (value != null && !racing.isEmpty()) {
        records.addAll(racing.remove(0));
      }
      records.add(new String[] {key, value});
    }

    @Override
    public CommitLog read() {
      CommitLog log = new CommitLog("t");
      long offset = 0;
      for (String[] r : records) {
        log.apply(r[0], r[1], offset++);
      }
      return log;
    }
  }

  private static TableAlteration adding(String column) {
    return TableAlteration.of(
        "here", v1(), TableChange.addColumn(column(column), DataTypes.LongType, true));
  }

  private static TableAlteration.Recorded record(Log log, TableAlteration change) {
    Layout layout = log.read().layout();
    return TableAlteration.record(
        "t",
        log,
        layout,
        l -> change.apply("t", l.latest(), TableAlteration.Pinned.of(l)),
        TableAlteration.MADE_BY);
  }

  /** Another change's record of version {@code version} adding {@code column}. */
  private static String[] other(Log log, long version, String column) {
    Layout layout = log.read().layout();
    LayoutVersion v =
        adding(column)
            .apply("t", layout.latest(), TableAlteration.Pinned.of(layout))
            .stamped(version, "2013-01-01T00:00:00+00:00", "alter_shuffle", "other" + version);
    return new String[] {"change/" + version + "/other" + version, v.recordJson()};
  }

  @Test
  void aVersionIsRecordedAsTheNextOne() throws Exception {
    Log log = new Log();
    TableAlteration.Recorded done = record(log, adding("extra"));
    assertEquals(2, done.version().version);
    assertEquals(2, log.records.size());
    assertTrue(log.records.get(1)[0].matches("change/2/[0-9a-f]{32}"), log.records.get(1)[0]);
    JsonNode written = Layout.JSON.readTree(log.records.get(1)[1]);
    assertEquals("ALTER TABLE", written.get("made_by").asText());
    assertEquals(log.records.get(1)[0].substring("change/2/".length()),
        written.get("change_id").asText());
    assertEquals(
        List.of("added column 'extra' int64 (field id 5)"), done.version().changes());
    Layout layout = done.log().layout();
    assertEquals(2, layout.version());
    assertEquals("extra", layout.schema.getFields().get(4).getName());
  }

  @Test
  void aChangeThatLostItsNumberIsDeletedAndMadeAgainOnTheWinner() throws Exception {
    Log log = new Log();
    log.racing.add(List.<String[]>of(other(log, 2, "first")));
    TableAlteration.Recorded done = record(log, adding("second"));
    // Theirs, ours (second in the log), ours deleted, ours again as version 3.
    assertEquals(5, log.records.size());
    String lost = log.records.get(2)[0];
    assertTrue(lost.startsWith("change/2/"), lost);
    assertEquals(lost, log.records.get(3)[0]);
    assertNull(log.records.get(3)[1]);
    assertTrue(log.records.get(4)[0].startsWith("change/3/"), log.records.get(4)[0]);
    assertEquals(3, done.version().version);
    assertEquals(List.of("added column 'second' int64 (field id 6)"), done.version().changes());
    Layout layout = done.log().layout();
    assertEquals(3, layout.version());
    assertEquals(List.of(), done.log().badRecords());
    assertEquals("first", layout.schema.getFields().get(4).getName());
    assertEquals("second", layout.schema.getFields().get(5).getName());
  }

  @Test
  void aChangeTheWinnerMadeImpossibleIsRefused() throws Exception {
    Log log = new Log();
    log.racing.add(List.<String[]>of(other(log, 2, "extra")));
    ShuffleException e = assertThrows(ShuffleException.class, () -> record(log, adding("extra")));
    assertEquals(
        "ShuffleLayoutError: shuffle 't': alter_shuffle refused, nothing was changed: add: column"
            + " 'extra' exists already",
        e.getMessage());
    // Ours was deleted: the log holds the winner's version alone.
    assertNull(log.records.get(log.records.size() - 1)[1]);
    assertEquals(2, log.read().layout().version());
  }

  @Test
  void aChangeLosingItsNumberEveryTimeGivesUp() throws Exception {
    // Each time, another change records the number ours was to have just before ours.
    Log log =
        new Log() {
          long next = 2;

          @Override
          public void write(String key, String value) {
            if (value != null) {
              long n = next++;
              records.add(other(this, n, "c" + n));
            }
            records.add(new String[] {key, value});
          }
        };
    ShuffleException e = assertThrows(ShuffleException.class, () -> record(log, adding("mine")));
    assertEquals(
        "ShuffleLayoutError: shuffle 't': a new layout version could not be recorded: other"
            + " changes took its number 5 times running; try again",
        e.getMessage());
    assertEquals(TableAlteration.ATTEMPTS + 1, log.read().layout().version());
    assertEquals(List.of(), log.read().badRecords());
  }
}
