package io.kafkashuffle.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.math.BigInteger;
import java.nio.channels.Channels;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Iterator;
import java.util.List;
import org.apache.arrow.vector.ipc.ReadChannel;
import org.apache.arrow.vector.ipc.WriteChannel;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * One version of a shuffle's layout: its columns, a field id per column, and its partition
 * count. Version 1 is the layout record's (field ids 1, 2, ... in column order); each later one
 * is a {@code change/<n>/<id>} record of the commit log holding the version whole, as {@code
 * version_to_json} in {@code orchestration/shuffle/core/commitlog.py} writes it and {@code
 * LayoutVersion} in {@code core/evolution.py} describes it. Field ids are never given twice, so a
 * column matched by id is the same column whatever it was called when a run was written.
 */
final class LayoutVersion {
  final long version;
  final Schema schema;
  final long[] fieldIds;
  final long lastFieldId;
  final long numPartitions;
  final String changeId;
  // The version as its record holds it: what a layout handed to tasks carries along.
  final ObjectNode json;

  private LayoutVersion(
      long version,
      Schema schema,
      long[] fieldIds,
      long lastFieldId,
      long numPartitions,
      String changeId,
      ObjectNode json) {
    if (fieldIds.length != schema.getFields().size()) {
      throw new IllegalArgumentException(
          "ShuffleLayoutError: layout version "
              + version
              + ": "
              + fieldIds.length
              + " field ids for "
              + schema.getFields().size()
              + " columns");
    }
    this.version = version;
    this.schema = schema;
    this.fieldIds = fieldIds;
    this.lastFieldId = lastFieldId;
    this.numPartitions = numPartitions;
    this.changeId = changeId;
    this.json = json;
  }

  /** Version 1: the layout record's schema ({@code schemaB64} its base64 IPC form). */
  static LayoutVersion first(Schema schema, String schemaB64, JsonNode schemaText, int partitions) {
    int k = schema.getFields().size();
    long[] ids = new long[k];
    for (int i = 0; i < k; i++) {
      ids[i] = i + 1;
    }
    ObjectNode d = Layout.JSON.createObjectNode();
    d.put("type", "change");
    d.put("version", 1);
    d.putNull("change_id");
    d.putNull("made_at");
    d.putNull("made_by");
    d.put("num_partitions", partitions);
    d.put("schema", schemaB64);
    if (schemaText != null) {
      d.set("schema_text", schemaText.deepCopy());
    }
    ArrayNode fids = d.putArray("field_ids");
    for (long id : ids) {
      fids.add(id);
    }
    d.put("last_field_id", k);
    d.putArray("changes");
    return new LayoutVersion(1, schema, ids, k, partitions, null, d);
  }

  /**
   * A change record's value, read as {@code version_from_json} reads it: what it refuses is
   * refused here too (an {@link IllegalArgumentException} whose message names the Python error
   * it corresponds to), so both sides skip the same records.
   */
  static LayoutVersion parse(String text) {
    JsonNode d;
    try {
      d = Layout.JSON.readTree(text);
    } catch (IOException e) {
      throw new IllegalArgumentException("JSONDecodeError: " + e.getMessage(), e);
    }
    return of(d);
  }

  static LayoutVersion of(JsonNode d) {
    if (d == null || !d.isObject()) {
      throw new IllegalArgumentException(
          "AttributeError: a " + (d == null ? "missing" : d.getNodeType()) + " has no 'get'");
    }
    JsonNode type = d.get("type");
    if (type == null || !type.isTextual() || !type.asText().equals("change")) {
      throw new IllegalArgumentException(
          "ValueError: type is "
              + (type == null || type.isNull()
                  ? "None"
                  : type.isTextual() ? ReadPlanner.repr(type.asText()) : type.toString())
              + ", not 'change'");
    }
    long version = integer(required(d, "version"));
    Schema schema = schema(required(d, "schema"));
    List<Long> ids = new ArrayList<>();
    for (JsonNode i : iterate(required(d, "field_ids"))) {
      ids.add(integer(i));
    }
    long last = integer(required(d, "last_field_id"));
    long partitions = integer(required(d, "num_partitions"));
    JsonNode changes = d.get("changes");
    if (truthy(changes)) {
      iterate(changes);
    }
    long[] fieldIds = new long[ids.size()];
    for (int i = 0; i < fieldIds.length; i++) {
      fieldIds[i] = ids.get(i);
    }
    JsonNode cid = d.get("change_id");
    return new LayoutVersion(
        version,
        schema,
        fieldIds,
        last,
        partitions,
        cid == null || cid.isNull() ? null : cid.asText(),
        ((ObjectNode) d).deepCopy());
  }

