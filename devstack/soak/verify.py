"""The soak's checks, from Kafka and the outputs alone, and its report (throughput over time,
stalls with their causes, memory of the long-lived processes, a plot).

Each check returns a list of problems: empty when it holds.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import statistics
import subprocess
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow.dataset as pads

from devstack.soak import app as soak_app
from devstack.soak import definitions as soak
from orchestration.shuffle import KafkaClient, read_queue_output, read_shuffle, shuffle_log
from orchestration.shuffle.core.commitlog import commit_topic
from orchestration.shuffle.core.logindex import index_topic
from orchestration.shuffle.core.queue import done_topic, work_topic

STALL_S = 10.0


def events(out: Path) -> list[dict]:
    path = out / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _parquet(path: Path) -> pd.DataFrame | None:
    if not path.exists():
        return None
    table = pads.dataset(str(path), format="parquet", partitioning="hive").to_table()
    # A folder a run is still writing holds no file yet (only Spark's _temporary).
    return table.to_pandas() if table.num_columns else None


def _expected_days(instance) -> list[str]:
    """Every day a producer run was launched for (its range tags)."""
    from dagster import RunsFilter

    last = None
    for run in instance.get_runs(RunsFilter(job_name=soak.PRODUCER_JOB)):
        end = run.tags.get(soak.RANGE_END)
        if end and (last is None or end > last):
            last = end
    if last is None:
        return []
    first = dt.date.fromisoformat(soak.FIRST_DAY)
    n = (dt.date.fromisoformat(last) - first).days + 1
    return [(first + dt.timedelta(days=i)).isoformat() for i in range(n)]


def check_daily(spark, conf: dict, instance, out: Path, rows: int) -> tuple[list[str], dict]:
    """The Dagster shuffle: every day launched is committed; every committed day's rows are
    in each consumer's output exactly once; Kafka's visible runs hold exactly them; Dagster's
    materialized partitions are the commit log's windows."""
    from dagster import AssetKey

    problems: list[str] = []
    log = shuffle_log(soak.TOPIC, kafka=conf)
    latest = log.latest_by_window()
    committed = sorted(w for w in latest if w is not None)
    expired = set(log.expired_windows())
    launched = _expected_days(instance)
    missing = sorted(set(launched) - set(committed))
    if missing:
        problems.append(f"{soak.TOPIC}: days launched but never committed: {missing}")
    materialized = instance.get_materialized_partitions(AssetKey("soak_events"))
    if set(materialized) != set(committed):
        problems.append(
            f"soak_events: Dagster's materialized partitions differ from the commit log: only "
            f"in Dagster {sorted(set(materialized) - set(committed))}, only in the log "
            f"{sorted(set(committed) - set(materialized))}"
        )
    consumers = {name: out / "consumers" / name for name in soak.CONSUMERS}
    for name, path in consumers.items():
        if path.exists():
            extra = sorted(
                p.name.removeprefix("day=") for p in path.iterdir()
                if p.name.startswith("day=") and p.name.removeprefix("day=") not in latest
            )  # fmt: skip
            if extra:
                problems.append(f"{name}: output for days never committed: {extra}")
    readable = [d for d in committed if d not in expired]
    in_kafka = Counter()
    if readable:
        df = read_shuffle(spark, soak.TOPIC, kafka=conf, windows=readable).select("id", "day")
        pdf = df.toPandas()
        in_kafka = Counter(pdf["day"].astype(str))
        for day, ids in pdf.groupby(pdf["day"].astype(str))["id"]:
            want = soak.expected_day(day, rows)["id"]
            if sorted(ids.tolist()) != want.tolist():
                problems.append(f"{soak.TOPIC} window {day}: the visible run's rows differ "
                                f"({len(ids)} read, {len(want)} expected)")  # fmt: skip
        for day in readable:
            if in_kafka.get(day, 0) == 0:
                problems.append(f"{soak.TOPIC} window {day}: committed, not expired, no rows read")
    for day in committed:
        want = soak.expected_day(day, rows)
        want_keys = want.groupby("key")["id"].agg(["count", "sum"])
        got = _parquet(consumers["soak_rows"] / f"day={day}")
        if got is None:
            problems.append(f"soak_rows {day}: no output")
        elif sorted(got["id"].tolist()) != want["id"].tolist():
            dup = int(got["id"].duplicated().sum())
            problems.append(f"soak_rows {day}: {len(got)} rows ({dup} duplicated), "
                            f"{len(want)} expected")  # fmt: skip
        for name, cols in (("soak_per_key", ("n", "id_sum")), ("soak_totals", ("n", "id_sum"))):
            got = _parquet(consumers[name] / f"day={day}")
            if got is None:
                problems.append(f"{name} {day}: no output")
                continue
            got = got.set_index("key").sort_index()
            if list(got.index) != list(want_keys.index) or not (
                (got[cols[0]].to_numpy() == want_keys["count"].to_numpy()).all()
                and (got[cols[1]].to_numpy() == want_keys["sum"].to_numpy()).all()
            ):
                problems.append(f"{name} {day}: per-key counts or sums differ from the day's rows")
            if name == "soak_per_key" and not (got["distinct_ids"] == got["n"]).all():
                problems.append(f"{name} {day}: a key holds the same id twice")
    stats = {
        "days_committed": len(committed),
        "days_expired": len(expired),
        "runs_committed": len(log.commits),
        "superseded_runs": len(log.commits) - len(latest),
        "rows_committed": sum(c.rows for c in log.commits),
    }
    return problems, stats


