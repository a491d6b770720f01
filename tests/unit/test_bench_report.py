"""The benchmark tables of docs/performance.md come from the results file, between their
markers."""

import json

import pytest

from bench import report
from bench.results import targets

RESULTS = {
    "master": "local[2]",
    "partitions": 8,
    "repeat": 3,
    "cores": 2,
    "sizes": {
        "1000000": {
            "shuffle_write": {"median_seconds": 2.0, "worker_peak_rss_mib": 240.4},
            "spark_write": {"median_seconds": 8.0},
            "targets": {
                "T3": {"title": "agg", "ours": "a", "baseline": "b", "ours_seconds": 0.5,
                       "baseline_seconds": 1.25, "kind": "speedup", "ratio": 2.5, "bound": 2.0,
                       "met": True, "runs": 3},
                "T8-tick": {"title": "tick", "ours": "c", "baseline": "d", "ours_seconds": 0.012,
                            "baseline_seconds": 0.01, "kind": "ratio", "ratio": 1.2345,
                            "bound": 1.2, "met": False},
            },
        }
    },
}  # fmt: skip


def test_tables_replace_only_what_stands_between_the_markers():
    readme = (
        "intro\n<!-- bench:targets:start -->\nold\n<!-- bench:targets:end -->\nmiddle\n"
        "<!-- bench:io:start -->\n<!-- bench:io:end -->\n"
        "<!-- bench:memory:start -->\n<!-- bench:memory:end -->\nend\n"
    )
    out = report.render(readme, RESULTS)
    assert out.startswith("intro\n<!-- bench:targets:start -->\n| target |")
    assert "old" not in out and "\nmiddle\n" in out and out.endswith("end\n")
    assert "| T3: agg | 1M | 3 | `a` 0.50 s | `b` 1.25 s | 2.50x faster | >= 2x | met |" in out
    assert "1.234 of the baseline | <= 1.2 | **missed** |" in out
    assert "| 1M | 2.00 s / 8.00 s (4.0x) | not run | not run | not run |" in out
    assert "| `shuffle_write` | 240 MiB |\n" in out
    assert report.render(out, RESULTS) == out  # idempotent


def test_missing_markers_are_an_error():
    with pytest.raises(SystemExit, match="bench:targets"):
        report.render("no markers here\n", RESULTS)


def test_results_of_several_runs_merge_by_size():
    other = {
        "master": "local[2]", "partitions": 8, "repeat": 1, "cores": 2,
        "sizes": {"1000000": {"x": {"median_seconds": 1.0},
                              "targets": {"T1": {"title": "t1"}}},
                  "10000000": {"targets": {}}},
    }  # fmt: skip
    merged = report.merge([RESULTS, other])
    assert set(merged["sizes"]["1000000"]["targets"]) == {"T3", "T8-tick", "T1"}
    assert "x" in merged["sizes"]["1000000"] and "shuffle_write" in merged["sizes"]["1000000"]
    assert "10000000" in merged["sizes"]
    assert RESULTS["sizes"]["1000000"]["targets"].keys() == {"T3", "T8-tick"}  # not mutated
    with pytest.raises(SystemExit, match="partitions"):
        report.merge([RESULTS, {**other, "partitions": 4}])


def test_memory_growth_is_the_largest_size_over_the_smallest_per_phase():
    results = {
        "master": "local[2]", "partitions": 8, "repeat": 1, "cores": 2,
        "sizes": {
            "1000000": {"shuffle_write": {"worker_peak_rss_mib": 200.0},
                        "shuffle_read": {"worker_peak_rss_mib": 100.0},
                        "spark_write": {"worker_peak_rss_mib": 50.0}},
            "10000000": {"shuffle_write": {"worker_peak_rss_mib": 230.0},
                         "shuffle_read": {"worker_peak_rss_mib": 150.0},
                         "spark_write": {"worker_peak_rss_mib": 500.0}},
        },
    }  # fmt: skip
    growth = report.memory_growth(results)
    assert set(growth) == {"shuffle_write", "shuffle_read"}  # ours only
    assert (
        growth["shuffle_write"]["ratio"] == pytest.approx(1.15) and growth["shuffle_write"]["met"]
    )
    assert growth["shuffle_read"]["ratio"] == pytest.approx(1.5)
    assert not growth["shuffle_read"]["met"]
    table = report.memory_table(results)
    assert "| `shuffle_write` | 200 MiB | 230 MiB | 1.15x | <= 1.2x | met |" in table
    assert "| `shuffle_read` | 100 MiB | 150 MiB | 1.50x | <= 1.2x | **missed** |" in table
    assert report.memory_growth({"sizes": {"1000000": results["sizes"]["1000000"]}}) == {}


