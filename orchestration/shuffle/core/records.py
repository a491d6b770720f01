"""``kafka-records`` without I/O: its options, start and end positions, rate limits, splits
and data-loss rules. Pure Python.

Option names and formats follow Spark's own ``kafka`` source where it has them; the
options, their defaults and whether batch reads or streams take them are declared in
:data:`~orchestration.shuffle.core.optiondefs.RECORDS` (the docs' option table is
written from it), which also refuses the options of Spark's source that this one does not
implement. Beyond Spark's: ``startingOffsets=committed`` with ``offsetResetStrategy``, and
``commitOffsets``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestration.shuffle.core.metrics import METRICS_KEY
from orchestration.shuffle.core.optiondefs import BATCH, RECORDS, STREAM
from orchestration.shuffle.core.options import Options
from orchestration.shuffle.errors import ShuffleOptionError

OWNER = "kafka-records"
EARLIEST, LATEST = -2, -1

# Offsets per topic and partition.
TopicOffsets = dict[str, dict[int, int]]


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        if self.assign:
            return any(t == topic for t, _ in self.assign)
        return topic in self.topics


@dataclass(frozen=True)
class Position:
    """Where to start or end: ``kind`` is earliest, latest, committed, offsets or
    timestamps (``values`` per topic and partition; ``timestamp`` for every partition)."""

    kind: str
    values: TopicOffsets = field(default_factory=dict)
    timestamp: int | None = None


@dataclass(frozen=True)
class RecordsOptions:
    kafka: dict[str, str] = field(repr=False)
    subscription: Subscription
    starting: Position
    ending: Position
    reset: str = "earliest"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    commit_offsets: bool = False
    # Where no record is at or after a starting timestamp: "latest" or "error".
    no_match: str = "latest"

    @property
    def group(self) -> str | None:
        """The consumer group (``kafka.group.id``), if one was given."""
        return self.kafka.get("group.id")

    def require_group(self) -> str:
        """The consumer group, for the reads that need one (``startingOffsets='committed'``,
        ``commitOffsets``; :func:`parse_options` refuses those without it)."""
        group = self.group
        if not group:
            raise ShuffleOptionError(f"{OWNER}: option 'kafka.group.id' is required here")
        return group


def _json(name: str, raw: str) -> dict:
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise ShuffleOptionError(f"{OWNER}: option {name!r} must be a JSON object, got {raw!r}")
    return parsed


def _per_partition(name: str, raw: str) -> TopicOffsets:
    out: TopicOffsets = {}
    for topic, parts in _json(name, raw).items():
        if not isinstance(parts, dict):
            raise ShuffleOptionError(
                f'{OWNER}: option {name!r} must look like {{"topic": {{"0": 23}}}}, got {raw!r}'
            )
        try:
            out[str(topic)] = {int(p): int(o) for p, o in parts.items()}
        except (TypeError, ValueError):
            raise ShuffleOptionError(
                f"{OWNER}: option {name!r}: partitions and offsets must be integers, got {raw!r}"
            ) from None
    return out


def _position(
    opts: Options, offsets: str, timestamp: str, by_timestamp: str, allowed: tuple[str, ...]
) -> Position:
    given = [n for n in (offsets, timestamp, by_timestamp) if opts.given(n)]
    if len(given) > 1:
        raise ShuffleOptionError(f"{OWNER}: options {given} cannot be combined; give one")
    if opts.given(timestamp):
        return Position("timestamp", timestamp=opts.integer(timestamp))
    by_time = opts.raw(by_timestamp)
    if by_time is not None:
        return Position("timestamps", _per_partition(by_timestamp, by_time))
    raw = (opts.text(offsets) or "").strip()
    if raw.lower() in allowed:
        return Position(raw.lower())
    if raw.startswith("{"):
        return Position("offsets", _per_partition(offsets, raw))
    raise ShuffleOptionError(
        f"{OWNER}: option {offsets!r} must be {', '.join(allowed)} or a JSON object "
        f'{{"topic": {{"partition": offset}}}}, got {raw!r}'
    )


def parse_options(options: Mapping[str, str], *, streaming: bool) -> RecordsOptions:
    """Parses and checks ``kafka-records`` options; errors name the option, and an option
    the source does not take (:data:`~orchestration.shuffle.core.optiondefs.RECORDS`) is
    refused."""
    opts = Options(options, RECORDS, mode=STREAM if streaming else BATCH)
    kafka = opts.kafka()
    chosen = [n for n in ("subscribe", "subscribePattern", "assign", "topic") if opts.given(n)]
    if len(chosen) != 1:
        raise ShuffleOptionError(
            f"{OWNER}: give exactly one of 'subscribe', 'subscribePattern' or 'assign' "
            f"(got {chosen or 'none'})"
        )
    name = chosen[0]
    value = opts.raw(name) or ""
    if name in ("subscribe", "topic"):
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise ShuffleOptionError(f"{OWNER}: option {name!r} names no topic")
        subscription = Subscription(topics=topics)
    elif name == "subscribePattern":
        try:
            re.compile(value)
        except re.error as exc:
            raise ShuffleOptionError(
                f"{OWNER}: option 'subscribePattern' is not a regular expression: {exc}"
            ) from None
        subscription = Subscription(pattern=value)
    else:
        parsed = _json("assign", value)
        try:
            pairs = tuple(sorted((str(t), int(p)) for t, parts in parsed.items() for p in parts))
        except (TypeError, ValueError):
            raise ShuffleOptionError(
                f"{OWNER}: option 'assign' must look like {{\"topic\": [0, 1]}}, got {value!r}"
            ) from None
        subscription = Subscription(assign=pairs)
    starting = _position(
        opts,
        "startingOffsets",
        "startingTimestamp",
        "startingOffsetsByTimestamp",
        ("earliest", "latest", "committed"),
    )
    if starting.kind == "committed" and not kafka.get("group.id"):
        raise ShuffleOptionError(
            f"{OWNER}: startingOffsets='committed' needs option 'kafka.group.id'"
        )
    if streaming:
        ending = Position("latest")  # the table refuses ending options on streams
    else:
        ending = _position(
            opts, "endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp", ("latest",)
        )
    commit = opts.flag("commitOffsets")
    if commit and not kafka.get("group.id"):
        raise ShuffleOptionError(f"{OWNER}: commitOffsets=true needs option 'kafka.group.id'")
    return RecordsOptions(
        kafka=kafka,
        subscription=subscription,
        starting=starting,
        ending=ending,
        reset=opts.choice("offsetResetStrategy"),
        max_offsets_per_trigger=opts.integer("maxOffsetsPerTrigger"),
        min_partitions=opts.integer("minPartitions"),
        max_records_per_partition=opts.integer("maxRecordsPerPartition"),
        fail_on_data_loss=opts.flag("failOnDataLoss"),
        include_headers=opts.flag("includeHeaders"),
        commit_offsets=commit,
        no_match=opts.choice("startingOffsetsByTimestampStrategy"),
    )


def resolve(
    position: Position,
    bounds: Mapping[tuple[str, int], tuple[int, int]],
    *,
    committed: Mapping[tuple[str, int], int] | None = None,
    by_time: Mapping[tuple[str, int], int] | None = None,
    reset: str = "earliest",
    option: str = "startingOffsets",
    no_match: str = "latest",
) -> dict[tuple[str, int], int]:
    """Concrete offsets of ``position`` for each partition, given their (low, high) offsets,
    the group's committed offsets and the offsets found for the timestamps (-1: none, the
    end; with ``no_match="error"`` an error naming those partitions). Offsets are clamped to
    ``[low, high]``."""
    out: dict[tuple[str, int], int] = {}
    missing = []
    unmatched = []
    for tp, (low, high) in bounds.items():
        if position.kind == "earliest":
            off = low
        elif position.kind == "latest":
            off = high
        elif position.kind == "committed":
            got = (committed or {}).get(tp)
            if got is None or got < 0:
                if reset == "none":
                    missing.append(tp)
                    continue
                off = low if reset == "earliest" else high
            else:
                off = got
        elif position.kind in ("timestamp", "timestamps"):
            found = (by_time or {}).get(tp)
            if found is not None and found < 0 and no_match == "error":
                unmatched.append(tp)
            off = high if found is None or found < 0 else found
        else:
            given = position.values.get(tp[0], {}).get(tp[1])
            off = low if given is None or given == EARLIEST else high if given == LATEST else given
        out[tp] = min(max(off, low), high)
    if missing:
        names = ", ".join(f"{t}-{p}" for t, p in sorted(missing))
        raise ShuffleOptionError(
            f"{OWNER}: {option}='committed' with offsetResetStrategy='none': the group has no "
            f"committed offset for partition(s) {names}"
        )
    if unmatched:
        names = ", ".join(f"{t}-{p}" for t, p in sorted(unmatched))
        raise ShuffleOptionError(
            f"{OWNER}: no record at or after the {option} timestamp in partition(s) {names} "
            "(startingOffsetsByTimestampStrategy='error'; 'latest' starts them at their end)"
        )
    return out


def rate_limit(
    start: Mapping[tuple[str, int], int], latest: Mapping[tuple[str, int], int], limit: int
) -> dict[tuple[str, int], int]:
    """End offsets reading at most about ``limit`` records, shared among partitions in
    proportion to how far behind each is (as Spark's source does)."""
    lag = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(lag.values())
    if total <= limit:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        share = limit * lag[tp] / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, begin + step)
    return out


