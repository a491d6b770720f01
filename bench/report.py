"""Writes the README's benchmark tables from the benchmark's results (never by hand).

Reads ``.local/bench/results.json`` (written by ``bench/shuffle_bench.py``) and replaces
what stands between ``<!-- bench:NAME:start -->`` and ``<!-- bench:NAME:end -->`` in
README.md, for NAME in ``targets`` (each target: ours, the baseline, the ratio, met or
not), ``io`` (write and read against Spark's Kafka sink and source) and ``memory`` (peak
resident memory of a Python worker per phase).

Run::

    python bench/report.py                      # results.json -> README.md
    python bench/report.py --check              # exit 1 if README.md is not up to date
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _seconds(s: float) -> str:
    return f"{s * 1000:.1f} ms" if s < 0.1 else f"{s:.2f} s"


def _rows(n: str) -> str:
    value = int(n)
    return f"{value / 1e6:g}M" if value >= 1_000_000 else f"{value / 1e3:g}k"


def targets_table(report: dict) -> str:
    lines = [
        "| target | rows | ours | baseline | ratio | wanted | |",
        "|---|---|---|---|---|---|---|",
    ]
    for size, summary in sorted(report["sizes"].items(), key=lambda kv: int(kv[0])):
        for name, t in summary.get("targets", {}).items():
            if t["kind"] == "speedup":
                ratio, wanted = f"{t['ratio']:.2f}x faster", f">= {t['bound']:g}x"
            else:
                ratio, wanted = f"{t['ratio']:.3f} of the baseline", f"<= {t['bound']:g}"
            lines.append(
                f"| {name}: {t['title']} | {_rows(size)} | `{t['ours']}` "
                f"{_seconds(t['ours_seconds'])} | `{t['baseline']}` "
                f"{_seconds(t['baseline_seconds'])} | {ratio} | {wanted} | "
                f"{'met' if t['met'] else '**missed**'} |"
            )
    runs = report.get("repeat")
    lines.append("")
    lines.append(
        f"Medians of {runs} run(s) of each phase, each pair side by side in one invocation "
        f"(alternating which goes first), `{report['master']}` on a {report.get('cores', '?')}"
        f"-core machine, {report['partitions']} Kafka partitions."
    )
    return "\n".join(lines)


def io_table(report: dict) -> str:
    lines = [
        "| rows | write: shuffle / Spark sink | read: shuffle / Spark source "
        "| Arrow hand-over alone |",
        "|---|---|---|---|",
    ]
    for size, s in sorted(report["sizes"].items(), key=lambda kv: int(kv[0])):

        def pair(a: str, b: str, s=s) -> str:
            if a not in s or b not in s:
                return "not run"
            x, y = s[a]["median_seconds"], s[b]["median_seconds"]
            return f"{_seconds(x)} / {_seconds(y)} ({y / x:.1f}x)"

        handover = s.get("arrow_handover")
        lines.append(
            f"| {_rows(size)} | {pair('shuffle_write', 'spark_write')} | "
            f"{pair('shuffle_read', 'spark_read')} | "
            f"{_seconds(handover['median_seconds']) if handover else 'not run'} |"
        )
    return "\n".join(lines)


MEMORY_PHASES = (
    "shuffle_write",
    "shuffle_read",
    "shuffle_per_key",
    "shuffle_aggregate",
    "shuffle_per_key_200k",
    "shuffle_aggregate_200k",
)


def memory_table(report: dict) -> str:
    lines = [
        "| rows | " + " | ".join(f"`{p}`" for p in MEMORY_PHASES) + " |",
        "|---|" + "---|" * len(MEMORY_PHASES),
    ]
    for size, s in sorted(report["sizes"].items(), key=lambda kv: int(kv[0])):
        cells = [
            f"{s[p]['worker_peak_rss_mib']:.0f} MiB" if p in s else "not run" for p in MEMORY_PHASES
        ]
        lines.append(f"| {_rows(size)} | " + " | ".join(cells) + " |")
    reuse = "reused" if report.get("python_worker_reuse", True) else "fresh for each task"
    lines.append("")
    lines.append(
        f"Peak resident memory of one Python worker (the largest of the runs; workers {reuse})."
    )
    return "\n".join(lines)


TABLES = {"targets": targets_table, "io": io_table, "memory": memory_table}


def render(readme: str, report: dict) -> str:
    for name, make in TABLES.items():
        pattern = re.compile(
            rf"(<!-- bench:{name}:start -->\n).*?(<!-- bench:{name}:end -->)", re.DOTALL
        )
        if not pattern.search(readme):
            raise SystemExit(f"README has no <!-- bench:{name}:start/end --> markers")
        table = make(report)
        readme = pattern.sub(lambda m, t=table: m.group(1) + t + "\n" + m.group(2), readme)
    return readme


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=str(ROOT / ".local" / "bench" / "results.json"))
    parser.add_argument("--readme", default=str(ROOT / "README.md"))
    parser.add_argument("--check", action="store_true", help="fail if README is out of date")
    args = parser.parse_args(argv)
    report = json.loads(Path(args.results).read_text())
    readme = Path(args.readme)
    before = readme.read_text()
    after = render(before, report)
    if args.check:
        return 0 if after == before else 1
    readme.write_text(after)
    print(f"updated {readme} from {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