  /**
   * A version a change makes, with its record's JSON as {@code version_to_json} writes it (keys
   * in the order its {@code sort_keys} gives them): the schema as base64 Arrow IPC, and each
   * column as "name: type" in pyarrow's words.
   */
  static LayoutVersion made(
      long version,
      Schema schema,
      long[] fieldIds,
      long lastFieldId,
      long numPartitions,
      List<String> changes,
      String madeAt,
      String madeBy,
      String changeId) {
    ObjectNode d = Layout.JSON.createObjectNode();
    text(d, "change_id", changeId);
    ArrayNode listed = d.putArray("changes");
    changes.forEach(listed::add);
    ArrayNode ids = d.putArray("field_ids");
    for (long id : fieldIds) {
      ids.add(id);
    }
    d.put("last_field_id", lastFieldId);
    text(d, "made_at", madeAt);
    text(d, "made_by", madeBy);
    d.put("num_partitions", numPartitions);
    d.put("schema", base64(schema));
    ArrayNode columns = d.putArray("schema_text");
    for (Field f : schema.getFields()) {
      columns.add(f.getName() + ": " + typeText(f));
    }
    d.put("type", "change");
    d.put("version", version);
    return new LayoutVersion(
        version, schema, fieldIds.clone(), lastFieldId, numPartitions, changeId, d);
  }

  /** This version recorded as version {@code version}: when, by whom, under which change id. */
  LayoutVersion stamped(long version, String madeAt, String madeBy, String changeId) {
    return made(
        version, schema, fieldIds, lastFieldId, numPartitions, changes(), madeAt, madeBy, changeId);
  }

  /** What this version changed from the one before, in words (empty: version 1). */
  List<String> changes() {
    List<String> out = new ArrayList<>();
    JsonNode listed = json.get("changes");
    if (listed != null && listed.isArray()) {
      listed.forEach(c -> out.add(c.asText()));
    }
    return out;
  }

  /** The JSON of this version's change record. */
  String recordJson() {
    return json.toString();
  }

  private static void text(ObjectNode d, String field, String value) {
    if (value == null) {
      d.putNull(field);
    } else {
      d.put(field, value);
    }
  }

  /** {@code schema} as the base64 Arrow IPC message a layout record holds. */
  static String base64(Schema schema) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    try {
      MessageSerializer.serialize(new WriteChannel(Channels.newChannel(out)), schema);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return Base64.getEncoder().encodeToString(out.toByteArray());
  }

  /** A column's type as pyarrow writes it ({@code str(field.type)}), nested types included. */
  static String typeText(Field f) {
    ArrowType t = f.getType();
    List<Field> children = f.getChildren();
    if (t instanceof ArrowType.List || t instanceof ArrowType.LargeList) {
      String kind = t instanceof ArrowType.List ? "list" : "large_list";
      return kind + "<" + childText(children.get(0)) + ">";
    } else if (t instanceof ArrowType.Struct) {
      List<String> parts = new ArrayList<>();
      children.forEach(c -> parts.add(childText(c)));
      return "struct<" + String.join(", ", parts) + ">";
    } else if (t instanceof ArrowType.Map && children.size() == 1) {
      List<Field> entry = children.get(0).getChildren();
      if (entry.size() == 2) {
        return "map<" + typeText(entry.get(0)) + ", " + typeText(entry.get(1)) + ">";
      }
    }
    return SchemaResolution.typeName(t);
  }

  private static String childText(Field c) {
    return c.getName() + ": " + typeText(c) + (c.isNullable() ? "" : " not null");
  }

  /** The name of the column of {@code fieldId} in this version; null: none. */
  String nameOf(long fieldId) {
    for (int i = 0; i < fieldIds.length; i++) {
      if (fieldIds[i] == fieldId) {
        return schema.getFields().get(i).getName();
      }
    }
    return null;
  }

