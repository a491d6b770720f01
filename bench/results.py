"""What the shuffle benchmark's results mean: its targets (T1-T8, B, P6), how a run's medians
meet them, T9 (worker memory across sizes) and the chart of them.

``bench.shuffle_bench`` measures; this module judges and draws, for it and for
``bench.report`` (which redraws the chart and writes the tables of docs/performance.md from
saved results).
It needs no Spark, Kafka or project import: matplotlib only when drawing.
"""

from __future__ import annotations

from pathlib import Path

# (target, title, ours, baseline, kind, bound): "speedup" is baseline / ours and must be at
# least the bound; "ratio" is ours / baseline and must be at most the bound.
TARGETS = (
    ("T1", "apply_per_key / applyInPandas, per key, 200k keys",
     "shuffle_per_key_200k", "spark_apply_in_pandas_200k", "speedup", 15.0),
    ("T2", "apply_per_key(per=batch) / groupBy.agg",
     "shuffle_per_key", "spark_group_by", "speedup", 1.0),
    ("T2-arrow", "apply_per_key(per=batch, data=arrow) / groupBy.agg",
     "shuffle_per_key_arrow", "spark_group_by", "speedup", 1.0),
    ("T3", "aggregate_shuffle / groupBy.agg, bench keys",
     "shuffle_aggregate", "spark_group_by_agg", "speedup", 2.0),
    ("T3-200k", "aggregate_shuffle / groupBy.agg, 200k keys",
     "shuffle_aggregate_200k", "spark_group_by_200k", "speedup", 2.0),
    ("T4", "write_shuffle / Spark kafka sink (JSON per row)",
     "shuffle_write", "spark_write", "speedup", 5.0),
    ("T5", "write bytes/s / Kafka ProducerPerformance bytes/s",
     "shuffle_write", "kafka_perf_test", "speedup", 0.5),
    ("T6", "write + 3 consumers / 3 x (Parquet + Spark shuffle + consumer)",
     "reuse_three_consumers", "spark_three_consumers", "ratio", 0.5),
    ("T6-arrow", "the same, per-key consumers on Arrow (data=arrow)",
     "reuse_three_consumers_arrow", "spark_three_consumers", "ratio", 0.5),
    ("T7", "re-run 1 consumer for 1 day / re-run the day's pipeline",
     "recover_one_consumer", "rerun_day_pipeline", "ratio", 0.25),
    ("T8-tick", "sensor tick, 30 windows / 1 window",
     "tick_30_windows", "tick_1_window", "ratio", 1.2),
    ("T8-read", "read 1 of 30 windows / all 30",
     "read_1_of_30_windows", "read_30_windows", "ratio", 0.1),
    ("T8-read-auto", "read 1 of 30 windows / all 30, parallelism=auto",
     "read_1_of_30_windows_auto", "read_30_windows_auto", "ratio", 0.1),
    ("B-write", "write_shuffle / bucketed Parquet table write (bucketBy 8)",
     "shuffle_write_b", "bucketed_write", "speedup", 1.0),
    ("B-read", "read_shuffle / read of the bucketed table",
     "shuffle_read_b", "bucketed_read", "speedup", 1.0),
    ("B-agg", "aggregate_shuffle / groupBy.agg over the bucketed table",
     "shuffle_aggregate_b", "bucketed_group_by", "speedup", 1.0),
    ("B-gaps", "apply_per_key gaps / window lag over the bucketed table",
     "shuffle_gaps_b", "bucketed_gaps", "speedup", 1.0),
    ("B-reuse", "write + 3 consumers / bucketed write + the 3 over the table",
     "reuse_three_consumers_b", "bucketed_three_consumers", "ratio", 0.6),
    ("P6", "row-path write / Arrow hand-over floor",
     "shuffle_write_rows", "arrow_handover", "ratio", 1.15),
)  # fmt: skip


def targets(summary: dict) -> dict:
    """Each target's medians side by side, its ratio and whether it is met."""
    out = {}
    for name, title, ours, base, kind, bound in TARGETS:
        if ours not in summary or base not in summary:
            continue
        o, b = summary[ours]["median_seconds"], summary[base]["median_seconds"]
        ratio = b / o if kind == "speedup" else o / b
        met = ratio >= bound if kind == "speedup" else ratio <= bound
        out[name] = {
            "title": title,
            "ours": ours,
            "baseline": base,
            "ours_seconds": o,
            "baseline_seconds": b,
            "kind": kind,
            "ratio": ratio,
            "bound": bound,
            "met": met,
            "runs": len(summary[ours]["runs"]),
        }
    f = summary.get("t1_function")
    floor = f["function_cpu_seconds"] / f["cores"] if f else None
    # Restated as overhead: (ours - fn/cores) against (applyInPandas - fn/cores). Only when
    # the function alone (timed in one process) is below ours: when it is not, that timing
    # is no floor of ours, and there is no overhead to state.
    if floor is not None and "T1" in out and out["T1"]["ours_seconds"] > floor:
        t1 = out["T1"]
        o, b = t1["ours_seconds"] - floor, t1["baseline_seconds"] - floor
        ratio = b / o
        out["T1-overhead"] = {
            **t1,
            "title": "T1 as overhead: (apply_per_key - fn CPU / cores) / (applyInPandas - same)",
            "ours_seconds": o,
            "baseline_seconds": b,
            "floor_seconds": floor,
            "ratio": ratio,
            "met": ratio >= t1["bound"],
        }
    return out