def test_memory_table_can_come_from_another_run():
    readme = (
        "<!-- bench:targets:start -->\n<!-- bench:targets:end -->\n"
        "<!-- bench:io:start -->\n<!-- bench:io:end -->\n"
        "<!-- bench:memory:start -->\n<!-- bench:memory:end -->\n"
    )
    fresh = json.loads(json.dumps(RESULTS))
    fresh["python_worker_reuse"] = False
    fresh["sizes"]["1000000"]["shuffle_write"]["worker_peak_rss_mib"] = 99.0
    out = report.render(readme, RESULTS, fresh)
    assert "| `shuffle_write` | 99 MiB |" in out and "fresh for each task" in out
    assert "2.00 s / 8.00 s" in out  # timings still from the first


def test_round_three_targets_say_met_missed_or_not_run(tmp_path):
    (tmp_path / "records.json").write_text(
        json.dumps(
            {
                "sizes": {
                    "1000000": {
                        "kafka_records_vs_spark_speedup": 3.0,
                        "stream_vs_batch_throughput": 0.95,
                        "stream_processing_vs_batch_throughput": 1.0,
                    },
                    "10000000": {
                        "kafka_records_vs_spark_speedup": 0.92,
                        "stream_vs_batch_throughput": 0.95,
                        "stream_processing_vs_batch_throughput": 1.1,
                    },
                }
            }
        )
    )
    (tmp_path / "queue.json").write_text(
        json.dumps({"producer_batch": 50, "summary": {"io_8_vs_2": 3.4}})
    )
    rows = {r[0].split()[0]: r for r in report.round_three(tmp_path)}
    # The largest size counts: P3 is missed there though met at 1M.
    assert rows["P3"][3] == "**missed**" and "0.92x" in rows["P3"][1]
    assert rows["P4"][3] == "met"
    # A queue measured with batched producers does not count for P7.
    assert rows["P7"][3] == "**missed**" and "batched" in rows["P7"][0]
    for name in ("P5", "P6"):
        assert rows[name][3] == "not run"
    assert "P1" not in rows and "P2" not in rows  # the session table's
    assert report.round_three_table(tmp_path).count("\n") == len(rows) + 1
    # A run with both read paths: P4 is the JVM path's, the Python path's beside it.
    records = json.loads((tmp_path / "records.json").read_text())
    records["sizes"]["10000000"].update(
        stream_vs_batch_throughput_jvm=0.5, stream_processing_vs_batch_throughput_jvm=0.8
    )
    (tmp_path / "records.json").write_text(json.dumps(records))
    p4 = {r[0].split()[0]: r for r in report.round_three(tmp_path)}["P4"]
    assert p4[3] == "**missed**"
    assert p4[1].startswith("on the JVM 0.50 (micro-batches alone 0.80)") and "0.95" in p4[1]


def test_session_rows_give_each_state_and_skip_an_earlier_form(tmp_path):
    assert [r[0] for r in report.session_rows(tmp_path)] == ["P1", "P2"]  # not run
    check = {"fresh": 1.2, "fresh_first_round": 0.4, "idle": 0.9, "after_job": 1.1}
    p1 = {
        "2000000": {
            "states": {},
            "rounds": 5,
            "targets": {"T2": {**check, "bound": 1.0, "met": False}},
        },
        "10000000": {"targets": {"T2": {"fresh": 1.0, "after": 1.0}}},  # an earlier form
    }
    (tmp_path / "session.json").write_text(json.dumps({"p1": p1}))
    rows = report.session_rows(tmp_path)
    assert rows[0] == (
        "P1 T2, 2M rows",
        "fresh 1.20x (first round 0.40x), after a minute idle 0.90x, after a pandas UDF job "
        "1.10x; medians of 5 rounds",
        ">= 1x in each",
        "**missed**",
    )
    assert [r[0] for r in rows] == ["P1 T2, 2M rows", "P2"]
    assert report.session_table(tmp_path).count("\n") == len(rows) + 1


