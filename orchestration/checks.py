"""Asset checks every shuffle asset needs, from one factory.

Example::

    checks = shuffle_asset_checks(events_by_user)       # blocking by default
    Definitions(assets=[events_by_user, ...], asset_checks=checks, ...)

- ``shuffle_layout``: the layout recorded in the commit log (key, partitions, key groups,
  event time) is the one the asset's metadata declares, and the data topic has its
  partition count. A shuffle whose layout changed under it would send keys to the wrong
  partitions.
- ``shuffle_rows``: the runs the check's Dagster run committed (else the latest visible
  run) read back complete: every frame of every committed subtask is found and the rows
  read equal the rows the commit records (counted inside the reader, no rows cross to the
  JVM).

Blocking checks stop the rest of their run when they fail; the commit sensor also reports
each commit, so a broken window is visible on the asset before consumers read it.
"""

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetsDefinition,
    MetadataValue,
    asset_check,
)

from orchestration.io_manager import DAGSTER_RUN_ATTR
from orchestration.sensors import asset_io_manager_key, asset_shuffle
from orchestration.shuffle import ShuffleError, plan_shuffle_read, shuffle_log
from orchestration.shuffle.kafka import check_partitions


def shuffle_asset_checks(asset: AssetsDefinition, *, blocking: bool = True) -> list:
    """The layout and row-count checks of a shuffle asset stored by ``KafkaShuffleIOManager``."""
    shuffle = asset_shuffle(asset)
    io_key = asset_io_manager_key(asset)
    spec = shuffle.spec

    @asset_check(
        asset=asset,
        name="shuffle_layout",
        blocking=blocking,
        required_resource_keys={io_key},
        description="The commit log's layout is the one the asset's metadata declares.",
    )
    def _layout(context: AssetCheckExecutionContext) -> AssetCheckResult:
        kafka = getattr(context.resources, io_key).kafka.client()
        try:
            layout = shuffle_log(spec.topic, kafka=kafka).require_layout()
            check_partitions(kafka, layout)
        except ShuffleError as exc:
            return AssetCheckResult(passed=False, metadata={"error": str(exc)})
        expected = (tuple(spec.key), spec.num_partitions, spec.max_parallelism, spec.event_time)
        actual = (layout.key, layout.num_partitions, layout.max_parallelism, layout.event_time)
        return AssetCheckResult(
            passed=expected == actual,
            metadata={"expected": str(expected), "actual": str(actual), "topic": spec.topic},
        )

    @asset_check(
        asset=asset,
        name="shuffle_rows",
        blocking=blocking,
        required_resource_keys={io_key},
        description="Committed runs read back complete: rows read = rows committed.",
    )
    def _rows(context: AssetCheckExecutionContext) -> AssetCheckResult:
        io_manager = getattr(context.resources, io_key)
        kafka = io_manager.kafka.client()
        try:
            log = shuffle_log(spec.topic, kafka=kafka)
        except ShuffleError as exc:
            return AssetCheckResult(passed=False, metadata={"error": str(exc)})
        run_id = context.run.run_id
        mine = [c for c in log.commits if c.attrs.get(DAGSTER_RUN_ATTR) == run_id]
        commits = mine or log.visible()[-1:]
        if not commits:
            return AssetCheckResult(passed=False, metadata={"error": "no committed run"})
        rows_read: dict[str, int] = {}
        try:
            for c in commits:
                read = plan_shuffle_read(
                    io_manager.session(), spec.topic, kafka=kafka, runs=[c.run_id], log=log
                )
                counted = read.aggregate({"_rows": ("*", "count")}).agg({"_rows": "sum"}).first()
                rows_read[c.run_id] = int(counted[0] or 0) if counted is not None else 0
        except ShuffleError as exc:
            return AssetCheckResult(passed=False, metadata={"error": str(exc)})
        per_run = {
            c.run_id: {
                "window": c.window,
                "rows_read": rows_read[c.run_id],
                "rows_committed": c.rows,
            }
            for c in commits
        }
        return AssetCheckResult(
            passed=all(rows_read[c.run_id] == c.rows for c in commits),
            metadata={
                "runs": MetadataValue.json(per_run),
                "rows_read": sum(rows_read.values()),
                "rows_committed": sum(c.rows for c in commits),
            },
        )

    return [_layout, _rows]
