package io.kafkashuffle.spark;

import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.DateUnit;
import org.apache.arrow.vector.types.FloatingPointPrecision;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.util.TransferPair;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.util.ArrowUtils;
import org.apache.spark.sql.vectorized.ColumnVector;

/**
 * How the frames of a run written under one layout version are read as the latest version, as
 * {@code resolve} and {@code resolved_column} in {@code orchestration/shuffle/core/evolution.py}
 * do it: each latest column is matched by its field id to the run's column of that id, whatever
 * its name was then. A column the run's version lacks (added since), or that its frame leaves
 * out (a run written with {@code schema_mode="merge"}), reads as nulls; a column the run has
 * narrower reads widened; a column dropped since is not read. Every read path of the JVM turns
 * frames into Spark columns through {@link #column}, so they all read a run alike.
 *
 * <p>A column whose frame vector already has the latest type is handed to Spark as it is, under
 * whatever name the frame gives it: a Spark column is addressed by position, never by name.
 */
final class SchemaResolution {
  /**
   * Where one latest column comes from: the run's column {@code name} (null: none, nulls), read
   * as {@code field}'s type.
   */
  static final class Source {
    final String name;
    final Field field;
    private DataType sparkType; // field's, made when first needed
    // The last all-null column handed out, and the last frame type checked (with whether it
    // is read as it is): a run's frames repeat both, batch after batch. Each is one immutable
    // object, so a read of it never sees half of an update.
    private NullColumnVector nulls;
    private Checked checked;

    Source(String name, Field field) {
      this.name = name;
      this.field = field;
    }

    DataType sparkType() {
      DataType t = sparkType;
      if (t == null) {
        t = ArrowUtils.fromArrowField(field);
        sparkType = t;
      }
      return t;
    }

    /** A column of {@code n} nulls of this column's type. */
    ColumnVector nulls(int n) {
      NullColumnVector v = nulls;
      if (v == null || v.rows() != n) {
        v = new NullColumnVector(sparkType(), n);
        nulls = v;
      }
      return v;
    }
  }

  /** A frame type a column was checked against: read as it is ({@code same}) or widened. */
  private record Checked(ArrowType got, boolean same) {}

  final LayoutVersion run;
  final LayoutVersion latest;
  /** The run's version names and types every column as the latest does. */
  final boolean identity;
  private final Map<String, Source> sources; // by latest column name, in the latest's order

  private SchemaResolution(LayoutVersion run, LayoutVersion latest) {
    this.run = run;
    this.latest = latest;
    this.identity = run.version == latest.version || run.sameColumns(latest);
    Map<String, Source> s = new LinkedHashMap<>();
    List<Field> fields = latest.schema.getFields();
    for (int i = 0; i < fields.size(); i++) {
      s.put(fields.get(i).getName(), new Source(run.nameOf(latest.fieldIds[i]), fields.get(i)));
    }
    this.sources = Collections.unmodifiableMap(s);
  }

  /** How a run of {@code run} is read as {@code latest}. */
  static SchemaResolution resolve(LayoutVersion run, LayoutVersion latest) {
    return new SchemaResolution(run, latest);
  }

  /** How a run of layout version {@code version} is read as {@code layout}'s latest. */
  static SchemaResolution of(Layout layout, long version) {
    return resolve(layout.layoutVersion(version), layout.latest());
  }

  /** Each latest column's source, in the latest version's column order. */
  Map<String, Source> sources() {
    return sources;
  }

  /** The frame columns to decode for the latest version's {@code wanted} columns. */
  Set<String> frameColumns(Iterable<String> wanted) {
    Set<String> out = new HashSet<>();
    for (String c : wanted) {
      Source s = sources.get(c);
      if (s != null && s.name != null) {
        out.add(s.name);
      }
    }
    return out;
  }

  /** The frame's name of latest column {@code name} (null: the run has no such column). */
  String frameName(String name) {
    Source s = sources.get(name);
    return s == null ? null : s.name;
  }

  /**
   * Latest column {@code name} of a frame's {@code root}, of its rows {@code selected} (null:
   * all, {@code n} of them): the frame's own vector when it has the latest type, else a widened
   * view of it ({@link WidenedColumnVector}), else nulls ({@link NullColumnVector}). Only a
   * selection of rows is copied (the frame's vector otherwise); the copy goes into {@code live},
   * released with the batch.
   */
  ColumnVector column(
      VectorSchemaRoot root,
      String name,
      int[] selected,
      int n,
      BufferAllocator allocator,
      List<AutoCloseable> live,
      String where) {
    Source s = sources.get(name);
    FieldVector v = s.name == null ? null : root.getVector(s.name);
    if (v == null) {
      return s.nulls(n);
    }
    ArrowType got = v.getField().getType();
    Checked c = s.checked;
    if (c == null || !c.got.equals(got)) {
      c = new Checked(got, check(s, name, got, where));
      s.checked = c;
    }
    FieldVector rows = rowsOf(v, selected, n, allocator, live);
    return c.same
        ? DirectColumnVector.of(rows)
        : WidenedColumnVector.of(rows, s.field.getType(), s.sparkType(), s.name);
  }

  /**
   * Whether a frame's column of type {@code got} is read as it is (true) or widened (false) as
   * {@code s}; refuses one that is neither.
   */
  private boolean check(Source s, String name, ArrowType got, String where) {
    ArrowType want = s.field.getType();
    if (PartitionFrames.sameValues(got, want)) {
      return true;
    }
    String problem = promotionProblem(got, want);
    if (problem != null) {
      throw ShuffleException.format(
          "DATA frame at "
              + where
              + " has column '"
              + s.name
              + "' of type "
              + typeName(got)
              + (s.name.equals(name) ? "" : " (column '" + name + "' now)")
              + ", the layout says "
              + typeName(want)
              + " (layout version "
              + latest.version
              + "): "
              + problem);
    }
    return false;
  }