def test_small_window_table_gives_the_read_target_the_pairs_and_the_plans(tmp_path):
    assert report.small_window_table(tmp_path).startswith("Not run")
    pair = {"ours": 0.05, "baseline": 0.06, "ratio": 0.05 / 0.06}
    p2 = {
        "master": "local[2]",
        "times": {"small_read": [0.1, 0.12, 0.11]},
        "targets": {"read": {"ours": 0.08, "baseline": 0.06, "ratio": 1.33, "met": False}},
        "small_read": {
            "per_partition": {"ours": 0.2, "baseline": 0.06, "ratio": 3.33},
            "made_once": pair,
            "exchanges": {"ours": False, "parquet": True},
        },
        "read_parts": {"plan": 0.01, "dataframe": 0.02, "run": 0.05},
    }
    (tmp_path / "session.json").write_text(json.dumps({"p2_jvm": p2}))
    lines = report.small_window_table(tmp_path).splitlines()
    assert lines[2].startswith("| P2 read") and lines[2].endswith("| 1.33 | <= 1 | **missed** |")
    assert "| 0.20 s | 60.0 ms | 3.33 | | |" in lines[3]
    assert lines[4].endswith("| 50.0 ms | 60.0 ms | 0.83 | | |")
    assert lines[5] == (
        "| the `groupBy(k).agg`'s plan | no Exchange | an Exchange | | none over the read | met |"
    )
    assert "plan 10.0 ms, dataframe 20.0 ms, run 50.0 ms" in lines[6]
    assert lines[-1].startswith("Medians of 3 runs of each")


def test_jvm_table_lists_every_size_and_target_or_says_not_run(tmp_path):
    assert "not run" in report.jvm_table(tmp_path)
    targets = {
        "read vs bucketed": {"ours_seconds": 0.3, "baseline_seconds": 0.36, "kind": "speedup",
                             "ratio": 1.2, "bound": 1.0, "met": True},
        "reuse vs bucketed": {"ours_seconds": 3.6, "baseline_seconds": 5.3, "kind": "ratio",
                              "ratio": 0.679, "bound": 0.6, "met": False},
    }  # fmt: skip
    sizes = {"10000000": {"targets": targets}, "2000000": {"targets": targets}}
    (tmp_path / "jvm.json").write_text(json.dumps({"sizes": sizes}))
    lines = report.jvm_table(tmp_path).splitlines()[2:]
    assert [line.split(" | ")[0] for line in lines] == [
        "| read vs bucketed, 2M rows",
        "| reuse vs bucketed, 2M rows",
        "| read vs bucketed, 10M rows",
        "| reuse vs bucketed, 10M rows",
    ]
    assert "1.20x" in lines[0] and ">= 1x" in lines[0] and lines[0].endswith("| met |")
    assert "0.68 of its time" in lines[1] and "<= 0.6" in lines[1] and "**missed**" in lines[1]


