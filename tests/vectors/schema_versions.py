"""The schema-version vectors both readers are tested against: commit-log records in, layout
versions and column resolutions out.

``schema_versions.json`` holds two lists:

- ``logs``: per case, a shuffle's commit-log records (``[key, value]``, value null for a
  delete; a record's offset is its index) and what :meth:`ShuffleLog.from_records` makes of
  them: every layout version (its number, partition count, field ids, last field id, change
  id and columns as ``[name, type, nullable]``, the type as pyarrow writes it), the latest
  version, each commit's run and ``layout_version``, the records skipped as ``[offset, key,
  reason]`` (the reason up to its first ``" ("``: what follows names a Python exception), and,
  for each version, how a run written under it reads as the latest (:func:`resolve`): per
  latest column ``[name, source name or null, latest type]`` and whether the versions name
  and type every column alike. ``unknown_versions`` holds the error of a version the log does
  not have (:meth:`Layout.layout_version`). A log whose layout cannot be read holds its
  error's class instead.
- ``casts``: per type pair, :func:`promotion_problem`'s answer, and for a promotion, values of
  the narrower type and what :func:`resolved_column` reads them as (decimals as strings, dates
  as days, timestamps as integers of their unit).
- ``alters``: per case, a layout version (its change record's JSON), the pinned columns and a
  change (renames ``[old, new]``, drops, widenings ``[column, type]`` and additions
  ``[column, type, nullable]``, types as Spark SQL names, :func:`column_type`), and what
  :func:`alter` makes of them: the next version's change record (made by ``ALTER TABLE``, at
  a fixed time and change id) or the refusal. ALTER TABLE on the JVM catalog
  (``TableAlteration.java``) must write the same record, and refuse with the same message.

``jvm/src/test/java/io/kafkashuffle/spark/SchemaVersionsTest.java`` checks the JVM's commit
log (``CommitLog.java``) and resolution (``SchemaResolution.java``) against the file, and
``TableAlterationTest.java`` its alterations.

After a deliberate change of the rules, write the file again and review its diff::

    .venv/bin/python -m tests.vectors.schema_versions --write
"""

from __future__ import annotations

import decimal
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from orchestration.shuffle import ShuffleError, ShuffleLog
from orchestration.shuffle.core.commitlog import (
    COMMIT_PREFIX,
    LAYOUT_KEY,
    Commit,
    Layout,
    PartitionRange,
    version_to_json,
)
from orchestration.shuffle.core.evolution import (
    Alteration,
    LayoutVersion,
    Pinned,
    alter,
    change_key,
    column_type,
    promotion_problem,
    resolve,
    resolved_column,
)

FILE = Path(__file__).with_name("schema_versions.json")
TOPIC = "vectors.evolving"
KEY = ("k",)
MAX_PARALLELISM = 16
PINNED = Pinned(KEY, (), "ts")

Record = tuple[str | None, str | None]

SCHEMA = pa.schema(
    [
        pa.field("k", pa.string(), nullable=False),
        ("ts", pa.timestamp("us", "UTC")),
        ("a", pa.int32()),
        ("b", pa.float32()),
        ("c", pa.decimal128(10, 2)),
        ("d", pa.string()),
        ("e", pa.date32()),
        ("x", pa.int16()),
    ]
)


def layout_record(partitions: int = 4, format_version: int = 1) -> Record:
    lay = Layout(
        TOPIC,
        KEY,
        partitions,
        MAX_PARALLELISM,
        SCHEMA,
        event_time="ts",
        format_version=format_version,
    )
    return (LAYOUT_KEY, lay.to_json())


def first_version(partitions: int = 4) -> LayoutVersion:
    return LayoutVersion.first(SCHEMA, partitions)


def changed(current: LayoutVersion, change: Alteration, change_id: str) -> LayoutVersion:
    """The version after ``current`` that ``change`` makes, as ``alter_shuffle`` makes it."""
    v = alter(TOPIC, current, change, PINNED, MAX_PARALLELISM)
    return replace(
        v,
        made_at=f"2013-01-{v.version:02d}T00:00:00+00:00",
        made_by="alter_shuffle",
        change_id=change_id,
    )


