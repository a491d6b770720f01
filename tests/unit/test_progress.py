"""The watcher of a step's Spark reads, on a SparkContext that only pretends (its trackers
as py4j shows them), in Dagster runs in process: what a line says, that it stops as the
step's end event goes by its log (success, failure, a retry) and logs nothing after, that
it takes its job tag off, and that a write of the step pauses it; on Spark Connect, nothing
watched, and said once."""

import logging
import time
from types import SimpleNamespace

import pytest
from dagster import (
    DagsterEventType,
    IOManager,
    RetryRequested,
    asset,
    instance_for_test,
    materialize,
)

from orchestration import KafkaResource, KafkaShuffleIOManager
from orchestration.progress import StepReads, spark_progress, step_reads, watch_spark_reads


class _Context:
    """A SparkContext whose job 3, tagged as its thread is (or ``always``), is running stage
    5: 2 of 4 tasks done, 2 running, 1000 rows read, submitted 3 s ago."""

    def __init__(self, always: bool = False) -> None:
        self.tags: set[str] = set()
        submitted = int(time.time() * 1000) - 3000
        stage = dict(numTasks=4, numCompletedTasks=2, numActiveTasks=2, submissionTime=submitted)
        tracker = SimpleNamespace(
            getActiveStageIds=lambda: [5],
            getJobIdsForTag=lambda tag: [3] if always or tag in self.tags else [],
            getJobInfo=lambda job: SimpleNamespace(status=lambda: "RUNNING", stageIds=lambda: [5]),
            getStageInfo=lambda sid: SimpleNamespace(
                **{k: (lambda v=v: v) for k, v in stage.items()}
            ),
        )
        rows = SimpleNamespace(inputRecords=lambda: 1000, shuffleReadRecords=lambda: 0)
        store = SimpleNamespace(lastStageAttempt=lambda sid: rows)
        scala = SimpleNamespace(statusTracker=lambda: tracker, statusStore=lambda: store)
        self._jsc = SimpleNamespace(statusTracker=lambda: tracker, sc=lambda: scala)

    def addJobTag(self, tag: str) -> None:
        self.tags.add(tag)

    def removeJobTag(self, tag: str) -> None:
        self.tags.discard(tag)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def log():
    logger = logging.Logger("step")
    logger.addHandler(_Lines())
    return logger


def _lines(log: logging.Logger) -> list[str]:
    return log.handlers[0].lines  # type: ignore[attr-defined]


def _wait_for(log: logging.Logger, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(_lines(log)) < count:
        assert time.monotonic() < deadline, _lines(log)
        time.sleep(0.01)


@pytest.mark.parametrize("ending", ["success", "failure", "retry"])
def test_a_step_reads_watcher_logs_until_the_step_ends_and_never_after(ending):
    sc = _Context(always=True)  # its job runs on after the step, as if still tagged
    watching: list[StepReads] = []
    attempts: list[int] = []  # the job tags on at each attempt

    class Inputs(IOManager):
        def handle_output(self, context, obj) -> None:
            pass

        def load_input(self, context) -> None:
            session = SimpleNamespace(sparkContext=sc)
            watch_spark_reads(context.log, session, "events: window 'w'", 0.01, watching)
            watch_spark_reads(context.log, session, "users: window 'w'", 0.01, watching)

    @asset(io_manager_key="inputs")
    def events() -> None:
        pass

    @asset
    def totals(context, events) -> None:
        # One watcher for the step, of both inputs, with its job tag on the step's thread.
        reads = step_reads(context.log)
        assert reads is not None and reads.inputs == ["events: window 'w'", "users: window 'w'"]
        attempts.append(len(sc.tags))
        time.sleep(0.3)
        if ending == "failure":
            raise ValueError("the asset fails")
        if ending == "retry" and len(attempts) == 1:
            raise RetryRequested(max_retries=1)

    with instance_for_test() as instance:
        result = materialize(
            [events, totals], instance=instance, resources={"inputs": Inputs()},
            raise_on_error=False,
        )  # fmt: skip
        assert result.success == (ending != "failure")
        time.sleep(0.1)  # as long as ten more lines, were it logging
        logs = list(instance.all_logs(result.run_id))
    T = DagsterEventType
    starts, ends = {T.STEP_START, T.STEP_RESTARTED}, {T.STEP_SUCCESS, T.STEP_FAILURE}
    ends.add(T.STEP_UP_FOR_RETRY)
    # Each attempt of the step watched: lines after its start, none after its end.
    lines: list[int] = []  # how many each attempt logged
    running = False
    for e in logs:
        if e.step_key == "totals" and e.dagster_event_type in starts:
            lines.append(0)
            running = True
        elif e.step_key == "totals" and e.dagster_event_type in ends:
            running = False
        elif e.user_message.startswith("events: window 'w', users: window 'w': reading for"):
            assert running, [e.user_message for e in logs]
            assert e.user_message.endswith(
                "in Spark job 3; stage 5: 2/4 tasks, 2 running, 1000 rows read"
            )
            lines[-1] += 1
    assert len(lines) == len(attempts) == (2 if ending == "retry" else 1)
    assert all(lines) and set(attempts) == {1}, (lines, attempts)
    assert not sc.tags and all(w.stopped for w in watching)


def test_a_write_of_the_step_pauses_its_reads_watcher(log):
    sc = _Context()
    reads = StepReads(log, sc, 0.01, "dagster-run-totals")
    reads.inputs.append("events: window '2024-07-01'")
    df = SimpleNamespace(sparkSession=SimpleNamespace(sparkContext=sc))
    _wait_for(log, 1)
    with spark_progress(log, "totals: window '2024-07-01'", df, 0.01):
        before = len(_lines(log))
        _wait_for(log, before + 3)
        during = len(_lines(log))
    written = _lines(log)[before:during]
    assert all(m.startswith("totals: window '2024-07-01': writing for ") for m in written), written
    assert written[-1].endswith("; stage 5: 2/4 tasks, 2 running, 1000 rows read")
    after = len(_lines(log))  # the write's poller has stopped: the reads are told again
    _wait_for(log, after + 1)
    reads.stop()
    assert _lines(log)[after].startswith("events: window '2024-07-01': reading for ")


def test_nothing_is_watched_outside_a_step_or_without_a_spark_context(log):
    connect = SimpleNamespace()  # a Spark Connect session raises for its sparkContext
    assert watch_spark_reads(log, SimpleNamespace(sparkContext=_Context()), "t", 0.01, []) is None
    assert watch_spark_reads(log, connect, "t", 0.01, []) is None
    assert not log.filters


def test_the_io_manager_says_once_that_spark_connect_reads_are_not_watched(log):
    io = KafkaShuffleIOManager(kafka=KafkaResource(bootstrap_servers="127.0.0.1:1"))
    said: list[logging.LogRecord] = []
    log.addFilter(lambda record: said.append(record) or True)
    connect = SimpleNamespace()  # a Spark Connect session raises for its sparkContext
    io._watch_spark_read(SimpleNamespace(log=log), connect, "events: window 'w'")
    io._watch_spark_read(SimpleNamespace(log=log), connect, "users: window 'w'")
    assert [(r.levelno, r.getMessage().split(": not watched: ")[0]) for r in said] == [
        (logging.DEBUG, "events: window 'w'")
    ]
    assert said[0].getMessage().endswith("the server's Spark UI shows them")
