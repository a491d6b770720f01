"""The columnar write path: a Parquet scan written without Spark's rows.

When the DataFrame to write is a plain scan of Parquet files (optionally projected to plain
columns and filtered by predicates that translate exactly; Hive-style partition columns
are taken from the directory names, and conditions on them alone prune directories as
Spark's own listing does), the producer tasks read their
share of the files' row groups with pyarrow and compute key groups with
:mod:`orchestration.shuffle.core.vhash`, so the rows never become JVM rows and the JVM's row to
Arrow conversion of ``mapInArrow`` (most of a write's time) is skipped. The tasks still
run as Spark tasks and feed the same producer subtasks, and only the driver's commit makes
the run visible, so exactly-once is the same as on the row path.

:func:`plan_columnar` inspects the optimized logical plan on the driver and reads the
files' footers. It is conservative: anything it cannot prove reads the same rows with the
same values (another node in the plan, a computed column, a filter it cannot translate
exactly, a non-local file, a Spark option that changes how files are read, a file whose
column types differ, legacy date rebasing) raises
:class:`ColumnarUnavailable` with the reason, and the write takes the row path.
"""

from __future__ import annotations

import dataclasses
import decimal
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from orchestration.shuffle.core.columnar import (
    ParquetScan,
    Piece,
    Predicate,
    ScanColumn,
    balance,
    open_parquet,
    predicate_columns,
    type_mismatch,
)
from orchestration.shuffle.core.paths import parse_location
from orchestration.shuffle.core.vhash import unsupported_reason
from orchestration.shuffle.spark.session import is_connect, storage_problems

_CATALYST = "org.apache.spark.sql.catalyst"
_PROJECT = f"{_CATALYST}.plans.logical.Project"
_FILTER = f"{_CATALYST}.plans.logical.Filter"
_LOGICAL_RELATION = "org.apache.spark.sql.execution.datasources.LogicalRelation"
_FS_RELATION = "org.apache.spark.sql.execution.datasources.HadoopFsRelation"
_PARQUET = "org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat"
_ATTRIBUTE = f"{_CATALYST}.expressions.AttributeReference"

# Reader options that only choose which files are listed (Spark lists them; we read that
# list) or that are checked below (the rebase modes). Any other option may change how rows
# are read.
_ALLOWED_OPTIONS = frozenset(
    {
        "path",
        "paths",
        "pathglobfilter",
        "recursivefilelookup",
        "modifiedbefore",
        "modifiedafter",
        "datetimerebasemode",
        "int96rebasemode",
    }
)

# Spark settings under which Spark reads a file differently from pyarrow.
_REFUSED_SETTINGS = {
    "spark.sql.parquet.fieldId.read.enabled": "true",
    "spark.sql.parquet.int96TimestampConversion": "true",
    "spark.sql.files.ignoreCorruptFiles": "true",
    "spark.sql.files.ignoreMissingFiles": "true",
}

_COMPARISONS = {
    "EqualTo": "=",
    "LessThan": "<",
    "LessThanOrEqual": "<=",
    "GreaterThan": ">",
    "GreaterThanOrEqual": ">=",
}
_FLIPPED = {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}

# Spark types whose comparisons mean the same in Arrow. Floating point is left out: Spark
# orders NaN above everything and NaN = NaN, Arrow does neither.
_COMPARABLE_SQL = ("TINYINT", "SMALLINT", "INT", "BIGINT", "BOOLEAN", "STRING", "DATE")
_COMPARABLE_PREFIXES = ("TIMESTAMP", "DECIMAL(")


class ColumnarUnavailable(Exception):
    """The columnar path does not apply to a DataFrame; the message says why."""


