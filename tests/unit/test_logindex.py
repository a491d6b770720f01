"""The commit log's index: a fold of the index and the log's tail is the fold of every record,
for the windows read, over generated logs (re-runs, tombstones, expiry, layout changes,
records that cannot be read)."""

import random

import pyarrow as pa
import pytest

from orchestration.shuffle import Commit, Layout, ShuffleFormatError
from orchestration.shuffle.core.commitlog import (
    COMMIT_PREFIX,
    EXPIRED_PREFIX,
    LAYOUT_KEY,
    Expired,
    LogFold,
    PartitionRange,
    version_to_json,
)
from orchestration.shuffle.core.evolution import LayoutVersion, change_key
from orchestration.shuffle.core.logindex import (
    ALWAYS,
    UNWINDOWED,
    WINDOWED,
    build_index,
    classify,
    decode_index,
    encode_index,
    index_topic,
    record_crc,
)

SCHEMA = pa.schema([("k", pa.string()), ("x", pa.int64())])
WINDOWS = [f"2024-01-{d:02d}" for d in range(1, 13)]


def layout_json(partitions: int = 4) -> str:
    return Layout("t", ("k",), partitions, 64, SCHEMA).to_json()


def commit_json(run: str, window: str | None, offset: int) -> str:
    return Commit(
        run, window, "2024-01-01T00:00:00+00:00", ((0, 0),),
        {0: PartitionRange(offset, offset + 1, 5, 1)}, 5, 50, 1,
    ).to_json()  # fmt: skip


def expired_json(run: str, window: str | None) -> str:
    return Expired(run, window, "2024-02-01T00:00:00+00:00", "retention", {}).to_json()


def generated_log(rng: random.Random, n: int) -> list[tuple[int, str | None, bytes | None]]:
    """A log of ``n`` records after its layout record, as writers, re-runs, retention and
    damage leave one (offsets with gaps, as transaction markers and compaction leave)."""
    out: list[tuple[int, str | None, bytes | None]] = []
    offset = 0

    def put(key, value):
        nonlocal offset
        offset += rng.choice((1, 1, 1, 2))
        out.append((offset, key, value if value is None else str(value).encode()))

    put(LAYOUT_KEY, layout_json())
    runs: list[tuple[str, str | None]] = []
    for i in range(n):
        roll = rng.random()
        if roll < 0.55 or not runs:
            run = f"r{i}"
            window = rng.choice([*WINDOWS, None]) if rng.random() < 0.95 else None
            runs.append((run, window))
            put(COMMIT_PREFIX + run, commit_json(run, window, i))
        elif roll < 0.65:
            run, window = rng.choice(runs)
            put(COMMIT_PREFIX + run, None)  # expiry deletes a commit record
            if rng.random() < 0.7:
                put(EXPIRED_PREFIX + run, expired_json(run, window))
        elif roll < 0.7:
            run, _ = rng.choice(runs)
            put(EXPIRED_PREFIX + run, None)
        elif roll < 0.75:
            run, window = rng.choice(runs)
            put(COMMIT_PREFIX + run, commit_json(run, window, i))  # written again
        elif roll < 0.78:
            run = f"bad{i}"
            text = rng.choice(
                ['{"window": "' + rng.choice(WINDOWS) + '", "run_id": ', "{not json", "{}"]
            )
            put(COMMIT_PREFIX + run, text)
        elif roll < 0.8:
            put(None, "no key")
        elif roll < 0.82:
            put(f"foreign/{i % 3}", rng.choice(["x", None]))
        elif roll < 0.84:
            put(LAYOUT_KEY, layout_json(rng.choice((4, 4, 8))))  # written again
        elif roll < 0.86:
            put(EXPIRED_PREFIX + f"e{i}", "{cut")
        elif roll < 0.88:
            schema = SCHEMA.append(pa.field(f"c{i}", pa.string()))
            n_fields = len(schema)
            v = LayoutVersion(2, schema, tuple(range(1, n_fields + 1)), n_fields, 4)
            put(change_key(2, f"w{i}"), version_to_json(v))
        else:
            run, window = rng.choice(runs)
            put(COMMIT_PREFIX + f"{run}x", commit_json(f"{run}x", window, i))
    return out


