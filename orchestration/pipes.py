"""A shuffle's producer as its own Spark application, launched through Dagster Pipes: the
part that runs in Dagster.

:func:`run_shuffle_pipes` is what the shuffle asset's body calls instead of returning a
DataFrame: it launches the application with any Pipes client (``PipesSubprocessClient``
running ``spark-submit``, or a platform's: EMR, Databricks, Dataproc), passing what the
application needs as Pipes extras (:mod:`orchestration.pipes_application`), and then
records the run in Dagster exactly as ``KafkaShuffleIOManager`` records a run it wrote: one
materialization per committed window with the same metadata (row count, column schema,
URI, ``shuffle/*``), and for windows that did not commit a failed run tagged with them
(``shuffle/failed_windows``), which ``failed_region_sensor`` re-runs alone.

What committed is read from the shuffle's commit log (the commits this Dagster run wrote),
not taken from the application's word: an application that died after a commit but
before its report still has that window recorded, and a window it reported that the log
does not hold is a failed one.

Example::

    @asset(partitions_def=daily, metadata=shuffle_metadata(key="tailnum", num_partitions=8,
                                                            window_column="day"))
    def flights_by_tailnum(context, kafka: KafkaResource, pipes: PipesSubprocessClient):
        return run_shuffle_pipes(
            context, pipes, kafka=kafka,
            command=["spark-submit", "--master", "spark://cluster:7077", "produce.py"],
        )
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetMaterialization,
    DagsterExecutionInterruptedError,
    MaterializeResult,
    PipesClient,
)

from orchestration.definition import (
    DAGSTER_RUN_ATTR,
    FAILED_WINDOWS_TAG,
    asset_shuffle,
    window_ends,
    windows_failure,
)
from orchestration.metadata import (
    commit_metadata,
    outside_window,
    watermark_as_of,
    window_bounds,
)
from orchestration.pipes_application import EXTRAS_KEY, public_kafka_settings, spec_to_json
from orchestration.resources import KafkaResource
from orchestration.shuffle.core.commitlog import Commit, ShuffleLog
from orchestration.shuffle.errors import ShuffleTopicNotFoundError
from orchestration.shuffle.read import shuffle_log


def shuffle_pipes_extras(
    context: AssetExecutionContext, kafka: KafkaResource, *, compression: str = "lz4"
) -> dict[str, Any]:
    """The Pipes extra (under ``"kafka_shuffle"``) an application launched for the shuffle
    asset of ``context`` needs: its layout, the run's windows and when each is complete,
    the cluster's settings without secrets, and the Dagster run's id."""
    asset = asset_shuffle(context.assets_def).under(kafka)
    windows = list(context.partition_keys) if context.has_partition_key_range else None
    if windows is None and context.has_partition_key:
        windows = [context.partition_key]
    partitions_def = context.assets_def.partitions_def
    ends = window_ends(partitions_def, windows or [])
    return {
        "spec": spec_to_json(asset.spec),
        "window_column": asset.window_column,
        "windows": windows,
        "complete_until": {k: v.isoformat() for k, v in ends.items()},
        "kafka": public_kafka_settings(kafka.config()),
        "compression": compression,
        "schema_mode": asset.schema_mode,
        "run_id": context.run.run_id,
    }


def _reported(messages: list[Any]) -> tuple[dict[str, dict], dict[str, str]]:
    """The windows the application reported committed (with what it wrote) and failed."""
    committed: dict[str, dict] = {}
    failed: dict[str, str] = {}
    for message in messages:
        body = message.get(EXTRAS_KEY) if isinstance(message, Mapping) else None
        if not isinstance(body, Mapping):
            continue
        for item in body.get("committed", []):
            committed[item.get("window") or ""] = item
        for item in body.get("failed", []):
            failed[item.get("window") or ""] = str(item.get("error"))
    return committed, failed


def run_shuffle_pipes(
    context: AssetExecutionContext,
    client: PipesClient,
    *,
    kafka: KafkaResource,
    extras: Mapping[str, Any] | None = None,
    compression: str = "lz4",
    **run_args: Any,
) -> MaterializeResult:
    """Launches the shuffle's producer application through ``client`` and records in Dagster
    what it committed, as ``KafkaShuffleIOManager`` records a run of its own.

    The asset declares the shuffle with ``shuffle_metadata`` (as for the IO manager) and
    stores nothing itself; the application calls ``pipes_write_shuffle`` on its rows.

    Args:
        context: The shuffle asset's context.
        client: A Pipes client: ``PipesSubprocessClient`` (``command=[...]`` in
            ``run_args``) or a platform's.
        kafka: The cluster the shuffle lives on. Its settings go to the application
            without secrets, which the application takes from its own platform.
        extras: More Pipes extras for the application.
        compression: Frame compression the application writes with.
        run_args: The client's own ``run`` arguments (``command``, ``env``, a job's
            definition, ...).

    Returns:
        The materialization of the run's windows (each with its own metadata).

    Raises:
        Failure: A window did not commit. Its committed windows are materialized first,
            and the run is tagged ``shuffle/failed_windows`` with the others, as the IO
            manager does, so ``failed_region_sensor`` re-runs those alone.
    """
    name = context.asset_key.to_user_string()
    ask = shuffle_pipes_extras(context, kafka, compression=compression)
    topic: str = ask["spec"]["topic"]  # the asset's, under the resource's prefix
    windows: list[str | None] = list(ask["windows"] or [None])
    crash: Exception | None = None
    messages: list[Any] = []
    try:
        invocation = client.run(
            context=context, extras={**(extras or {}), EXTRAS_KEY: ask}, **run_args
        )
        messages = list(invocation.get_custom_messages())
    except DagsterExecutionInterruptedError:
        raise
    except Exception as exc:  # noqa: BLE001 - each client fails in its own way
        # The application failed (a window it could not commit, or a crash): what it
        # committed before is still in the commit log, and is recorded below.
        crash = exc
    reported, errors = _reported(messages)
    try:
        log: ShuffleLog | None = shuffle_log(topic, kafka=kafka.client())
    except ShuffleTopicNotFoundError:
        log = None  # the application failed before the shuffle was created
    mine: dict[str | None, Commit] = {}
    for commit in log.commits if log is not None else []:  # in log order: the last wins
        if commit.attrs.get(DAGSTER_RUN_ATTR) == context.run.run_id:
            mine[commit.window] = commit
    committed = {w: mine[w] for w in windows if w in mine}
    failed: dict[str, str] = {}
    for w in windows:
        if w in committed:
            continue
        why = errors.get(w or "")
        if why is None and (w or "") in reported:
            why = f"reported committed as run {reported[w or '']['run_id']}, not in the commit log"
        failed[w or ""] = why or f"not committed ({crash or 'the application reported nothing'})"
    metadata = {
        w: commit_metadata(
            c,
            log.layout if log is not None else None,
            kafka,
            topic=topic,
            write_path=reported.get(w or "", {}).get("path"),
            shuffle_watermark=watermark_as_of(log, c) if log is not None else None,
        )
        for w, c in committed.items()
    }
    partitions_def = context.assets_def.partitions_def
    for w, c in committed.items():
        context.log.info(
            f"{topic}: window {w!r} committed as run {c.run_id} ({c.rows} rows) by the "
            "Pipes application"
        )
        bounds = window_bounds(partitions_def, w)
        wrong = outside_window(c, *bounds) if bounds is not None else None
        if wrong is not None:
            context.log.warning(f"{topic}: {wrong}")
    if not failed:
        if len(windows) == 1:
            return MaterializeResult(metadata=metadata[windows[0]])
        for w, md in metadata.items():
            context.add_asset_metadata(md, partition_key=w)
        return MaterializeResult()
    for w, md in metadata.items():
        context.log_event(
            AssetMaterialization(asset_key=context.asset_key, partition=w, metadata=md)
        )
    tagged = ",".join(sorted(failed))
    # Read by failed_region_sensor (see KafkaShuffleIOManager for why the instance is asked).
    context.instance.add_run_tags(context.run.run_id, {FAILED_WINDOWS_TAG: tagged})
    failure, error = windows_failure(
        name,
        len(windows),
        [w or "" for w in committed],
        failed,
        by=" by the Pipes application",
    )
    raise failure from (crash or error)
