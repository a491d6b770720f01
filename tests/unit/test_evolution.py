"""Schema and partition evolution, the pure part: promotions, merge on write, alter, the
change records of the commit log, and reading a run of any version as the latest."""

import decimal
import json
import random

import pyarrow as pa
import pytest

from orchestration.shuffle import Commit, Layout, ShuffleFormatError, ShuffleLayoutError, ShuffleLog
from orchestration.shuffle.core.commitlog import (
    COMMIT_PREFIX,
    LAYOUT_KEY,
    PartitionRange,
    version_from_json,
    version_to_json,
)
from orchestration.shuffle.core.evolution import (
    MERGE,
    STRICT,
    Alteration,
    LayoutVersion,
    Pinned,
    alter,
    change_key,
    column_type,
    merge_schema,
    promotion_problem,
    read_as,
    resolve,
    version_of_key,
)
from orchestration.shuffle.errors import ShuffleOptionError

BASE = pa.schema(
    [
        ("k", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("n", pa.int32()),
        ("x", pa.float32()),
        ("d", pa.decimal128(10, 2)),
    ]
)
PINNED = Pinned(("k",), (), "ts")


def v1(schema=BASE, n=4):
    return LayoutVersion.first(schema, n)


@pytest.mark.parametrize(
    "old, new",
    [
        (pa.int8(), pa.int16()),
        (pa.int8(), pa.int64()),
        (pa.int16(), pa.int32()),
        (pa.int32(), pa.int64()),
        (pa.float32(), pa.float64()),
        (pa.int32(), pa.float64()),
        (pa.int16(), pa.float64()),
        (pa.decimal128(10, 2), pa.decimal128(12, 2)),
        (pa.decimal128(10, 2), pa.decimal128(12, 4)),
        (pa.int32(), pa.decimal128(10, 0)),
        (pa.int64(), pa.decimal128(21, 2)),
        (pa.date32(), pa.timestamp("us")),
        (pa.string(), pa.string()),
    ],
)
def test_promotions_allowed(old, new):
    assert promotion_problem(old, new) is None


@pytest.mark.parametrize(
    "old, new, says",
    [
        (pa.int64(), pa.int32(), "narrows"),
        (pa.int64(), pa.float64(), "not a type promotion"),  # not exact beyond 2**53
        (pa.float64(), pa.float32(), "not a type promotion"),
        (pa.decimal128(12, 2), pa.decimal128(10, 2), "loses digits"),
        (pa.decimal128(10, 2), pa.decimal128(11, 4), "loses digits"),
        (pa.int32(), pa.decimal128(9, 0), "needs 10"),
        (pa.string(), pa.int64(), "not a type promotion"),
        (pa.int32(), pa.string(), "not a type promotion"),
        (pa.date32(), pa.timestamp("us", tz="UTC"), "not a type promotion"),
    ],
)
def test_promotions_refused(old, new, says):
    problem = promotion_problem(old, new)
    assert problem is not None and says in problem


def test_every_promotion_is_exact_on_extreme_values():
    cases = [
        (pa.array([-128, 127, None], pa.int8()), pa.int64()),
        (pa.array([-(2**31), 2**31 - 1], pa.int32()), pa.float64()),
        (pa.array([-(2**31), 2**31 - 1], pa.int32()), pa.decimal128(10, 0)),
        (pa.array([float("inf"), float("-inf"), 1.5, None], pa.float32()), pa.float64()),
        (pa.array([decimal.Decimal("-99999999.99")], pa.decimal128(10, 2)), pa.decimal128(13, 3)),
        (pa.array([0, -719162, 2932896], pa.date32()), pa.timestamp("us")),
    ]
    for arr, new in cases:
        assert promotion_problem(arr.type, new) is None
        back = arr.cast(new)
        assert (
            back.to_pylist() == [None if v is None else v for v in back.to_pylist()]
            and back.null_count == arr.null_count
        )
        if not pa.types.is_date32(arr.type):
            assert [v if v is None else float(v) for v in back.to_pylist()] == [
                v if v is None else float(v) for v in arr.to_pylist()
            ]


def test_strict_refuses_every_difference_and_names_merge():
    incoming = BASE.append(pa.field("extra", pa.string()))
    with pytest.raises(ShuffleLayoutError) as e:
        merge_schema("t", v1(), incoming, PINNED, STRICT)
    assert "column 'extra'" in str(e.value) and "schema_mode='merge'" in str(e.value)
    wider = pa.schema([f.with_type(pa.int64()) if f.name == "n" else f for f in BASE])
    with pytest.raises(ShuffleLayoutError, match=r"column 'n' has type int64.*schema_mode='merge'"):
        merge_schema("t", v1(), wider, PINNED, STRICT)
    with pytest.raises(ShuffleLayoutError, match=r"column 'x' is missing.*schema_mode='merge'"):
        merge_schema("t", v1(), pa.schema([f for f in BASE if f.name != "x"]), PINNED, STRICT)
    assert merge_schema("t", v1(), BASE, PINNED, STRICT) is None
    # Column order does not matter.
    assert merge_schema("t", v1(), pa.schema(list(reversed(BASE))), PINNED, STRICT) is None


def test_merge_adds_widens_and_reads_missing_as_null():
    incoming = pa.schema(
        [
            ("k", pa.string()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("n", pa.int64()),
            ("d", pa.decimal128(14, 3)),
            ("country", pa.string()),
        ]
    )
    v2 = merge_schema("t", v1(), incoming, PINNED, MERGE)
    assert v2 is not None and v2.version == 2
    assert v2.schema.names == ["k", "ts", "n", "x", "d", "country"]
    assert v2.schema.field("n").type == pa.int64()
    assert v2.schema.field("d").type == pa.decimal128(14, 3)
    assert v2.field_ids == (1, 2, 3, 4, 5, 6) and v2.last_field_id == 6
    assert any("added column 'country'" in c for c in v2.changes)
    assert any("widened column 'n' int32 -> int64" in c for c in v2.changes)
    # A later run with the narrower type writes under v2 unchanged (read widened).
    assert merge_schema("t", v2, BASE, PINNED, MERGE) is None


@pytest.mark.parametrize(
    "incoming, says",
    [
        (
            pa.schema(
                [("k", pa.string()), ("ts", pa.timestamp("us", tz="UTC")), ("n", pa.string())]
            ),
            "column 'n' has type string, the shuffle has int32",
        ),
        (
            pa.schema([("k", pa.large_string()), ("ts", pa.timestamp("us", tz="UTC"))]),
            "column 'k' has type large_string.*a key column",
        ),
        (
            pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("n", pa.int32())]),
            "column 'k' is missing; it is a key column",
        ),
        (
            pa.schema(
                [
                    ("k", pa.string()),
                    ("ts", pa.timestamp("us", tz="UTC")),
                    pa.field("z", pa.int32(), nullable=False),
                ]
            ),
            "column 'z'.*not nullable",
        ),
        (
            pa.schema([("k", pa.string()), ("ts", pa.timestamp("ms", tz="UTC"))]),
            "the event-time column",
        ),
    ],
)
def test_no_mode_allows(incoming, says):
    for mode in (STRICT, MERGE):
        with pytest.raises(
            ShuffleLayoutError, match="cannot be written in any schema mode.*" + says
        ):
            merge_schema("t", v1(), incoming, PINNED, mode)


