"""A long write's or read's progress in the Dagster run's log, while it runs.

The IO manager logs it every ``progress_every_s`` seconds, by one of three reporters:

- :class:`ProgressLog`: a read or a write without Spark (``read_table``, ``read_batches``,
  ``write_table``), which calls it as it goes;
- :func:`spark_progress`: around a Spark write, the stages its session runs;
- :func:`watch_spark_reads`: the Spark inputs of a step, which are lazy DataFrames read
  later by the asset's own code: the stages of the Spark jobs the step's thread starts,
  until the step ends.

The last two poll the SparkContext's status tracker in one kind of thread (``_Poller``),
which never keeps the process alive and never logs once stopped.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetExecutionContext,
    DagsterEvent,
    DagsterEventType,
    DagsterInvariantViolationError,
)

from orchestration.shuffle.table_read import ReadProgress
from orchestration.shuffle.table_write import WriteProgress

# The events with which Dagster ends a step's attempt, logged through the step's own log
# manager: its success, its failure (an interrupted run's too), a retry to come.
_STEP_ENDS = frozenset(
    {
        DagsterEventType.STEP_SUCCESS,
        DagsterEventType.STEP_FAILURE,
        DagsterEventType.STEP_UP_FOR_RETRY,
    }
)


class ProgressLog:
    """The ``progress`` callback of a read or write without Spark (``read_table``,
    ``read_batches``, ``write_table``) that logs to ``log`` how far it has got, at most
    every ``every_s`` seconds (never for 0): partitions, rows and bytes so far, and the
    seconds since it started. It logs in the thread that reads or writes, as the batches
    go: a read by ``read_batches`` logs as the asset takes its batches.

    Example::

        read_table(topic, kafka=conf, progress=ProgressLog(context.log, topic, 10.0))
    """

    def __init__(self, log: Any, what: str, every_s: float):
        self.log = log
        self.what = what
        self.every_s = every_s
        self.started = time.monotonic()
        self.due = self.started + every_s

    def __call__(self, progress: ReadProgress | WriteProgress) -> None:
        if self.every_s <= 0:
            return
        now = time.monotonic()
        if now < self.due:
            return
        self.due = now + self.every_s
        self.log.info(f"{self.what}: {describe_progress(progress, now - self.started)}")


def describe_progress(p: ReadProgress | WriteProgress, seconds: float) -> str:
    """A read's or a write's progress as the run's log says it."""
    if isinstance(p, ReadProgress):
        return (
            f"reading for {seconds:.0f} s; {p.partitions_done}/{p.partitions} partitions, "
            f"{p.rows} of {p.rows_committed} rows, {p.bytes} bytes, {p.runs} run(s) of "
            f"{p.windows} window(s)"
        )
    return (
        f"writing for {seconds:.0f} s; {p.rows}/{p.rows_total} rows, {p.frames} frames, "
        f"{p.bytes} bytes, {p.partitions}/{p.partitions_total} partitions"
        + ("; all delivered, committing" if p.committing else "")
    )


def spark_context(session: Any) -> Any:
    """The SparkContext of a classic ``session``, whose status tracker tells the progress
    of its jobs; None for a Spark Connect session (its jobs run in the server, whose
    tracker the client cannot reach) or no session."""
    if session is None:
        return None
    try:
        return session.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect raises its own error for it
        return None


@dataclass(frozen=True)
class _Stage:
    id: int
    tasks: int
    done: int
    running: int
    submitted_ms: int  # -1 until it is submitted
    rows: int  # what its finished tasks read, from a source or a shuffle; 0 if not counted

    def describe(self) -> str:
        return (
            f"stage {self.id}: {self.done}/{self.tasks} tasks"
            + (f", {self.running} running" if self.running else "")
            + (f", {self.rows} rows read" if self.rows else "")
        )