@dataclass(frozen=True)
class ColumnarPlan:
    """A columnar write, planned on the driver: what each task reads.

    Attributes:
        scan: The columns, output names and filter every task applies.
        assignments: Per task, the pieces (row groups) it reads.
        nulls_ruled_out: The files' statistics show no null in a key column, so the
            writer need not count them with Spark.
        owners: For a sorted write (:meth:`owning`), per task the Kafka partitions
            ``[first, end)`` it writes, every one of their rows; empty: each task writes the
            rows it reads to whichever partitions they belong to.
    """

    scan: ParquetScan
    assignments: tuple[tuple[Piece, ...], ...]
    nulls_ruled_out: bool
    owners: tuple[tuple[int, int], ...] = ()

    def owning(self, num_partitions: int, tasks: int) -> ColumnarPlan:
        """The plan of a sorted write: ``tasks`` tasks, each reading every piece and writing
        the rows of its own contiguous range of the ``num_partitions`` partitions, so that
        each partition has one writer (which sorts its rows in one sequence)."""
        owners = tuple(
            (i * num_partitions // tasks, (i + 1) * num_partitions // tasks) for i in range(tasks)
        )
        return dataclasses.replace(self, assignments=(self.pieces,) * tasks, owners=owners)

    @property
    def pieces(self) -> tuple[Piece, ...]:
        """Every piece the plan reads, once, in the order assigned."""
        return tuple(dict.fromkeys(p for a in self.assignments for p in a))

    @property
    def input_bytes(self) -> int:
        """Uncompressed bytes of the columns read."""
        return sum(p.weight for p in self.pieces)

    def in_order(self, names: Sequence[str]) -> ColumnarPlan:
        """The same plan, writing its columns in the order of ``names``."""
        by_name = {out: src for src, out in self.scan.output}
        output = tuple((by_name[n], n) for n in names)
        return dataclasses.replace(self, scan=dataclasses.replace(self.scan, output=output))

    @property
    def tasks(self) -> int:
        return len(self.assignments)

    @property
    def rows_read(self) -> int:
        """Rows of the row groups read, before the filter."""
        return sum(p.rows for p in self.pieces)


def _class(obj: Any) -> str:
    return obj.getClass().getName()


def _seq(scala_seq: Any) -> list:
    return [scala_seq.apply(i) for i in range(scala_seq.size())]


def _conf(spark: Any, key: str, default: str) -> str:
    try:
        return str(spark.conf.get(key, default))
    except Exception:  # noqa: BLE001 - a setting this Spark does not know keeps its default
        return default


def key_type_reason(t: T.DataType) -> str | None:
    """Why a key column of Spark type ``t`` cannot be keyed in Arrow, or None if it can."""
    plain = (
        T.BooleanType,
        T.ByteType,
        T.ShortType,
        T.IntegerType,
        T.LongType,
        T.FloatType,
        T.DoubleType,
        T.DateType,
        T.TimestampType,
        T.TimestampNTZType,
        T.BinaryType,
    )
    if isinstance(t, plain):
        return None
    if isinstance(t, T.StringType):
        collation = getattr(t, "collation", "UTF8_BINARY")
        # Spark hashes a collated string by its collation key, not its bytes.
        return None if collation == "UTF8_BINARY" else f"a string collated {collation}"
    if isinstance(t, T.DecimalType) and t.precision <= 18:
        return None
    return t.simpleString()


class _Translator:
    """Catalyst filter expressions to predicate trees (see
    ``orchestration.shuffle.core.columnar.Predicate``)."""

    def __init__(self, spark: Any, names: dict[int, str], sql_types: dict[int, str]):
        self.spark = spark
        self.names = names  # exprId -> the relation's column name
        self.sql_types = sql_types  # exprId -> the column's Spark SQL type

    def refuse(self, expr: Any) -> ColumnarUnavailable:
        return ColumnarUnavailable(f"a filter it cannot translate exactly: {expr.sql()}")

    def column(self, expr: Any, comparable: bool) -> str:
        if _class(expr) != _ATTRIBUTE:
            raise self.refuse(expr)
        eid = expr.exprId().id()
        if eid not in self.names:
            raise self.refuse(expr)
        sql = self.sql_types[eid]
        if comparable and not (sql in _COMPARABLE_SQL or sql.startswith(_COMPARABLE_PREFIXES)):
            raise ColumnarUnavailable(
                f"a filter compares column {expr.name()!r} of type {sql.lower()}, whose "
                "comparisons differ between Spark and Arrow"
            )
        return self.names[eid]

    def literal(self, expr: Any, column: Any) -> Any:
        if expr.getClass().getSimpleName() != "Literal":
            raise self.refuse(expr)
        if expr.dataType().sql() != self.sql_types[column.exprId().id()]:
            raise self.refuse(expr)
        return self.value(expr.value(), expr.dataType().sql(), expr)

    def value(self, v: Any, sql: str, expr: Any) -> Any:
        out = _python_value(v, sql)
        if out is _UNCONVERTED:
            raise self.refuse(expr)
        return out

    def translate(self, e: Any) -> Predicate:
        kind = e.getClass().getSimpleName()
        if _class(e) == _ATTRIBUTE and e.dataType().sql() == "BOOLEAN":
            # A boolean column as a condition is the same three-valued truth as "b = true".
            return ("cmp", "=", self.column(e, comparable=True), True)
        children = _seq(e.children())
        if kind in ("And", "Or"):
            return (kind.lower(), self.translate(children[0]), self.translate(children[1]))
        if kind == "Not":
            return ("not", self.translate(children[0]))
        if kind in ("IsNull", "IsNotNull"):
            op = "is_null" if kind == "IsNull" else "is_not_null"
            return (op, self.column(children[0], comparable=False))
        if kind in _COMPARISONS or kind == "EqualNullSafe":
            left, right = children
            op = _COMPARISONS.get(kind, "<=>")
            if _class(left) != _ATTRIBUTE:
                left, right, op = right, left, _FLIPPED.get(op, op)
            name = self.column(left, comparable=True)
            value = self.literal(right, left)
            if value is None:
                raise self.refuse(e)
            if op == "<=>":
                return ("eq_null_safe", name, value)
            return ("cmp", op, name, value)
        if kind == "In":
            attr = e.value()
            name = self.column(attr, comparable=True)
            values = [self.literal(v, attr) for v in _seq(e.list())]
            return ("in", name, tuple(v for v in values if v is not None), None in values)
        if kind == "InSet":
            attr = children[0]
            name = self.column(attr, comparable=True)
            sql = self.sql_types[attr.exprId().id()]
            converters = self.spark._jvm.scala.jdk.javaapi.CollectionConverters
            values = [self.value(v, sql, e) for v in converters.asJava(e.hset())]
            return ("in", name, tuple(v for v in values if v is not None), None in values)
        raise self.refuse(e)


def _file_path(jpath: Any) -> str:
    """A file Spark listed (a Hadoop ``Path``) as pyarrow opens it: a local path, or the URI
    (``s3a://`` and the other schemes :func:`~orchestration.shuffle.core.columnar.open_parquet`
    resolves)."""
    uri = jpath.toUri()
    if uri.getScheme() in (None, "file"):
        return str(uri.getPath())
    return str(jpath.toString())


def _spark_version(md: dict[bytes, bytes]) -> tuple[int, ...] | None:
    raw = md.get(b"org.apache.spark.version")
    if raw is None:
        return None
    try:
        return tuple(int(p) for p in raw.decode().split("-")[0].split(".")[:3])
    except ValueError:
        return (0,)


def _rebase_reason(path: str, md: dict[bytes, bytes], modes: dict[str, str]) -> str | None:
    """Why Spark might rebase this file's dates or timestamps (Julian calendar), or None.

    Spark reads files written by Spark 3.0 or later as they are, unless marked legacy;
    files by Spark 2 are rebased; files by other writers follow the configured mode.
    """
    version = _spark_version(md)
    for kind, marker in (("datetime", b"org.apache.spark.legacyDateTime"),
                         ("int96", b"org.apache.spark.legacyINT96")):  # fmt: skip
        if version is not None:
            if version < (3, 0, 0) or marker in md:
                return f"file {path} asks for legacy {kind} rebasing"
        elif modes[kind] != "CORRECTED":
            return (
                f"file {path} was not written by Spark and {kind} rebasing is "
                f"{modes[kind]}, not CORRECTED"
            )
    return None


def _file_columns(
    path: str, pf: pq.ParquetFile, wanted: Sequence[ScanColumn], case_sensitive: bool
) -> dict[str, str]:
    """The file's name of each wanted column; refuses a missing or mistyped column."""
    arrow = pf.schema_arrow
    physical = {}
    for i in range(len(pf.schema)):
        col = pf.schema.column(i)
        if "." not in col.path:
            physical[col.path] = col.physical_type
    names = {}
    for c in wanted:
        if case_sensitive:
            matches = [n for n in arrow.names if n == c.name]
        else:
            matches = [n for n in arrow.names if n.lower() == c.name.lower()]
        if len(matches) != 1:
            what = "no column" if not matches else "several columns matching"
            raise ColumnarUnavailable(f"file {path} has {what} {c.name!r}")
        name = matches[0]
        reason = type_mismatch(arrow.field(name).type, c.arrow_type, physical.get(name))
        if reason:
            raise ColumnarUnavailable(f"file {path} column {name!r}: {reason}")
        names[c.name] = name
    return names


def _default_tasks(df: DataFrame) -> int:
    # The scan's own partition count: what the row path would run, so the producer
    # subtasks and their sizes follow spark.sql.files.maxPartitionBytes as the user set it.
    try:
        return max(1, df.rdd.getNumPartitions())
    except Exception:  # noqa: BLE001 - planning failed: one task per core instead
        return max(1, int(df.sparkSession.sparkContext.defaultParallelism))


def _walk(jdf: Any) -> tuple[Any, Any, list[Any]]:
    """The optimized plan's top node, its relation node and its filter conditions."""
    node = top = jdf.queryExecution().optimizedPlan()
    conditions = []
    while _class(node) in (_PROJECT, _FILTER):
        if _class(node) == _PROJECT:
            for e in _seq(node.projectList()):
                if _class(e) != _ATTRIBUTE:
                    raise ColumnarUnavailable(f"not a plain Parquet scan: it computes {e.sql()}")
        else:
            conditions.append(node.condition())
        node = node.child()
    if _class(node) != _LOGICAL_RELATION:
        name = node.getClass().getSimpleName()
        raise ColumnarUnavailable(f"not a plain Parquet scan: its plan has a node {name}")
    relation = node.relation()
    if _class(relation) != _FS_RELATION:
        raise ColumnarUnavailable("not a plain Parquet scan: not a file relation")
    if _class(relation.fileFormat()) != _PARQUET:
        fmt = relation.fileFormat().getClass().getSimpleName()
        raise ColumnarUnavailable(f"not a Parquet scan: the files are read as {fmt}")
    return top, node, conditions


def _check_settings(spark: Any, options: dict[str, str]) -> None:
    for k, v in options.items():
        if k == "mergeschema" and v.lower() == "false":
            continue
        if k not in _ALLOWED_OPTIONS:
            raise ColumnarUnavailable(f"the scan sets reader option {k}={v}")
    for k, refused in _REFUSED_SETTINGS.items():
        if _conf(spark, k, "false").lower() == refused:
            raise ColumnarUnavailable(f"Spark setting {k} is {refused}")


def _conjuncts(e: Any) -> list[Any]:
    if e.getClass().getSimpleName() == "And":
        return _conjuncts(e.left()) + _conjuncts(e.right())
    return [e]


_UNCONVERTED = object()


def _python_value(v: Any, sql: str) -> Any:
    """A literal's JVM value (through py4j) as Python: None, str, Decimal, bool or int;
    ``_UNCONVERTED`` for anything else."""
    if v is None:
        return None
    if sql == "STRING":
        return str(v.toString())
    if sql.startswith("DECIMAL("):
        return decimal.Decimal(str(v.toString()))
    if isinstance(v, bool | int):
        return v
    return _UNCONVERTED


def _partition_value(v: Any, sql: str, column: str) -> Any:
    if v is not None and sql in ("DOUBLE", "FLOAT"):
        return float(v)
    out = _python_value(v, sql)
    if out is _UNCONVERTED:
        raise ColumnarUnavailable(f"partition column {column!r} has type {sql.lower()}")
    return out


def _list_files(
    spark: Any, relation: Any, partition_filters: list[Any]
) -> list[tuple[str, tuple[Any, ...]]]:
    """The files Spark reads, with their partition values, pruned as Spark prunes them."""
    jvm = spark._jvm
    converters = jvm.scala.jdk.javaapi.CollectionConverters

    def scala_seq(items: list[Any]) -> Any:
        java = jvm.java.util.ArrayList()
        for item in items:
            java.add(item)
        return converters.asScala(java).toSeq()

    fields = list(relation.partitionSchema().fields())
    files = []
    for directory in _seq(
        relation.location().listFiles(scala_seq(partition_filters), scala_seq([]))
    ):
        row = directory.values()
        values = tuple(
            None
            if row.isNullAt(i)
            else _partition_value(row.get(i, f.dataType()), f.dataType().sql(), f.name())
            for i, f in enumerate(fields)
        )
        for status in _seq(directory.files()):
            files.append((_file_path(status.getPath()), values))
    return files


def plan_columnar(
    df: DataFrame, schema: pa.Schema, key: Sequence[str], tasks: int | None = None
) -> ColumnarPlan:
    """Plans a columnar write of ``df``, or raises :class:`ColumnarUnavailable`.

    Args:
        df: The DataFrame to write.
        schema: The shuffle's Arrow schema (``df``'s columns, as written).
        key: The key columns.
        tasks: Spark tasks to run (default: as many as Spark's scan of ``df`` has).
    """
    for c in key:
        reason = key_type_reason(df.schema[c].dataType) or unsupported_reason(schema.field(c).type)
        if reason:
            raise ColumnarUnavailable(f"key column {c!r} has type {reason}")
    if is_connect(df.sparkSession):
        raise ColumnarUnavailable("Spark Connect: the Parquet plan cannot be read without the JVM")
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        raise ColumnarUnavailable("the DataFrame has no JVM plan to read")
    spark = df.sparkSession
    top, node, conditions = _walk(jdf)
    relation = node.relation()
    options = {str(k).lower(): str(v) for k, v in _java_map(spark, relation.options()).items()}
    _check_settings(spark, options)
    case_sensitive = _conf(spark, "spark.sql.caseSensitive", "false").lower() == "true"

    data_fields = list(relation.dataSchema().fieldNames())
    partition_fields = list(relation.partitionSchema().fieldNames())
    if {n.lower() for n in data_fields} & {n.lower() for n in partition_fields}:
        raise ColumnarUnavailable("a column is both in the files and a partition column")
    names: dict[int, str] = {}
    sql_types: dict[int, str] = {}
    spark_types: dict[str, Any] = {}
    for a in _seq(node.output()):
        if a.name() in data_fields or a.name() in partition_fields:
            names[a.exprId().id()] = a.name()
            sql_types[a.exprId().id()] = a.dataType().sql()
            spark_types[a.name()] = a.dataType()
    output_attrs = _seq(top.output())
    if [a.name() for a in output_attrs] != list(df.columns):
        raise ColumnarUnavailable("the plan's output columns are not the DataFrame's")
    output: list[tuple[str, str]] = []
    for a, out in zip(output_attrs, df.columns, strict=True):
        eid = a.exprId().id()
        if _class(a) != _ATTRIBUTE or eid not in names:
            raise ColumnarUnavailable(f"column {out!r} is not a column of the Parquet files")
        output.append((names[eid], out))
    written = [src for src, _ in output]
    if len(set(written)) != len(written):
        raise ColumnarUnavailable("a file column is written twice")
    if sorted(out for _, out in output) != sorted(schema.names):
        raise ColumnarUnavailable("the DataFrame's columns are not the shuffle's")

    # Conjuncts on partition columns alone select directories: Spark's listing prunes them
    # exactly, as its scan does, so they need no translation. The tasks apply the rest.
    partition_ids = {eid for eid, n in names.items() if n in partition_fields}
    # Catalyst expressions, reached through py4j.
    partition_filters: list[Any] = []
    row_filters: list[Any] = []
    for cond in conditions:
        for c in _conjuncts(cond):
            refs = {a.exprId().id() for a in _seq(c.references().toSeq())}
            prunes = refs and refs <= partition_ids and c.deterministic()
            (partition_filters if prunes and not _has_subquery(spark, c) else row_filters).append(c)
    translator = _Translator(spark, names, sql_types)
    predicate: Predicate | None = None
    for cond in row_filters:
        p = translator.translate(cond)
        predicate = p if predicate is None else ("and", predicate, p)

    from orchestration.shuffle.spark.compat import to_arrow_type_utc

    types = {src: schema.field(out).type for src, out in output}
    columns = [ScanColumn(src, types[src]) for src in written]
    for name in predicate_columns(predicate):
        if name not in types:
            t = to_arrow_type_utc(_python_type(spark, spark_types[name]))
            if pa.types.is_timestamp(t) and t.tz is not None:
                t = pa.timestamp(t.unit, tz="UTC")
            types[name] = t
            columns.append(ScanColumn(name, t))
    file_columns = [c for c in columns if c.name not in partition_fields]

    files = _list_files(spark, relation, partition_filters)
    # pyarrow opens the files Spark listed: it must reach the same store (one check per
    # bucket or host).
    checked = set()
    for path, _ in files:
        location = parse_location(path)
        store = "/".join(location.spark.split("/", 3)[:3])
        if location.is_local or store in checked:
            continue
        checked.add(store)
        problems = storage_problems(spark, location)
        if problems:
            raise ColumnarUnavailable(f"file {path}: {'; '.join(problems)}")
    read_partitions = [n for n in partition_fields if n in types]

    modes = {
        "datetime": options.get("datetimerebasemode")
        or _conf(spark, "spark.sql.parquet.datetimeRebaseModeInRead", "CORRECTED"),
        "int96": options.get("int96rebasemode")
        or _conf(spark, "spark.sql.parquet.int96RebaseModeInRead", "CORRECTED"),
    }
    modes = {k: v.upper() for k, v in modes.items()}
    has_datetimes = any(
        pa.types.is_timestamp(c.arrow_type) or pa.types.is_date(c.arrow_type) for c in file_columns
    )
    key_sources = {src for src, out in output if out in key}

    pieces: list[Piece] = []
    file_names: dict[str, dict[str, str]] = {}
    partition_values: dict[str, tuple[Any, ...]] = {}
    nulls_ruled_out = True
    for path, values in files:
        by_name = dict(zip(partition_fields, values, strict=True))
        if read_partitions:
            partition_values[path] = tuple(by_name[n] for n in read_partitions)
        if any(by_name[k] is None for k in key_sources if k in by_name):
            nulls_ruled_out = False
        with open_parquet(path, coerce_int96_timestamp_unit="us") as pf:
            md = pf.metadata
            if has_datetimes:
                reason = _rebase_reason(path, md.metadata or {}, modes)
                if reason:
                    raise ColumnarUnavailable(reason)
            in_file = _file_columns(path, pf, file_columns, case_sensitive)
            renamed = {k: v for k, v in in_file.items() if k != v}
            if renamed:
                file_names[path] = renamed
            wanted = set(in_file.values())
            keys_in_file = {in_file[k] for k in key_sources if k in in_file}
            for rg in range(md.num_row_groups):
                meta = md.row_group(rg)
                weight = 0
                for j in range(meta.num_columns):
                    chunk = meta.column(j)
                    top_name = chunk.path_in_schema.split(".")[0]
                    if top_name in wanted:
                        weight += chunk.total_uncompressed_size
                    if top_name in keys_in_file and meta.num_rows:
                        stats = chunk.statistics
                        if stats is None or not stats.has_null_count or stats.null_count:
                            nulls_ruled_out = False
                if meta.num_rows:
                    pieces.append(Piece(path, rg, meta.num_rows, max(1, weight)))

    n = max(1, min(tasks or _default_tasks(df), len(pieces)))
    bins = balance([p.weight for p in pieces], n)
    scan = ParquetScan(
        columns=tuple(columns),
        output=tuple(output),
        predicate=predicate,
        file_names=file_names,
        partition_columns=tuple(read_partitions),
        partition_values=partition_values,
    )
    return ColumnarPlan(
        scan=scan,
        assignments=tuple(tuple(pieces[i] for i in b) for b in bins),
        nulls_ruled_out=nulls_ruled_out,
    )


def _has_subquery(spark: Any, expr: Any) -> bool:
    try:
        subquery = spark._jvm.org.apache.spark.sql.catalyst.expressions.SubqueryExpression
        return bool(subquery.hasSubquery(expr))
    except Exception:  # noqa: BLE001 - cannot tell: treat it as one
        return True


def _java_map(spark: Any, scala_map: Any) -> dict:
    converters = spark._jvm.scala.jdk.javaapi.CollectionConverters
    return dict(converters.asJava(scala_map))


def _python_type(spark: Any, jtype: Any) -> T.DataType:
    # PySpark's public JSON parser takes fields, not bare types: wrap the type in one.
    field = {"name": "_", "type": json.loads(jtype.json()), "nullable": True, "metadata": {}}
    return T.StructField.fromJson(field).dataType