def test_alter_renames_drops_widens_adds_and_grows():
    v2 = alter(
        "t",
        v1(),
        Alteration(
            rename={"x": "score"},
            drop=("d",),
            widen={"n": pa.int64()},
            add=(pa.field("d", pa.string()),),
            num_partitions=8,
        ),
        PINNED,
        128,
    )
    assert v2.schema.names == ["k", "ts", "n", "score", "d"]
    # The re-added "d" is a new column: a new field id, never the old one's values.
    assert v2.field_ids == (1, 2, 3, 4, 6)
    assert v2.num_partitions == 8 and v2.version == 2
    res = resolve(v1(), v2)
    assert res.sources["score"].name == "x"
    assert res.sources["d"].name is None
    batch = pa.record_batch(
        [
            pa.array(["a"]),
            pa.array([0], pa.timestamp("us", tz="UTC")),
            pa.array([7], pa.int32()),
            pa.array([1.5], pa.float32()),
            pa.array([decimal.Decimal("3.25")], pa.decimal128(10, 2)),
        ],
        schema=BASE,
    )
    out = read_as(batch, v1(), v2)
    assert out.schema == v2.schema
    assert out.to_pylist() == [
        {"k": "a", "ts": out.column("ts")[0].as_py(), "n": 7, "score": 1.5, "d": None}
    ]