T9_BOUND = 1.2  # peak worker memory, largest size / smallest, per phase of ours
MEMORY_PHASES = (
    "shuffle_write",
    "shuffle_write_rows",
    "shuffle_read",
    "shuffle_per_key",
    "shuffle_per_key_arrow",
    "shuffle_per_key_streamed",
    "shuffle_per_key_whole",
    "shuffle_aggregate",
    "shuffle_per_key_200k",
    "shuffle_aggregate_200k",
    "reuse_three_consumers",
    "reuse_three_consumers_arrow",
    "recover_one_consumer",
    "read_1_of_30_windows",
    "read_30_windows",
)


def per_size(values: str, sizes: list[int], default: int) -> list[int]:
    """One count per size from ``values``: one number for every size, or one per size in
    order (``"3,3,1"`` for 1M, 10M and 100M rows: the largest size once).

    Example::

        per_size("3,1", [10**6, 10**8], 3)   # [3, 1]
    """
    if not values:
        return [default] * len(sizes)
    counts = [int(v) for v in str(values).split(",") if v.strip()]
    if any(c < 1 for c in counts):
        raise ValueError(f"repeat counts must be at least 1, got {values!r}")
    if len(counts) == 1:
        return counts * len(sizes)
    if len(counts) != len(sizes):
        raise ValueError(
            f"{len(counts)} repeat counts ({values!r}) for {len(sizes)} sizes: give one, or "
            "one per size"
        )
    return counts


def memory_growth(report: dict) -> dict:
    """T9: per phase of ours, the peak worker memory at the largest size over the smallest."""
    sizes = sorted(report["sizes"], key=int)
    if len(sizes) < 2:
        return {}
    small, large = report["sizes"][sizes[0]], report["sizes"][sizes[-1]]
    out = {}
    for name in MEMORY_PHASES:
        if name not in small or name not in large:
            continue
        a, b = small[name]["worker_peak_rss_mib"], large[name]["worker_peak_rss_mib"]
        ratio = b / a if a else float("inf")
        out[name] = {
            "small_rows": int(sizes[0]),
            "large_rows": int(sizes[-1]),
            "small_mib": a,
            "large_mib": b,
            "ratio": ratio,
            "bound": T9_BOUND,
            "met": ratio <= T9_BOUND,
        }
    return out