def check_stream(spark, conf: dict, out: Path) -> tuple[list[str], dict]:
    """The streaming shuffle: the consumer's table holds each committed window's latest run
    exactly, no window that was not committed, and the rate source's values with no gap."""
    problems: list[str] = []
    log = shuffle_log(soak_app.STREAM_TOPIC, kafka=conf)
    latest = log.latest_by_window()
    windows = sorted(w for w in latest if w is not None)
    table = _parquet(out / "stream_out")
    stats = {"windows_committed": len(windows), "runs_committed": len(log.commits),
             "rows_committed": sum(c.rows for c in log.commits)}  # fmt: skip
    if not windows:
        return [f"{soak_app.STREAM_TOPIC}: nothing was committed"], stats
    if table is None:
        return [f"{soak_app.STREAM_TOPIC}: the streaming consumer wrote nothing"], stats
    table["window"] = table["window"].astype(str)
    extra = sorted(set(table["window"]) - set(windows))
    if extra:
        problems.append(f"stream output: windows never committed: {extra[:10]}")
    visible = read_shuffle(spark, soak_app.STREAM_TOPIC, kafka=conf, windows=windows,
                           with_metadata=True).select("id", "_window").toPandas()  # fmt: skip
    want = visible.groupby("_window")["id"].apply(lambda s: sorted(s.tolist())).to_dict()
    got = table.groupby("window")["id"].apply(lambda s: sorted(s.tolist())).to_dict()
    wrong = [w for w in windows if want.get(w, []) != got.get(w, [])]
    if wrong:
        problems.append(f"stream output: {len(wrong)} window(s) differ from their latest run, "
                        f"e.g. {wrong[:5]}")  # fmt: skip
    ids = visible["id"]
    if ids.duplicated().any():
        problems.append(f"{soak_app.STREAM_TOPIC}: {int(ids.duplicated().sum())} ids in two "
                        "windows")  # fmt: skip
    if len(ids) and (ids.min() != 0 or ids.max() + 1 != ids.nunique()):
        problems.append(f"{soak_app.STREAM_TOPIC}: the rate source's values have gaps "
                        f"({ids.nunique()} distinct in 0..{ids.max()})")  # fmt: skip
    stats["rows_visible"] = int(len(ids))
    stats["consumer_rows"] = int(len(table))
    return problems, stats


def _dead_letters(conf: dict) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**conf, "group.id": "unused", "enable.auto.commit": False})
    try:
        md = consumer.list_topics(soak_app.DLQ_TOPIC, timeout=30).topics[soak_app.DLQ_TOPIC]
        ids = []
        for p in md.partitions:
            lo, hi = consumer.get_watermark_offsets(TopicPartition(soak_app.DLQ_TOPIC, p),
                                                    timeout=30, cached=False)  # fmt: skip
            if hi <= lo:
                continue
            consumer.assign([TopicPartition(soak_app.DLQ_TOPIC, p, lo)])
            seen = 0
            while seen < hi - lo:
                msg = consumer.poll(10)
                if msg is None:
                    break
                if msg.error():
                    continue
                seen += 1
                ids.append(json.loads(msg.value())["id"])
        return ids
    finally:
        consumer.close()