def test_other_benchmarks_tables_come_from_their_files_where_readme_has_markers(tmp_path):
    (tmp_path / "records.json").write_text(json.dumps({"sizes": {"10000000": {
        "kafka_records_jvm": {"median_seconds": 2.0}, "kafka_records": {"median_seconds": 9.5},
        "spark_kafka_source": {"median_seconds": 10.0},
        "kafka_records_jvm_vs_spark_speedup": 5.0, "kafka_records_vs_spark_speedup": 1.0526,
        "stream_vs_batch_throughput_jvm": 0.714, "stream_processing_vs_batch_throughput_jvm": 0.83,
    }}}))  # fmt: skip
    readme = (
        "<!-- bench:targets:start -->\n<!-- bench:targets:end -->\n"
        "<!-- bench:io:start -->\n<!-- bench:io:end -->\n"
        "<!-- bench:memory:start -->\n<!-- bench:memory:end -->\n"
        "<!-- bench:records:start -->\nold\n<!-- bench:records:end -->\n"
        "<!-- bench:queue:start -->\n<!-- bench:queue:end -->\n"
    )
    out = report.render(readme, RESULTS, None, tmp_path)
    assert (
        "| 10M | 2.00 s | 9.50 s | 10.00 s | 5.00x | 1.05x | 0.71 (0.83) | not run (not run) |"
        in (out)
    )
    assert "old" not in out
    # No queue.json there: the page's queue table stays as it was.
    readme_q = readme.replace("queue:start -->\n", "queue:start -->\nqueue as measured\n")
    assert report.kept_tables(readme_q, tmp_path) == ["queue"]
    assert "queue as measured" in report.render(readme_q, RESULTS, None, tmp_path)
    assert "not run: `scripts/dev bench-queue`" in report.queue_table(tmp_path)
    # Without a work folder, or without their markers, those tables are left alone.
    assert report.render(readme, RESULTS).count("old") == 1
    (tmp_path / "queue.json").write_text(json.dumps({
        "records": 24000, "batch_size": 50, "producer_batch": None,
        "summary": {"io": {"2": 1000.0, "8": 3100.0}, "io_wall": {"2": 900.0, "8": 2500.0},
                    "cpu": {"2": 2000.0}, "cpu_wall": {"2": 1800.0},
                    "io_8_vs_2": 3.1, "io_wall_8_vs_2": 2.78, "cpu_8_vs_2": 1.2}}))  # fmt: skip
    table = report.queue_table(tmp_path)
    assert (
        "| 2 | 1,000 (900) | 2,000 (1,800) |" in table
        and "| 8 | 3,100 (2,500) | not run |" in table
    )
    assert "default batching" in table and "I/O-bound 3.10x active (2.78x wall)" in table


def test_t1_is_restated_as_overhead_over_the_function_s_own_cpu_time():
    summary = {
        "shuffle_per_key_200k": {"median_seconds": 36.0, "runs": [{}]},
        "spark_apply_in_pandas_200k": {"median_seconds": 216.0, "runs": [{}]},
    }
    assert "T1-overhead" not in targets(summary)  # no function time measured
    summary["t1_function"] = {"function_cpu_seconds": 60.0, "cores": 2}
    t = targets(summary)
    assert t["T1"]["ratio"] == pytest.approx(6.0) and not t["T1"]["met"]
    over = t["T1-overhead"]
    # (216 - 30) / (36 - 30): Spark adds 186 s to the function, we add 6 s.
    assert over["ours_seconds"] == pytest.approx(6.0)
    assert over["baseline_seconds"] == pytest.approx(186.0)
    assert over["ratio"] == pytest.approx(31.0) and over["met"]
    # The function alone took more than ours on the cores: no floor, no overhead stated.
    summary["t1_function"] = {"function_cpu_seconds": 80.0, "cores": 2}
    assert "T1-overhead" not in targets(summary) and "T1" in targets(summary)


def test_repeat_counts_are_one_for_every_size_or_one_per_size():
    from bench.results import per_size

    assert per_size("", [1, 2, 3], 3) == [3, 3, 3]
    assert per_size("5", [1, 2], 3) == [5, 5]
    assert per_size("3,3,1", [1, 2, 3], 3) == [3, 3, 1]
    with pytest.raises(ValueError, match="2 repeat counts"):
        per_size("3,1", [1, 2, 3], 3)
    with pytest.raises(ValueError, match="at least 1"):
        per_size("0", [1], 3)


def test_growth_is_time_per_row_and_memory_of_the_larger_size_over_the_smaller():
    from bench.results import growth

    data = {
        # 10x the rows: 11x the time (1.1x per row, met), 1.5x the memory (missed).
        "shuffle_write": {"10": 1.0, "100": 11.0, "10:mib": 200.0, "100:mib": 300.0},
        # 13x the time (1.3x per row, missed); no memory sampled.
        "spark_write": {"10": 2.0, "100": 26.0},
        "only_small": {"10": 1.0},
    }
    g = growth(data, 10, 100)
    assert set(g) == {"shuffle_write", "spark_write"}
    w = g["shuffle_write"]
    assert w["time_ratio"] == pytest.approx(1.1) and w["time_met"]
    assert w["us_per_row"] == {"10": pytest.approx(1e5), "100": pytest.approx(1.1e5)}
    assert w["memory_ratio"] == pytest.approx(1.5) and not w["memory_met"]
    s = g["spark_write"]
    assert s["time_ratio"] == pytest.approx(1.3) and not s["time_met"]
    assert "memory_ratio" not in s


