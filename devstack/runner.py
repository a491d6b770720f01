"""Runs a pipeline's jobs and sensors in this process, as the Dagster daemon would.

``scripts/dev main`` uses it to backfill the producer and let the sensors launch the
consumers without a daemon running: each sensor tick is evaluated with Dagster's own
context builders, and each run it requests is executed in process, on the same instance
(so the UI shows them), the same Spark session, and with the same run-key deduplication
the daemon applies. Given several ``Definitions`` (the code locations of a workspace), it
finds each job and sensor in the location that defines it, as the daemon does.
"""

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from dagster import (
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    Definitions,
    RunRequest,
    RunsFilter,
    SensorResult,
    SkipReason,
    build_run_status_sensor_context,
    build_sensor_context,
)

RUN_KEY_TAG = "dagster/run_key"
SENSOR_TAG = "dagster/sensor_name"
MAX_RETRIES_TAG = "dagster/max_retries"
RETRY_NUMBER_TAG = "dagster/retry_number"
PARENT_RUN_TAG = "dagster/parent_run_id"
# A backfill run of a range of partitions, as Dagster's own backfills tag it.
ASSET_PARTITION_RANGE_START_TAG = "dagster/asset_partition_range_start"
ASSET_PARTITION_RANGE_END_TAG = "dagster/asset_partition_range_end"
ROOT_RUN_TAG = "dagster/root_run_id"


@dataclass
class RunOutcome:
    job_name: str
    partition: str
    run_id: str
    success: bool
    tags: dict[str, str] = field(default_factory=dict)
    result: object = field(default=None, repr=False)  # the ExecuteInProcessResult


