"""Schema and partition evolution: a shuffle's layout versions and how a run written under
one is read under the latest. Pure: no Spark, no Kafka.

A shuffle's layout has numbered versions. Version 1 is its layout record; every change
after it (a column added, dropped, renamed or widened; more Kafka partitions) is a
``change/<n>`` record of the commit log holding version *n* whole: its Arrow schema, a field
id per column, the largest field id ever given and the partition count. Each commit records
the version its run was written under (:attr:`~orchestration.shuffle.core.commitlog.Commit.
layout_version`), so a run is always read by the names, types and partition count it was
written with, and :func:`resolve` maps its columns onto the latest version by field id:

- a column of the latest version whose field id the run's version has is read from the run's
  column of that id (whatever its name was then), widened when its type was narrower;
- a column the run's version lacks (added since), or that a run written with
  ``schema_mode="merge"`` left out, is null;
- a column the run has and the latest version lacks (dropped since) is not read.

Field ids are never given twice, so a column dropped and added again under the same name is
a new column: the old one's values are never read for it.

Example::

    latest = versions[-1]
    plan = resolve(run_version, latest)
    batch = apply_resolution(frame_batch, plan)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from orchestration.shuffle.errors import ShuffleLayoutError, ShuffleOptionError

CHANGE_PREFIX = "change/"

# The schema modes of a write (``schema_mode=``): "strict" refuses a run whose columns differ
# from the latest version's; "merge" records a new version that adds the run's new nullable
# columns and widens the columns it has wider, and reads the columns it lacks as nulls.
STRICT = "strict"
MERGE = "merge"
SCHEMA_MODES = (STRICT, MERGE)

# Digits left of the point an integer type needs in a decimal (Arrow's int8 holds -128).
_INT_DIGITS = {pa.int8(): 3, pa.int16(): 5, pa.int32(): 10, pa.int64(): 19}
_INT_ORDER = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]


def check_schema_mode(mode: object, where: str) -> str:
    """``mode`` if it is a schema mode, else a :class:`ShuffleOptionError` naming ``where``."""
    if mode is None:
        return STRICT
    if mode not in SCHEMA_MODES:
        raise ShuffleOptionError(
            f"{where}: schema_mode must be one of {list(SCHEMA_MODES)}, got {mode!r}"
        )
    return str(mode)


def promotion_problem(old: pa.DataType, new: pa.DataType) -> str | None:
    """Why a column of type ``old`` cannot become ``new`` (None: equal, or a promotion).

    The promotions are those Iceberg and Delta Lake allow, as Arrow types (Spark's names in
    brackets): a wider integer (byte -> short -> int -> long); float -> double; an integer of
    at most 32 bits -> double; a decimal to one with at least as many digits on each side of
    the point (Iceberg: only the precision, the scale fixed; Delta: both); an integer to a
    decimal with room for every value; a date to a timestamp without time zone
    (timestamp_ntz). Every one is exact: no value of ``old`` changes when read as ``new``.

    Example::

        promotion_problem(pa.int32(), pa.int64())      # None
        promotion_problem(pa.int64(), pa.int32())      # "int64 -> int32 narrows ..."
    """
    if old.equals(new):
        return None
    if pa.types.is_integer(old) and pa.types.is_signed_integer(old):
        if new in _INT_ORDER and old in _INT_ORDER:
            if _INT_ORDER.index(new) > _INT_ORDER.index(old):
                return None
            return f"{old} -> {new} narrows the integer"
        if pa.types.is_float64(new) and old != pa.int64():
            return None
        if pa.types.is_decimal(new) and old in _INT_DIGITS:
            if new.precision - new.scale >= _INT_DIGITS[old]:
                return None
            return (
                f"{old} -> {new} leaves {new.precision - new.scale} digits left of the point; "
                f"{old} needs {_INT_DIGITS[old]}"
            )
    if pa.types.is_float32(old) and pa.types.is_float64(new):
        return None
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        if new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale:
            return None
        return (
            f"{old} -> {new} loses digits: a decimal may only gain digits on each side of the point"
        )
    if pa.types.is_date32(old) and pa.types.is_timestamp(new) and new.tz is None:
        return None
    return f"{old} -> {new} is not a type promotion (see the Evolution guide's table)"


@dataclass(frozen=True)
class LayoutVersion:
    """One version of a shuffle's layout: its columns (each with a field id) and its
    partition count. Version 1 is the layout record's; later ones are ``change/<n>``
    records.

    ``changes``: what this version changed from the one before, in words; ``made_by``: who
    made it (``alter_shuffle``, or a write with ``schema_mode="merge"``).
    """

    version: int
    schema: pa.Schema
    field_ids: tuple[int, ...]
    last_field_id: int
    num_partitions: int
    changes: tuple[str, ...] = ()
    made_at: str | None = None
    made_by: str | None = None
    change_id: str | None = None

    def __post_init__(self) -> None:
        if len(self.field_ids) != len(self.schema):
            raise ShuffleLayoutError(
                f"layout version {self.version}: {len(self.field_ids)} field ids for "
                f"{len(self.schema)} columns"
            )

    @classmethod
    def first(cls, schema: pa.Schema, num_partitions: int) -> LayoutVersion:
        """Version 1, the layout record's: field ids 1, 2, ... in column order."""
        ids = tuple(range(1, len(schema) + 1))
        return cls(1, schema, ids, len(schema), num_partitions)

    def field_id(self, name: str) -> int | None:
        i = self.schema.get_field_index(name)
        return self.field_ids[i] if i >= 0 else None

    def name_of(self, field_id: int) -> str | None:
        for name, fid in zip(self.schema.names, self.field_ids, strict=True):
            if fid == field_id:
                return name
        return None