  /** {@code v} itself (all rows), or a copy of its {@code selected} rows. */
  static FieldVector rowsOf(
      FieldVector v, int[] selected, int n, BufferAllocator allocator, List<AutoCloseable> live) {
    if (selected == null) {
      return v;
    }
    FieldVector copy = v.getField().createVector(allocator);
    live.add(copy);
    copy.setInitialCapacity(n);
    copy.allocateNew();
    TransferPair tp = v.makeTransferPair(copy);
    for (int j = 0; j < n; j++) {
      tp.copyValueSafe(selected[j], j);
    }
    copy.setValueCount(n);
    return copy;
  }

  // Digits left of the point a signed integer of each width needs in a decimal.
  private static int intDigits(int bits) {
    return switch (bits) {
      case 8 -> 3;
      case 16 -> 5;
      case 32 -> 10;
      default -> 19;
    };
  }

  private static boolean signedInt(ArrowType t) {
    return t instanceof ArrowType.Int i && i.getIsSigned();
  }

  private static boolean isDouble(ArrowType t) {
    return t instanceof ArrowType.FloatingPoint f
        && f.getPrecision() == FloatingPointPrecision.DOUBLE;
  }

  /**
   * Why a column of type {@code old} cannot be read as {@code to} (null: the same type, or a
   * promotion), as {@code promotion_problem} in evolution.py, with its messages: a wider signed
   * integer; float to double; an integer of at most 32 bits to double; a decimal gaining digits
   * on neither side of the point less; an integer to a decimal with room for every value; a date
   * to a timestamp without time zone. Every one is exact.
   */
  static String promotionProblem(ArrowType old, ArrowType to) {
    if (old.equals(to)) {
      return null;
    }
    String both = typeName(old) + " -> " + typeName(to);
    if (signedInt(old)) {
      int bits = ((ArrowType.Int) old).getBitWidth();
      if (signedInt(to)) {
        return ((ArrowType.Int) to).getBitWidth() > bits ? null : both + " narrows the integer";
      }
      if (isDouble(to) && bits != 64) {
        return null;
      }
      if (to instanceof ArrowType.Decimal d) {
        int left = d.getPrecision() - d.getScale();
        if (left >= intDigits(bits)) {
          return null;
        }
        return both
            + " leaves "
            + left
            + " digits left of the point; "
            + typeName(old)
            + " needs "
            + intDigits(bits);
      }
    }
    if (old instanceof ArrowType.FloatingPoint f
        && f.getPrecision() == FloatingPointPrecision.SINGLE
        && isDouble(to)) {
      return null;
    }
    if (old instanceof ArrowType.Decimal o && to instanceof ArrowType.Decimal d) {
      if (d.getScale() >= o.getScale()
          && d.getPrecision() - d.getScale() >= o.getPrecision() - o.getScale()) {
        return null;
      }
      return both
          + " loses digits: a decimal may only gain digits on each side of the point";
    }
    if (old instanceof ArrowType.Date date
        && date.getUnit() == DateUnit.DAY
        && to instanceof ArrowType.Timestamp t
        && t.getTimezone() == null) {
      return null;
    }
    return both + " is not a type promotion (see the Evolution guide's table)";
  }

  /** An Arrow type as pyarrow writes it ({@code str(pa.int64())}: "int64"), for messages. */
  static String typeName(ArrowType t) {
    if (t instanceof ArrowType.Int i) {
      return (i.getIsSigned() ? "int" : "uint") + i.getBitWidth();
    } else if (t instanceof ArrowType.FloatingPoint f) {
      return switch (f.getPrecision()) {
        case HALF -> "halffloat";
        case SINGLE -> "float";
        case DOUBLE -> "double";
      };
    } else if (t instanceof ArrowType.Decimal d) {
      return "decimal" + d.getBitWidth() + "(" + d.getPrecision() + ", " + d.getScale() + ")";
    } else if (t instanceof ArrowType.Timestamp ts) {
      return "timestamp["
          + unit(ts.getUnit())
          + (ts.getTimezone() == null ? "" : ", tz=" + ts.getTimezone())
          + "]";
    } else if (t instanceof ArrowType.Date d) {
      return d.getUnit() == DateUnit.DAY ? "date32[day]" : "date64[ms]";
    } else if (t instanceof ArrowType.Utf8) {
      return "string";
    } else if (t instanceof ArrowType.LargeUtf8) {
      return "large_string";
    } else if (t instanceof ArrowType.Binary) {
      return "binary";
    } else if (t instanceof ArrowType.LargeBinary) {
      return "large_binary";
    } else if (t instanceof ArrowType.Bool) {
      return "bool";
    } else if (t instanceof ArrowType.Null) {
      return "null";
    }
    return t.toString();
  }

  private static String unit(org.apache.arrow.vector.types.TimeUnit u) {
    return switch (u) {
      case SECOND -> "s";
      case MILLISECOND -> "ms";
      case MICROSECOND -> "us";
      case NANOSECOND -> "ns";
    };
  }

  /**
   * Refuses a plan (made elsewhere) whose runs name a layout version {@code layout} lacks,
   * before any task starts: such a run cannot be read.
   */
  static void requireVersions(Layout layout, List<SplitPlan> splits) {
    Set<Long> checked = new HashSet<>();
    for (SplitPlan s : splits) {
      for (SplitPlan.PartitionRead r : s.reads) {
        for (SplitPlan.Segment g : r.segments) {
          if (checked.add(g.layoutVersion)) {
            layout.layoutVersion(g.layoutVersion);
          }
        }
      }
    }
  }
}
