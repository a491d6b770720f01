"""Retention of a shuffle: which runs to expire and how much of each partition to delete.
Pure Python.

A shuffle's data topic keeps every frame (``retention.ms=-1``): the commit log points into it.
Like Kafka Streams' repartition topics, whose consumed records are purged with
``deleteRecords``, a shuffle drops what no reader can need any more:

- runs **superseded** by a newer run of their window (never visible again, except by run id);
- with ``older_than``, runs committed before ``now - older_than``;
- with ``keep_last``, the runs of all but the ``keep_last`` most recently committed windows.

Their commit records are replaced by ``expired/<run>`` markers (so a reader of such a run is
told why it is gone) and deleted. Then each partition's records below a cutoff are deleted:
the cutoff is just past the last frame of an expired run in that partition, but never past
the first frame of a run that stays, and never past ``protect_from`` (the first offset
written less than ``min_age`` ago), so frames of a run still being written are kept. Frames
of failed attempts below the cutoff go with them.

A commit log holding a commit record that cannot be read (``ShuffleLog.bad_records``) is
not expired: the run it records is unknown, so neither whether it is superseded nor where its
frames lie can be told, and a cutoff could delete them.

Expiring twice is harmless: markers record the expired runs' offsets, so an interrupted
expiry computes the same cutoffs when it runs again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from orchestration.shuffle.core.commitlog import Commit, Expired, PartitionRange, ShuffleLog
from orchestration.shuffle.errors import ShuffleFormatError, ShuffleOptionError


@dataclass(frozen=True)
class ExpiryPlan:
    expire: tuple[tuple[Commit, str], ...]  # (run, reason)
    keep: tuple[Commit, ...]
    cutoffs: dict[int, int]  # partition -> delete records below this offset

    @property
    def runs(self) -> list[str]:
        return [c.run_id for c, _ in self.expire]


def _committed_at(c: Commit) -> dt.datetime:
    at = dt.datetime.fromisoformat(c.committed_at)
    return at if at.tzinfo else at.replace(tzinfo=dt.UTC)


def plan_expiry(
    log: ShuffleLog,
    *,
    now: dt.datetime,
    older_than: dt.timedelta | None = None,
    keep_last: int | None = None,
    protect_from: Mapping[int, int] | None = None,
) -> ExpiryPlan:
    """What :func:`~orchestration.shuffle.expire_shuffle` removes (see the module doc)."""
    if keep_last is not None and keep_last < 1:
        raise ShuffleOptionError(f"shuffle {log.topic!r}: keep_last must be >= 1, got {keep_last}")
    if older_than is not None and older_than < dt.timedelta(0):
        raise ShuffleOptionError(f"shuffle {log.topic!r}: older_than must not be negative")
    unreadable = [b for b in log.bad_records if b.is_commit]
    if unreadable:
        raise ShuffleFormatError(
            f"shuffle {log.topic!r} is not expired: "
            + "; ".join(b.describe(log.topic) for b in unreadable[:5])
            + " (its run's frames could be deleted; repair or delete the record first)"
        )
    latest = {c.run_id for c in log.latest_by_window().values()}
    kept_windows: set[str] | None = None
    if keep_last is not None:
        order: list[str] = []
        for c in log.commits:
            if c.window is not None:
                if c.window in order:
                    order.remove(c.window)
                order.append(c.window)
        kept_windows = set(order[-keep_last:])
    expire: list[tuple[Commit, str]] = []
    keep: list[Commit] = []
    for c in log.commits:
        if c.window is not None and c.run_id not in latest:
            expire.append((c, "superseded by a newer run of its window"))
        elif older_than is not None and _committed_at(c) < now - older_than:
            expire.append((c, f"committed more than {older_than} before {now.isoformat()}"))
        elif kept_windows is not None and c.window is not None and c.window not in kept_windows:
            expire.append((c, f"not among the {keep_last} most recent windows"))
        else:
            keep.append(c)
    gone: list[Mapping[int, PartitionRange]] = [c.partitions for c, _ in expire]
    gone += [e.partitions for e in log.expired.values()]
    cutoffs: dict[int, int] = {}
    for p in sorted({p for parts in gone for p in parts}):
        end = max(parts[p].last for parts in gone if p in parts) + 1
        firsts = [c.partitions[p].first for c in keep if p in c.partitions]
        cutoff = min([end, *firsts])
        if protect_from is not None and p in protect_from:
            cutoff = min(cutoff, protect_from[p])
        if cutoff > 0:
            cutoffs[p] = cutoff
    return ExpiryPlan(tuple(expire), tuple(keep), cutoffs)


def marker(c: Commit, reason: str, now: dt.datetime) -> Expired:
    return Expired(c.run_id, c.window, now.isoformat(), reason, dict(c.partitions), c.rows, c.bytes)


def bytes_deleted(
    runs: list[Expired], lows: Mapping[int, int], cutoffs: Mapping[int, int]
) -> dict[int, int]:
    """Bytes of expired runs' committed frames that deleting each partition's records in
    ``[low, cutoff)`` removes (a run's bytes are shared among its partitions by rows, and a
    range cut in the middle counts by offsets)."""
    out: dict[int, int] = {}
    for r in runs:
        for p, rng in r.partitions.items():
            if p not in cutoffs:
                continue
            share = r.bytes * rng.rows // r.rows if r.rows else r.bytes // len(r.partitions)
            span = rng.last + 1 - rng.first
            gone = min(rng.last + 1, cutoffs[p]) - max(rng.first, lows.get(p, 0))
            if gone > 0 and span > 0:
                out[p] = out.get(p, 0) + share * min(gone, span) // span
    return out