def change_key(version: int, change_id: str) -> str:
    """The commit-log key of a record of version ``version`` made by change ``change_id``.

    Each change has a key of its own, so compaction never drops one record of a version for
    another: of two changes that raced for one version, the first in the log is the
    version, whatever compaction does later."""
    return f"{CHANGE_PREFIX}{version}/{change_id}"


def version_of_key(key: str) -> int | None:
    """The version a ``change/<n>/<id>`` key names (None: not such a key)."""
    m = re.fullmatch(re.escape(CHANGE_PREFIX) + r"([1-9][0-9]{0,8})/[A-Za-z0-9_.-]+", key)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class Pinned:
    """The columns a change may not touch: the key, the ``sort_by`` columns and the
    event-time column (their types decide key groups, order and watermarks)."""

    key: tuple[str, ...]
    sort_by: tuple[str, ...] = ()
    event_time: str | None = None

    def why(self, name: str) -> str | None:
        if name in self.key:
            return "a key column"
        if name in self.sort_by:
            return "a sort_by column"
        if name == self.event_time:
            return "the event-time column"
        return None


@dataclass
class _Draft:
    """A version being built from the one before it."""

    fields: list[pa.Field]
    ids: list[int]
    last_id: int
    changes: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, v: LayoutVersion) -> _Draft:
        return cls(list(v.schema), list(v.field_ids), v.last_field_id)

    def index(self, name: str) -> int:
        for i, f in enumerate(self.fields):
            if f.name == name:
                return i
        return -1

    def schema(self, metadata: Mapping[bytes, bytes] | None) -> pa.Schema:
        return pa.schema(self.fields, metadata=metadata)


def former_names(versions: Sequence[LayoutVersion]) -> dict[str, str]:
    """Each name a column of the latest version had before it was renamed, with its name
    now (``{"x": "score"}``); names now taken by a column are left out."""
    if not versions:
        return {}
    latest = versions[-1]
    out = {}
    for v in versions[:-1]:
        for name, fid in zip(v.schema.names, v.field_ids, strict=True):
            now = latest.name_of(fid)
            if now is not None and now != name and latest.schema.get_field_index(name) < 0:
                out[name] = now
    return out


