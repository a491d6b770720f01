"""Fault injection for tests: the engine's own, and users' through ``orchestration.testing``.

Example::

    with fail_write_attempts_below(1):   # every first attempt of a write task fails
        write_shuffle(df, spec, kafka=conf)
    with fail_window_writes("2024-03-02", topic="events"):   # that window's next write fails
        ...
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestration.shuffle.kafka.client import KafkaConfig

_fail_attempts_below: contextvars.ContextVar[int] = contextvars.ContextVar(
    "fail_attempts_below", default=0
)


@contextlib.contextmanager
def fail_write_attempts_below(attempts: int) -> Iterator[None]:
    """Writes started inside fail each task attempt numbered below ``attempts`` after its
    first frame (the frames already produced stay in the topic)."""
    token = _fail_attempts_below.set(attempts)
    try:
        yield
    finally:
        _fail_attempts_below.reset(token)


# Window failures are kept process-wide, not in a context variable: a Dagster step may write
# on a thread of its own, which does not see the test's context.
_window_failures: dict[tuple[str | None, str | None], int] = {}
_window_lock = threading.Lock()
# Every attempt a task may make: Spark gives up on the task, so the run is not committed.
_EVERY_ATTEMPT = 1 << 30


@contextlib.contextmanager
def fail_window_writes(
    window: str | None, *, topic: str | None = None, times: int = 1
) -> Iterator[None]:
    """Inside, the next ``times`` writes of ``window`` (of the shuffle ``topic``, or of any
    shuffle) fail as a write whose tasks all fail does: their first frames reach the topic,
    nothing is committed, ``write_shuffle`` raises ``ShuffleWriteError``. Writes after those
    succeed. For writes in this process (any thread), e.g. ``dagster.materialize``."""
    rule = (topic, window)
    with _window_lock:
        _window_failures[rule] = _window_failures.get(rule, 0) + times
    try:
        yield
    finally:
        with _window_lock:
            _window_failures.pop(rule, None)


def write_attempts_to_fail(topic: str | None = None, window: str | None = None) -> int:
    """The attempt number below which the tasks of a write of ``window`` to ``topic``
    starting now fail (0: none fail). A matching :func:`fail_window_writes` is used up."""
    with _window_lock:
        for rule in ((topic, window), (None, window)):
            if _window_failures.get(rule, 0) > 0:
                _window_failures[rule] -= 1
                return _EVERY_ATTEMPT
    return _fail_attempts_below.get()


def data_frames_of_attempt(
    kafka: KafkaConfig, topic: str, partitions: int, run_id: str, attempt: int
) -> int:
    """DATA frames that ``attempt`` of run ``run_id``'s tasks left in ``topic``, read back
    from the brokers: to show that a failed attempt's frames are there but never read."""
    from orchestration.shuffle.core.frames import FrameType, decode
    from orchestration.shuffle.kafka.client import KafkaClient, read_range

    client = KafkaClient.of(kafka)
    count = 0
    with client.consumer() as c:
        for p, (lo, hi) in enumerate(client.end_offsets(topic, partitions)):
            for m in read_range(c, topic, p, lo, hi):
                h = decode(m.value()).header
                if h.run_id == run_id and h.attempt == attempt and h.type is FrameType.DATA:
                    count += 1
    return count