@pytest.mark.parametrize(
    "change, says",
    [
        (Alteration(rename={"k": "key"}), "rename: column 'k' is a key column"),
        (Alteration(rename={"nope": "a"}), "rename: no column 'nope'"),
        (Alteration(rename={"x": "n"}), "rename: column 'n' exists already"),
        (Alteration(drop=("ts",)), "drop: column 'ts' is the event-time column"),
        (Alteration(drop=("nope",)), "drop: no column 'nope'"),
        (Alteration(widen={"n": pa.int16()}), "widen: column 'n': int32 -> int16 narrows"),
        (Alteration(widen={"k": pa.large_string()}), "widen: column 'k' is a key column"),
        (Alteration(add=(pa.field("n", pa.int64()),)), "add: column 'n' exists already"),
        (
            Alteration(add=(pa.field("q", pa.int64(), nullable=False),)),
            "add: column 'q' is not nullable",
        ),
        (Alteration(num_partitions=4), "does not grow the shuffle's 4 partitions"),
        (Alteration(num_partitions=200), "more than the shuffle's 128 key groups"),
    ],
)
def test_alter_refusals_name_the_column_and_rule(change, says):
    with pytest.raises(ShuffleLayoutError, match="nothing was changed.*" + says):
        alter("t", v1(), change, PINNED, 128)


def test_alter_refuses_every_bad_change_at_once_and_an_empty_one():
    with pytest.raises(ShuffleLayoutError) as e:
        alter("t", v1(), Alteration(drop=("k",), widen={"x": pa.int8()}), PINNED, 128)
    assert "drop: column 'k'" in str(e.value) and "widen: column 'x'" in str(e.value)
    with pytest.raises(ShuffleOptionError, match="nothing to change"):
        alter("t", v1(), Alteration(), PINNED, 128)


def test_column_type_takes_spark_names_and_arrow_types():
    assert column_type("bigint", "w") == pa.int64()
    assert column_type("DECIMAL(12, 2)", "w") == pa.decimal128(12, 2)
    assert column_type("timestamp_ntz", "w") == pa.timestamp("us")
    assert column_type(pa.int8(), "w") == pa.int8()
    with pytest.raises(ShuffleOptionError, match="w: 'varchar' is not a column type"):
        column_type("varchar", "w")


def layout_record(schema=BASE, n=4):
    return Layout("t", ("k",), n, 128, schema, "ts")


def change(version, schema, ids, last, n=4, cid=None):
    return LayoutVersion(
        version, schema, tuple(ids), last, n, ("c",), change_id=cid or f"c{version}"
    )


def commit_json(run, window, version=1, partitions=None):
    return Commit(
        run,
        window,
        "2024-01-01T00:00:00+00:00",
        ((0, 0),),
        partitions or {0: PartitionRange(0, 1, 1, 1)},
        1,
        1,
        1,
        layout_version=version,
    ).to_json()


def test_change_records_build_the_latest_layout_and_runs_keep_their_version():
    s2 = BASE.append(pa.field("c", pa.string()))
    s3 = pa.schema([f.with_name("score") if f.name == "x" else f for f in s2])
    records = [
        (LAYOUT_KEY, layout_record().to_json()),
        (COMMIT_PREFIX + "r1", commit_json("r1", "w1")),
        (change_key(2, "a"), version_to_json(change(2, s2, range(1, 7), 6))),
        (COMMIT_PREFIX + "r2", commit_json("r2", "w2", 2)),
        (change_key(3, "b"), version_to_json(change(3, s3, range(1, 7), 6, n=8, cid="b"))),
        (COMMIT_PREFIX + "r3", commit_json("r3", "w3", 3)),
    ]
    log = ShuffleLog.from_records("t", records)
    assert log.layout.version == 3 and log.layout.schema == s3 and log.layout.num_partitions == 8
    assert log.layout_record.schema == BASE and log.layout_record.version == 1
    assert [log.run_version(c).version for c in log.commits] == [1, 2, 3]
    assert log.run_version(log.commits[0]).num_partitions == 4
    assert not log.bad_records
    # The commit JSON of version 1 is as before evolution existed.
    assert "layout_version" not in json.loads(commit_json("r", "w"))
    # The layout handed to tasks carries its versions.
    again = Layout.from_json(log.layout.to_json())
    assert again == log.layout
    assert "versions" not in json.loads(layout_record().to_json())