def merge_schema(
    topic: str,
    current: LayoutVersion,
    incoming: pa.Schema,
    pinned: Pinned,
    mode: str,
    renamed: Mapping[str, str] | None = None,
) -> LayoutVersion | None:
    """The version a run of ``incoming`` columns makes of ``current`` (None: it is written
    under ``current``, unchanged).

    ``mode`` ``"strict"``: ``incoming`` must have the latest version's columns, types and
    nullability (as before schema evolution existed); any difference is refused naming the
    column and saying that ``schema_mode="merge"`` allows it when it does. ``"merge"``: new
    nullable columns are added (at the end, with new field ids), columns that arrive wider
    by a promotion (:func:`promotion_problem`) are widened, a column arriving nullable makes
    a non-nullable one nullable, and columns the run lacks or has narrower are read as the
    latest version has them (nulls; widened).

    Refused in every mode, before anything is written: a type that is no promotion, any
    change to a pinned column's type (key, ``sort_by``, event time), the run lacking a
    pinned column, a non-nullable column added (earlier runs have no value for it), and a
    column under a name the shuffle renamed (``renamed``: :func:`former_names`): a writer
    that predates a rename would otherwise add its old name back as a new column.

    Returns:
        The next version (new columns with new field ids, ``changes`` in words), or None.

    Raises:
        ShuffleLayoutError: Each refused column named with its rule, in one message.
    """
    refused: list[str] = []
    merge_only: list[str] = []
    draft = _Draft.of(current)
    for name in current.schema.names:
        if incoming.get_field_index(name) < 0:
            why = pinned.why(name)
            if why:
                refused.append(f"column {name!r} is missing; it is {why}, which every run has")
            else:
                merge_only.append(f"column {name!r} is missing (merge reads it as null)")
    renamed = renamed or {}
    for f in incoming:
        i = draft.index(f.name)
        if i < 0:
            if f.name in renamed:
                refused.append(
                    f"column {f.name!r} was renamed to {renamed[f.name]!r}; write it under its "
                    "new name (alter_shuffle(add_columns=...) adds a new column of the old name)"
                )
                continue
            if not f.nullable:
                refused.append(
                    f"column {f.name!r} ({f.type}) is new and not nullable; earlier runs have "
                    "no value for it, so a column is added only as nullable"
                )
                continue
            merge_only.append(f"column {f.name!r} is not in the shuffle's schema ({f.type})")
            draft.last_id += 1
            draft.fields.append(f)
            draft.ids.append(draft.last_id)
            draft.changes.append(f"added column {f.name!r} {f.type} (field id {draft.last_id})")
            continue
        rec = draft.fields[i]
        if not rec.type.equals(f.type):
            why = pinned.why(f.name)
            if why:
                refused.append(
                    f"column {f.name!r} has type {f.type}, the shuffle has {rec.type}; it is "
                    f"{why}, whose type never changes"
                )
                continue
            up = promotion_problem(rec.type, f.type)
            if up is None:
                merge_only.append(
                    f"column {f.name!r} has type {f.type}, the shuffle has {rec.type}"
                )
                draft.fields[i] = rec.with_type(f.type)
                draft.changes.append(f"widened column {f.name!r} {rec.type} -> {f.type}")
            elif promotion_problem(f.type, rec.type) is None:
                merge_only.append(
                    f"column {f.name!r} has type {f.type}, narrower than the shuffle's "
                    f"{rec.type} (merge reads it widened)"
                )
            else:
                refused.append(
                    f"column {f.name!r} has type {f.type}, the shuffle has {rec.type}: {up}"
                )
                continue
        if not draft.fields[i].nullable and f.nullable:
            merge_only.append(f"column {f.name!r} is nullable, the shuffle's is not")
            draft.fields[i] = draft.fields[i].with_nullable(True)
            draft.changes.append(f"made column {f.name!r} nullable")
    if refused:
        raise ShuffleLayoutError(
            f"shuffle {topic!r}: this run's columns cannot be written in any schema mode: "
            + "; ".join(refused)
        )
    if merge_only and mode != MERGE:
        raise ShuffleLayoutError(
            f"shuffle {topic!r} exists with a different schema (version {current.version}): "
            + "; ".join(merge_only)
            + ". schema_mode='merge' allows these: it records a new schema version"
        )
    if not draft.changes:
        return None
    return LayoutVersion(
        current.version + 1,
        draft.schema(current.schema.metadata),
        tuple(draft.ids),
        draft.last_id,
        current.num_partitions,
        tuple(draft.changes),
    )


@dataclass(frozen=True)
class Alteration:
    """What :func:`alter` changes, in the order it applies them: renames, drops, widenings,
    additions, then the partition count."""

    rename: Mapping[str, str] = field(default_factory=dict)
    drop: Sequence[str] = ()
    widen: Mapping[str, pa.DataType] = field(default_factory=dict)
    add: Sequence[pa.Field] = ()
    num_partitions: int | None = None

    def is_empty(self) -> bool:
        return not (self.rename or self.drop or self.widen or self.add) and (
            self.num_partitions is None
        )


