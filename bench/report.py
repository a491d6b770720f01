"""Writes the benchmark tables of the docs' Performance page (``docs/performance.md``) from
the benchmarks' results (never by hand).

Reads ``.local/bench/results.json`` (written by ``scripts/dev bench``, ``bench.shuffle_bench``)
and replaces what stands between ``<!-- bench:NAME:start -->`` and ``<!-- bench:NAME:end -->``
in docs/performance.md, for NAME in ``targets`` (each target: ours, the baseline, the ratio, met or
not), ``io`` (write and read against Spark's Kafka sink and source) and ``memory`` (peak
resident memory of a Python worker per phase); and, from the other benchmarks' files in
``.local/bench``, the tables of ``WORK_TABLES`` whose files are there (the others stay as
the page has them); and the README's summary table (``summary``) from the same files.

Run::

    python -m bench.report                      # results.json -> docs/performance.md
    python -m bench.report --check              # exit 1 if the page is not up to date
    python -m bench.report --results a.json b.json --chart .local/bench/results.png
    python -m bench.report --results a.json --memory no-reuse.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from bench.results import (
    MEMORY_GROWTH_BOUND,
    MEMORY_PHASES,
    READ_LIMIT_BOUND,
    T9_BOUND,
    TIME_GROWTH_BOUND,
    chart,
    growth,
    growth_chart,
    is_ours,
    jvm_growth_input,
    memory_growth,
    shuffle_growth_input,
)

ROOT = Path(__file__).resolve().parents[1]


def _seconds(s: float) -> str:
    return f"{s * 1000:.1f} ms" if s < 0.1 else f"{s:.2f} s"


def _rows(n: str) -> str:
    value = int(n)
    return f"{value / 1e6:g}M" if value >= 1_000_000 else f"{value / 1e3:g}k"


def _in_order(targets: dict) -> list[tuple[str, dict]]:
    """Targets T, then B, then P, by number; a variant (``T2-arrow``) after its target, as
    the results list them (merged files list a later file's targets last)."""
    given = list(targets.items())

    def key(item: tuple[int, tuple[str, dict]]) -> tuple[int, int, int]:
        at, (name, _) = item
        m = re.match(r"([A-Z]+)(\d*)", name)
        letters, number = (m.group(1), m.group(2)) if m else (name, "")
        return ({"T": 0, "B": 1, "P": 2}.get(letters, 3), int(number or 0), at)

    return [item for _, item in sorted(enumerate(given), key=key)]


def targets_table(report: dict) -> str:
    lines = [
        "| target | rows | runs | ours | baseline | ratio | wanted | |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for size, summary in sorted(report["sizes"].items(), key=lambda kv: int(kv[0])):
        for name, t in _in_order(summary.get("targets", {})):
            runs = t.get("runs") or len(summary.get(t["ours"], {}).get("runs", [])) or "?"
            if t["kind"] == "speedup":
                ratio, wanted = f"{t['ratio']:.2f}x faster", f">= {t['bound']:g}x"
            else:
                ratio, wanted = f"{t['ratio']:.3f} of the baseline", f"<= {t['bound']:g}"
            lines.append(
                f"| {name}: {t['title']} | {_rows(size)} | {runs} | `{t['ours']}` "
                f"{_seconds(t['ours_seconds'])} | `{t['baseline']}` "
                f"{_seconds(t['baseline_seconds'])} | {ratio} | {wanted} | "
                f"{'met' if t['met'] else '**missed**'} |"
            )
    lines.append("")
    lines.append(
        "Medians of the runs counted, each pair side by side in one invocation (alternating "
        f"which goes first), `{report['master']}` on a {report.get('cores', '?')}-core "
        f"machine, {report['partitions']} Kafka partitions."
    )
    return "\n".join(lines)


def io_table(report: dict) -> str:
    lines = [
        "| rows | write: shuffle / Spark sink | write, row path / Spark sink "
        "| read: shuffle / Spark source | Arrow hand-over alone |",
        "|---|---|---|---|---|",
    ]
    for size, s in sorted(report["sizes"].items(), key=lambda kv: int(kv[0])):

        def pair(a: str, b: str, s=s) -> str:
            if a not in s or b not in s:
                return "not run"
            x, y = s[a]["median_seconds"], s[b]["median_seconds"]
            return f"{_seconds(x)} / {_seconds(y)} ({y / x:.1f}x)"

        handover = s.get("arrow_handover")
        if not ({"shuffle_write", "shuffle_read", "arrow_handover"} & s.keys()):
            continue
        lines.append(
            f"| {_rows(size)} | {pair('shuffle_write', 'spark_write')} | "
            f"{pair('shuffle_write_rows', 'spark_write')} | "
            f"{pair('shuffle_read', 'spark_read')} | "
            f"{_seconds(handover['median_seconds']) if handover else 'not run'} |"
        )
    return "\n".join(lines)


def memory_table(report: dict) -> str:
    """One row per phase of ours: peak worker memory per size and, with two sizes or more,
    T9 (the largest size over the smallest, which must stay within 20%)."""
    sizes = sorted(report["sizes"], key=int)
    growth = memory_growth(report)
    head = "| phase | " + " | ".join(_rows(s) for s in sizes)
    lines = [
        head + (" | T9: largest / smallest | wanted | |" if growth else " |"),
        "|---|" + "---|" * (len(sizes) + (3 if growth else 0)),
    ]
    for p in MEMORY_PHASES:
        cells = [
            f"{report['sizes'][s][p]['worker_peak_rss_mib']:.0f} MiB"
            if p in report["sizes"][s]
            else "not run"
            for s in sizes
        ]
        if cells.count("not run") == len(cells):
            continue
        line = f"| `{p}` | " + " | ".join(cells) + " |"
        if growth:
            g = growth.get(p)
            line += (
                f" {g['ratio']:.2f}x | <= {g['bound']:g}x | {'met' if g['met'] else '**missed**'} |"
                if g
                else " | | |"
            )
        lines.append(line)
    reuse = "reused" if report.get("python_worker_reuse", True) else "fresh for each task"
    lines.append("")
    lines.append(
        f"Peak resident memory of one Python worker (the largest of the runs; workers {reuse})."
    )
    return "\n".join(lines)


def merge(reports: list[dict]) -> dict:
    """Several runs' results as one: per size, phases and targets of later runs are added
    (a phase measured in two runs keeps the later run's); the run settings must agree."""
    merged = json.loads(json.dumps(reports[0]))
    for other in reports[1:]:
        for key in ("master", "partitions", "cores"):
            if other.get(key) != merged.get(key):
                raise SystemExit(f"results differ in {key}: {merged.get(key)} / {other.get(key)}")
        if other.get("repeat") != merged.get("repeat"):
            merged["repeat"] = f"{merged.get('repeat')} / {other.get('repeat')}"
        for size, summary in other["sizes"].items():
            mine = merged["sizes"].setdefault(size, {})
            targets = {**mine.get("targets", {}), **summary.get("targets", {})}
            mine.update(summary)
            mine["targets"] = targets
    return merged


P_BOUNDS = {"P3": 2.0, "P4": 0.9, "P5": T9_BOUND, "P6": 1.15, "P7": 3.0}


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def session_rows(work: Path) -> list[tuple[str, str, str, str]]:
    """P1 and P2, each (target, what was measured, wanted, met / missed / not run), from
    ``session.json`` in ``work`` (``bench/session_bench.py``)."""
    out: list[tuple[str, str, str, str]] = []

    def verdict(ok: bool) -> str:
        return "met" if ok else "**missed**"

    session = _load(work / "session.json") or {}
    p1_runs = [("p1", ""), ("p1_python", " (session without the jar)")]
    for key, which in p1_runs:
        for rows, r in sorted((session.get(key) or {}).items(), key=lambda kv: int(kv[0])):
            if "states" not in r:
                continue  # an earlier version's results
            for name, c in r["targets"].items():
                out.append(
                    (
                        f"P1 {name}, {_rows(rows)} rows{which}",
                        f"fresh {c['fresh']:.2f}x (first round {c['fresh_first_round']:.2f}x), "
                        f"after a minute idle {c['idle']:.2f}x, after a pandas UDF job "
                        f"{c['after_job']:.2f}x; medians of {r['rounds']} rounds",
                        f">= {c['bound']:g}x in each",
                        verdict(c["met"]),
                    )
                )
    if not any("states" in r for k, _ in p1_runs for r in (session.get(k) or {}).values()):
        out.append(("P1", "not run", "", "not run"))
    p2 = session.get("p2")
    sessions = [("", p2), (" (session with jvm_spark_conf)", session.get("p2_jvm"))]
    for which, p2_run in sessions:
        for name, t in (p2_run or {}).get("targets", {}).items():
            out.append(
                (
                    f"P2 {name}, one 1k-row window{which}",
                    f"{_seconds(t['ours'])} vs {_seconds(t['baseline'])} from Parquet "
                    f"({t['ratio']:.2f} of its time)",
                    "<= 1",
                    verdict(t["met"]),
                )
            )
    if not p2:
        out.append(("P2", "not run", "", "not run"))
    return out


def small_window_table(work: Path) -> str:
    """One 1,000-row window read on the JVM path, a small read (one split, keyed), against a
    1,000-row Parquet file's read in the same session, from ``session.json``'s ``p2_jvm``
    (``bench/session_bench.py --jvm``): P2's read target, then the further pairs, Spark's
    ``groupBy(k).agg`` with whether each plan has an Exchange, and the parts of one read."""
    p2 = (_load(work / "session.json") or {}).get("p2_jvm") or {}
    more = p2.get("small_read")
    if not more:
        return "Not run: `scripts/dev bench-session --jvm --no-p1`."
    read = p2["targets"]["read"]
    lines = [
        "| a 1,000-row window on the JVM path | ours | a 1,000-row Parquet file | ratio | "
        "wanted | |",
        "|---|---|---|---|---|---|",
        f"| P2 read: planned, DataFrame made and run, against the file's DataFrame run "
        f"| {_seconds(read['ours'])} | {_seconds(read['baseline'])} | {read['ratio']:.2f} "
        f"| <= 1 | {'met' if read['met'] else '**missed**'} |",
    ]
    labels = {
        "per_partition": "the same read in one split per Kafka partition (`parallelism=None`)",
        "made_once": "both DataFrames made once, each only run",
        "new_frame": "both made in the timing (the file's `spark.read.parquet` too)",
        "group_by_key": "`groupBy(k).agg` over each, ours planned in the timing as above",
    }
    for name, label in labels.items():
        t = more.get(name)
        if t:
            lines.append(
                f"| {label} | {_seconds(t['ours'])} | {_seconds(t['baseline'])} "
                f"| {t['ratio']:.2f} | | |"
            )
    ex = more.get("exchanges") or {}
    if ex:
        yes = {True: "an Exchange", False: "no Exchange"}
        lines.append(
            f"| the `groupBy(k).agg`'s plan | {yes[ex['ours']]} | {yes[ex['parquet']]} "
            f"| | none over the read | {'met' if not ex['ours'] else '**missed**'} |"
        )
    parts = p2.get("read_parts") or {}
    if parts:
        lines.append(
            "| the read's parts | "
            + ", ".join(f"{k} {_seconds(v)}" for k, v in parts.items())
            + " | | | | |"
        )
    runs = len(next(iter(p2["times"].values())))
    lines += [
        "",
        f"Medians of {runs} runs of each, every pair side by side in one invocation "
        f"(alternating which goes first), `{p2.get('master', 'local[2]')}`.",
    ]
    return "\n".join(lines)


def session_table(work: Path) -> str:
    lines = ["| target | measured | wanted | |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in session_rows(work)]
    return "\n".join(lines)


def round_three(
    work: Path, results: dict | None = None, memory: dict | None = None
) -> list[tuple[str, str, str, str]]:
    """P3-P7, each (target, what was measured, wanted, met / missed / not run), from the
    results of three benchmarks in ``work``: ``records.json`` (P3, P4), ``results.json``
    (P5, P6; or ``results`` and, for P5, ``memory`` when given) and ``queue.json`` (P7).
    P1 and P2 are :func:`session_rows`."""
    out: list[tuple[str, str, str, str]] = []

    def verdict(ok: bool) -> str:
        return "met" if ok else "**missed**"

    records = _load(work / "records.json") or {}
    sizes = records.get("sizes") or {}
    big = max(sizes, key=int) if sizes else None
    if big is None:
        out += [("P3", "not run", "", "not run"), ("P4", "not run", "", "not run")]
    else:
        s = sizes[big]
        r4 = s["stream_vs_batch_throughput"]
        # The JVM executor of read_records, when the run had it; the Python source beside.
        r3 = s.get("kafka_records_jvm_vs_spark_speedup", s["kafka_records_vs_spark_speedup"])
        measured = f"{r3:.2f}x faster"
        if "kafka_records_jvm_vs_spark_speedup" in s:
            measured = (
                f"on the JVM {measured} (the Python source "
                f"{s['kafka_records_vs_spark_speedup']:.2f}x)"
            )
        out.append(
            (
                f"P3 kafka-records / Spark kafka source, {_rows(big)} messages",
                measured,
                f">= {P_BOUNDS['P3']:g}x",
                verdict(r3 >= P_BOUNDS["P3"]),
            )
        )
        alone = s["stream_processing_vs_batch_throughput"]
        measured = f"{r4:.2f} (micro-batches alone {alone:.2f})"
        # On the JVM path, when the run had it (stream and batch both there); Python beside.
        if "stream_vs_batch_throughput_jvm" in s:
            measured = (
                f"on the JVM {s['stream_vs_batch_throughput_jvm']:.2f} (micro-batches alone "
                f"{s['stream_processing_vs_batch_throughput_jvm']:.2f}); the Python path "
                f"{measured}"
            )
            r4 = s["stream_vs_batch_throughput_jvm"]
        out.append(
            (
                f"P4 streaming / batch read throughput, {_rows(big)} rows",
                measured,
                f">= {P_BOUNDS['P4']:g}",
                verdict(r4 >= P_BOUNDS["P4"]),
            )
        )
    results = results if results is not None else _load(work / "results.json")
    memory = memory if memory is not None else results
    growth = memory_growth(memory) if memory else {}
    if growth:
        worst = max(growth.items(), key=lambda kv: kv[1]["ratio"])
        missed = [n for n, g in growth.items() if not g["met"]]
        out.append(
            (
                "P5 worker memory, largest size / smallest, every phase",
                f"worst `{worst[0]}` {worst[1]['ratio']:.2f}x; {len(missed)} of {len(growth)} "
                "phases over",
                f"<= {P_BOUNDS['P5']:g}x",
                verdict(not missed),
            )
        )
    else:
        out.append(("P5", "not run", "", "not run"))
    big_r = max(results["sizes"], key=int) if results and results.get("sizes") else None
    s = results["sizes"][big_r] if big_r else {}
    if "shuffle_write_rows" in s and "arrow_handover" in s:
        r6 = s["shuffle_write_rows"]["median_seconds"] / s["arrow_handover"]["median_seconds"]
        out.append(
            (
                f"P6 row-path write / Arrow hand-over floor, {_rows(big_r)} rows",
                f"{_seconds(s['shuffle_write_rows']['median_seconds'])} vs "
                f"{_seconds(s['arrow_handover']['median_seconds'])} ({r6:.2f}x)",
                f"<= {P_BOUNDS['P6']:g}x",
                verdict(r6 <= P_BOUNDS["P6"]),
            )
        )
    else:
        out.append(("P6", "not run", "", "not run"))
    queue = _load(work / "queue.json")
    if queue:
        q = queue["summary"]
        producer = "default producer" if queue.get("producer_batch") is None else "batched"
        ok = q["io_8_vs_2"] >= P_BOUNDS["P7"] and queue.get("producer_batch") is None
        out.append(
            (
                f"P7 queue, 8 vs 2 consumers, I/O-bound ({producer})",
                f"{q['io_8_vs_2']:.2f}x",
                f">= {P_BOUNDS['P7']:g}x",
                verdict(ok),
            )
        )
    else:
        out.append(("P7", "not run", "", "not run"))
    return out


def round_three_table(work: Path, results: dict | None = None, memory: dict | None = None) -> str:
    lines = ["| target | measured | wanted | |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in round_three(work, results, memory)]
    return "\n".join(lines)


def jvm_rows(work: Path) -> list[tuple[str, str, str, str]]:
    """The JVM read path's targets from ``jvm.json`` (``bench/jvm_bench.py``), each size:
    (target, what was measured, wanted, met / missed); one "not run" row without the file."""
    report = _load(work / "jvm.json")
    if not report or not report.get("sizes"):
        return [("JVM read path", "not run", "", "not run")]
    out = []
    for rows, r in sorted(report["sizes"].items(), key=lambda kv: int(kv[0])):
        for name, t in r["targets"].items():
            if t["kind"] == "speedup":
                measured = f"{t['ratio']:.2f}x"
                wanted = f">= {t['bound']:g}x"
            else:
                measured = f"{t['ratio']:.2f} of its time"
                wanted = f"<= {t['bound']:g}"
            out.append(
                (
                    f"{name}, {_rows(rows)} rows",
                    f"{_seconds(t['ours_seconds'])} vs {_seconds(t['baseline_seconds'])}: "
                    f"{measured}",
                    wanted,
                    "met" if t["met"] else "**missed**",
                )
            )
    return out


def jvm_table(work: Path) -> str:
    lines = ["| target | measured | wanted | |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in jvm_rows(work)]
    return "\n".join(lines)


# The sorted runs' pairs of ``jvm.json``: (its target's name, how the page names it).
SORTED_PAIRS = (
    ("sorted join vs Parquet, no broadcast",
     "join of two sorted shuffles vs the Parquet join, no broadcast"),
    ("sorted join vs bucketed sorted", "the same vs the bucketed, sorted Parquet join"),
    ("sorted reuse vs bucketed sorted",
     "sorted write + window `lag` + first 3 per key vs the bucketed sorted table's"),
    ("sorted write vs unsorted write", "sorted write vs unsorted write (the cost of sorting)"),
)  # fmt: skip


def sorted_table(work: Path) -> str:
    """The sorted runs' pairs of the JVM benchmark (``jvm.json``), a column per size."""
    report = _load(work / "jvm.json")
    if not report or not report.get("sizes"):
        return "not run: `scripts/dev bench-jvm` writes `.local/bench/jvm.json`"
    sizes = sorted(report["sizes"], key=int)
    lines = [
        "| pair | " + " | ".join(f"{_rows(n)} rows" for n in sizes) + " | target |",
        "|---|" + "---|" * len(sizes) + "---|",
    ]
    for name, title in SORTED_PAIRS:
        cells, bound = [], ""
        for n in sizes:
            t = report["sizes"][n].get("targets", {}).get(name)
            if t is None:
                cells.append("not run")
                continue
            ratio = f"{t['ratio']:.2f}x" if t["kind"] == "speedup" else f"{t['ratio']:.2f}"
            cells.append(
                f"{t['ours_seconds']:.3f} s vs {t['baseline_seconds']:.3f} s: **{ratio}**"
                + ("" if t["met"] else " (missed)")
            )
            wanted = ">= " if t["kind"] == "speedup" else "<= "
            bound = f"{wanted}{t['bound']:g}" + ("x" if t["kind"] == "speedup" else "")
        lines.append(f"| {title} | {' | '.join(cells)} | {bound} |")
    lines.append("")
    lines.append(
        f"Medians of {_repeats(report)} side by side, `{report.get('master', '?')}` on a "
        f"{report.get('cores', '?')}-core machine. The sorted write's cost is stated, not a "
        "target; its bound is the bench's own check."
    )
    return "\n".join(lines)


def _repeats(report: dict) -> str:
    counts = sorted({s.get("repeat") for s in report["sizes"].values() if s.get("repeat")})
    return " / ".join(str(c) for c in counts) + " runs" if counts else "the runs"


def records_table(work: Path) -> str:
    """The connector benchmark (``records.json``, ``bench/records_bench.py``): per size, the
    three ways of reading the topic and the shuffle's stream against its batch read."""
    report = _load(work / "records.json")
    if not report or not report.get("sizes"):
        return "not run: `scripts/dev bench-records` writes `.local/bench/records.json`"
    lines = [
        "| messages | `read_records` on the JVM | `kafka-records` (Python) | Spark's `kafka` "
        "source | JVM / Spark | Python / Spark | shuffle stream / batch throughput, JVM "
        "(micro-batches alone) | the same, Python path | Spark's Parquet source, the same |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def med(s: dict, name: str) -> str:
        return _seconds(s[name]["median_seconds"]) if name in s else "not run"

    def ratio(s: dict, name: str, suffix: str = "") -> str:
        return f"{s[name]:.2f}{suffix}" if name in s else "not run"

    for size, s in sorted(report["sizes"].items(), key=lambda kv: int(kv[0])):
        lines.append(
            f"| {_rows(size)} | {med(s, 'kafka_records_jvm')} | {med(s, 'kafka_records')} | "
            f"{med(s, 'spark_kafka_source')} | "
            f"{ratio(s, 'kafka_records_jvm_vs_spark_speedup', suffix='x')} | "
            f"{ratio(s, 'kafka_records_vs_spark_speedup', suffix='x')} | "
            f"{ratio(s, 'stream_vs_batch_throughput_jvm')} "
            f"({ratio(s, 'stream_processing_vs_batch_throughput_jvm')}) | "
            f"{ratio(s, 'stream_vs_batch_throughput')} "
            f"({ratio(s, 'stream_processing_vs_batch_throughput')}) | "
            f"{ratio(s, 'stream_vs_batch_throughput_parquet')} "
            f"({ratio(s, 'stream_processing_vs_batch_throughput_parquet')}) |"
        )
    return "\n".join(lines)


def queue_table(work: Path) -> str:
    """The queue benchmark (``queue.json``, ``bench/queue_bench.py``): records per second by
    consumers, for each function, active and wall-clock."""
    report = _load(work / "queue.json")
    if not report or not report.get("summary"):
        return "not run: `scripts/dev bench-queue` writes `.local/bench/queue.json`"
    q = report["summary"]
    lines = [
        "| consumers | I/O-bound: records/s active (wall) | CPU-bound: records/s active (wall) |",
        "|---|---|---|",
    ]
    for n in sorted(q["io"], key=int):
        cpu = (
            f"{q['cpu'][n]:,.0f} ({q['cpu_wall'][n]:,.0f})" if n in q.get("cpu", {}) else "not run"
        )
        lines.append(f"| {n} | {q['io'][n]:,.0f} ({q['io_wall'][n]:,.0f}) | {cpu} |")
    producer = (
        "a producer at its default batching"
        if report.get("producer_batch") is None
        else f"{report['producer_batch']}-record producer batches"
    )
    lines.append("")
    lines.append(
        f"{report['records']:,} records from {producer}, {report['batch_size']} records per "
        f"poll; medians of the runs. 8 against 2 consumers: I/O-bound {q['io_8_vs_2']:.2f}x "
        f"active ({q['io_wall_8_vs_2']:.2f}x wall), CPU-bound {q['cpu_8_vs_2']:.2f}x."
    )
    return "\n".join(lines)


# The growth run's files (``scripts/dev bench`` and ``bench-jvm`` at 1M, 10M and 100M rows),
# per benchmark. A later file of a benchmark measures some of its phases again (the per-key
# phases, ``decade-perkey.json``): at the sizes it has, its phases replace the earlier ones.
GROWTH_FILES = (
    ("shuffle benchmark", ("decade.json", "decade-perkey.json")),
    ("JVM benchmark", ("decade-jvm.json",)),
)


def growth_inputs(work: Path) -> list[tuple[str, dict]]:
    """The growth run's phases per benchmark, from its files in ``work`` (those present)."""
    out = []
    for title, names in GROWTH_FILES:
        reports = [r for r in (_load(work / n) for n in names) if r and r.get("sizes")]
        if not reports:
            continue
        make = jvm_growth_input if names[0].startswith("decade-jvm") else shuffle_growth_input
        data: dict[str, dict] = {}
        for report in reports:
            for phase, values in make(report).items():
                data.setdefault(phase, {}).update(values)
        out.append((title, data))
    return out


def _verdict(ratio: float, met: bool) -> str:
    return f"{ratio:.2f}x" if met else f"**{ratio:.2f}x**"


def growth_table(work: Path) -> str:
    """Time per row and peak worker memory of every phase at each size of the growth run,
    and their growth over its two largest sizes against the bounds."""
    inputs = growth_inputs(work)
    if not inputs:
        return (
            "not run: `scripts/dev bench` and `bench-jvm` with `--rows 1000000,10000000,100000000`"
        )
    sizes = sorted({int(n) for _, d in inputs for v in d.values() for n in v if ":" not in n})
    small, large = sizes[-2:] if len(sizes) > 1 else (sizes[0], sizes[0])
    head = " | ".join(f"µs/row {_rows(str(n))}" for n in sizes)
    mem = " | ".join(f"MiB {_rows(str(n))}" for n in sizes)
    step = f"{_rows(str(large))} / {_rows(str(small))}"
    lines = [
        f"| benchmark | phase | {head} | time per row, {step} | {mem} | memory, {step} |",
        "|---|---|" + "---|" * (2 * len(sizes) + 2),
    ]
    for title, data in inputs:
        g = growth(data, small, large)
        ordered = sorted(data, key=lambda p: not is_ours(p))  # ours first, in run order
        for phase in ordered:
            values = data[phase]
            us = [values.get(str(n)) for n in sizes]
            cells = [f"{s / n * 1e6:.2f}" if s else "" for s, n in zip(us, sizes, strict=True)]
            mib = [values.get(f"{n}:mib") for n in sizes]
            mcells = [f"{m:.0f}" if m else "" for m in mib]
            entry = g.get(phase)
            t = _verdict(entry["time_ratio"], entry["time_met"]) if entry else ""
            m = (
                _verdict(entry["memory_ratio"], entry["memory_met"])
                if entry and "memory_ratio" in entry
                else ("not sampled" if entry else "")
            )
            name = f"`{phase}`" if is_ours(phase) else f"{phase} (baseline)"
            lines.append(
                f"| {title} | {name} | {' | '.join(cells)} | {t} | {' | '.join(mcells)} | {m} |"
            )
    lines.append("")
    lines.append(
        f"Growth {step}: time per row wanted <= {TIME_GROWTH_BOUND}x, peak memory of one "
        f"Python worker wanted <= {MEMORY_GROWTH_BOUND}x (bold: over the bound). Memory is "
        "sampled in our Python workers only (workers fresh for each task)."
    )
    return "\n".join(lines)


# The read-side limit's files (``bench/read_limit_bench.py``): a fresh session's run and one
# after untimed reads (``--warmup``).
READ_LIMIT_FILES = (("fresh session", "read_limit.json"), ("after", "read_limit-warm.json"))
READ_LIMIT_ROWS = (
    ("Kafka's `ConsumerPerformance`", "kafka_consumer_perf_test", None),
    ("JVM read path", "shuffle_read_jvm", "jvm"),
    ("Python read path", "shuffle_read_python", "python"),
)


def read_limit_table(work: Path) -> str:
    """The read-side limit (``read_limit.json``, ``read_limit-warm.json``): each read's bytes
    per second and its ratio to Kafka's consumer perf test, fresh and after untimed reads;
    the JVM path's ratio against :data:`READ_LIMIT_BOUND`."""
    runs = [(label, _load(work / name)) for label, name in READ_LIMIT_FILES]
    runs = [(label, r) for label, r in runs if r]
    if not runs:
        return "not run: `scripts/dev bench-read-limit` writes `.local/bench/read_limit.json`"
    head, rule = "| read |", "|---|"
    for label, r in runs:
        when = f"after {r['warmup']} reads on each path" if r["warmup"] else label
        head += f" {when}: MiB/s | of the perf test |"
        rule += "---|---|"
    lines = [head + " target |", rule + "---|"]
    for title, phase, path in READ_LIMIT_ROWS:
        cells = []
        for _, r in runs:
            ratio = r["ratio_to_consumer_perf_test"][path] if path else 1.0
            shown = f"{ratio:.2f}"
            if path == "jvm":
                shown = f"{shown} (met)" if ratio >= READ_LIMIT_BOUND else f"**{shown}** (missed)"
            cells += [f"{r['median_mib_per_s'][phase]:.1f}", shown]
        target = f">= {READ_LIMIT_BOUND:g}" if path == "jvm" else ""
        lines.append(f"| {title} | {' | '.join(cells)} | {target} |")
    r = runs[0][1]
    lines.append("")
    lines.append(
        f"{r['rows'] / 1e6:g}M rows, {r['partitions']} partitions ({r['bytes'] / 2**20:.1f} MiB "
        f"in {r['records']} records), `{r['master']}`; medians of {r['repeat']} repeats, "
        "alternating order."
    )
    return "\n".join(lines)


# The README's summary: (what, where the pair is, its target, how ours and the baseline are
# named). "results": the shuffle benchmark's results; else a file in the work folder.
SUMMARY_ROWS = (
    ("write keyed rows to Kafka", "results", "T4",
     "`write_shuffle`", "Spark's `kafka` sink, JSON per row,"),
    ("read them back", "jvm.json", "read vs Spark's kafka source",
     "`read_shuffle` on the JVM", "Spark's `kafka` source with `from_json`,"),
    ("read any topic (100 B messages)", "records.json", "P3",
     "`read_records` on the JVM", "Spark's `kafka` source,"),
    ("write once, three consumers", "results", "T6",
     "", "each consumer from Parquet through its own Spark shuffle,"),
    ("re-run one consumer for one day", "results", "T7",
     "", "re-run that day's whole pipeline,"),
    ("aggregate per key", "results", "T3",
     "`aggregate_shuffle`", "`groupBy(key).agg` over Parquet,"),
    ("join two shuffles by key, no broadcast", "jvm.json", "sorted join vs Parquet, no broadcast",
     "written sorted (`sort_by`), read on the JVM,", "the same join of their Parquet files,"),
)  # fmt: skip
# The work folder's files the summary reads.
SUMMARY_FILES = tuple(sorted({source for _, source, *_ in SUMMARY_ROWS} - {"results"}))


def _summary_pair(source: str, target: str, results: dict, work: Path) -> tuple[str, dict] | None:
    """(size, the target's entry) at the largest size of its benchmark, or None."""
    if source == "results":
        sizes = results.get("sizes") or {}
        have = [n for n in sizes if target in sizes[n].get("targets", {})]
        if not have:
            return None
        big = max(have, key=int)
        return big, sizes[big]["targets"][target]
    report = _load(work / source)
    if not report or not report.get("sizes"):
        return None
    big = max(report["sizes"], key=int)
    s = report["sizes"][big]
    if source == "records.json":
        if "kafka_records_jvm" not in s or "spark_kafka_source" not in s:
            return None
        ours = s["kafka_records_jvm"]["median_seconds"]
        base = s["spark_kafka_source"]["median_seconds"]
        entry = {"ours_seconds": ours, "baseline_seconds": base, "kind": "speedup"}
        return big, {**entry, "ratio": base / ours}
    t = s.get("targets", {}).get(target)
    return (big, t) if t else None


def summary_table(results: dict, work: Path) -> str:
    """The README's table: what the project beats, and by how much, each pair at the largest
    size of its benchmark, from the same results files as the Performance page."""
    lines = ["| what | kafka-shuffle | baseline | |", "|---|---|---|---|"]
    sizes = set()
    for what, source, target, ours, base in SUMMARY_ROWS:
        got = _summary_pair(source, target, results, work)
        if got is None:
            lines.append(f"| {what} | not run | | |")
            continue
        size, t = got
        sizes.add(size)
        if t["kind"] == "speedup":
            ratio = f"{t['ratio']:.1f}x faster" if t["ratio"] >= 10 else f"{t['ratio']:.2f}x faster"
        else:
            ratio = f"{t['ratio']:.2f} of the time"
        lines.append(
            f"| {what} | {(ours + ' ').lstrip()}{_seconds(t['ours_seconds'])} | "
            f"{base} {_seconds(t['baseline_seconds'])} | {ratio} |"
        )
    lines.append("")
    rows = " and ".join(_rows(n) for n in sorted(sizes, key=int)) or "no"
    lines.append(
        f"Medians of side-by-side runs on one {results.get('cores', '?')}-core machine "
        f"(`{results.get('master', '?')}`, the embedded broker, "
        f"{results.get('partitions', '?')} Kafka partitions), {rows} rows or messages."
    )
    return "\n".join(lines)


TABLES = {"targets": targets_table, "io": io_table, "memory": memory_table}
# Tables from the other benchmarks' files in the work folder (work, results, memory), written
# where the page has their markers, each with the files it reads there. A table none of whose
# files is in the work folder is left as the page has it: a run of one benchmark rewrites its
# own tables, not the others'. P1-P7 (``round3``) also read the shuffle benchmark's results and
# are always written.
WORK_TABLES = {
    "round3": (round_three_table, ()),
    "session": (lambda work, _results, _memory: session_table(work), ("session.json",)),
    "small_window": (
        lambda work, _results, _memory: small_window_table(work),
        ("session.json",),
    ),
    "jvm": (lambda work, _results, _memory: jvm_table(work), ("jvm.json",)),
    "sorted": (lambda work, _results, _memory: sorted_table(work), ("jvm.json",)),
    "records": (lambda work, _results, _memory: records_table(work), ("records.json",)),
    "queue": (lambda work, _results, _memory: queue_table(work), ("queue.json",)),
    "growth": (
        lambda work, _results, _memory: growth_table(work),
        tuple(name for _, names in GROWTH_FILES for name in names),
    ),
    "read_limit": (
        lambda work, _results, _memory: read_limit_table(work),
        tuple(name for _, name in READ_LIMIT_FILES),
    ),
}


def kept_tables(readme: str, work: Path) -> list[str]:
    """The other benchmarks' tables of ``readme`` that :func:`render` leaves as they are: none
    of their files is in ``work``."""
    return [
        name
        for name, (_, files) in WORK_TABLES.items()
        if f"<!-- bench:{name}:start -->" in readme
        and files
        and not any((work / f).exists() for f in files)
    ]


def _replace(readme: str, name: str, table: str) -> str:
    pattern = re.compile(
        rf"(<!-- bench:{name}:start -->\n).*?(<!-- bench:{name}:end -->)", re.DOTALL
    )
    if not pattern.search(readme):
        raise SystemExit(f"the page has no <!-- bench:{name}:start/end --> markers")
    return pattern.sub(lambda m, t=table: m.group(1) + t + "\n" + m.group(2), readme)


def render(readme: str, report: dict, memory: dict | None = None, work: Path | None = None) -> str:
    """``readme`` with each table between its markers replaced; the memory table (and T9)
    from ``memory`` when given (a run with ``--no-worker-reuse``), else from ``report``;
    with ``work``, also P1-P7 (``round3``), the JVM read path's targets (``jvm``), the
    connector's (``records``) and queue mode's (``queue``) figures from the benchmarks' files
    there, where the page has their markers and one of their files is there (see
    :data:`WORK_TABLES`)."""
    for name, make in TABLES.items():
        table = make(memory if name == "memory" and memory is not None else report)
        readme = _replace(readme, name, table)
    if work is not None:
        kept = kept_tables(readme, work)
        for name, (make_from, _) in WORK_TABLES.items():
            if f"<!-- bench:{name}:start -->" in readme and name not in kept:
                readme = _replace(readme, name, make_from(work, report, memory))
    return readme


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--results",
        nargs="+",
        default=[str(ROOT / ".local" / "bench" / "results.json")],
        help="results files; several are merged (a later file adds phases and sizes)",
    )
    parser.add_argument(
        "--memory",
        nargs="+",
        help="results for the memory table and T9 (a --no-worker-reuse run); default --results",
    )
    parser.add_argument(
        "--page",
        "--readme",
        dest="page",
        default=str(ROOT / "docs" / "performance.md"),
        help="the Markdown file whose marked tables are written (default: docs/performance.md)",
    )
    parser.add_argument(
        "--summary-page",
        default=str(ROOT / "README.md"),
        help="the Markdown file whose <!-- bench:summary --> table is written (default: README.md)",
    )
    parser.add_argument("--chart", help="also draw the targets chart (PNG) of the merged results")
    parser.add_argument(
        "--growth",
        metavar="PNG",
        help="write only the growth table (decade.json, decade-jvm.json in .local/bench) and "
        "draw its chart to PNG, then stop",
    )
    parser.add_argument(
        "--small-window",
        action="store_true",
        help="write only the small-window table (session.json's p2_jvm in .local/bench), then stop",
    )
    parser.add_argument("--check", action="store_true", help="fail if the page is out of date")
    parser.add_argument(
        "--targets",
        action="store_true",
        help="print P1-P7 from the four benchmarks' results in .local/bench, and the JVM read "
        "path's targets (jvm.json), and stop",
    )
    args = parser.parse_args(argv)
    if args.targets:
        print(session_table(ROOT / ".local" / "bench"))
        print()
        print(round_three_table(ROOT / ".local" / "bench"))
        print()
        print(jvm_table(ROOT / ".local" / "bench"))
        print()
        print(read_limit_table(ROOT / ".local" / "bench"))
        return 0
    if args.small_window:
        page = Path(args.page)
        table = small_window_table(ROOT / ".local" / "bench")
        page.write_text(_replace(page.read_text(), "small_window", table))
        print(f"updated the small-window table of {page}")
        return 0
    if args.growth:
        work = ROOT / ".local" / "bench"
        growth_chart(growth_inputs(work), Path(args.growth))
        page = Path(args.page)
        page.write_text(_replace(page.read_text(), "growth", growth_table(work)))
        print(f"updated the growth table of {page}; chart: {args.growth}")
        return 0
    report = merge([json.loads(Path(p).read_text()) for p in args.results])
    if args.chart:
        chart(report, Path(args.chart))
    readme = Path(args.page)
    before = readme.read_text()
    memory = merge([json.loads(Path(p).read_text()) for p in args.memory]) if args.memory else None
    work = ROOT / ".local" / "bench"
    after = render(before, report, memory, work)
    for name in kept_tables(before, work):
        print(f"kept the page's {name} table: none of its results files is in {work}")
    summary_page = Path(args.summary_page)
    summary_before = summary_page.read_text() if summary_page.exists() else ""
    summary_after = summary_before
    if "<!-- bench:summary:start -->" in summary_before:
        if all((work / f).exists() for f in SUMMARY_FILES):
            summary_after = _replace(summary_before, "summary", summary_table(report, work))
        else:
            print(f"kept the summary table of {summary_page}: it needs {SUMMARY_FILES} in {work}")
    if args.check:
        return 0 if after == before and summary_after == summary_before else 1
    readme.write_text(after)
    print(f"updated {readme} from {args.results}")
    if summary_after != summary_before:
        summary_page.write_text(summary_after)
        print(f"updated the summary table of {summary_page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