def test_growth_table_reads_both_benchmarks_files_and_marks_what_is_over_the_bound(tmp_path):
    assert "not run" in report.growth_table(tmp_path)

    def size(seconds: float, mib: float) -> dict:
        return {"shuffle_read": {"median_seconds": seconds, "worker_peak_rss_mib": mib},
                "spark_read": {"median_seconds": seconds * 10}}  # fmt: skip

    sizes = {"1000000": size(1.0, 100.0), "10000000": size(10.0, 110.0),
             "100000000": size(130.0, 200.0)}  # fmt: skip
    (tmp_path / "decade.json").write_text(json.dumps({"sizes": sizes}))
    jvm = {"10000000": {"medians": {"jvm_read": 1.0}}, "100000000": {"medians": {"jvm_read": 10.0}}}
    (tmp_path / "decade-jvm.json").write_text(json.dumps({"sizes": jvm}))
    lines = report.growth_table(tmp_path).splitlines()
    assert "time per row, 100M / 10M" in lines[0] and "memory, 100M / 10M" in lines[0]
    read = next(line for line in lines if "`shuffle_read`" in line)
    # 1.00 µs per row at 1M and 10M, 1.30 at 100M: 1.30x (missed); 200 / 110 MiB (missed).
    assert "| 1.00 | 1.00 | 1.30 | **1.30x** | 100 | 110 | 200 | **1.82x** |" in read
    spark = next(line for line in lines if "spark_read (baseline)" in line)
    assert spark.endswith("| not sampled |")
    jvm_read = next(line for line in lines if "`jvm_read`" in line)
    assert jvm_read.startswith("| JVM benchmark |") and "| 1.00x |" in jvm_read
    # A later file measures the read again at 10M and 100M rows: its figures replace those
    # sizes' (1M stays the first file's).
    again = {"10000000": size(10.0, 100.0), "100000000": size(100.0, 105.0)}
    (tmp_path / "decade-perkey.json").write_text(json.dumps({"sizes": again}))
    read = next(ln for ln in report.growth_table(tmp_path).splitlines() if "`shuffle_read`" in ln)
    assert "| 1.00 | 1.00 | 1.00 | 1.00x | 100 | 100 | 105 | 1.05x |" in read


def test_read_limit_table_gives_both_runs_and_the_jvm_ratio_against_its_bound(tmp_path):
    assert "not run" in report.read_limit_table(tmp_path)

    def run(warmup, perf, jvm, python):
        return {
            "rows": 10_000_000, "bytes": 391_545_704, "records": 182, "partitions": 8,
            "repeat": 7, "warmup": warmup, "master": "local[2]",
            "median_mib_per_s": {"kafka_consumer_perf_test": perf, "shuffle_read_jvm": jvm,
                                 "shuffle_read_python": python},
            "ratio_to_consumer_perf_test": {"jvm": jvm / perf, "python": python / perf},
        }  # fmt: skip

    (tmp_path / "read_limit.json").write_text(json.dumps(run(0, 700.0, 525.0, 210.0)))
    only_fresh = report.read_limit_table(tmp_path)
    assert "| JVM read path | 525.0 | **0.75** (missed) | >= 0.8 |" in only_fresh
    (tmp_path / "read_limit-warm.json").write_text(json.dumps(run(10, 800.0, 720.0, 240.0)))
    lines = report.read_limit_table(tmp_path).splitlines()
    assert lines[0].startswith("| read | fresh session: MiB/s | of the perf test | after 10 reads")
    assert lines[2] == "| Kafka's `ConsumerPerformance` | 700.0 | 1.00 | 800.0 | 1.00 |  |"
    assert lines[3] == "| JVM read path | 525.0 | **0.75** (missed) | 720.0 | 0.90 (met) | >= 0.8 |"
    assert lines[4] == "| Python read path | 210.0 | 0.30 | 240.0 | 0.30 |  |"
    assert "373.4 MiB in 182 records" in lines[-1]
    readme = "<!-- bench:read_limit:start -->\nold\n<!-- bench:read_limit:end -->\n"
    page = "".join(
        f"<!-- bench:{name}:start -->\n<!-- bench:{name}:end -->\n"
        for name in ("targets", "io", "memory")
    )
    out = report.render(page + readme, RESULTS, None, tmp_path)
    assert "old" not in out and "| JVM read path | 525.0 |" in out