def test_of_two_records_of_a_version_the_first_wins_and_a_gap_is_reported():
    s2 = BASE.append(pa.field("c", pa.string()))
    s2b = BASE.append(pa.field("other", pa.int64()))
    s4 = s2.append(pa.field("e", pa.string()))
    records = [
        (LAYOUT_KEY, layout_record().to_json()),
        (change_key(2, "first"), version_to_json(change(2, s2, range(1, 7), 6, cid="first"))),
        (change_key(2, "second"), version_to_json(change(2, s2b, range(1, 7), 6, cid="second"))),
        (change_key(4, "gap"), version_to_json(change(4, s4, range(1, 8), 7, cid="gap"))),
        (change_key(3, "bad"), b"{not json"),
    ]
    log = ShuffleLog.from_records("t", records)
    assert log.layout.version == 2 and log.layout.schema == s2
    assert log.version_keys == {2: change_key(2, "first")}
    reasons = {b.key: b.reason for b in log.bad_records}
    assert "follows a missing version 3" in reasons[change_key(4, "gap")]
    assert "not a readable layoutversion record" in reasons[change_key(3, "bad")]
    # A tombstone removes its record: the second becomes version 2.
    log = ShuffleLog.from_records("t", [*records[:3], (change_key(2, "first"), None)])
    assert log.layout.schema == s2b


def test_a_run_of_a_version_the_log_lacks_is_refused_by_name():
    records = [
        (LAYOUT_KEY, layout_record().to_json()),
        (COMMIT_PREFIX + "r", commit_json("r", "w", 5)),
    ]
    log = ShuffleLog.from_records("t", records)
    with pytest.raises(
        ShuffleFormatError, match="layout version 5 is not in its commit log 't__commits'"
    ):
        log.run_version(log.commits[0])


def test_a_layout_of_a_later_format_version_is_refused():
    d = json.loads(layout_record().to_json())
    d["format_version"] = 2
    with pytest.raises(ShuffleFormatError, match="format_version 2.*reads \\[1\\].*upgrade"):
        ShuffleLog.from_records("t", [(LAYOUT_KEY, json.dumps(d))])


def test_keys_and_json_round_trip():
    v = change(2, BASE, range(1, 6), 9, cid="abc")
    assert version_from_json(version_to_json(v)) == v
    assert version_of_key(change_key(12, "ab-c.d_e")) == 12
    assert version_of_key("change/0/x") is None and version_of_key("change/2") is None


# --- property: a generated history of changes; every run reads as written, in the latest ---

_TYPES = [
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.float32(),
    pa.float64(),
    pa.decimal128(9, 2),
    pa.string(),
    pa.date32(),
]


def _values(rng, t, n):
    out = []
    for _ in range(n):
        if rng.random() < 0.2:
            out.append(None)
        elif pa.types.is_integer(t):
            bits = t.bit_width - 1
            out.append(
                rng.choice([-(2**bits), 2**bits - 1, 0, rng.randint(-(2**bits), 2**bits - 1)])
            )
        elif pa.types.is_floating(t):
            out.append(rng.choice([float("inf"), float("-inf"), -0.0, 0.5, rng.uniform(-1e6, 1e6)]))
        elif pa.types.is_decimal(t):
            top = 10**t.precision - 1
            out.append(
                decimal.Decimal(rng.choice([top, -top, rng.randint(-top, top)])).scaleb(-t.scale)
            )
        elif pa.types.is_date32(t):
            out.append(rng.choice([-719_162, 2_932_896, rng.randint(-719_162, 2_932_896)]))
        elif pa.types.is_timestamp(t):
            out.append(rng.randint(-(2**50), 2**50))
        else:
            out.append(rng.choice(["", "é", "a\x00b", str(rng.random())]))
    if pa.types.is_date32(t):
        return pa.array(out, pa.int32()).cast(t)
    if pa.types.is_timestamp(t):
        return pa.array(out, pa.int64()).cast(t)
    return pa.array(out, t)


