"""Watermark merging, as Flink merges a shuffle's watermarks. Pure Python.

Each producer subtask broadcasts its own watermark (the largest event time it has seen
minus the allowed out-of-orderness) to every partition. A consumer channel (one partition)
therefore sees interleaved watermarks of many subtasks. It tracks the latest per subtask,
and its merged watermark is their minimum, emitted only once every subtask has reported
one. A subtask that has ended no longer holds the minimum back. A subtask's watermark
going backwards is an error: producers only ever move them forward.

Event times are integers (microseconds since the epoch, UTC).

Example::

    >>> m = WatermarkMerger(subtasks=[0, 1])
    >>> m.observe(0, 100) is None       # subtask 1 not heard from yet
    True
    >>> m.observe(1, 50)
    50
    >>> m.observe(1, 120)               # the minimum is now subtask 0's 100
    100
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestration.shuffle.errors import ShuffleWatermarkError


class WatermarkMerger:
    """The merged watermark of one consumer channel over a known set of producer subtasks.

    Args:
        subtasks: The producer subtasks whose watermarks must all arrive before the first
            merged watermark is emitted.
        where: Describes the channel (topic, partition, run) for error messages.
    """

    def __init__(self, subtasks: Iterable[int], where: str = ""):
        self._expected = frozenset(subtasks)
        self._latest: dict[int, int] = {}
        self._ended: set[int] = set()
        self._current: int | None = None
        self._where = where

    @property
    def current(self) -> int | None:
        """The merged watermark so far, or None until every subtask has reported."""
        return self._current

    def observe(self, subtask: int, event_time: int) -> int | None:
        """Records a subtask's watermark; returns the merged watermark if it advanced."""
        self._check_known(subtask)
        previous = self._latest.get(subtask)
        if previous is not None and event_time < previous:
            loc = f" on {self._where}" if self._where else ""
            raise ShuffleWatermarkError(
                f"watermark of producer subtask {subtask} went back from {previous} to "
                f"{event_time}{loc}"
            )
        self._latest[subtask] = event_time
        return self._advance()

    def end(self, subtask: int) -> int | None:
        """Records that a subtask has ended; returns the merged watermark if it advanced."""
        self._check_known(subtask)
        self._ended.add(subtask)
        return self._advance()

    def _check_known(self, subtask: int) -> None:
        if subtask not in self._expected:
            raise ShuffleWatermarkError(
                f"watermark from producer subtask {subtask}, which is not one of "
                f"{sorted(self._expected)}" + (f" on {self._where}" if self._where else "")
            )

    def _advance(self) -> int | None:
        live = self._expected - self._ended
        if not live <= self._latest.keys():
            return None
        candidates = [self._latest[s] for s in live]
        if not candidates:
            # Every subtask has ended: the channel is complete up to the furthest watermark.
            if not self._latest:
                return None
            candidates = [max(self._latest.values())]
        merged = min(candidates)
        if self._current is None or merged > self._current:
            self._current = merged
            return merged
        return None


# 0001-01-01T00:00:00Z in epoch microseconds: the earliest instant a Python datetime (and a
# Spark timestamp) can hold.
EARLIEST_US = -62_135_596_800_000_000


def subtask_watermark(max_event_time: int | None, max_out_of_orderness: int) -> int | None:
    """A producer subtask's watermark: the largest event time seen minus the allowance, but
    never before 0001-01-01 (:data:`EARLIEST_US`): nothing can be later than that, and a
    watermark before it could not be shown as a datetime."""
    if max_event_time is None:
        return None
    return max(max_event_time - max_out_of_orderness, min(max_event_time, EARLIEST_US))


def run_watermark(
    task_watermarks: Iterable[int | None], complete_until: int | None = None
) -> int | None:
    """The watermark a finished run declares.

    It is the minimum over the subtasks that saw event times (a subtask with no rows holds
    nothing back once it has ended), raised to ``complete_until`` when the run declares its
    event time complete up to there.
    """
    seen = [w for w in task_watermarks if w is not None]
    merged = min(seen) if seen else None
    if complete_until is not None:
        merged = complete_until if merged is None else max(merged, complete_until)
    return merged
