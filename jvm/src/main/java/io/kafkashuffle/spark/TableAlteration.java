package io.kafkashuffle.spark;

import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.function.Function;
import org.apache.arrow.vector.types.DateUnit;
import org.apache.arrow.vector.types.FloatingPointPrecision;
import org.apache.arrow.vector.types.TimeUnit;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.FieldType;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.CharType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.sql.types.VarcharType;

/**
 * A change of a shuffle's columns, as ALTER TABLE on {@link ShuffleCatalog} asks for it: columns
 * renamed, dropped, widened (ALTER COLUMN ... TYPE, a type promotion) and added (nullable), made
 * into the shuffle's next layout version by the rules of {@code alter} in {@code
 * orchestration/shuffle/core/evolution.py}, with its messages (both are held to the {@code
 * alters} of {@code tests/vectors/schema_versions.json}), and recorded in the commit log as
 * {@code write_version} in {@code orchestration/shuffle/kafka/commitlog.py} records a version.
 *
 * <p>Changes apply in {@code alter}'s order whatever the statement's: renames, drops, widenings,
 * additions. Runs already written are not touched: each is read as the latest version by field
 * id. A shuffle's Kafka partitions grow with {@code alter_shuffle(topic, num_partitions=...)},
 * which adds them to the data topic before it records the version.
 */
final class TableAlteration {
  /** Who a version recorded by ALTER TABLE was made by (its record's {@code made_by}). */
  static final String MADE_BY = "ALTER TABLE";
  /** Tries at recording a version before giving up ({@code VERSION_ATTEMPTS}). */
  static final int ATTEMPTS = 5;

  /**
   * The columns no change may touch ({@code Pinned} in evolution.py): the key, the {@code
   * sort_by} columns and the event-time column, whose types decide key groups, order and
   * watermarks.
   */
  static final class Pinned {
    final List<String> key;
    final List<String> sortBy;
    final String eventTime; // null: none

    Pinned(List<String> key, List<String> sortBy, String eventTime) {
      this.key = List.copyOf(key);
      this.sortBy = List.copyOf(sortBy);
      this.eventTime = eventTime;
    }

    static Pinned of(Layout layout) {
      return new Pinned(layout.key, layout.sortBy, layout.eventTime);
    }

    /** Why {@code name} may not change, in {@code Pinned.why}'s words; null: it may. */
    String why(String name) {
      if (key.contains(name)) {
        return "a key column";
      }
      if (sortBy.contains(name)) {
        return "a sort_by column";
      }
      if (name != null && name.equals(eventTime)) {
        return "the event-time column";
      }
      return null;
    }
  }

  /** Old name to new, in the order given. */
  final Map<String, String> rename = new LinkedHashMap<>();

  final List<String> drop = new ArrayList<>();
  /** Column to its new type, in the order given. */
  final Map<String, ArrowType> widen = new LinkedHashMap<>();

  final List<Field> add = new ArrayList<>();

  boolean isEmpty() {
    return rename.isEmpty() && drop.isEmpty() && widen.isEmpty() && add.isEmpty();
  }

  /**
   * The alteration Spark's {@code changes} ask of a shuffle whose latest version is {@code
   * current}: added, renamed, dropped and retyped top-level columns. {@code DROP COLUMN IF
   * EXISTS} of a column the shuffle lacks is left out. Any other change (a table property, a
   * comment, a position, a default value, nullability, a nested field, a type a shuffle column
   * is not given here) is refused, each named, before anything is checked or written; {@code
   * where} (the catalog and shuffle) leads the message.
   */
  static TableAlteration of(String where, LayoutVersion current, TableChange... changes) {
    TableAlteration out = new TableAlteration();
    List<String> refused = new ArrayList<>();
    Set<String> columns = new HashSet<>();
    current.schema.getFields().forEach(f -> columns.add(f.getName()));
    for (TableChange c : changes) {
      if (c instanceof TableChange.ColumnChange cc && cc.fieldNames().length != 1) {
        refused.add(
            ReadPlanner.repr(String.join(".", cc.fieldNames()))
                + ": a field inside a column is not changed here (a shuffle's columns are"
                + " changed whole)");
        continue;
      }
      if (c instanceof TableChange.AddColumn a) {
        String name = a.fieldNames()[0];
        String why = null;
        if (a.position() != null) {
          why = "a position is not given here (columns are added at the end)";
        } else if (a.comment() != null) {
          why = "a shuffle keeps no column comments";
        } else if (hasDefault(a)) {
          why = "a default value is not kept (earlier runs read an added column as null)";
        }
        ArrowType t = arrowType(a.dataType());
        if (why == null && t == null) {
          why = notTaken(a.dataType());
        }
        if (why != null) {
          refused.add("ADD COLUMN " + ReadPlanner.repr(name) + ": " + why);
        } else {
          out.add.add(new Field(name, new FieldType(a.isNullable(), t, null), null));
        }
      } else if (c instanceof TableChange.RenameColumn r) {
        out.rename.put(r.fieldNames()[0], r.newName());
      } else if (c instanceof TableChange.DeleteColumn d) {
        String name = d.fieldNames()[0];
        if (!(Boolean.TRUE.equals(d.ifExists()) && !columns.contains(name))) {
          out.drop.add(name);
        }
      } else if (c instanceof TableChange.UpdateColumnType u) {
        String name = u.fieldNames()[0];
        ArrowType t = arrowType(u.newDataType());
        if (t == null) {
          refused.add(
              "ALTER COLUMN " + ReadPlanner.repr(name) + " TYPE: " + notTaken(u.newDataType()));
        } else {
          out.widen.put(name, t);
        }
      } else {
        refused.add(unsupported(c));
      }
    }
    if (!refused.isEmpty()) {
      throw ShuffleException.option(
          where
              + ": ALTER TABLE refused, nothing was changed: "
              + String.join("; ", refused)
              + ". ALTER TABLE of a shuffle adds nullable columns (ADD COLUMNS), renames (RENAME"
              + " COLUMN), drops (DROP COLUMN) and widens them (ALTER COLUMN ... TYPE)");
    }
    return out;
  }