@dataclass(frozen=True)
class Range:
    topic: str
    partition: int
    start: int
    end: int  # exclusive


def split(
    ranges: list[Range], min_partitions: int | None, max_records: int | None = None
) -> list[Range]:
    """Splits ranges into pieces of at most ``max_records`` records each, then the largest
    further so that there are at least ``min_partitions`` pieces (as Spark's source does
    with ``maxRecordsPerPartition`` and ``minPartitions``)."""
    ranges = [r for r in ranges if r.end > r.start]
    if max_records:
        ranges = [p for r in ranges for p in _pieces(r, -(-(r.end - r.start) // max_records))]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    out = []
    for r in ranges:
        size = r.end - r.start
        out += _pieces(r, max(1, min(size, round(min_partitions * size / total))))
    return out


def _pieces(r: Range, pieces: int) -> list[Range]:
    size = r.end - r.start
    bounds = [r.start + size * i // pieces for i in range(pieces + 1)]
    return [Range(r.topic, r.partition, a, b) for a, b in zip(bounds, bounds[1:], strict=False)]


def offsets_to_json(offsets: Mapping[tuple[str, int], int]) -> dict:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = off
    return out


def offsets_from_json(d: Mapping) -> dict[tuple[str, int], int]:
    try:
        return {
            (t, int(p)): int(o)
            for t, parts in d.items()
            if t != METRICS_KEY  # metrics shown next to a reported offset, not an offset
            for p, o in parts.items()
        }
    except (AttributeError, TypeError, ValueError):
        raise ShuffleOptionError(
            f"{OWNER}: {d!r} is not a kafka-records offset; was the checkpoint written by "
            "another source?"
        ) from None