def alter(
    topic: str, current: LayoutVersion, change: Alteration, pinned: Pinned, max_parallelism: int
) -> LayoutVersion:
    """The version ``change`` makes of ``current``, every column refused at once if any is.

    Raises:
        ShuffleLayoutError: A pinned column renamed, dropped or retyped; a column named that
            does not exist (or exists, for an addition); a type that is no promotion; a
            non-nullable column added; a partition count that does not grow or exceeds the
            key groups; nothing to change.
    """
    if change.is_empty():
        raise ShuffleOptionError(f"shuffle {topic!r}: alter_shuffle was given nothing to change")
    draft = _Draft.of(current)
    refused: list[str] = []
    for old, new in change.rename.items():
        i = draft.index(old)
        why = pinned.why(old)
        if i < 0:
            refused.append(f"rename: no column {old!r} (columns: {current.schema.names})")
        elif why:
            refused.append(f"rename: column {old!r} is {why}, whose name never changes")
        elif not isinstance(new, str) or not new or new.startswith("_"):
            refused.append(f"rename: {new!r} is not a column name (none starts with '_')")
        elif draft.index(new) >= 0 and new not in change.rename:
            refused.append(f"rename: column {new!r} exists already")
    if not refused:
        renamed = [(draft.index(old), new) for old, new in change.rename.items()]
        for i, new in renamed:
            draft.changes.append(
                f"renamed column {draft.fields[i].name!r} to {new!r} (field id {draft.ids[i]})"
            )
            draft.fields[i] = draft.fields[i].with_name(new)
        names = [f.name for f in draft.fields]
        if len(set(names)) != len(names):
            refused.append(f"rename: the columns would be {names}, a name twice")
    for name in change.drop:
        i = draft.index(name)
        why = pinned.why(name)
        if i < 0:
            refused.append(f"drop: no column {name!r}")
        elif why:
            refused.append(f"drop: column {name!r} is {why}, which every run has")
        else:
            draft.changes.append(f"dropped column {name!r} (field id {draft.ids[i]})")
            del draft.fields[i], draft.ids[i]
    if not draft.fields and not refused:
        refused.append("drop: a shuffle keeps at least one column")
    for name, new_type in change.widen.items():
        i = draft.index(name)
        why = pinned.why(name)
        if i < 0:
            refused.append(f"widen: no column {name!r}")
        elif why:
            refused.append(f"widen: column {name!r} is {why}, whose type never changes")
        else:
            old_type = draft.fields[i].type
            up = promotion_problem(old_type, new_type)
            if up is not None:
                refused.append(f"widen: column {name!r}: {up}")
            elif not old_type.equals(new_type):
                draft.fields[i] = draft.fields[i].with_type(new_type)
                draft.changes.append(f"widened column {name!r} {old_type} -> {new_type}")
    for f in change.add:
        if f.name.startswith("_") or not f.name:
            refused.append(f"add: {f.name!r} is not a column name (none starts with '_')")
        elif draft.index(f.name) >= 0:
            refused.append(f"add: column {f.name!r} exists already")
        elif not f.nullable:
            refused.append(
                f"add: column {f.name!r} is not nullable; earlier runs have no value for it"
            )
        else:
            draft.last_id += 1
            draft.fields.append(f)
            draft.ids.append(draft.last_id)
            draft.changes.append(f"added column {f.name!r} {f.type} (field id {draft.last_id})")
    n = current.num_partitions
    if change.num_partitions is not None:
        want = change.num_partitions
        if not isinstance(want, int) or isinstance(want, bool) or want <= n:
            refused.append(
                f"num_partitions: {want!r} does not grow the shuffle's {n} partitions "
                "(Kafka partitions are only ever added)"
            )
        elif want > max_parallelism:
            refused.append(
                f"num_partitions: {want} is more than the shuffle's {max_parallelism} key "
                "groups (max_parallelism); more key groups need a new layout (rewrite_shuffle)"
            )
        else:
            draft.changes.append(f"grew the partitions from {n} to {want}")
            n = want
    if refused:
        raise ShuffleLayoutError(
            f"shuffle {topic!r}: alter_shuffle refused, nothing was changed: " + "; ".join(refused)
        )
    return LayoutVersion(
        current.version + 1,
        draft.schema(current.schema.metadata),
        tuple(draft.ids),
        draft.last_id,
        n,
        tuple(draft.changes),
    )


@dataclass(frozen=True)
class ColumnSource:
    """Where one column of the latest version comes from in a run's frames: ``name`` (None:
    the run has no such column; it reads as nulls), cast to ``type`` when the frame's type
    differs."""

    name: str | None
    type: pa.DataType


@dataclass(frozen=True)
class Resolution:
    """How the frames of a run written under one version are read under the latest:
    ``sources[name]`` for each latest column name. ``identity``: the run's version names and
    types every column as the latest does, so nothing needs mapping."""

    sources: Mapping[str, ColumnSource]
    identity: bool

    def frame_columns(self, wanted: Iterable[str]) -> set[str]:
        """The frame columns to decode for the latest version's ``wanted`` columns."""
        return {s.name for c in wanted if (s := self.sources.get(c)) and s.name is not None}