def share_group_lag(kafka_classpath: str, bootstrap: str, group: str) -> tuple[int | None, str]:
    """The share group's lag as Kafka's own tool reports it (records not yet acknowledged)."""
    from devstack.localstack import java_executable

    proc = subprocess.run(
        [java_executable(), "-cp", kafka_classpath,
         "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
         "--bootstrap-server", bootstrap, "--describe", "--group", group, "--offsets"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    text = proc.stdout + proc.stderr
    lines = [ln.split() for ln in proc.stdout.splitlines() if ln.strip()]
    if not lines or "LAG" not in lines[0]:
        return None, text
    col = lines[0].index("LAG")
    total = 0
    for row in lines[1:]:
        if len(row) > col and re.fullmatch(r"\d+", row[col]):
            total += int(row[col])
    return total, text


def check_queue(spark, conf: dict, out: Path, timeline: list[dict], classpath: str) -> tuple:
    problems: list[str] = []
    fed = [e for e in timeline if e["event"] == "queue_fed"]
    if not fed:
        return ["queue: the feeder never reported how many records it wrote"], {}
    n = fed[-1]["records"]
    poison = {i for i in range(n) if soak_app.poisoned(i)}
    good = set(range(n)) - poison
    rows = read_queue_output(spark, str(out / "queue_out")).select("id").toPandas()["id"]
    got = Counter(rows.tolist())
    dup = sorted(i for i, c in got.items() if c > 1)
    if set(got) != good or dup:
        problems.append(
            f"queue output: {len(set(got) & good)} of {len(good)} good records, "
            f"{len(set(got) - good)} not good, {len(dup)} twice (e.g. {dup[:5]})"
        )
    dead = Counter(_dead_letters(conf))
    twice = sorted(i for i, c in dead.items() if c > 1)
    if set(dead) != poison or twice:
        problems.append(
            f"{soak_app.DLQ_TOPIC}: {len(set(dead) & poison)} of {len(poison)} poison records, "
            f"{len(set(dead) - poison)} not poison, {len(twice)} twice (e.g. {twice[:5]})"
        )
    lag, text = share_group_lag(classpath, conf["bootstrap.servers"], soak_app.QUEUE_GROUP)
    if lag is None:
        problems.append(f"share group {soak_app.QUEUE_GROUP}: lag unknown: {text.strip()[:500]}")
    elif lag:
        problems.append(f"share group {soak_app.QUEUE_GROUP}: {lag} records not acknowledged")
    stats = {"records_fed": n, "accepted": len(got), "dead_lettered": sum(dead.values()),
             "share_group_lag": lag}  # fmt: skip
    return problems, stats


# Topics and groups that are the soak's own or Kafka's; anything else was left behind.
def check_leftovers(conf: dict) -> tuple[list[str], dict]:
    client = KafkaClient(conf)
    admin = client.admin()
    topics = set(admin.list_topics(timeout=30).topics)
    ours = {soak.TOPIC, soak_app.STREAM_TOPIC}
    # Each shuffle's data topic, commit log and the log's index (once the log is long), and
    # the queue's work topic and the record of what its consumers settled.
    allowed = {t for base in ours for t in (base, commit_topic(base), index_topic(base))} | {
        soak_app.QUEUE_TOPIC, work_topic(soak_app.QUEUE_TOPIC), done_topic(soak_app.QUEUE_TOPIC),
        soak_app.DLQ_TOPIC,
    }  # fmt: skip
    left = sorted(t for t in topics - allowed if not t.startswith("__"))
    groups = admin.list_consumer_groups(request_timeout=30).result()
    names = sorted(g.group_id for g in groups.valid)
    stray = [g for g in names if g != soak_app.QUEUE_GROUP]
    problems = []
    if left:
        problems.append(f"topics left behind: {left}")
    if stray:
        problems.append(f"consumer groups left behind: {stray}")
    return problems, {"topics": sorted(topics), "groups": names}


# -- the report --------------------------------------------------------------------------


def commit_times(conf: dict) -> dict[str, list[tuple[float, int]]]:
    out = {}
    for topic in (soak.TOPIC, soak_app.STREAM_TOPIC):
        log = shuffle_log(topic, kafka=conf)
        out[topic] = sorted(
            (dt.datetime.fromisoformat(c.committed_at).timestamp(), c.rows) for c in log.commits
        )
    return out


def throughput(commits: dict, start: float, bucket: float = 60.0) -> list[dict]:
    rows: dict[int, dict] = {}
    for topic, items in commits.items():
        for t, n in items:
            b = int((t - start) // bucket)
            rows.setdefault(b, {"minute": b, soak.TOPIC: 0, soak_app.STREAM_TOPIC: 0})
            rows[b][topic] += n
    return [rows[k] for k in sorted(rows)]


def stalls(
    timeline: list[dict],
    faults: list[dict],
    start: float,
    end: float,
    load: list[tuple[float, float]] = (),  # type: ignore[assignment]
    cores: int = 2,
) -> list[dict]:
    """Gaps longer than :data:`STALL_S` in the continuous work (the streaming producer's
    commits and the streaming consumer's batches), each with what happened around it: the
    faults, the queries' failures, and the machine's load average when it exceeded twice
    its cores."""
    found = []
    for event, what in (("stream_commit", "streaming producer"),
                        ("stream_batch", "streaming consumer")):  # fmt: skip
        times = [start] + sorted(e["t"] for e in timeline if e["event"] == event) + [end]
        for a, b in zip(times, times[1:], strict=False):
            if b - a <= STALL_S:
                continue
            causes = [
                f"{f['kind']}" + (f" (node {f['node']})" if "node" in f else "")
                for f in faults if f["t"] <= b and f.get("t_end", f["t"]) >= a - 20
            ]  # fmt: skip
            causes += [
                f"{e['event']}: {e.get('query') or ''} {e.get('error', '')[:160]}".strip()
                for e in timeline
                if e["event"] in ("query_failed", "app_started", "app_draining")
                and a - 5 <= e["t"] <= b + 5
            ]
            busy = [v for t, v in load if a <= t <= b]
            if busy and max(busy) > 2 * cores:
                causes.append(f"machine load up to {max(busy):.0f} on {cores} cores")
            found.append({"what": what, "from_s": round(a - start, 1), "seconds": round(b - a, 1),
                          "causes": causes or ["none recorded"]})  # fmt: skip
    return sorted(found, key=lambda s: s["from_s"])


def longest_life(samples: list, pids: list[int]) -> list:
    """The samples of the process that ran longest among those sampled."""
    runs: dict[int, list] = {}
    for sample, pid in zip(samples, pids, strict=False):
        runs.setdefault(pid, []).append(sample)
    return max(runs.values(), key=len) if runs else []


def flat(samples: list[tuple[float, float]], limit: float = 1.5) -> tuple[bool, str]:
    """Whether RSS stayed flat: the median of the last fifth within ``limit`` times the
    median of the second fifth (the first is warm-up). Not judged over less than 8 minutes
    (a JVM's heap and a daemon's imports are still growing then)."""
    if len(samples) < 10 or samples[-1][0] - samples[0][0] < 480:
        values = [round(v) for _, v in samples]
        return True, f"not judged (under 8 minutes of one process): {values[:1] + values[-1:]} MiB"
    values = [v for _, v in samples]
    k = len(values) // 5
    early = statistics.median(values[k : 2 * k])
    late = statistics.median(values[-k:])
    ratio = late / early if early else 1.0
    return ratio <= limit, f"{early:.0f} MiB -> {late:.0f} MiB ({ratio:.2f}x, limit {limit}x)"


def plot(path: Path, start: float, commits: dict, rss: dict, faults: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    for topic, items in commits.items():
        xs, total, ys = [], 0, []
        for t, n in items:
            total += n
            xs.append((t - start) / 60)
            ys.append(total)
        axes[0].step(xs, ys, where="post", label=f"{topic}: rows committed")
    axes[0].set_ylabel("rows committed")
    axes[0].legend(loc="upper left")
    for name, samples in rss.items():
        axes[1].plot([(t - start) / 60 for t, _ in samples], [v for _, v in samples], label=name)
    axes[1].set_ylabel("RSS (MiB)")
    axes[1].set_xlabel("minutes")
    axes[1].legend(loc="upper left")
    for f in faults:
        for ax in axes:
            ax.axvline((f["t"] - start) / 60, color="red", alpha=0.25)
        axes[0].annotate(f["kind"], ((f["t"] - start) / 60, 0), rotation=90, fontsize=7,
                         color="red", va="bottom")  # fmt: skip
    fig.suptitle("soak: rows committed and memory over time (red: faults)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