class LocalRunner:
    """Executes jobs and sensor ticks of ``defs`` (one code location's definitions, or those
    of several) against ``instance``, in this process."""

    def __init__(
        self,
        defs: Definitions | Sequence[Definitions],
        instance: DagsterInstance,
        log_level: str | None = None,
        progress: Callable[[str], None] | None = None,
    ):
        self.locations = [defs] if isinstance(defs, Definitions) else list(defs)
        self.instance = instance
        # The console logger of in-process runs; every event is in the instance (and the UI).
        self.run_config = (
            {"loggers": {"console": {"config": {"log_level": log_level}}}} if log_level else None
        )
        self.progress = progress
        self.cursors: dict[str, str | None] = {}
        self.outcomes: list[RunOutcome] = []

    def _location(self, kind: str, name: str) -> Definitions:
        """The one location that defines the job or sensor ``name``."""
        found = [
            d for d in self.locations if _defines(d.jobs if kind == "job" else d.sensors, name)
        ]
        if len(found) != 1:
            raise KeyError(f"{kind} {name!r} is defined in {len(found)} of the code locations")
        return found[0]

    def _job(self, name: str):
        return self._location("job", name).resolve_job_def(name)

    def run(
        self,
        job_name: str,
        partition: str | None = None,
        partition_range: tuple[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
        asset_selection: Sequence[AssetKey] | None = None,
    ) -> RunOutcome:
        """Executes one run of a job, for a partition or a partition range (one run)."""
        all_tags = dict(tags or {})
        if partition_range is not None:
            all_tags[ASSET_PARTITION_RANGE_START_TAG] = partition_range[0]
            all_tags[ASSET_PARTITION_RANGE_END_TAG] = partition_range[1]
        started = time.monotonic()
        result = self._job(job_name).execute_in_process(
            run_config=self.run_config,
            instance=self.instance,
            partition_key=partition,
            tags=all_tags,
            asset_selection=asset_selection,
            raise_on_error=False,
        )
        label = partition or (
            f"{partition_range[0]}...{partition_range[1]}" if partition_range else ""
        )
        outcome = RunOutcome(job_name, label, result.run_id, result.success, all_tags, result)
        self.outcomes.append(outcome)
        if self.progress is not None:
            retry = f" (retry {all_tags['shuffle/retry']})" if "shuffle/retry" in all_tags else ""
            status = "ok" if result.success else "FAILED"
            self.progress(
                f"  {job_name:<36} {label:<24} {status:<6} {time.monotonic() - started:5.1f}s "
                f"run {result.run_id[:8]}{retry}"
            )
        return outcome

    def _already_ran(self, run_key: str) -> bool:
        return bool(self.instance.get_run_ids(RunsFilter(tags={RUN_KEY_TAG: run_key}), limit=1))

    def execute_requests(
        self, sensor_name: str, requests: Iterable[RunRequest]
    ) -> list[RunOutcome]:
        """Runs what a sensor requested, skipping run keys that already ran (as the daemon does)."""
        outcomes = []
        for req in requests:
            if req.run_key and self._already_ran(req.run_key):
                continue
            tags = {**(req.tags or {}), SENSOR_TAG: sensor_name}
            if req.run_key:
                tags[RUN_KEY_TAG] = req.run_key
            outcomes.append(self.run(req.job_name, partition=req.partition_key, tags=tags))
        return outcomes

    def tick(self, sensor_name: str) -> list[RunRequest]:
        """Evaluates one tick of a (non run-status) sensor, keeping its cursor between ticks."""
        location = self._location("sensor", sensor_name)
        sensor_def = location.resolve_sensor_def(sensor_name)
        with build_sensor_context(
            instance=self.instance,
            cursor=self.cursors.get(sensor_name),
            resources=location.resources,
            definitions=location,
        ) as ctx:
            result = sensor_def(ctx)
        if isinstance(result, SkipReason) or result is None:
            return []
        if isinstance(result, SensorResult):
            if result.cursor is not None:
                self.cursors[sensor_name] = result.cursor
            return list(result.run_requests or [])
        return list(result) if isinstance(result, list) else [result]

    def failure_requests(self, sensor_name: str, run_id: str) -> list[RunRequest]:
        """Evaluates a run-failure sensor for one failed run."""
        sensor_def = self._location("sensor", sensor_name).resolve_sensor_def(sensor_name)
        run = self.instance.get_run_by_id(run_id)
        records = self.instance.get_records_for_run(
            run_id, of_type=DagsterEventType.PIPELINE_FAILURE
        ).records
        event = records[-1].event_log_entry.dagster_event
        ctx = build_run_status_sensor_context(
            sensor_name=sensor_name,
            dagster_event=event,
            dagster_instance=self.instance,
            dagster_run=run,
        ).for_run_failure()
        result = sensor_def(ctx)
        if result is None or isinstance(result, SkipReason):
            return []
        return list(result) if isinstance(result, list) else [result]

    def retry(self, outcome: RunOutcome) -> RunOutcome | None:
        """Re-runs a failed run as Dagster's run retries would (the job's ``dagster/max_retries``
        tag, same job and partition, tagged with its retry number and parent run)."""
        tags = self._job(outcome.job_name).tags or {}
        limit = int(tags.get(MAX_RETRIES_TAG, 0))
        number = int(outcome.tags.get(RETRY_NUMBER_TAG, 0))
        if number >= limit:
            return None
        retry_tags = {k: v for k, v in outcome.tags.items() if k not in (RUN_KEY_TAG, SENSOR_TAG)}
        retry_tags.update(
            {
                RETRY_NUMBER_TAG: str(number + 1),
                PARENT_RUN_TAG: outcome.run_id,
                ROOT_RUN_TAG: outcome.tags.get(ROOT_RUN_TAG, outcome.run_id),
            }
        )
        return self.run(outcome.job_name, partition=outcome.partition, tags=retry_tags)

    def settle(self, commit_sensor: str, failure_sensor: str, max_rounds: int = 10) -> None:
        """Ticks the commit sensor and retries failures until nothing new is requested: runs
        of jobs with a ``dagster/max_retries`` tag as Dagster's run retries do, the others
        through the failed-region sensor."""
        retried: set[str] = set()
        for _ in range(max_rounds):
            progressed = bool(self.execute_requests(commit_sensor, self.tick(commit_sensor)))
            for outcome in list(self.outcomes):
                if outcome.success or outcome.run_id in retried:
                    continue
                retried.add(outcome.run_id)
                if MAX_RETRIES_TAG in (self._job(outcome.job_name).tags or {}):
                    progressed |= self.retry(outcome) is not None
                    continue
                reqs = self.failure_requests(failure_sensor, outcome.run_id)
                progressed |= bool(self.execute_requests(failure_sensor, reqs))
            if not progressed:
                return


def _defines(definitions, name: str) -> bool:
    return any(getattr(d, "name", None) == name for d in definitions or ())