def _random_change(rng, cur: LayoutVersion, names_used):
    free = [f for f in cur.schema if f.name != "k"]
    kind = rng.choice(["add", "drop", "rename", "widen", "readd"])
    if kind == "drop" and free:
        return Alteration(drop=(rng.choice(free).name,))
    if kind == "rename" and free:
        new = f"c{len(names_used)}"
        names_used.append(new)
        return Alteration(rename={rng.choice(free).name: new})
    if kind == "widen":
        for f in rng.sample(free, len(free)):
            wider = [
                t
                for t in _TYPES + [pa.decimal128(12, 3), pa.timestamp("us")]
                if not t.equals(f.type) and promotion_problem(f.type, t) is None
            ]
            if wider:
                return Alteration(widen={f.name: rng.choice(wider)})
    if kind == "readd" and names_used:
        gone = [n for n in names_used if cur.schema.get_field_index(n) < 0]
        if gone:
            return Alteration(add=(pa.field(rng.choice(gone), rng.choice(_TYPES)),))
    new = f"c{len(names_used)}"
    names_used.append(new)
    return Alteration(add=(pa.field(new, rng.choice(_TYPES)),))


@pytest.mark.parametrize("seed", range(40))
def test_generated_histories_read_every_run_as_written(seed):
    rng = random.Random(seed)
    names = ["c0", "c1"]
    schema = pa.schema([("k", pa.string()), ("c0", rng.choice(_TYPES)), ("c1", rng.choice(_TYPES))])
    versions = [LayoutVersion.first(schema, 4)]
    runs = []  # (version, batch as written, {field id: values})
    for _ in range(rng.randint(2, 7)):
        cur = versions[-1]
        n = rng.randint(0, 5)
        cols = {f.name: _values(rng, f.type, n) for f in cur.schema}
        cols["k"] = pa.array([f"k{i}" for i in range(n)])
        # A merge write may leave out a column: it reads as null.
        left_out = rng.choice([None, *[f.name for f in cur.schema if f.name != "k"]])
        written = {c: a for c, a in cols.items() if c != left_out}
        batch = pa.record_batch(list(written.values()), names=list(written))
        by_id = {cur.field_id(c): a for c, a in written.items()}
        runs.append((cur, batch, by_id))
        try:
            nxt = alter("t", cur, _random_change(rng, cur, names), Pinned(("k",)), 128)
        except ShuffleLayoutError:
            continue
        versions.append(nxt)
    latest = versions[-1]
    for run, batch, by_id in runs:
        got = read_as(batch, run, latest)
        assert got.schema == latest.schema
        for f, fid in zip(latest.schema, latest.field_ids, strict=True):
            col = got.column(f.name)
            if fid in by_id:
                want = by_id[fid].cast(f.type)
                assert col.to_pylist() == want.to_pylist(), (seed, f.name)
            else:
                assert col.null_count == batch.num_rows, (seed, f.name)


def test_merge_refuses_a_name_the_shuffle_renamed():
    v2 = alter("t", v1(), Alteration(rename={"x": "score"}), PINNED, 128)
    from orchestration.shuffle.core.evolution import former_names

    renamed = former_names([v1(), v2])
    assert renamed == {"x": "score"}
    with pytest.raises(ShuffleLayoutError, match="column 'x' was renamed to 'score'"):
        merge_schema("t", v2, BASE, PINNED, MERGE, renamed)
    # Added again on purpose, the old name is a new column and no longer a former name.
    v3 = alter("t", v2, Alteration(add=(pa.field("x", pa.float32()),)), PINNED, 128)
    assert former_names([v1(), v2, v3]) == {}


def test_a_reader_of_an_older_version_stops_at_a_later_run():
    v2 = alter("t", v1(), Alteration(add=(pa.field("c", pa.string()),)), PINNED, 128)
    batch = pa.record_batch([pa.array(["a"])], names=["k"])
    with pytest.raises(
        ShuffleLayoutError, match="layout version 2, after this read took version 1"
    ):
        read_as(batch, v2, v1())