def resolve(run: LayoutVersion, latest: LayoutVersion) -> Resolution:
    """How a run of version ``run`` is read as ``latest``: by field id (see the module doc)."""
    sources = {}
    same = run.version == latest.version or (
        run.field_ids == latest.field_ids and run.schema.equals(latest.schema)
    )
    for f, fid in zip(latest.schema, latest.field_ids, strict=True):
        name = run.name_of(fid)
        sources[f.name] = ColumnSource(name, f.type)
    return Resolution(sources, same)


def resolved_column(batch: pa.RecordBatch, name: str, source: ColumnSource) -> pa.Array:
    """The latest version's column ``name`` of a frame's ``batch``: its run's column,
    widened when narrower, or nulls."""
    if source.name is None or batch.schema.get_field_index(source.name) < 0:
        return pa.nulls(batch.num_rows, source.type)
    col = batch.column(source.name)
    return col if col.type.equals(source.type) else col.cast(source.type)


def read_as(batch: pa.RecordBatch, run: LayoutVersion, target: LayoutVersion) -> pa.Table:
    """A frame's ``batch`` of a run written under ``run``, read as ``target`` (its columns,
    in its order: :func:`resolve`).

    Raises:
        ShuffleLayoutError: ``run`` is a later version than ``target``: a reader holding an
            older version must start again to read it.
    """
    if run.version > target.version:
        raise ShuffleLayoutError(
            f"a run was written under layout version {run.version}, after this read took "
            f"version {target.version}; start the read again to read it"
        )
    res = resolve(run, target)
    columns = [resolved_column(batch, f.name, res.sources[f.name]) for f in target.schema]
    return pa.Table.from_arrays(columns, schema=pa.schema(list(target.schema)))


_SIMPLE_TYPES = {
    pa.bool_(): "boolean",
    pa.int8(): "tinyint",
    pa.int16(): "smallint",
    pa.int32(): "int",
    pa.int64(): "bigint",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.string(): "string",
    pa.large_string(): "string",
    pa.binary(): "binary",
    pa.large_binary(): "binary",
    pa.date32(): "date",
    pa.date64(): "date",
    pa.null(): "void",
}


def type_name(t: pa.DataType) -> str:
    """A readable name of an Arrow type: Spark SQL's where Spark has one
    (``bigint``, ``timestamp``, ``decimal(10,2)``, ``array<string>``), else Arrow's."""
    if t in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[t]
    if pa.types.is_timestamp(t):
        # Spark's two kinds: an instant (with a zone) or a wall-clock time (without).
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_map(t):
        return f"map<{type_name(t.key_type)},{type_name(t.item_type)}>"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return f"array<{type_name(t.value_type)}>"
    if pa.types.is_struct(t):
        fields = ",".join(
            f"{t.field(i).name}:{type_name(t.field(i).type)}" for i in range(t.num_fields)
        )
        return f"struct<{fields}>"
    if pa.types.is_dictionary(t):
        return type_name(t.value_type)
    return str(t)


_SQL_TYPES = {
    "boolean": pa.bool_(),
    "tinyint": pa.int8(),
    "byte": pa.int8(),
    "smallint": pa.int16(),
    "short": pa.int16(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "long": pa.int64(),
    "float": pa.float32(),
    "real": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ltz": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
_DECIMAL = re.compile(r"(?:decimal|dec|numeric)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")


def column_type(value: object, where: str) -> pa.DataType:
    """``value`` as the Arrow type a shuffle stores: an Arrow type, or a Spark SQL type name
    (``"bigint"``, ``"double"``, ``"decimal(12, 2)"``, ``"timestamp_ntz"``, ...) as Spark
    writes it to a shuffle.

    Raises:
        ShuffleOptionError: Neither, naming ``where``.
    """
    if isinstance(value, pa.DataType):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _SQL_TYPES:
            return _SQL_TYPES[text]
        m = _DECIMAL.fullmatch(text)
        if m and 1 <= int(m.group(1)) <= 38 and int(m.group(2) or 0) <= int(m.group(1)):
            return pa.decimal128(int(m.group(1)), int(m.group(2) or 0))
    raise ShuffleOptionError(
        f"{where}: {value!r} is not a column type: give a pyarrow type or one of "
        f"{sorted(_SQL_TYPES)} or decimal(p, s)"
    )
