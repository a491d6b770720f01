"""The Spark side of streaming reads of a shuffle: the ``kafka-shuffle`` data source's stream
reader.

Offsets, admission control and where a query starts are pure logic
(:mod:`orchestration.shuffle.core.stream`); this module asks the commit log for its records
and hands each micro-batch's splits to the batch reader
(:class:`~orchestration.shuffle.spark.reader.ShuffleReader`), so a micro-batch is read and
checked exactly as a batch read is.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from orchestration.shuffle.core.commitlog import BadRecord, Commit
from orchestration.shuffle.core.metrics import METRICS_KEY
from orchestration.shuffle.core.planner import plan_splits
from orchestration.shuffle.core.stream import (
    LogRecord,
    StreamOffset,
    admit,
    check_versions,
    starting_offset,
    stream_commits,
)
from orchestration.shuffle.kafka.commitlog import log_end, read_log_records
from orchestration.shuffle.spark.compat import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
    require_admission_control,
)
from orchestration.shuffle.spark.reader import ShuffleReader, SourceOptions

log = logging.getLogger(__name__)


class ShuffleStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming reads of a shuffle: each micro-batch reads the runs committed since the
    previous one (see :mod:`orchestration.shuffle.core.stream`), keyed as a batch read is.

    Made by :class:`~orchestration.shuffle.spark.sources.ShuffleDataSource` for
    ``spark.readStream.format("kafka-shuffle")``; prefer
    :func:`orchestration.shuffle.read_shuffle_stream`, which also tags the key columns.
    """

    def __init__(self, opts: SourceOptions):
        stream = opts.stream
        limits = {
            "maxRunsPerTrigger": stream.max_runs_per_trigger,
            "maxRowsPerTrigger": stream.max_rows_per_trigger,
        }
        require_admission_control(
            f"kafka-shuffle stream of {opts.topic}",
            [k for k, v in limits.items() if v is not None],
            jvm=True,
        )
        self.opts = opts
        self.batch = ShuffleReader(opts)
        self._target: int | None = None  # Trigger.AvailableNow: the log's end when it started
        # (from, records, end offset) of the last commit-log read.
        self._last_read: tuple[int, list[LogRecord], int] | None = None
        self._planned: list[Commit] = []  # the commits latestOffset() admitted last
        # Unreadable commit records in the range latestOffset() read last, and the offsets
        # of those already reported (each is logged once per query).
        self._skipped: list[BadRecord] = []
        self._reported: set[int] = set()
        self._end_read: int | None = None  # the commit log's end latestOffset() last read

    def _records(
        self, start: StreamOffset, needed_until: int | None = None
    ) -> tuple[list[LogRecord], int]:
        """Commit-log records from ``start`` on. Planning a micro-batch reuses what
        ``latestOffset`` just read when it reaches ``needed_until``."""
        # Visibility before the snapshot needs the log from its beginning.
        first = 0 if start.log < start.snapshot else start.log
        cached = self._last_read
        if needed_until is not None and cached and cached[0] == first and cached[2] >= needed_until:
            return cached[1], cached[2]
        records, high = self._read_log(first)
        self._last_read = (first, records, high)
        return records, high

    def _read_log(self, first: int) -> tuple[list[LogRecord], int]:
        """The commit log's records from offset ``first`` on, and its end offset."""
        return read_log_records(self.opts.kafka, self.opts.topic, first)

    def _log_end(self) -> int:
        return log_end(self.opts.kafka, self.opts.topic)

    def initialOffset(self) -> dict:
        stream = self.opts.stream
        records, high = self._read_log(0)
        return starting_offset(
            records, high, stream.starting_offsets, stream.starting_timestamp_ms
        ).to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        # Spark only passes its own limit types: a run stands for a file here.
        stream = self.opts.stream
        if stream.max_runs_per_trigger is not None:
            return ReadMaxFiles(stream.max_runs_per_trigger)
        if stream.max_rows_per_trigger is not None:
            return ReadMaxRows(stream.max_rows_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._log_end()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        if start is None:
            return self._latest_without_start()
        begin = StreamOffset.from_dict(start)
        records, high = self._records(begin)
        self._end_read = high
        if self._target is not None:
            high = min(high, self._target)
        limited = not isinstance(limit, ReadAllAvailable)
        stream = self.opts.stream
        skipped: list[BadRecord] = []
        commits = stream_commits(self.opts.topic, records, begin, high, skipped)
        for bad in skipped:
            if bad.offset not in self._reported:
                self._reported.add(bad.offset)
                log.warning(
                    "kafka-shuffle stream of %s: skipped the unreadable record %r at partition "
                    "0 offset %d of its commit log (%s); its run is not read",
                    self.opts.topic,
                    bad.key,
                    bad.offset,
                    bad.reason,
                )
        self._skipped = skipped
        end = admit(
            commits,
            begin,
            high,
            max_runs=stream.max_runs_per_trigger if limited else None,
            max_rows=stream.max_rows_per_trigger if limited else None,
        )
        self._planned = [c for off, c in commits if off < end.log]
        return end.to_dict()

    def _latest_without_start(self) -> dict:
        # PySpark 4.0 and 4.1 call latestOffset() without the micro-batch's start and with
        # no limit: the batch is everything up to the log's end. The end offset's snapshot is
        # its own log position: a snapshot only matters to a start below it, and the next
        # micro-batch starts at this end; partitions() judges the batch by its start's own.
        high = self._log_end()
        self._end_read = high
        self._planned = []
        return StreamOffset(high, high).to_dict()

    def reportLatestOffset(self) -> dict | None:
        # Shown in the query's progress as ``latestOffset``. Spark asks for it right after
        # latestOffset() planned a micro-batch: the runs planned are that batch's.
        planned = self._planned
        metrics = {
            "topic": self.opts.topic,
            "runs": [c.run_id for c in planned],
            "rows": sum(c.rows for c in planned),
            "bytes": sum(c.bytes for c in planned),
            # Commit records skipped as unreadable in the batch's range, as batch reads
            # report them (ShuffleLog.bad_records).
            "skipped_records": [
                {"offset": b.offset, "key": b.key, "reason": b.reason} for b in self._skipped
            ],
        }
        end = self._end_read if self._end_read is not None else self._log_end()
        return {"log": end, METRICS_KEY: metrics}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, stop = StreamOffset.from_dict(start), StreamOffset.from_dict(end)
        if stop.log <= begin.log:
            return []
        records, _ = self._records(begin, needed_until=stop.log)
        commits = [
            c for _, c in stream_commits(self.opts.topic, records, begin, stop.log, skipped=[])
        ]
        if not commits:
            return []
        check_versions(self.opts.layout, commits)
        plans = plan_splits(self.opts.layout, commits, self.opts.read.parallelism)
        return [InputPartition(p.to_json()) for p in plans]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.batch.read(partition)

    def commit(self, end: dict) -> None:
        pass
