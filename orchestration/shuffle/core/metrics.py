"""Metrics of the streaming sources, from a query's progress reports. Pure Python.

Spark's Python stream reader has no hook for source metrics, so the sources put what only
they know next to the latest offset they report (``reportLatestOffset``), under the key
``"@metrics"`` (never a topic name: a topic name has no ``@``). Spark copies the reported
offset into each progress report as ``latestOffset``; with the batch's ``startOffset``,
``endOffset`` and ``numInputRows``, that gives, per micro-batch:

- ``kafka-records``: records; offsets behind latest per partition (min / max / avg, as
  Spark's own Kafka source reports them: the latest offset minus the batch's end offset;
  a partition the batch did not reach yet counts from its earliest offset); offset commits
  to ``kafka.group.id`` succeeded and failed, and records skipped as lost, so far in the
  query's run;
- ``kafka-shuffle``: records; commit records behind the commit log's end (the same three
  figures, over the one commit log); the runs the batch read and their bytes in Kafka,
  from their commit records.

Spark asks a source for the offset to report right after it planned a micro-batch, so the
figures reported with a batch's ``latestOffset`` are those of that batch.

Example::

    >>> offsets_behind({("t", 0): 10, ("t", 1): 20}, {("t", 0): 25, ("t", 1): 25})
    OffsetsBehind(min=5, max=15, avg=10.0)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

METRICS_KEY = "@metrics"
RECORDS = "kafka-records"
SHUFFLE = "kafka-shuffle"


@dataclass(frozen=True)
class OffsetsBehind:
    """How far a micro-batch's end is from the latest offsets, over partitions."""

    min: int
    max: int
    avg: float


@dataclass(frozen=True)
class BatchMetrics:
    """One micro-batch of one of our sources, from a progress report.

    ``offset_commits_*`` and ``records_lost`` are counts since the query (re)started, as
    the source reported them with its latest offset; None when it did not report them
    (offset commits: without ``commitOffsets``; lost records: with ``failOnDataLoss``).
    ``runs`` and ``bytes`` are reported by shuffle sources only.
    """

    batch_id: int
    source: str  # "kafka-records" or "kafka-shuffle"
    records: int
    offsets_behind: OffsetsBehind | None
    topics: tuple[str, ...] = ()
    offset_commits_succeeded: int | None = None
    offset_commits_failed: int | None = None
    records_lost: int | None = None
    runs: tuple[str, ...] | None = None
    bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        behind = d.pop("offsets_behind")
        for k in ("min", "max", "avg"):
            d[f"{k}_offsets_behind_latest"] = None if behind is None else behind[k]
        d["topics"] = list(self.topics)
        d["runs"] = None if self.runs is None else list(self.runs)
        return d


def offsets_behind(
    end: Mapping[Any, int], latest: Mapping[Any, int], earliest: Mapping[Any, int] | None = None
) -> OffsetsBehind | None:
    """Per partition of ``latest``: ``latest - end`` (never below 0). A partition missing
    from ``end`` counts from ``earliest`` (0 if not given). None without partitions."""
    if not latest:
        return None
    earliest = earliest or {}
    gaps = [max(0, hi - end.get(p, earliest.get(p, 0))) for p, hi in latest.items()]
    return OffsetsBehind(min(gaps), max(gaps), sum(gaps) / len(gaps))


def _records_offsets(d: Mapping | None) -> dict[tuple[str, int], int]:
    if not isinstance(d, Mapping):
        return {}
    out = {}
    for topic, parts in d.items():
        if topic == METRICS_KEY or not isinstance(parts, Mapping):
            continue
        for p, off in parts.items():
            out[(topic, int(p))] = int(off)
    return out


def kind_of(offset: Mapping | None) -> str | None:
    """Which of our sources wrote this offset: a commit-log position is ``{"log": N, ...}``;
    a kafka-records one maps topics to ``{partition: offset}``."""
    if not isinstance(offset, Mapping) or not offset:
        return None
    if isinstance(offset.get("log"), int):
        return SHUFFLE
    parts = [v for k, v in offset.items() if k != METRICS_KEY]
    if parts and all(
        isinstance(v, Mapping)
        and all(str(p).isdigit() and isinstance(o, int) for p, o in v.items())
        for v in parts
    ):
        return RECORDS
    return None