def fold(records) -> LogFold:
    f = LogFold("t")
    f.add([(k, v) for _, k, v in records], [o for o, _, _ in records])
    return f


def through_index(records, cut: int, step: int, windows):
    """Folds the index of ``records[:cut]`` (built in two steps, at ``step``), encoded and
    decoded, with the records from ``cut`` on."""
    first = build_index(None, records[:step], records[step - 1][0] + 1 if step else 0)
    index = build_index(first, records[step:cut], records[cut - 1][0] + 1)
    opened = decode_index(encode_index(index))
    assert opened.through == index.through and opened.last == index.last
    kept = opened.index(windows)
    return fold([*(r.record for r in kept.rows), *records[cut:]])


def outcome(fn):
    try:
        return ("ok", fn())
    except ShuffleFormatError as exc:
        return ("refused", str(exc))


@pytest.mark.parametrize("seed", range(60))
def test_the_index_and_the_tail_fold_to_the_log(seed):
    rng = random.Random(seed)
    records = generated_log(rng, rng.randint(1, 160))
    cut = rng.randint(1, len(records))
    step = rng.randint(0, cut)
    full_fold, whole_fold = fold(records), through_index(records, cut, step, None)
    assert whole_fold.first_layout == full_fold.first_layout
    full, whole = outcome(full_fold.log), outcome(whole_fold.log)
    if full[0] == "refused":
        assert whole == full
        return
    a, b = full[1], whole[1]
    assert b.commits == a.commits and b.commit_offsets == a.commit_offsets
    assert b.expired == a.expired and b.bad_records == a.bad_records
    assert b.windows == a.windows and b.layout == a.layout
    assert b.layout_record == a.layout_record and b.version_keys == a.version_keys
    for _ in range(4):
        wanted = rng.sample(WINDOWS, rng.randint(1, 3))
        part = through_index(records, cut, step, wanted).log()
        assert part.visible(wanted) == a.visible(wanted)
        assert part.layout == a.layout and part.bad_records == a.bad_records
        assert outcome(lambda p=part, w=wanted: p.require_readable(w)) == outcome(
            lambda w=wanted: a.require_readable(w)
        )
        expired = a.expired_windows()
        assert {w: m for w, m in part.expired_windows().items() if w in wanted} == {
            w: m for w, m in expired.items() if w in wanted
        }
        for c in part.visible(wanted):
            assert part.commit_offsets[c.run_id] == a.commit_offsets[c.run_id]


def test_a_read_of_one_window_decodes_its_bucket_only():
    records = [(0, LAYOUT_KEY, layout_json().encode())]
    for i in range(2000):
        w = f"w{i % 500}"
        records.append((i + 1, COMMIT_PREFIX + f"r{i}", commit_json(f"r{i}", w, i).encode()))
    index = build_index(None, records, 2001)
    opened = decode_index(encode_index(index))
    assert opened.buckets == 2000 // 64
    kept = opened.index(["w7"])
    # The layout and the four runs of w7 (and others of its bucket are left out).
    runs = [COMMIT_PREFIX + f"r{i}" for i in (7, 507, 1007, 1507)]
    assert [r.key for r in kept.rows] == [LAYOUT_KEY, *runs]
    assert len(opened.index(None).rows) == 2001


def test_classify_and_topic():
    assert index_topic("events") == "events__commits.index"
    assert classify(LAYOUT_KEY, b"{}") == (None, ALWAYS)
    assert classify(COMMIT_PREFIX + "r", commit_json("r", "w", 0).encode()) == ("w", WINDOWED)
    assert classify(COMMIT_PREFIX + "r", commit_json("r", None, 0).encode()) == (None, UNWINDOWED)
    assert classify(COMMIT_PREFIX + "r", b"{cut") == (None, ALWAYS)
    assert classify(EXPIRED_PREFIX + "r", expired_json("r", "w").encode()) == ("w", WINDOWED)
    assert classify(None, b"x") == (None, ALWAYS)
    assert record_crc("a", b"b") != record_crc("ab", b"")


def test_what_is_not_an_index_is_refused():
    with pytest.raises(ShuffleFormatError, match="not a commit-log index"):
        decode_index(b"PAR1 not arrow")
    table = pa.table({"x": [1]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    with pytest.raises(ShuffleFormatError):
        decode_index(sink.getvalue().to_pybytes())