class _SparkStatus:
    """What a SparkContext's JVM tells of its jobs and stages.

    PySpark's ``StatusTracker`` wraps the Java tracker, which neither finds jobs by tag nor
    gives a stage's submission time; the Scala ``SparkStatusTracker`` finds them by tag
    (``getJobIdsForTag``, Spark 3.5). No public tracker counts a stage's rows (SPARK-35624
    proposed it and was closed): they come from the status store the Spark UI and its REST
    API read (``inputRecords``, ``shuffleReadRecords``; no input bytes, which Spark counts
    for file reads only), reached through py4j, and are left out where it is not there.
    """

    def __init__(self, sc: Any):
        jsc = sc._jsc
        self._java = jsc.statusTracker()
        self._scala = jsc.sc().statusTracker()
        try:
            self._store = jsc.sc().statusStore()
        except Exception:  # noqa: BLE001 - not a public API: rows are then not said
            self._store = None

    def active_stage_ids(self) -> list[int]:
        return sorted(self._java.getActiveStageIds())

    def running_jobs(self, tag: str) -> dict[int, list[int]]:
        """The running jobs with ``tag``, each with its stages' ids."""
        jobs = {}
        for job in sorted(self._scala.getJobIdsForTag(tag)):
            info = self._java.getJobInfo(job)
            if info is not None and str(info.status()) == "RUNNING":
                jobs[job] = sorted(info.stageIds())
        return jobs

    def stage(self, stage_id: int) -> _Stage | None:
        info = self._java.getStageInfo(stage_id)
        if info is None:
            return None  # no longer retained (spark.ui.retainedStages)
        return _Stage(
            stage_id,
            info.numTasks(),
            info.numCompletedTasks(),
            info.numActiveTasks(),
            info.submissionTime(),
            self._rows(stage_id),
        )

    def _rows(self, stage_id: int) -> int:
        if self._store is None:
            return 0
        try:
            data = self._store.lastStageAttempt(stage_id)
            return int(data.inputRecords()) + int(data.shuffleReadRecords())
        except Exception:  # noqa: BLE001 - no attempt of it stored: no rows to say
            return 0