def record(v: LayoutVersion, version: int | None = None) -> Record:
    """``v``'s change record (under the key of ``version``, when given: a key naming another
    version than the record holds)."""
    return (change_key(version or v.version, v.change_id or "x"), version_to_json(v))


def commit(run: str, version: int, partitions: int = 4) -> Record:
    """A commit of ``run`` written under layout ``version``, a frame in each partition."""
    ranges = {p: PartitionRange(2 * p, 2 * p + 1, 10, 1) for p in range(partitions)}
    c = Commit(
        run_id=run,
        window=None,
        committed_at="2013-02-01T00:00:00+00:00",
        tasks=((0, 0),),
        partitions=ranges,
        rows=10 * partitions,
        bytes=400 * partitions,
        frames=partitions,
        layout_version=version,
    )
    return (COMMIT_PREFIX + run, c.to_json())


def history() -> list[LayoutVersion]:
    """Versions 1 to 6: a rename, four widenings, a drop and a re-add of the same name, an
    added column."""
    v1 = first_version()
    v2 = changed(v1, Alteration(rename={"d": "label"}), "rename-d")
    v3 = changed(
        v2,
        Alteration(
            widen={
                "a": pa.int64(),
                "b": pa.float64(),
                "c": pa.decimal128(12, 2),
                "e": pa.timestamp("us"),
            }
        ),
        "widen",
    )
    v4 = changed(v3, Alteration(drop=("x",)), "drop-x")
    v5 = changed(v4, Alteration(add=(pa.field("x", pa.int64()),)), "add-x")
    v6 = changed(v5, Alteration(add=(pa.field("note", pa.string()),)), "add-note")
    return [v1, v2, v3, v4, v5, v6]


def cases() -> list[dict[str, Any]]:
    """Every log case: its name and its records."""
    v = history()
    lay = layout_record()
    v2_other = changed(v[0], Alteration(add=(pa.field("other", pa.string()),)), "lost-race")
    grown = changed(v[0], Alteration(num_partitions=8), "grow")
    grown3 = changed(grown, Alteration(rename={"a": "amount"}), "rename-a")
    bad_ids = json.loads(version_to_json(v[1]))
    bad_ids["field_ids"] = bad_ids["field_ids"][:-1]
    wrong_type = json.loads(version_to_json(v[1]))
    wrong_type["type"] = "layout"
    return [
        {"name": "the layout record alone", "records": [lay, commit("r1", 1)]},
        {
            "name": "rename, widenings, drop and re-add, an added column",
            "records": [
                lay,
                commit("r1", 1),
                record(v[1]),
                record(v[2]),
                commit("r3", 3),
                record(v[3]),
                record(v[4]),
                record(v[5]),
                commit("r6", 6),
            ],
        },
        {
            "name": "change records before the layout record",
            "records": [record(v[2]), record(v[1]), lay],
        },
        {
            "name": "two records race for one version: the first in the log is it",
            "records": [lay, record(v[1]), record(v2_other), commit("r2", 2)],
        },
        {
            "name": "the winner of a race deleted: the other record is the version",
            "records": [lay, record(v[1]), record(v2_other), (record(v[1])[0], None)],
        },
        {
            "name": "a record written again moves to its new offset",
            "records": [lay, record(v[1]), record(v2_other), record(v[1])],
        },
        {
            "name": "a gap: versions after a missing one are reported, not applied",
            "records": [lay, record(v[1]), record(v[3]), record(v[4]), commit("r5", 5)],
        },
        {
            "name": "a deleted version leaves a gap",
            "records": [lay, record(v[1]), record(v[2]), (record(v[1])[0], None)],
        },
        {
            "name": "an unreadable change record is reported and leaves a gap",
            "records": [
                lay,
                (change_key(2, "cut"), version_to_json(v[1])[:40]),
                record(v[2]),
            ],
        },
        {
            "name": "unreadable change records of several kinds",
            "records": [
                lay,
                (change_key(2, "not-json"), "\u0000 not json"),
                (change_key(2, "ids"), json.dumps(bad_ids)),
                (change_key(2, "type"), json.dumps(wrong_type)),
                (change_key(2, "no-schema"), json.dumps({"type": "change", "version": 2})),
            ],
        },
        {
            "name": "an unreadable record written again readable",
            "records": [lay, (change_key(2, "rename-d"), "{"), record(v[1])],
        },
        {
            "name": "an unreadable record deleted",
            "records": [lay, (change_key(2, "rename-d"), "{"), (change_key(2, "rename-d"), None)],
        },
        {
            "name": "a key naming another version than its record",
            "records": [lay, record(v[1], version=3), record(v[1])],
        },
        {
            "name": "keys that are not change keys",
            "records": [
                lay,
                ("change/02/x", version_to_json(v[1])),
                ("change/2/a b", version_to_json(v[1])),
                ("change/2", version_to_json(v[1])),
                ("change/2/x", None),
            ],
        },
        {
            "name": "grown partitions, then a rename",
            "records": [
                lay,
                commit("r1", 1),
                record(grown),
                commit("r2", 2, partitions=8),
                record(grown3),
            ],
        },
        {
            "name": "change records without a layout record",
            "records": [record(v[1]), commit("r1", 2)],
        },
        {
            "name": "a layout record of another format",
            "records": [layout_record(format_version=2), record(v[1])],
        },
    ]