def test_readme_summary_takes_each_pair_at_its_benchmark_s_largest_size(tmp_path):
    def target(ours, base, kind="speedup"):
        ratio = base / ours if kind == "speedup" else ours / base
        return {"ours_seconds": ours, "baseline_seconds": base, "kind": kind, "ratio": ratio}

    results = {
        "master": "local[2]", "cores": 2, "partitions": 8,
        "sizes": {
            "1000000": {"targets": {"T4": target(1.0, 2.0)}},
            "10000000": {"targets": {"T4": target(2.0, 24.0), "T6": target(10.0, 25.0, "ratio"),
                                     "T3": target(0.5, 1.0)}},
        },
    }  # fmt: skip
    table = report.summary_table(results, tmp_path)
    lines = table.splitlines()
    assert lines[2] == (
        "| write keyed rows to Kafka | `write_shuffle` 2.00 s | "
        "Spark's `kafka` sink, JSON per row, 24.00 s | 12.0x faster |"
    )
    assert "| read them back | not run | | |" in lines  # no jvm.json
    assert "| write once, three consumers | 10.00 s | each consumer" in table
    assert "25.00 s | 0.40 of the time |" in table
    assert "| re-run one consumer for one day | not run | | |" in lines  # no T7
    assert "| `aggregate_shuffle` 0.50 s |" in table and "| 2.00x faster |" in table
    jvm = {"sizes": {"10000000": {"targets": {
        "read vs Spark's kafka source": target(0.5, 20.5),
        "sorted join vs Parquet, no broadcast": target(1.0, 6.0)}}}}  # fmt: skip
    (tmp_path / "jvm.json").write_text(json.dumps(jvm))
    (tmp_path / "records.json").write_text(json.dumps({"sizes": {"10000000": {
        "kafka_records_jvm": {"median_seconds": 2.5},
        "spark_kafka_source": {"median_seconds": 12.0}}}}))  # fmt: skip
    table = report.summary_table(results, tmp_path)
    assert "| `read_shuffle` on the JVM 0.50 s | " in table and "| 41.0x faster |" in table
    assert "| `read_records` on the JVM 2.50 s | Spark's `kafka` source, 12.00 s | 4.80x" in table
    assert "read on the JVM, 1.00 s | the same join of their Parquet files, 6.00 s | 6.00x" in table
    assert lines[-1].endswith("8 Kafka partitions), 10M rows or messages.")


def test_sorted_table_gives_each_sorted_pair_per_size(tmp_path):
    assert "not run" in report.sorted_table(tmp_path)

    def t(ours, base, kind, bound, met):
        ratio = base / ours if kind == "speedup" else ours / base
        return {"ours_seconds": ours, "baseline_seconds": base, "kind": kind, "ratio": ratio,
                "bound": bound, "met": met}  # fmt: skip

    sizes = {
        "2000000": {"repeat": 3, "targets": {
            "sorted join vs Parquet, no broadcast": t(0.4, 1.8, "speedup", 2.0, True),
            "sorted reuse vs bucketed sorted": t(1.5, 3.0, "ratio", 0.5, True)}},
        "10000000": {"repeat": 3, "targets": {
            "sorted join vs Parquet, no broadcast": t(1.0, 1.5, "speedup", 2.0, False),
            "sorted write vs unsorted write": t(3.0, 1.5, "ratio", 2.0, True)}},
    }  # fmt: skip
    (tmp_path / "jvm.json").write_text(json.dumps({"master": "local[2]", "cores": 2,
                                                   "sizes": sizes}))  # fmt: skip
    lines = report.sorted_table(tmp_path).splitlines()
    assert lines[0] == "| pair | 2M rows | 10M rows | target |"
    assert lines[2] == (
        "| join of two sorted shuffles vs the Parquet join, no broadcast | 0.400 s vs 1.800 s: "
        "**4.50x** | 1.000 s vs 1.500 s: **1.50x** (missed) | >= 2x |"
    )
    assert lines[3].startswith("| the same vs the bucketed") and lines[3].count("not run") == 2
    assert "| 1.500 s vs 3.000 s: **0.50** | not run | <= 0.5 |" in lines[4]
    assert "| not run | 3.000 s vs 1.500 s: **2.00** | <= 2 |" in lines[5]
    assert "Medians of 3 runs side by side" in lines[-1]