class _Poller:
    """Logs ``line()`` to ``log`` every ``every_s`` seconds in a daemon thread (nothing
    when it returns None, nor while paused) until :meth:`stop`, after which it logs no more."""

    def __init__(self, log: Any, every_s: float, line: Callable[[], str | None]):
        self._log = log
        self._every_s = every_s
        self._line = line
        self._stopped = threading.Event()
        # Held while a line is logged: stop() and pause() wait for it, so that nothing is
        # logged after they return.
        self._logging = threading.Lock()
        self._paused = 0
        self._thread = threading.Thread(target=self._run, name="shuffle-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self._every_s):
            if self._paused:
                continue
            try:
                text = self._line()
            except Exception as exc:  # noqa: BLE001 - progress must never fail the work
                # The SparkContext was stopped under it, say: no more progress to tell.
                logging.getLogger(__name__).debug("progress: Spark's status: %s", exc)
                return
            if text is None:
                continue
            with self._logging:
                if self._stopped.is_set():
                    return
                if not self._paused:
                    self._log.info(text)

    def stop(self) -> None:
        self._stopped.set()
        if threading.current_thread() is not self._thread:
            with self._logging:
                pass

    @contextlib.contextmanager
    def pause(self) -> Iterator[None]:
        """Nothing is logged while the block runs."""
        with self._logging:
            self._paused += 1
        try:
            yield
        finally:
            with self._logging:
                self._paused -= 1


@contextlib.contextmanager
def spark_progress(log: Any, what: str, df: Any, every_s: float) -> Iterator[None]:
    """While the block runs, logs to ``log`` every ``every_s`` seconds the progress of the
    Spark jobs of ``df``'s session (each active stage's tasks done of all, and the rows its
    finished tasks read), so that a long write shows it is working. Nothing for rows that are
    not a Spark DataFrame, a session without a SparkContext (Spark Connect: its progress is
    the server's), or ``every_s`` 0. The step's Spark reads (:func:`watch_spark_reads`)
    say nothing meanwhile: the write's jobs are the step's too."""
    sc = spark_context(getattr(df, "sparkSession", None)) if every_s > 0 else None
    try:
        status = _SparkStatus(sc) if sc is not None else None
    except Exception:  # noqa: BLE001 - a SparkContext stopped: progress must not fail the write
        status = None
    if status is None:
        yield
        return
    started = time.monotonic()

    def line() -> str:
        stages = [s for i in status.active_stage_ids() if (s := status.stage(i)) is not None]
        return f"{what}: writing for {time.monotonic() - started:.0f} s; " + (
            "; ".join(s.describe() for s in stages)
            if stages
            else "no Spark stage running (committing)"
        )

    reads = step_reads(log)
    with reads.poller.pause() if reads is not None else contextlib.nullcontext():
        poller = _Poller(log, every_s, line)
        try:
            yield
        finally:
            poller.stop()


class StepReads(logging.Filter):
    """The Spark reads of one Dagster step, watched while the step runs: every ``every_s``
    seconds, while a Spark job that the step's thread started is running, logs to the step's
    log the inputs read (``inputs``), the seconds since the step's first Spark job started,
    and those jobs' active stages (tasks done of all, rows read). Made by
    :func:`watch_spark_reads`.

    The step's jobs are told from others by a Spark job tag, added to the thread that loads
    the input (the thread that then runs the asset): jobs started from another thread are
    not counted, unless it is a ``pyspark.InheritableThread``. It stops, and takes the tag
    off, as the step ends: as a filter on the step's log manager (a ``logging.Logger``,
    whose filters see each record before it is recorded) it sees the event that ends the
    step go by, and stops before that event is written, so no line of it follows.
    """

    def __init__(self, log: logging.Logger, sc: Any, every_s: float, tag: str):
        super().__init__()
        self.inputs: list[str] = []
        self.tag = tag
        self.thread = threading.get_ident()
        self.stopped = False
        # When the step's first Spark job started (its first stage's submission, ms).
        self._began_ms = 0
        self._sc = sc
        self._status = _SparkStatus(sc)
        sc.addJobTag(tag)
        self.poller = _Poller(log, every_s, self._line)
        log.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        # Dagster logs an event with the DagsterEvent in the record's "dagster_event".
        event = getattr(record, "dagster_event", None)
        if isinstance(event, DagsterEvent) and event.event_type in _STEP_ENDS:
            self.stop()
        return True

    def stop(self) -> None:
        """No line after this returns; the job tag is taken off the step's thread when
        called from it (as it is at the step's end)."""
        if self.stopped:
            return
        self.stopped = True
        self.poller.stop()
        if threading.get_ident() == self.thread:
            with contextlib.suppress(Exception):  # a SparkContext stopped: no tag left
                self._sc.removeJobTag(self.tag)

    def _line(self) -> str | None:
        jobs = self._status.running_jobs(self.tag)
        if not jobs:
            return None  # the asset is doing something else
        stages = {i: s for ids in jobs.values() for i in ids if (s := self._status.stage(i))}
        for s in stages.values():
            if s.submitted_ms > 0:
                self._began_ms = min(self._began_ms or s.submitted_ms, s.submitted_ms)
        seconds = time.time() - self._began_ms / 1000 if self._began_ms else 0.0
        active = set(self._status.active_stage_ids())
        running = [s.describe() for i, s in sorted(stages.items()) if i in active]
        return (
            f"{', '.join(self.inputs)}: reading for {max(seconds, 0):.0f} s, in Spark "
            f"job{'s' if len(jobs) > 1 else ''} {', '.join(map(str, jobs))}; "
            + ("; ".join(running) if running else "no stage running")
        )


def step_reads(log: Any) -> StepReads | None:
    """The live watcher of the Spark reads of the step whose log manager is ``log``."""
    for f in getattr(log, "filters", ()):
        if isinstance(f, StepReads) and not f.stopped:
            return f
    return None


def watch_spark_reads(
    log: Any, session: Any, what: str, every_s: float, watching: list[StepReads]
) -> StepReads | None:
    """Watches, from now until the step ends, the Spark jobs the current Dagster step starts
    (see :class:`StepReads`), naming ``what`` among the inputs they read; one watcher per
    step, which ``watching`` keeps (those of steps that ran on this thread before are
    stopped). None, watching nothing, for ``every_s`` 0, outside a step's execution (nothing
    would end it), or a session without a SparkContext (Spark Connect)."""
    sc = spark_context(session)
    if every_s <= 0 or sc is None or not isinstance(log, logging.Logger):
        return None
    try:
        step = AssetExecutionContext.get()
    except DagsterInvariantViolationError:  # no step's execution: nothing would end it
        return None
    watcher = step_reads(log)
    if watcher is None:
        # A step runs on one thread at a time: one that ran here before has ended, though
        # no end event reached it (a step launched elsewhere, say).
        for old in watching:
            if old.thread == threading.get_ident():
                old.stop()
        watching[:] = [w for w in watching if not w.stopped]
        tag = f"dagster-{step.run.run_id}-{step.op_def.name}".replace(",", "_")
        try:
            watcher = StepReads(log, sc, every_s, tag)
        except Exception as exc:  # noqa: BLE001 - progress must never fail the read
            log.debug(f"{what}: its progress is not watched: {exc}")
            return None
        watching.append(watcher)
    if what not in watcher.inputs:
        watcher.inputs.append(what)
    return watcher