  // AddColumn.defaultValue() returned a String before Spark 4.1 and a ColumnDefaultValue since:
  // looked up by name, so that one jar runs on each.
  private static boolean hasDefault(TableChange.AddColumn a) {
    try {
      return a.getClass().getMethod("defaultValue").invoke(a) != null;
    } catch (ReflectiveOperationException e) {
      return false;
    }
  }

  private static String unsupported(TableChange c) {
    String name =
        c instanceof TableChange.ColumnChange cc
            ? " of " + ReadPlanner.repr(cc.fieldNames()[0])
            : "";
    if (c instanceof TableChange.SetProperty || c instanceof TableChange.RemoveProperty) {
      return "table properties: a shuffle has none (its layout is its commit log's)";
    } else if (c instanceof TableChange.UpdateColumnNullability) {
      return "the nullability" + name + ": not changed by ALTER TABLE";
    } else if (c instanceof TableChange.UpdateColumnComment) {
      return "the comment" + name + ": a shuffle keeps no column comments";
    } else if (c instanceof TableChange.UpdateColumnPosition) {
      return "the position" + name + ": a shuffle's columns keep their order";
    } else if (c instanceof TableChange.UpdateColumnDefaultValue) {
      return "the default value"
          + name
          + ": not kept (earlier runs read an added column as null)";
    }
    return c.getClass().getSimpleName() + ": not a change ALTER TABLE makes of a shuffle";
  }

  private static String notTaken(DataType t) {
    if (t instanceof CharType || t instanceof VarcharType) {
      return t.catalogString() + " is not a column type here; give it as string";
    }
    if (t instanceof StringType) {
      return t.catalogString()
          + " is a string of a collation: a shuffle stores plain strings (UTF8_BINARY)";
    }
    return t.catalogString()
        + " is not a column type ALTER TABLE gives a shuffle (boolean, tinyint, smallint, int,"
        + " bigint, float, double, decimal(p,s), string, binary, date, timestamp, timestamp_ntz);"
        + " alter_shuffle takes any Arrow type";
  }

  /**
   * The Arrow type a shuffle stores a Spark column of type {@code t} as, as {@code
   * shuffle_schema} in {@code orchestration/shuffle/write.py} writes it (and {@code column_type}
   * in evolution.py reads its SQL name): a timestamp in microseconds, an instant's in UTC; null
   * for a type not given here (nested types, intervals, strings of another collation).
   */
  static ArrowType arrowType(DataType t) {
    if (t instanceof BooleanType) {
      return ArrowType.Bool.INSTANCE;
    } else if (t instanceof ByteType) {
      return new ArrowType.Int(8, true);
    } else if (t instanceof ShortType) {
      return new ArrowType.Int(16, true);
    } else if (t instanceof IntegerType) {
      return new ArrowType.Int(32, true);
    } else if (t instanceof LongType) {
      return new ArrowType.Int(64, true);
    } else if (t instanceof FloatType) {
      return new ArrowType.FloatingPoint(FloatingPointPrecision.SINGLE);
    } else if (t instanceof DoubleType) {
      return new ArrowType.FloatingPoint(FloatingPointPrecision.DOUBLE);
    } else if (t instanceof DecimalType d) {
      return new ArrowType.Decimal(d.precision(), d.scale(), 128);
    } else if (t instanceof CharType || t instanceof VarcharType) {
      return null;
    } else if (t instanceof StringType) {
      return t.equals(DataTypes.StringType) ? ArrowType.Utf8.INSTANCE : null;
    } else if (t instanceof BinaryType) {
      return ArrowType.Binary.INSTANCE;
    } else if (t instanceof DateType) {
      return new ArrowType.Date(DateUnit.DAY);
    } else if (t instanceof TimestampType) {
      return new ArrowType.Timestamp(TimeUnit.MICROSECOND, "UTC");
    } else if (t instanceof TimestampNTZType) {
      return new ArrowType.Timestamp(TimeUnit.MICROSECOND, null);
    }
    return null;
  }

