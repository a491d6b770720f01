"""The soak's faults: what each does, and the seeded schedule they follow.

Every kind happens at least once; a longer soak adds broker and worker faults so that one
fault starts about every 90 seconds. Times are seconds from the start of the fault window.
The faults a Dagster run takes (:data:`AT_START`) are planted before the daemon starts, on
the first days, rather than on the schedule.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

# Each kind at least once, in a seeded order.
KINDS = (
    "broker",
    "controller",
    "spark_worker",
    "daemon",
    "producer_run_fails",
    "producer_task_fails",
    "consumer_run_fails",
)
# What a longer soak repeats.
REPEATED = ("broker", "spark_worker", "broker", "producer_task_fails")
# Faults whose effect is a file a run takes: they count once taken.
TAKEN = ("producer_run_fails", "producer_task_fails", "consumer_run_fails")
# Those a Dagster run takes, planted before the daemon starts: the first producer run's
# last day and one consumer's first day, so that the first runs take them while the soak
# runs. Planted on the schedule instead, on the next day to be produced, the producer's run
# waited in the queue behind the consumers' runs of the days before, and on 2 cores the
# faults were taken some 15 minutes in, in the drain, which waits for them.
AT_START = ("producer_run_fails", "consumer_run_fails")


@dataclass(frozen=True)
class Fault:
    at: float
    kind: str


def schedule(seed: int, window: float, every: float = 90.0) -> list[Fault]:
    """Faults over ``window`` seconds: each kind but those of :data:`AT_START` once, then
    repeats, spread evenly with seeded jitter, never two closer than a fifth of their
    spacing."""
    rng = random.Random(seed)
    kinds = [k for k in KINDS if k not in AT_START]
    rng.shuffle(kinds)
    extra = max(0, int(window // every) - len(kinds))
    kinds += [REPEATED[i % len(REPEATED)] for i in range(extra)]
    step = window / len(kinds)
    return [
        Fault(at=round(i * step + rng.uniform(0.1, 0.8) * step, 1), kind=k)
        for i, k in enumerate(kinds)
    ]


def quorum_leader(node_data_dirs: list[Path]) -> int | None:
    """The id of the KRaft quorum's leader (the active controller), from the nodes' own
    ``quorum-state`` files: the most recent epoch any node has seen."""
    best: tuple[int, int] | None = None
    for data in node_data_dirs:
        path = data / "__cluster_metadata-0" / "quorum-state"
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        leader, epoch = state.get("leaderId", -1), state.get("leaderEpoch", -1)
        if leader is not None and leader >= 0 and (best is None or epoch > best[1]):
            best = (leader, epoch)
    return None if best is None else best[0]