def columns(schema: pa.Schema) -> list[list[Any]]:
    return [[f.name, str(f.type), f.nullable] for f in schema]


def expected(records: list[Record]) -> dict[str, Any]:
    """What the Python commit log makes of a case, in the file's form."""
    try:
        log = ShuffleLog.from_records(TOPIC, records)
    except ShuffleError as exc:
        return {"error": {"kind": type(exc).__name__}}
    out: dict[str, Any] = {
        "bad_records": [[b.offset, b.key, b.reason.split(" (")[0]] for b in log.bad_records],
        "commits": [[c.run_id, c.layout_version] for c in log.commits],
    }
    layout = log.layout
    if layout is None:
        return {**out, "latest": None}
    versions = layout.versions or (layout.layout_version(1),)
    latest = layout.layout_version()
    out["versions"] = [
        {
            "version": v.version,
            "num_partitions": v.num_partitions,
            "field_ids": list(v.field_ids),
            "last_field_id": v.last_field_id,
            "change_id": v.change_id,
            "columns": columns(v.schema),
        }
        for v in versions
    ]
    out["latest"] = {
        "version": latest.version,
        "num_partitions": layout.num_partitions,
        "columns": columns(layout.schema),
    }
    out["resolutions"] = []
    for v in versions:
        res = resolve(v, latest)
        out["resolutions"].append(
            {
                "version": v.version,
                "identity": res.identity,
                "columns": [[name, s.name, str(s.type)] for name, s in res.sources.items()],
            }
        )
    unknown = []
    for n in (latest.version + 1, 99):
        try:
            layout.layout_version(n)
        except ShuffleError as exc:
            unknown.append(
                {"version": n, "error": {"kind": type(exc).__name__, "message": str(exc)}}
            )
    out["unknown_versions"] = unknown
    return out


# Type pairs: promotions (with values to read widened) and changes that are none.
CASTS: list[tuple[pa.DataType, pa.DataType, list[Any]]] = [
    (pa.int8(), pa.int16(), [1, None, -128, 127]),
    (pa.int8(), pa.int64(), [-128, 0, None]),
    (pa.int16(), pa.int32(), [-32768, 32767, None]),
    (pa.int32(), pa.int64(), [-(2**31), 2**31 - 1, None, 0]),
    (pa.float32(), pa.float64(), [1.5, None, -0.25, 3.4e38]),
    (pa.int32(), pa.float64(), [-(2**31), None, 7]),
    (pa.int16(), pa.float64(), [-32768, None]),
    (pa.decimal128(10, 2), pa.decimal128(12, 2), ["12345678.90", None, "-0.01"]),
    (pa.decimal128(10, 2), pa.decimal128(14, 4), ["-12345678.99", "0.50", None]),
    (pa.int32(), pa.decimal128(12, 2), [-(2**31), None, 5]),
    (pa.int64(), pa.decimal128(19, 0), [2**63 - 1, -(2**63), None]),
    (pa.date32(), pa.timestamp("us"), [0, None, 19_000, -1]),
    (pa.date32(), pa.timestamp("ms"), [1, None]),
    (pa.int64(), pa.int32(), []),
    (pa.int64(), pa.float64(), []),
    (pa.float64(), pa.float32(), []),
    (pa.decimal128(10, 2), pa.decimal128(10, 3), []),
    (pa.decimal128(10, 2), pa.decimal128(12, 1), []),
    (pa.int32(), pa.decimal128(10, 2), []),
    (pa.date32(), pa.timestamp("us", "UTC"), []),
    (pa.string(), pa.large_string(), []),
    (pa.int32(), pa.string(), []),
    (pa.int64(), pa.int64(), []),
]


