package io.kafkashuffle.spark;

import java.io.Serializable;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/** What every task of one read needs, shipped to executors with the reader factory. */
final class ReadSpec implements Serializable {
  private static final long serialVersionUID = 1L;

  static final List<String> METADATA_COLUMNS =
      List.of("_partition", "_key_group", "_run_id", "_offset", "_window");

  final String topic;
  final HashMap<String, String> kafka; // librdkafka-style settings
  final String layoutJson;
  final String[] columns; // the output columns, in order (layout columns, then metadata)
  final Long eventTimeStart; // epoch microseconds, inclusive
  final Long eventTimeEnd; // exclusive
  private transient Layout layout;

  ReadSpec(
      String topic,
      Map<String, String> kafka,
      Layout layout,
      String[] columns,
      Long eventTimeStart,
      Long eventTimeEnd) {
    this.topic = topic;
    this.kafka = new HashMap<>(kafka);
    this.layoutJson = layout.json;
    this.layout = layout;
    this.columns = columns;
    this.eventTimeStart = eventTimeStart;
    this.eventTimeEnd = eventTimeEnd;
  }

  Layout layout() {
    if (layout == null) {
      layout = Layout.parse(layoutJson, "shuffle " + topic + " layout");
    }
    return layout;
  }

  boolean filtersEventTime() {
    return eventTimeStart != null || eventTimeEnd != null;
  }
}