  private static int index(List<Field> fields, String name) {
    for (int i = 0; i < fields.size(); i++) {
      if (fields.get(i).getName().equals(name)) {
        return i;
      }
    }
    return -1;
  }

  private static List<String> names(List<Field> fields) {
    List<String> out = new ArrayList<>();
    fields.forEach(f -> out.add(f.getName()));
    return out;
  }

  private static Field renamed(Field f, String name) {
    return new Field(name, f.getFieldType(), f.getChildren());
  }

  private static Field retyped(Field f, ArrowType t) {
    FieldType was = f.getFieldType();
    return new Field(
        f.getName(),
        new FieldType(was.isNullable(), t, was.getDictionary(), was.getMetadata()),
        f.getChildren());
  }

  /**
   * The version this alteration makes of {@code current} (numbered the one after it, not yet
   * stamped with who made it), as {@code alter} makes it: every refused column named at once,
   * in its words.
   *
   * @throws ShuffleException LAYOUT: a pinned column renamed, dropped or retyped; a column named
   *     that does not exist (or exists, for an addition or a new name); a type that is no
   *     promotion; a column added that is not nullable. OPTION: nothing to change.
   */
  LayoutVersion apply(String topic, LayoutVersion current, Pinned pinned) {
    String shuffle = "shuffle " + ReadPlanner.repr(topic);
    if (isEmpty()) {
      throw ShuffleException.option(shuffle + ": alter_shuffle was given nothing to change");
    }
    List<Field> fields = new ArrayList<>(current.schema.getFields());
    List<Long> ids = new ArrayList<>();
    for (long id : current.fieldIds) {
      ids.add(id);
    }
    long lastId = current.lastFieldId;
    List<String> changes = new ArrayList<>();
    List<String> refused = new ArrayList<>();
    for (Map.Entry<String, String> e : rename.entrySet()) {
      String old = e.getKey();
      String now = e.getValue();
      int i = index(fields, old);
      String why = pinned.why(old);
      if (i < 0) {
        refused.add(
            "rename: no column "
                + ReadPlanner.repr(old)
                + " (columns: "
                + ReadPlanner.repr(names(current.schema.getFields()))
                + ")");
      } else if (why != null) {
        refused.add(
            "rename: column " + ReadPlanner.repr(old) + " is " + why
                + ", whose name never changes");
      } else if (now == null || now.isEmpty() || now.startsWith("_")) {
        refused.add(
            "rename: " + ReadPlanner.repr(now) + " is not a column name (none starts with '_')");
      } else if (index(fields, now) >= 0 && !rename.containsKey(now)) {
        refused.add("rename: column " + ReadPlanner.repr(now) + " exists already");
      }
    }
    if (refused.isEmpty()) {
      // Every index is found before any column is renamed: names may swap.
      List<Integer> at = new ArrayList<>();
      List<String> to = new ArrayList<>();
      for (Map.Entry<String, String> e : rename.entrySet()) {
        at.add(index(fields, e.getKey()));
        to.add(e.getValue());
      }
      for (int k = 0; k < at.size(); k++) {
        int i = at.get(k);
        changes.add(
            "renamed column "
                + ReadPlanner.repr(fields.get(i).getName())
                + " to "
                + ReadPlanner.repr(to.get(k))
                + " (field id "
                + ids.get(i)
                + ")");
        fields.set(i, renamed(fields.get(i), to.get(k)));
      }
      List<String> names = names(fields);
      if (new HashSet<>(names).size() != names.size()) {
        refused.add("rename: the columns would be " + ReadPlanner.repr(names) + ", a name twice");
      }
    }
    for (String name : drop) {
      int i = index(fields, name);
      String why = pinned.why(name);
      if (i < 0) {
        refused.add("drop: no column " + ReadPlanner.repr(name));
      } else if (why != null) {
        refused.add(
            "drop: column " + ReadPlanner.repr(name) + " is " + why + ", which every run has");
      } else {
        changes.add("dropped column " + ReadPlanner.repr(name) + " (field id " + ids.get(i) + ")");
        fields.remove(i);
        ids.remove(i);
      }
    }
    if (fields.isEmpty() && refused.isEmpty()) {
      refused.add("drop: a shuffle keeps at least one column");
    }
    for (Map.Entry<String, ArrowType> e : widen.entrySet()) {
      String name = e.getKey();
      int i = index(fields, name);
      String why = pinned.why(name);
      if (i < 0) {
        refused.add("widen: no column " + ReadPlanner.repr(name));
      } else if (why != null) {
        refused.add(
            "widen: column " + ReadPlanner.repr(name) + " is " + why
                + ", whose type never changes");
      } else {
        ArrowType old = fields.get(i).getType();
        String up = SchemaResolution.promotionProblem(old, e.getValue());
        if (up != null) {
          refused.add("widen: column " + ReadPlanner.repr(name) + ": " + up);
        } else if (!old.equals(e.getValue())) {
          fields.set(i, retyped(fields.get(i), e.getValue()));
          changes.add(
              "widened column "
                  + ReadPlanner.repr(name)
                  + " "
                  + SchemaResolution.typeName(old)
                  + " -> "
                  + SchemaResolution.typeName(e.getValue()));
        }
      }
    }
    for (Field f : add) {
      String name = f.getName();
      if (name.startsWith("_") || name.isEmpty()) {
        refused.add(
            "add: " + ReadPlanner.repr(name) + " is not a column name (none starts with '_')");
      } else if (index(fields, name) >= 0) {
        refused.add("add: column " + ReadPlanner.repr(name) + " exists already");
      } else if (!f.isNullable()) {
        refused.add(
            "add: column "
                + ReadPlanner.repr(name)
                + " is not nullable; earlier runs have no value for it");
      } else {
        lastId++;
        fields.add(f);
        ids.add(lastId);
        changes.add(
            "added column "
                + ReadPlanner.repr(name)
                + " "
                + LayoutVersion.typeText(f)
                + " (field id "
                + lastId
                + ")");
      }
    }
    if (!refused.isEmpty()) {
      throw new ShuffleException(
          ShuffleException.Kind.LAYOUT,
          shuffle + ": alter_shuffle refused, nothing was changed: " + String.join("; ", refused));
    }
    long[] fieldIds = new long[ids.size()];
    for (int i = 0; i < fieldIds.length; i++) {
      fieldIds[i] = ids.get(i);
    }
    return LayoutVersion.made(
        current.version + 1,
        new Schema(fields, current.schema.getCustomMetadata()),
        fieldIds,
        lastId,
        current.numPartitions,
        changes,
        null,
        null,
        null);
  }