def chart(report: dict, path: Path) -> None:
    """One panel per target: ours and the baseline (median seconds) per size, and the time
    ours must stay under to meet the target (dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [t[0] for t in TARGETS]
    names.insert(names.index("T1") + 1, "T1-overhead")
    sizes = sorted(report["sizes"], key=int)
    cols = min(len(names), 5)
    grid = -(-len(names) // cols)
    fig, axes = plt.subplots(grid, cols, figsize=(3.6 * cols, 4.2 * grid), squeeze=False)
    for ax in axes.flat[len(names) :]:
        ax.set_axis_off()
    for ax, name in zip(axes.flat, names, strict=False):
        rows = [(size, report["sizes"][size]["targets"].get(name)) for size in sizes]
        rows = [(size, t) for size, t in rows if t]
        ax.set_title(name, fontsize=10)
        if not rows:
            ax.text(0.5, 0.5, "not run", ha="center", transform=ax.transAxes)
            continue
        x = list(range(len(rows)))
        ours = [t["ours_seconds"] for _, t in rows]
        base = [t["baseline_seconds"] for _, t in rows]
        ax.bar([i - 0.2 for i in x], ours, 0.4, label="ours", color="#2a7ab9")
        ax.bar([i + 0.2 for i in x], base, 0.4, label="baseline", color="#b0b0b0")
        for i, (_, t) in enumerate(rows):
            limit = (
                t["baseline_seconds"] / t["bound"]
                if t["kind"] == "speedup"
                else t["baseline_seconds"] * t["bound"]
            )
            ax.hlines(limit, i - 0.45, i + 0.05, colors="#c0392b", linestyles="dashed",
                      label="target" if i == 0 else None)  # fmt: skip
            mark = "met" if t["met"] else "missed"
            ratio = f"{t['ratio']:.2f}x" if t["kind"] == "speedup" else f"{t['ratio']:.3f}"
            ax.annotate(f"{ratio}\n{mark}", (i, max(t["ours_seconds"], t["baseline_seconds"])),
                        ha="center", va="bottom", fontsize=8)  # fmt: skip
        ax.set_xticks(x, [f"{int(size) / 1e6:g}M rows" for size, _ in rows])
        ax.set_ylabel("seconds (median)")
        ax.margins(y=0.25)
        ax.set_xlabel(rows[0][1]["title"], fontsize=7)
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# A decade more data: how time per row and peak worker memory grow from one size to the next
# (targets: time per row within 1.15x, peak memory within 1.2x, from 10M to 100M rows).
TIME_GROWTH_BOUND = 1.15
MEMORY_GROWTH_BOUND = T9_BOUND
# The read-side limit: a JVM read's bytes per second against Kafka's own consumer perf test's.
READ_LIMIT_BOUND = 0.8
OURS_PREFIXES = ("shuffle_", "reuse_", "jvm_", "python_", "write_")


def is_ours(phase: str) -> bool:
    """Whether ``phase`` is one of ours (memory is sampled in our Python workers only)."""
    return phase.startswith(OURS_PREFIXES)


def growth(sizes: dict[str, dict[str, float | None]], small: int, large: int) -> dict:
    """Per phase, from ``small`` to ``large`` rows: the time per row (microseconds) at each
    size and its ratio, and the peak memory (MiB, None when not sampled) and its ratio, each
    against its bound.

    ``sizes`` maps a phase to ``{"<rows>": seconds}`` and, under ``"<rows>:mib"``, its peak
    memory. A phase missing at either size is left out.

    Example::

        growth({"w": {"10": 1.0, "100": 12.0}}, 10, 100)["w"]["time_ratio"]   # 1.2
    """
    out = {}
    for phase, values in sizes.items():
        a, b = values.get(str(small)), values.get(str(large))
        if not a or not b:
            continue
        per_row = {n: s / int(n) * 1e6 for n, s in values.items() if ":" not in n and s}
        time_ratio = (b / large) / (a / small)
        entry: dict = {
            "us_per_row": per_row,
            "time_ratio": time_ratio,
            "time_met": time_ratio <= TIME_GROWTH_BOUND,
            "mib": {n.split(":")[0]: m for n, m in values.items() if n.endswith(":mib") and m},
        }
        ma, mb = values.get(f"{small}:mib"), values.get(f"{large}:mib")
        if ma and mb:
            entry["memory_ratio"] = mb / ma
            entry["memory_met"] = mb / ma <= MEMORY_GROWTH_BOUND
        out[phase] = entry
    return out


def shuffle_growth_input(report: dict) -> dict[str, dict[str, float | None]]:
    """:func:`growth`'s input from a shuffle benchmark report: each phase's median seconds
    and, for ours, the peak worker memory, per size."""
    out: dict[str, dict[str, float | None]] = {}
    for rows, summary in report["sizes"].items():
        for phase, entry in summary.items():
            if not isinstance(entry, dict) or "median_seconds" not in entry:
                continue  # the targets, T1's function alone
            values = out.setdefault(phase, {})
            values[rows] = entry["median_seconds"]
            if is_ours(phase):
                values[f"{rows}:mib"] = entry.get("worker_peak_rss_mib")
    return out


def jvm_growth_input(report: dict) -> dict[str, dict[str, float | None]]:
    """:func:`growth`'s input from a JVM benchmark report: each phase's median seconds per
    size (no memory: the JVM's heap is fixed by the session)."""
    out: dict[str, dict[str, float | None]] = {}
    for rows, summary in report["sizes"].items():
        for phase, seconds in summary.get("medians", {}).items():
            out.setdefault(phase, {})[rows] = seconds
    return out


def growth_chart(panels: list[tuple[str, dict]], path: Path) -> None:
    """Growth curves: for each ``(title, growth input)``, time per row against rows (log
    scales, ours solid, baselines dashed), and for the shuffle benchmark's phases of ours,
    peak worker memory against rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    memory = [(t, d) for t, d in panels if any(k.endswith(":mib") for v in d.values() for k in v)]
    count = len(panels) + len(memory)
    cols = min(count, 2)
    grid = -(-count // cols)
    fig, axes = plt.subplots(grid, cols, figsize=(7.5 * cols, 5.6 * grid), squeeze=False)
    for ax in axes.flat[count:]:
        ax.set_axis_off()
    for ax, (title, data) in zip(axes.flat, panels, strict=False):
        for phase, values in sorted(data.items()):
            sizes = sorted(int(n) for n in values if ":" not in n and values[n])
            if len(sizes) < 2:
                continue
            ys = [values[str(n)] / n * 1e6 for n in sizes]
            style = "-" if is_ours(phase) else "--"
            ax.plot(sizes, ys, style, marker="o", markersize=3, label=phase)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("rows")
        ax.set_ylabel("microseconds per row (median)")
        ax.set_title(f"{title}: time per row", fontsize=10)
        ax.legend(fontsize=6, loc="best", ncol=2)
    for ax, (title, data) in zip(axes.flat[len(panels) :], memory, strict=False):
        for phase, values in sorted(data.items()):
            points = sorted(
                (int(k.split(":")[0]), m) for k, m in values.items() if k.endswith(":mib") and m
            )
            if len(points) < 2:
                continue
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3,
                    label=phase)  # fmt: skip
        ax.set_xscale("log")
        ax.set_xlabel("rows")
        ax.set_ylabel("peak RSS of one Python worker (MiB)")
        ax.set_title(f"{title}: peak worker memory", fontsize=10)
        ax.legend(fontsize=6, loc="best", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