def to_json_value(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def from_json_values(t: pa.DataType, values: list[Any]) -> pa.Array:
    if pa.types.is_decimal(t):
        return pa.array([None if v is None else decimal.Decimal(v) for v in values], t)
    if pa.types.is_date32(t):
        return pa.array(values, pa.int32()).cast(t)
    return pa.array(values, t)


def cast_vectors() -> list[dict[str, Any]]:
    out = []
    for old, new, values in CASTS:
        case: dict[str, Any] = {
            "from": str(old),
            "to": str(new),
            "problem": promotion_problem(old, new),
        }
        if values:
            batch = pa.record_batch([from_json_values(old, values)], names=["col"])
            latest = pa.schema([("col", new)])
            v_run = LayoutVersion(2, batch.schema, (1,), 1, 4)
            v_latest = LayoutVersion(3, latest, (1,), 1, 4)
            col = resolved_column(batch, "col", resolve(v_run, v_latest).sources["col"])
            if pa.types.is_timestamp(new):
                col = col.cast(pa.int64())
            case["values"] = values
            case["expected"] = [to_json_value(v) for v in col.to_pylist()]
        out.append(case)
    return out


# What the JVM catalog stamps a version it records with, fixed here to compare records.
ALTER_MADE = {
    "made_at": "2013-03-01T00:00:00+00:00",
    "made_by": "ALTER TABLE",
    "change_id": "alter",
}
SORTED = Pinned(KEY, ("k", "a"), "ts")


def alter_cases() -> list[tuple[str, LayoutVersion, Pinned, dict[str, Any]]]:
    """Alterations of history's versions: (name, current version, pinned, change)."""
    v = history()
    every_type = [
        [name, t, True]
        for name, t in [
            ("f_bool", "boolean"),
            ("f_byte", "tinyint"),
            ("f_short", "smallint"),
            ("f_int", "int"),
            ("f_long", "bigint"),
            ("f_float", "float"),
            ("f_double", "double"),
            ("f_dec", "decimal(12,2)"),
            ("f_string", "string"),
            ("f_binary", "binary"),
            ("f_date", "date"),
            ("f_ts", "timestamp"),
            ("f_ntz", "timestamp_ntz"),
        ]
    ]
    return [
        ("add a nullable column", v[0], PINNED, {"add": [["country", "string", True]]}),
        ("add a column of each type", v[0], PINNED, {"add": every_type}),
        ("rename a column", v[0], PINNED, {"rename": [["d", "label"]]}),
        ("swap two names", v[0], PINNED, {"rename": [["a", "b"], ["b", "a"]]}),
        ("drop a column", v[0], PINNED, {"drop": ["x"]}),
        (
            "widen columns",
            v[0],
            PINNED,
            {
                "widen": [
                    ["a", "bigint"],
                    ["b", "double"],
                    ["c", "decimal(12,2)"],
                    ["e", "timestamp_ntz"],
                    ["x", "int"],
                ]
            },
        ),
        ("widen to the same type changes nothing", v[0], PINNED, {"widen": [["a", "int"]]}),
        (
            "a rename, a drop, a widening and an addition at once",
            v[1],
            PINNED,
            {
                "rename": [["label", "name"]],
                "drop": ["x"],
                "widen": [["a", "bigint"]],
                "add": [["x", "string", True]],
            },
        ),
        (
            "a dropped name added again is a new column",
            v[3],
            PINNED,
            {"add": [["x", "bigint", True]]},
        ),
        ("an altered version altered again", v[5], PINNED, {"rename": [["note", "remark"]]}),
        ("rename the key", v[0], PINNED, {"rename": [["k", "key"]]}),
        ("drop the event-time column", v[0], PINNED, {"drop": ["ts"]}),
        ("widen the event-time column", v[0], PINNED, {"widen": [["ts", "timestamp_ntz"]]}),
        ("widen a sort_by column", v[0], SORTED, {"widen": [["a", "bigint"]]}),
        ("rename a sort_by column", v[0], SORTED, {"rename": [["a", "amount"]]}),
        (
            "columns that do not exist",
            v[0],
            PINNED,
            {"rename": [["zz", "y"]], "drop": ["qq"], "widen": [["nope", "bigint"]]},
        ),
        (
            "types that are no promotion",
            v[0],
            PINNED,
            {"widen": [["a", "smallint"], ["b", "int"], ["d", "bigint"], ["c", "decimal(10,3)"]]},
        ),
        ("add a column that is not nullable", v[0], PINNED, {"add": [["n", "bigint", False]]}),
        ("add a name taken", v[0], PINNED, {"add": [["a", "int", True]]}),
        ("add a name twice", v[0], PINNED, {"add": [["y", "int", True], ["y", "string", True]]}),
        ("add a name of the metadata columns", v[0], PINNED, {"add": [["_y", "int", True]]}),
        ("rename to a name taken", v[0], PINNED, {"rename": [["a", "b"]]}),
        ("rename to a name of the metadata columns", v[0], PINNED, {"rename": [["a", "_a"]]}),
        ("rename two columns to one name", v[0], PINNED, {"rename": [["a", "z"], ["b", "z"]]}),
        (
            "several refusals at once",
            v[0],
            PINNED,
            {"rename": [["k", "key"]], "drop": ["ts"], "add": [["a", "int", True]]},
        ),
        ("nothing to change", v[0], PINNED, {}),
    ]


def alteration(change: dict[str, Any]) -> Alteration:
    """A case's change as :func:`alter` takes it."""
    return Alteration(
        rename=dict(change.get("rename", [])),
        drop=tuple(change.get("drop", [])),
        widen={c: column_type(t, "widen") for c, t in change.get("widen", [])},
        add=tuple(
            pa.field(c, column_type(t, "add"), nullable=n) for c, t, n in change.get("add", [])
        ),
    )


def alter_vectors() -> list[dict[str, Any]]:
    out = []
    for name, current, pinned, change in alter_cases():
        try:
            new = alter(TOPIC, current, alteration(change), pinned, MAX_PARALLELISM)
        except ShuffleError as exc:
            expect: dict[str, Any] = {"error": {"kind": type(exc).__name__, "message": str(exc)}}
        else:
            expect = {"record": json.loads(version_to_json(replace(new, **ALTER_MADE)))}
        out.append(
            {
                "name": name,
                "topic": TOPIC,
                "current": json.loads(version_to_json(current)),
                "pinned": {
                    "key": list(pinned.key),
                    "sort_by": list(pinned.sort_by),
                    "event_time": pinned.event_time,
                },
                "change": change,
                "expected": expect,
            }
        )
    return out


def vectors() -> dict[str, Any]:
    return {
        "logs": [
            {
                "name": c["name"],
                "topic": TOPIC,
                "records": [list(r) for r in c["records"]],
                "expected": expected(c["records"]),
            }
            for c in cases()
        ],
        "casts": cast_vectors(),
        "alters": alter_vectors(),
    }


def main(argv: list[str]) -> int:
    if argv != ["--write"]:
        print(__doc__)
        return 2
    data = vectors()
    FILE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(
        f"wrote {FILE} ({len(data['logs'])} logs, {len(data['casts'])} casts, "
        f"{len(data['alters'])} alterations)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