def _parsed(offset: Any) -> Any:
    """An offset as a classic session reports it (parsed JSON): Spark Connect's progress
    reports carry the source's offsets as JSON text instead."""
    if isinstance(offset, str):
        try:
            return json.loads(offset)
        except ValueError:
            return None
    return offset


def batch_metrics(batch_id: int, source: Mapping[str, Any]) -> BatchMetrics | None:
    """Metrics of one ``sources[]`` entry of a progress report (parsed JSON); None when the
    entry is not one of our sources."""
    end, latest = _parsed(source.get("endOffset")), _parsed(source.get("latestOffset"))
    kind = kind_of(end) or kind_of(latest)
    if kind is None:
        return None
    records = int(source.get("numInputRows") or 0)
    reported = latest.get(METRICS_KEY, {}) if isinstance(latest, Mapping) else {}

    def count(name: str) -> int | None:
        v = reported.get(name)
        return int(v) if v is not None else None

    if kind == SHUFFLE:
        end_log = end.get("log") if isinstance(end, Mapping) else None
        latest_log = latest.get("log") if isinstance(latest, Mapping) else None
        behind = (
            offsets_behind({0: end_log}, {0: latest_log})
            if end_log is not None and latest_log is not None
            else None
        )
        topic = reported.get("topic")
        runs = reported.get("runs")
        return BatchMetrics(
            batch_id,
            SHUFFLE,
            records,
            behind,
            (topic,) if topic else (),
            runs=tuple(runs) if runs is not None else None,
            bytes=count("bytes"),
        )
    ends, latests = _records_offsets(end), _records_offsets(latest)
    earliest = {(t, int(p)): int(o) for t, parts in reported.get("earliest", {}).items()
                for p, o in parts.items()}  # fmt: skip
    return BatchMetrics(
        batch_id,
        RECORDS,
        records,
        offsets_behind(ends, latests, earliest),
        tuple(sorted({t for t, _ in latests} | {t for t, _ in ends})),
        count("offset_commits_succeeded"),
        count("offset_commits_failed"),
        count("records_lost"),
    )


def progress_metrics(progress: Sequence[Mapping[str, Any]]) -> list[BatchMetrics]:
    """Every micro-batch of our sources in a query's progress reports (parsed JSON, e.g.
    ``json.loads(p.json)`` for each of ``query.recentProgress``), in batch order. A batch
    reported twice (Spark reports an idle trigger again) is counted once."""
    out: dict[tuple[int, int], BatchMetrics] = {}
    for report in progress:
        for i, source in enumerate(report.get("sources") or ()):
            m = batch_metrics(int(report.get("batchId", -1)), source)
            if m is not None and (m.records or (m.batch_id, i) not in out):
                out[(m.batch_id, i)] = m
    return [out[k] for k in sorted(out)]


def summarize_stream_metrics(batches: Sequence[BatchMetrics]) -> dict[str, Any]:
    """Totals over micro-batches, for a Dagster materialization's metadata."""
    with_data = [b for b in batches if b.records]
    last = batches[-1] if batches else None
    out: dict[str, Any] = {
        "micro_batches": len(with_data),
        "records": sum(b.records for b in batches),
    }
    sized = [b.bytes for b in batches if b.bytes is not None]
    if sized:
        out["bytes"] = sum(sized)
    if last is not None and last.offsets_behind is not None:
        out["min_offsets_behind_latest"] = last.offsets_behind.min
        out["max_offsets_behind_latest"] = last.offsets_behind.max
        out["avg_offsets_behind_latest"] = last.offsets_behind.avg
    for name in ("offset_commits_succeeded", "offset_commits_failed", "records_lost"):
        values = [getattr(b, name) for b in batches if getattr(b, name) is not None]
        if values:
            out[name] = values[-1]  # counted since the query started: the last is the total
    return out
