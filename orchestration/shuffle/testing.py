"""Fault injection for the engine's own tests. Not part of the public API.

Example::

    with fail_write_attempts_below(1):   # every first attempt of a write task fails
        write_shuffle(df, spec, kafka=conf)
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestration.shuffle.kafka.client import KafkaSettings

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


def write_attempts_to_fail() -> int:
    """The attempt number below which write tasks started now fail (0: none fail)."""
    return _fail_attempts_below.get()


def data_frames_of_attempt(
    kafka: KafkaSettings, topic: str, partitions: int, run_id: str, attempt: int
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