  /** The same columns (names, types, nullability; metadata aside) with the same field ids. */
  boolean sameColumns(LayoutVersion other) {
    if (!java.util.Arrays.equals(fieldIds, other.fieldIds)) {
      return false;
    }
    List<Field> a = schema.getFields();
    List<Field> b = other.schema.getFields();
    if (a.size() != b.size()) {
      return false;
    }
    for (int i = 0; i < a.size(); i++) {
      if (!sameField(a.get(i), b.get(i))) {
        return false;
      }
    }
    return true;
  }

  private static boolean sameField(Field a, Field b) {
    if (!a.getName().equals(b.getName())
        || a.isNullable() != b.isNullable()
        || !a.getType().equals(b.getType())
        || a.getChildren().size() != b.getChildren().size()) {
      return false;
    }
    for (int i = 0; i < a.getChildren().size(); i++) {
      if (!sameField(a.getChildren().get(i), b.getChildren().get(i))) {
        return false;
      }
    }
    return true;
  }

  private static JsonNode required(JsonNode d, String field) {
    JsonNode n = d.get(field);
    if (n == null) {
      throw new IllegalArgumentException("KeyError: '" + field + "'");
    }
    return n;
  }

  /** A base64 Arrow IPC schema, as the layout record's {@code schema} holds one. */
  static Schema schema(JsonNode n) {
    if (!n.isTextual()) {
      throw new IllegalArgumentException(
          "TypeError: the schema is a JSON " + n.getNodeType() + ", not base64 text");
    }
    try {
      byte[] bytes = Base64.getDecoder().decode(n.asText());
      return MessageSerializer.deserializeSchema(
          new ReadChannel(Channels.newChannel(new ByteArrayInputStream(bytes))));
    } catch (IOException | RuntimeException e) {
      throw new IllegalArgumentException(
          "ArrowInvalid: the schema is not a base64 Arrow IPC schema: " + e, e);
    }
  }

  /**
   * A JSON value as Python's {@code int()} takes it: an integer, a float truncated, a boolean
   * (0, 1), or a string of an integer; anything else is refused.
   */
  static long integer(JsonNode n) {
    if (n.isIntegralNumber()) {
      if (n.canConvertToLong()) {
        return n.longValue();
      }
      throw new IllegalArgumentException("OverflowError: " + n + " is out of range");
    }
    if (n.isNumber()) {
      double v = n.doubleValue();
      if (Double.isNaN(v) || Double.isInfinite(v)) {
        throw new IllegalArgumentException("ValueError: cannot convert " + n + " to integer");
      }
      return (long) v;
    }
    if (n.isBoolean()) {
      return n.booleanValue() ? 1 : 0;
    }
    if (n.isTextual()) {
      String s = n.asText().strip();
      if (s.matches("[+-]?[0-9]+(_[0-9]+)*")) {
        try {
          return new BigInteger(s.replace("_", "")).longValueExact();
        } catch (ArithmeticException e) {
          throw new IllegalArgumentException("OverflowError: " + n + " is out of range");
        }
      }
      throw new IllegalArgumentException(
          "ValueError: invalid literal for int() with base 10: " + ReadPlanner.repr(n.asText()));
    }
    throw new IllegalArgumentException(
        "TypeError: int() argument must be a string, a bytes-like object or a real number, not "
            + "a JSON "
            + n.getNodeType());
  }

  /** The items Python iterates a JSON value by: a list's, a string's characters, an object's keys. */
  private static List<JsonNode> iterate(JsonNode n) {
    List<JsonNode> out = new ArrayList<>();
    if (n.isArray()) {
      n.forEach(out::add);
    } else if (n.isTextual()) {
      n.asText()
          .codePoints()
          .forEach(c -> out.add(Layout.JSON.getNodeFactory().textNode(Character.toString(c))));
    } else if (n.isObject()) {
      for (Iterator<String> it = n.fieldNames(); it.hasNext(); ) {
        out.add(Layout.JSON.getNodeFactory().textNode(it.next()));
      }
    } else {
      throw new IllegalArgumentException("TypeError: a JSON " + n.getNodeType() + " is not iterable");
    }
    return out;
  }

  private static boolean truthy(JsonNode n) {
    if (n == null || n.isNull()) {
      return false;
    }
    if (n.isBoolean()) {
      return n.booleanValue();
    }
    if (n.isNumber()) {
      return n.doubleValue() != 0;
    }
    if (n.isTextual()) {
      return !n.asText().isEmpty();
    }
    return n.size() > 0;
  }
}