  /** Where {@link #record} writes change records and reads the commit log back. */
  interface ChangeLog {
    /** Appends {@code key} (a null value deletes it) to the commit log, acknowledged by all. */
    void write(String key, String value);

    /** The commit log read to its end. */
    CommitLog read();
  }

  /**
   * Records the version {@code make} makes of the latest layout ({@code layout} first), as
   * {@code write_version} does: its record {@code change/<n>/<id>} (n the latest version + 1)
   * is written, the log read again, and when the first record of version n there is another's,
   * ours is deleted and the change worked out again against the version that won ({@code make}
   * may then refuse), at most {@link #ATTEMPTS} times. So two changes at once are never both
   * half applied.
   *
   * @return the version recorded, and the commit log as read once it was.
   * @throws ShuffleException LAYOUT: {@code make} refused, or other changes took the version's
   *     number every time.
   */
  static Recorded record(
      String topic,
      ChangeLog log,
      Layout layout,
      Function<Layout, LayoutVersion> make,
      String madeBy) {
    for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
      String changeId = UUID.randomUUID().toString().replace("-", "");
      LayoutVersion v = make.apply(layout).stamped(layout.version() + 1, now(), madeBy, changeId);
      String key = CommitLog.CHANGE_PREFIX + v.version + "/" + changeId;
      log.write(key, v.recordJson());
      CommitLog read = log.read();
      if (key.equals(read.versionKey(v.version))) {
        return new Recorded(v, read);
      }
      log.write(key, null);
      layout = read.layout();
      if (layout == null) {
        throw new ShuffleException(
            ShuffleException.Kind.LAYOUT,
            "shuffle " + ReadPlanner.repr(topic) + " has no layout record any more");
      }
    }
    throw new ShuffleException(
        ShuffleException.Kind.LAYOUT,
        "shuffle "
            + ReadPlanner.repr(topic)
            + ": a new layout version could not be recorded: other changes took its number "
            + ATTEMPTS
            + " times running; try again");
  }

  /** A version {@link #record} recorded, and the commit log it read back with it. */
  record Recorded(LayoutVersion version, CommitLog log) {}

  /** Now as Python's {@code datetime.now(UTC).isoformat()} writes it. */
  static String now() {
    OffsetDateTime t = OffsetDateTime.now(ZoneOffset.UTC).truncatedTo(ChronoUnit.MICROS);
    int micros = t.getNano() / 1000;
    return t.format(DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss"))
        + (micros == 0 ? "" : String.format(".%06d", micros))
        + "+00:00";
  }
}
