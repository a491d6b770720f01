"""Every data source's options, declared once: name, type, default, whether batch reads,
streaming reads or both take it, and what it does. Pure Python.

The parsers (:class:`~orchestration.shuffle.core.options.Options`) take defaults and bounds
from here and refuse any option not declared: a misspelled one names the nearest declared
one, an option of Spark's own ``kafka`` source that a source does not implement says what to
use instead, an option renamed says its new name, and an option of batch reads given to a
stream (or the other way round) says so. ``kafka.*`` options are Kafka client settings,
passed through unchecked. The JVM sources check the same tables (``OptionTable.java`` is
written from them by ``python -m devstack.optiondocs --write``; the docs' option tables are
written from them when the site is built).

Example::

    SHUFFLE.check({"topic": "t", "window": "2024-03-09"}, BATCH)
    # ShuffleOptionError: kafka-shuffle: unknown option 'window', did you mean 'windows'?
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from orchestration.shuffle.errors import ShuffleOptionError

BATCH = "batch"
STREAM = "stream"
MODES = (BATCH, STREAM)

# Options that start with this prefix are Kafka client settings, passed on without it.
KAFKA_OPTION_PREFIX = "kafka."

# Value types (the parsers check that an option is read as its declared type).
STRING = "string"
INTEGER = "integer"
BOOLEAN = "boolean"
CHOICE = "choice"
JSON_LIST = "JSON list"
JSON_OBJECT = "JSON object"
MILLIS = "epoch ms"
PARALLELISM = "integer or auto"
POSITION = "position"  # a keyword or a JSON object, as Spark's startingOffsets


@dataclass(frozen=True)
class OptionDef:
    """One option of a data source.

    Attributes:
        name: The option's name (matched case-insensitively, as Spark does).
        type: One of the value types above.
        description: What it does (rendered into the docs' option tables).
        default: The value when the option is not given (None: not set).
        stream_default: The default of streaming reads when it differs from ``default``.
        modes: The reads that take it: ``("batch",)``, ``("stream",)`` or both.
        choices: The values a ``choice`` takes (matched case-insensitively).
        minimum: The smallest value an ``integer`` takes.
        required: The read fails without it.
        set_by: The function that sets it, for an option the library writes for itself.
    """

    name: str
    type: str
    description: str
    default: str | None = None
    stream_default: str | None = None
    modes: tuple[str, ...] = MODES
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    required: bool = False
    set_by: str | None = None

    def default_for(self, mode: str | None) -> str | None:
        if mode == STREAM and self.stream_default is not None:
            return self.stream_default
        return self.default


@dataclass(frozen=True)
class Refused:
    """An option a source refuses with a reason: one of Spark's ``kafka`` source that it does
    not implement (``spark_kafka``), or one Spark itself adds (``path``)."""

    name: str
    reason: str
    spark_kafka: bool = True


@dataclass(frozen=True)
class Renamed:
    """An option that was renamed: refused, naming the new one."""

    name: str
    new: str
    reason: str


@dataclass(frozen=True)
class OptionTable:
    """The options of one data source; :meth:`check` refuses what it does not declare.

    Example::

        RECORDS.check({"subscribe": "t", "kafka.bootstrap.servers": "h:9092"}, STREAM)
    """

    source: str
    options: tuple[OptionDef, ...]
    refused: tuple[Refused, ...] = ()
    renamed: tuple[Renamed, ...] = ()
    modes: tuple[str, ...] = MODES
    summary: str = ""

    def get(self, name: str) -> OptionDef:
        """The declaration of ``name``; a KeyError for an undeclared one (a bug, not a
        user's error: the parsers read declared options only)."""
        lowered = name.lower()
        for d in self.options:
            if d.name.lower() == lowered:
                return d
        raise KeyError(f"{self.source}: option {name!r} is not declared in its option table")

    def problems(self, names: Iterable[str], mode: str | None = None) -> list[str]:
        """What is wrong with options ``names`` for a read in ``mode`` (None: not known
        yet), one sentence each, in the order of the names lower-cased."""
        declared = {d.name.lower(): d for d in self.options}
        refused = {r.name.lower(): r for r in self.refused}
        renamed = {r.name.lower(): r for r in self.renamed}
        out = []
        for given in sorted({str(n) for n in names}, key=lambda n: (n.lower(), n)):
            lowered = given.lower()
            if lowered.startswith(KAFKA_OPTION_PREFIX):
                continue
            if lowered in declared:
                d = declared[lowered]
                if mode is not None and mode not in d.modes:
                    out.append(mode_problem(d.name, d.modes, mode))
            elif lowered in renamed:
                new = renamed[lowered]
                out.append(f"option {given!r} was renamed {new.new!r} ({new.reason})")
            elif lowered in refused:
                r = refused[lowered]
                if r.spark_kafka:
                    out.append(
                        f"option {r.name!r} of Spark's kafka source is not supported: {r.reason}"
                    )
                else:
                    out.append(f"option {r.name!r} is not supported: {r.reason}")
            else:
                out.append(unknown_problem(given, [d.name for d in self.options], self.listed()))
        return out

    def check(self, names: Iterable[str], mode: str | None = None) -> None:
        """Raises a ShuffleOptionError naming every option of ``names`` that this source
        does not take (in ``mode``, when given)."""
        found = self.problems(names, mode)
        if found:
            raise ShuffleOptionError(f"{self.source}: " + "; ".join(found))

    def listed(self) -> list[str]:
        """The names a user sets (not those the library sets for itself)."""
        return [d.name for d in self.options if d.set_by is None]


def mode_problem(name: str, modes: tuple[str, ...], mode: str) -> str:
    only = "batch reads" if modes == (BATCH,) else "streaming reads"
    this = "a streaming read" if mode == STREAM else "a batch read"
    return f"option {name!r} applies to {only} only, not to {this}"


def unknown_problem(given: str, candidates: list[str], listed: list[str]) -> str:
    near = nearest(given, candidates)
    if near is not None:
        return f"unknown option {given!r}, did you mean {near!r}?"
    if "." in given:
        # librdkafka names have dots: a client setting given without its prefix.
        return (
            f"unknown option {given!r}, a Kafka client setting is given as "
            f"'{KAFKA_OPTION_PREFIX}{given}'"
        )
    return f"unknown option {given!r} (options: {', '.join(listed)})"


def distance(a: str, b: str) -> int:
    """Edits (insert, delete, replace, swap two adjacent letters) between ``a`` and ``b``,
    case-insensitively. The JVM sources compute the same (``OptionCheck.java``), so both
    paths suggest the same name."""
    a, b = a.lower(), b.lower()
    rows = [list(range(len(b) + 1))]
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            row[j] = min(rows[i - 1][j] + 1, row[j - 1] + 1, rows[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], rows[i - 2][j - 2] + 1)
        rows.append(row)
    return rows[len(a)][len(b)]


def nearest(given: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to ``given`` if it is within a third of its length in edits
    (at least one), the first such in order on a tie; None if none is that close."""
    best: tuple[int, str] | None = None
    for c in candidates:
        d = distance(given, c)
        if d <= max(1, len(c) // 3) and (best is None or d < best[0]):
            best = (d, c)
    return None if best is None else best[1]


def check_keywords(owner: str, given: Iterable[str], allowed: Iterable[str]) -> None:
    """Refuses keyword arguments a function does not take (its ``**kwargs`` checked at run
    time), naming the nearest it does."""
    names = list(allowed)
    bad = [k for k in given if k not in names]
    if bad:
        parts = []
        for k in bad:
            near = nearest(k, names)
            hint = f", did you mean {near!r}?" if near else f" (it takes: {', '.join(names)})"
            parts.append(f"unexpected keyword argument {k!r}{hint}")
        raise ShuffleOptionError(f"{owner}: " + "; ".join(parts))


# --- what several tables share ---------------------------------------------------------

# Spark adds these when load() is given paths.
_TO_SHUFFLE = "load() takes no path (name the shuffle with option 'topic')"
_TO_TOPICS = "load() takes no path (name the topics with option 'subscribe')"
SHUFFLE_PATHS = (
    Refused("path", _TO_SHUFFLE, spark_kafka=False),
    Refused("paths", _TO_SHUFFLE, spark_kafka=False),
)
RECORDS_PATHS = (
    Refused("path", _TO_TOPICS, spark_kafka=False),
    Refused("paths", _TO_TOPICS, spark_kafka=False),
)

_CLIENT_TIMEOUTS = "Kafka requests use the client's own timeouts and retries (kafka.* settings)"

# Spark's kafka source options that no source here implements.
_SPARK_CLIENT = (
    Refused("fetchOffset.numRetries", _CLIENT_TIMEOUTS),
    Refused("fetchOffset.retryIntervalMs", _CLIENT_TIMEOUTS),
    Refused("kafkaConsumer.pollTimeoutMs", _CLIENT_TIMEOUTS),
)

_ONE_SHUFFLE = "a read names one shuffle, with option 'topic'"
_SHUFFLE_RUNS = (
    "a batch read reads the runs committed when it is planned: choose them with 'windows' or 'runs'"
)
_SHUFFLE_TRIGGER = (
    "a micro-batch admits whole runs: bound it with 'maxRunsPerTrigger' or 'maxRowsPerTrigger'"
)
SPARK_KAFKA_ON_SHUFFLE = (
    Refused("subscribe", _ONE_SHUFFLE),
    Refused("subscribePattern", _ONE_SHUFFLE),
    Refused("assign", _ONE_SHUFFLE),
    Refused("startingOffsetsByTimestamp", "use 'startingTimestamp' (epoch ms, every partition)"),
    Refused(
        "startingOffsetsByTimestampStrategy",
        "a stream started at 'startingTimestamp' reads the runs committed from then on, if any",
    ),
    Refused("endingOffsets", _SHUFFLE_RUNS),
    Refused("endingTimestamp", _SHUFFLE_RUNS),
    Refused("endingOffsetsByTimestamp", _SHUFFLE_RUNS),
    Refused("maxOffsetsPerTrigger", _SHUFFLE_TRIGGER),
    Refused("minOffsetsPerTrigger", _SHUFFLE_TRIGGER),
    Refused("maxTriggerDelay", _SHUFFLE_TRIGGER),
    Refused("minPartitions", "use 'parallelism'"),
    Refused("maxRecordsPerPartition", "use 'parallelism'"),
    Refused(
        "failOnDataLoss",
        "a shuffle read always fails when a committed frame is missing (END frame counts)",
    ),
    Refused("includeHeaders", "shuffle frames carry no headers"),
    Refused("groupIdPrefix", "a shuffle read joins no consumer group"),
    *_SPARK_CLIENT,
)

_PARALLELISM = (
    "Spark partitions. Not given: one per Kafka partition (split *i* is Kafka partition *i*); "
    "fewer merge whole contiguous partitions, more split a partition's key groups (never a "
    "key group); `auto`: one per partition, but a small read merges partitions so that each "
    "task reads about 500k rows or more."
)
_WINDOWS = (
    "Only these windows (the latest committed run of each); each must have a committed run. "
    'JSON list, e.g. `["2013-01-01"]`.'
)
_RUNS = "Only these runs, superseded ones too; each must exist. JSON list of run ids."
_START_MS = (
    "Only rows whose event time is at or after this instant, in epoch milliseconds (as "
    "Spark's `startingTimestamp`; up to three decimals for microseconds). The shuffle must "
    "have an event-time column."
)
_END_MS = "Only rows whose event time is before this instant, in epoch milliseconds."
_WITH_METADATA = "Add the columns `_partition`, `_key_group`, `_run_id`, `_offset`, `_window`."

# Renamed with the move to one unit, milliseconds since the epoch, for every time a user
# sets (as Spark's startingTimestamp): the old options took microseconds.
EVENT_TIME_RENAMES = (
    Renamed(
        "event_time_start",
        "event_time_start_ms",
        "epoch milliseconds, as Spark's startingTimestamp; the old option took microseconds",
    ),
    Renamed(
        "event_time_end",
        "event_time_end_ms",
        "epoch milliseconds, as Spark's startingTimestamp; the old option took microseconds",
    ),
)

_STREAM_OPTIONS = (
    OptionDef(
        "startingOffsets",
        CHOICE,
        "Where a new query starts: `earliest` (every visible committed run; runs superseded "
        "before the query started are skipped) or `latest` (runs committed after it starts). "
        "A query restarted from its checkpoint goes on from there.",
        default="earliest",
        modes=(STREAM,),
        choices=("earliest", "latest"),
    ),
    OptionDef(
        "startingTimestamp",
        INTEGER,
        "Runs committed at or after this instant, in epoch milliseconds (wins over "
        "`startingOffsets`).",
        modes=(STREAM,),
        minimum=0,
    ),
    OptionDef(
        "maxRunsPerTrigger",
        INTEGER,
        "Whole runs per micro-batch (at least one).",
        modes=(STREAM,),
        minimum=1,
    ),
    OptionDef(
        "maxRowsPerTrigger",
        INTEGER,
        "Rows per micro-batch, in whole runs (at least one run, however large).",
        modes=(STREAM,),
        minimum=1,
    ),
)


_SELECTION = (
    OptionDef("windows", JSON_LIST, _WINDOWS, modes=(BATCH,)),
    OptionDef("runs", JSON_LIST, _RUNS, modes=(BATCH,)),
    OptionDef("event_time_start_ms", MILLIS, _START_MS, modes=(BATCH,)),
    OptionDef("event_time_end_ms", MILLIS, _END_MS, modes=(BATCH,)),
    OptionDef("parallelism", PARALLELISM, _PARALLELISM),
)


# --- the tables -----------------------------------------------------------------------

SHUFFLE = OptionTable(
    "kafka-shuffle",
    (
        OptionDef("topic", STRING, "The shuffle's data topic.", required=True),
        *_SELECTION,
        OptionDef("with_metadata", BOOLEAN, _WITH_METADATA, default="false"),
        *_STREAM_OPTIONS,
        OptionDef(
            "layout",
            STRING,
            "The shuffle's layout (JSON), with `plan`: a read planned on the driver.",
            modes=(BATCH,),
            set_by="plan_shuffle_read",
        ),
        OptionDef(
            "plan",
            JSON_LIST,
            "The splits planned on the driver (one JSON object per Spark partition).",
            modes=(BATCH,),
            set_by="plan_shuffle_read",
        ),
        OptionDef(
            "aggregate",
            JSON_OBJECT,
            'Per-key aggregates instead of rows: `{"name": ["column", "function"]}`.',
            modes=(BATCH,),
            set_by="aggregate_shuffle",
        ),
        OptionDef(
            "per_key",
            STRING,
            "A per-key function (pickled, base64) run inside the reader.",
            modes=(BATCH,),
            set_by="apply_per_key",
        ),
        OptionDef(
            "per_key_schema",
            STRING,
            "The per-key function's output schema (Arrow, base64).",
            modes=(BATCH,),
            set_by="apply_per_key",
        ),
        # About 120 MiB of Arrow at 60 bytes a row, and as much again once in pandas.
        OptionDef(
            "pass_rows",
            INTEGER,
            "Rows one pass of per-key work holds (a key group is never split).",
            default="2000000",
            modes=(BATCH,),
            minimum=1,
            set_by="apply_per_key",
        ),
    ),
    refused=(
        *SPARK_KAFKA_ON_SHUFFLE,
        Refused(
            "small_read_rows",
            "it is the JVM read path's (kafka-shuffle-jvm); here parallelism 'auto' reads a "
            "small read in few tasks",
            spark_kafka=False,
        ),
        *SHUFFLE_PATHS,
    ),
    renamed=EVENT_TIME_RENAMES,
    summary=(
        '`spark.read.format("kafka-shuffle")` and `spark.readStream.format("kafka-shuffle")`'
        " (the Python source); `read_shuffle`, `aggregate_shuffle`, `apply_per_key` and "
        "`read_shuffle_stream` set these for you."
    ),
)

_MS = "epoch milliseconds"
_RECORDS_TRIGGER = "a micro-batch reads what there is, up to 'maxOffsetsPerTrigger'"
_OFFSETS_JSON = '`{"topic": {"0": 23, "1": -2}}` (-2: earliest, -1: latest)'

RECORDS = OptionTable(
    "kafka-records",
    (
        OptionDef(
            "subscribe",
            STRING,
            "Comma-separated topics. Give exactly one of `subscribe`, `subscribePattern`, "
            "`assign`, `topic`.",
        ),
        OptionDef(
            "subscribePattern",
            STRING,
            "A regular expression; a running query picks up topics that start matching it.",
        ),
        OptionDef("assign", JSON_OBJECT, 'Partitions, `{"topicA": [0, 1]}`.'),
        OptionDef("topic", STRING, "The same as `subscribe`."),
        OptionDef(
            "startingOffsets",
            POSITION,
            "`earliest`, `latest`, `committed` (the group `kafka.group.id`'s offsets, "
            f"`offsetResetStrategy` where it has none) or {_OFFSETS_JSON}.",
            default="earliest",
            stream_default="latest",
        ),
        OptionDef(
            "startingTimestamp",
            INTEGER,
            f"Start at the first record at or after this instant ({_MS}), in every partition.",
            minimum=0,
        ),
        OptionDef(
            "startingOffsetsByTimestamp",
            JSON_OBJECT,
            f'Per partition: `{{"topic": {{"0": <{_MS}>}}}}`.',
        ),
        OptionDef(
            "startingOffsetsByTimestampStrategy",
            CHOICE,
            "Where no record is at or after a starting timestamp: `latest` (start at the end) "
            "or `error` (fail, naming the partitions; Spark's default).",
            default="latest",
            choices=("latest", "error"),
        ),
        OptionDef(
            "endingOffsets",
            POSITION,
            f"`latest` or {_OFFSETS_JSON.replace('-2: earliest, ', '')}.",
            default="latest",
            modes=(BATCH,),
        ),
        OptionDef(
            "endingTimestamp",
            INTEGER,
            f"End before the first record at or after this instant ({_MS}).",
            modes=(BATCH,),
            minimum=0,
        ),
        OptionDef(
            "endingOffsetsByTimestamp",
            JSON_OBJECT,
            f'Per partition: `{{"topic": {{"0": <{_MS}>}}}}`.',
            modes=(BATCH,),
        ),
        OptionDef(
            "maxOffsetsPerTrigger",
            INTEGER,
            "Records per micro-batch, shared among partitions by how far behind each is.",
            modes=(STREAM,),
            minimum=1,
        ),
        OptionDef(
            "minPartitions",
            INTEGER,
            "At least this many Spark partitions: the largest ranges are split.",
            minimum=1,
        ),
        OptionDef(
            "maxRecordsPerPartition",
            INTEGER,
            "At most this many records per Spark partition: larger ranges are split "
            "(before `minPartitions` applies).",
            minimum=1,
        ),
        OptionDef(
            "failOnDataLoss",
            BOOLEAN,
            "Offsets removed (retention, `delete_records`) before they were read fail the "
            "read, naming topic, partition and offsets; `false`: skipped, counted and logged.",
            default="true",
        ),
        OptionDef("includeHeaders", BOOLEAN, "Add the column `headers`.", default="false"),
        OptionDef(
            "commitOffsets",
            BOOLEAN,
            "Commit each completed micro-batch's end offsets (and a batch read's) to the group "
            "`kafka.group.id`, for monitoring.",
            default="false",
        ),
        OptionDef(
            "offsetResetStrategy",
            CHOICE,
            "`startingOffsets=committed` where the group has no offset: `earliest`, `latest` "
            "or `none` (an error naming the partitions).",
            default="earliest",
            choices=("earliest", "latest", "none"),
        ),
    ),
    refused=(
        Refused("minOffsetsPerTrigger", _RECORDS_TRIGGER),
        Refused("maxTriggerDelay", _RECORDS_TRIGGER),
        Refused(
            "groupIdPrefix",
            "reads assign partitions and join no group ('kafka.group.id' names the group whose "
            "offsets startingOffsets=committed reads and commitOffsets writes)",
        ),
        *_SPARK_CLIENT,
        *RECORDS_PATHS,
    ),
    summary=(
        '`spark.read.format("kafka-records")` and `spark.readStream.format("kafka-records")`'
        "; `read_records(spark, options)` takes the same options (batch)."
    ),
)

_PYTHON_ONLY = (
    "it runs in the Python reader: use the kafka-shuffle source (aggregate_shuffle, apply_per_key)"
)

_SMALL_READ_ROWS = (
    "A read of at most this many rows (by its commit records), planned one split per Kafka "
    "partition (no `parallelism` given, or `auto`), is read as one split that Spark still "
    "sees as keyed (by `partition_of_<max_parallelism>_1`): one task and one fetch of every "
    "partition, and still no Exchange for `groupBy`, windows or joins by the key. `0`: never. "
    "The session's default is `spark.sql.catalog.<catalog>.small_read_rows`."
)

SHUFFLE_JVM = OptionTable(
    "kafka-shuffle-jvm",
    (
        OptionDef(
            "topic",
            STRING,
            'The shuffle\'s data topic (`format("kafka-shuffle-jvm")`; a catalog table is '
            "named by the table).",
            modes=(BATCH,),
        ),
        OptionDef(
            "catalog",
            STRING,
            'The catalog that `format("kafka-shuffle-jvm")` reads through.',
            default="shuffle",
            modes=(BATCH,),
        ),
        OptionDef(
            "with_metadata",
            BOOLEAN,
            _WITH_METADATA + " A catalog table has them in its namespace `with_metadata` instead.",
            default="false",
            modes=(BATCH,),
        ),
        *_SELECTION,
        OptionDef(
            "small_read_rows",
            INTEGER,
            _SMALL_READ_ROWS,
            # Up to here one task beats one per partition on the 2-core machine, the keyed
            # work after the read included (docs/performance.md, "Small windows").
            default="10000",
            modes=(BATCH,),
            minimum=0,
        ),
        *_STREAM_OPTIONS,
        OptionDef(
            "layout",
            STRING,
            "The shuffle's layout (JSON), with `plan`: a read planned by Python.",
            modes=(BATCH,),
            set_by="read_shuffle",
        ),
        OptionDef(
            "plan",
            JSON_LIST,
            "The splits planned by Python (one JSON object per Spark partition).",
            modes=(BATCH,),
            set_by="read_shuffle",
        ),
    ),
    refused=(
        *SPARK_KAFKA_ON_SHUFFLE,
        Refused("aggregate", _PYTHON_ONLY, spark_kafka=False),
        Refused("per_key", _PYTHON_ONLY, spark_kafka=False),
        Refused("per_key_schema", _PYTHON_ONLY, spark_kafka=False),
        Refused("pass_rows", _PYTHON_ONLY, spark_kafka=False),
        *SHUFFLE_PATHS,
    ),
    renamed=EVENT_TIME_RENAMES,
    summary=(
        '`spark.read.format("kafka-shuffle-jvm")` (batch) and the tables of the catalog '
        "`shuffle` (`jvm_spark_conf`): `spark.read.table`, SQL, and `spark.readStream.table` "
        "(streaming), where `read_shuffle` and `read_shuffle_stream` take the JVM path."
    ),
)

_RECORDS_PLANNED = "read_records(spark, options) takes it and plans the ranges this source reads"

RECORDS_JVM = OptionTable(
    "kafka-records-jvm",
    (
        OptionDef(
            "ranges",
            JSON_LIST,
            "`[[topic, partition, start, end], ...]`: offsets `[start, end)` per Spark partition.",
            required=True,
            set_by="read_records",
        ),
        OptionDef("includeHeaders", BOOLEAN, "Add the column `headers`.", default="false"),
        OptionDef(
            "failOnDataLoss",
            BOOLEAN,
            "Offsets removed before they were read fail the read; `false`: skipped.",
            default="true",
        ),
    ),
    refused=(
        *(
            Refused(d.name, _RECORDS_PLANNED, spark_kafka=False)
            for d in RECORDS.options
            if d.name not in ("includeHeaders", "failOnDataLoss")
        ),
        *RECORDS.refused,
    ),
    modes=(BATCH,),
    summary='`spark.read.format("kafka-records-jvm")`, as `read_records` uses it (batch).',
)

TABLES: Mapping[str, OptionTable] = {
    t.source: t for t in (SHUFFLE, RECORDS, SHUFFLE_JVM, RECORDS_JVM)
}


def table(source: str) -> OptionTable:
    """The option table of data source ``source``."""
    try:
        return TABLES[source]
    except KeyError:
        raise KeyError(f"no option table for data source {source!r}") from None


# --- the docs' option tables -----------------------------------------------------------

_TYPES = {MILLIS: "epoch ms", POSITION: "keyword or JSON object", PARALLELISM: "integer or `auto`"}


def _code(text: str) -> str:
    """Names quoted 'so' in messages, as markdown code."""
    return re.sub(r"'([^' ]+)'", r"`\1`", text)


def _type(d: OptionDef) -> str:
    if d.type == CHOICE:
        return " or ".join(f"`{c}`" for c in d.choices)
    if d.type == INTEGER and d.minimum is not None and d.minimum > -(2**63):
        return f"integer >= {d.minimum}"
    return _TYPES.get(d.type, d.type)


def _default(d: OptionDef) -> str:
    if d.required:
        return "required"
    if d.default is None:
        return ""
    if d.stream_default is not None:
        return f"`{d.default}` (streams: `{d.stream_default}`)"
    return f"`{d.default}`"


def markdown(table: OptionTable) -> list[str]:
    """The docs' option table of ``table``, as markdown lines: what it takes, then what it
    refuses and why."""
    yes = {True: "yes", False: ""}
    lines = [
        table.summary,
        "",
        "| option | type | default | batch | stream | what it does |",
        "|---|---|---|---|---|---|",
    ]
    for d in table.options:
        what = d.description + (f" Set by `{d.set_by}`." if d.set_by else "")
        modes = [m in d.modes and m in table.modes for m in MODES]
        lines.append(
            f"| `{d.name}` | {_type(d)} | {_default(d)} | {yes[modes[0]]} | {yes[modes[1]]} "
            f"| {what} |"
        )
    lines.append(
        f"| `{KAFKA_OPTION_PREFIX}*` | string | | yes | {yes[STREAM in table.modes]} | Kafka "
        "client settings, without the prefix (`kafka.bootstrap.servers` is required; see "
        "*Kafka settings in Spark's names*). Not checked here. |"
    )
    groups: dict[tuple[bool, str], list[str]] = {}
    for r in table.refused:
        groups.setdefault((r.spark_kafka, r.reason), []).append(r.name)
    if groups or table.renamed:
        lines += ["", "| refused | why, or what instead |", "|---|---|"]
    for (spark_kafka, reason), names in groups.items():
        of = " (Spark's `kafka` source)" if spark_kafka else ""
        lines.append(f"| {', '.join(f'`{n}`' for n in names)}{of} | {_code(reason)} |")
    for n in table.renamed:
        lines.append(f"| `{n.name}` | renamed `{n.new}`: {_code(n.reason)} |")
    return lines
