"""A shuffle's producer as its own Spark application, launched through Dagster Pipes: the
part that runs in that application.

The asset launches the application with a Pipes client (``run_shuffle_pipes``, on
Dagster's side); the client hands it, as Pipes extras, what the asset declares: the
shuffle's layout, the windows of the run (its partition keys) and when each is complete,
the Kafka cluster's settings without its secrets, and the Dagster run to tag its commits
with. :func:`pipes_write_shuffle` writes the application's DataFrame as one run per
window and reports back which windows committed and which failed; Dagster's side records a
materialization per committed window and fails the run for the others, which
``failed_region_sensor`` then re-runs alone.

This module imports the engine and ``dagster_pipes`` (the small, dependency-free package
Pipes applications use), never Dagster itself: it runs wherever the platform runs the
Spark driver (``spark-submit``, EMR, Databricks, Dataproc).

Example (the application, e.g. ``produce_flights.py``)::

    from dagster_pipes import open_dagster_pipes
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from orchestration import pipes_write_shuffle

    with open_dagster_pipes() as pipes:
        spark = SparkSession.builder.getOrCreate()
        days = pipes.extras["kafka_shuffle"]["windows"]
        flights = spark.read.parquet("/data/flights").where(F.col("day").isin(days))
        pipes_write_shuffle(flights)   # raises if a window failed, after reporting it
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Any

from dagster_pipes import PipesContext
from pyspark.sql import DataFrame

from orchestration.shuffle.errors import ShuffleError, ShuffleOptionError, ShuffleWriteError
from orchestration.shuffle.spec import ShuffleSpec, WriteResult
from orchestration.shuffle.write import WindowsResult, write_shuffle, write_windows

# The Pipes extra (and custom message) that carries the shuffle's part.
EXTRAS_KEY = "kafka_shuffle"
# The commit attribute naming the Dagster run (orchestration.definition.DAGSTER_RUN_ATTR,
# which imports Dagster; the two are held equal by a unit test).
RUN_ATTR = "dagster_run_id"
# Kafka settings that stay with Dagster: the application gets its secrets from its own
# platform (an environment variable, a secret scope), never through Pipes extras.
_SECRET = re.compile(r"password|secret|jaas|private|key\.pem|token", re.IGNORECASE)


def spec_to_json(spec: ShuffleSpec) -> dict[str, Any]:
    """``spec`` as JSON values (Pipes extras). Pure; :func:`spec_from_json` reads it back."""
    return {
        "topic": spec.topic,
        "key": list(spec.key),
        "num_partitions": spec.num_partitions,
        "max_parallelism": spec.max_parallelism,
        "event_time": spec.event_time,
        "max_out_of_orderness_s": spec.max_out_of_orderness.total_seconds(),
        "replication_factor": spec.replication_factor,
        "sort_by": list(spec.sort_by),
    }


def spec_from_json(data: Mapping[str, Any]) -> ShuffleSpec:
    """The :class:`ShuffleSpec` :func:`spec_to_json` wrote."""
    return ShuffleSpec(
        topic=data["topic"],
        key=tuple(data["key"]),
        num_partitions=int(data["num_partitions"]),
        max_parallelism=int(data["max_parallelism"]),
        event_time=data.get("event_time"),
        max_out_of_orderness=dt.timedelta(seconds=float(data.get("max_out_of_orderness_s", 0))),
        replication_factor=data.get("replication_factor"),
        sort_by=tuple(data.get("sort_by", ())),
    )


def public_kafka_settings(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of ``conf`` that may travel to the application: all but its secrets
    (passwords, JAAS configurations, private keys, tokens)."""
    return {k: v for k, v in conf.items() if not _SECRET.search(k)}


def _extras(context: PipesContext) -> Mapping[str, Any]:
    try:
        return context.get_extra(EXTRAS_KEY)
    except Exception as exc:  # noqa: BLE001 - dagster_pipes raises its own error type
        raise ShuffleOptionError(
            f"the Pipes session has no {EXTRAS_KEY!r} extra: launch this application from "
            "the shuffle asset with orchestration.run_shuffle_pipes(context, client, ...), "
            "which passes the shuffle's layout and windows"
        ) from exc


def _result_json(window: str | None, result: WriteResult) -> dict[str, Any]:
    return {
        "window": window,
        "run_id": result.run_id,
        "rows": result.rows,
        "bytes": result.bytes,
        "path": result.path,
    }


def pipes_write_shuffle(
    df: DataFrame,
    *,
    context: PipesContext | None = None,
    kafka: Mapping[str, Any] | None = None,
    compression: str | None = None,
    raise_on_failure: bool = False,
    schema_mode: str | None = None,
) -> WindowsResult:
    """Writes ``df`` as the shuffle the launching asset declares, one run per window of the
    Dagster run, and reports each window back through Pipes.

    Each committed run carries the Dagster run's id (as an IO manager's does), so the
    asset checks and Dagster's side find it in the commit log. Each window's outcome is
    logged to the Dagster run as it happens, and the windows committed and failed are sent
    as a custom message when all were tried. A run of one partition (or of none) writes
    ``df`` as that window; a run over a range writes the rows of each window, by the
    asset's ``shuffle/window_column``.

    Args:
        df: The rows to write.
        context: The Pipes context; default the one ``open_dagster_pipes`` opened.
        kafka: Settings merged over those the asset passed (which hold no secrets): the
            cluster's password or SASL configuration, from the application's platform.
        compression: Frame compression; default the setting the asset passed.
        raise_on_failure: Raise when a window failed, after all were tried and reported.
            Off by default: the application then ends successfully, with the failed windows
            in its report, and Dagster fails the run for them and re-runs them alone
            (``failed_region_sensor``). A failed application may be re-run whole by its
            platform (YARN re-attempts one), which would write every window again; and the
            Pipes report of an application that fails may not reach Dagster.
        schema_mode: ``"strict"`` or ``"merge"`` (see ``write_shuffle``); default the
            asset's ``shuffle/schema_mode`` metadata, else strict.

    Returns:
        The windows committed and failed.

    Raises:
        ShuffleWriteError: With ``raise_on_failure``, some window failed.
        ShuffleOptionError: The application was not launched by ``run_shuffle_pipes``, or
            a range run's asset declares no ``shuffle/window_column``.
    """
    pipes = context or PipesContext.get()
    ask = _extras(pipes)
    spec = spec_from_json(ask["spec"])
    conf = {**ask.get("kafka", {}), **(kafka or {})}
    codec = compression or ask.get("compression", "lz4")
    mode = schema_mode or ask.get("schema_mode")
    attrs = {RUN_ATTR: str(ask.get("run_id") or pipes.run_id)}
    windows: list[str] | None = ask.get("windows")
    ends = {k: dt.datetime.fromisoformat(v) for k, v in (ask.get("complete_until") or {}).items()}

    def report(window: str | None, outcome: WriteResult | ShuffleError) -> None:
        if isinstance(outcome, WriteResult):
            pipes.log.info(
                f"{spec.topic}: window {window!r} committed as run {outcome.run_id} "
                f"({outcome.rows} rows, {outcome.bytes} bytes, {outcome.path} path)"
            )
        else:
            pipes.log.error(f"{spec.topic}: window {window!r} failed: {outcome}")

    if windows is not None and len(windows) > 1:
        column = ask.get("window_column")
        if not column:
            raise ShuffleOptionError(
                f"shuffle {spec.topic}: a run over {len(windows)} windows ({windows[0]} .. "
                f"{windows[-1]}) needs the asset's definition metadata "
                "'shuffle/window_column' naming the column whose value is the window"
            )
        result = write_windows(
            df,
            spec,
            kafka=conf,
            windows=windows,
            window_column=column,
            complete_until=ends,
            compression=codec,
            attrs=attrs,
            on_window=report,
            schema_mode=mode,
        )
        done: list[tuple[str | None, WriteResult]] = list(result.committed.items())
        failed: dict[str | None, str] = {w: e for w, e in result.failed.items()}
    else:
        window = windows[0] if windows else None
        done, failed = [], {}
        try:
            written = write_shuffle(
                df,
                spec,
                kafka=conf,
                window=window,
                complete_until=ends.get(window) if window is not None else None,
                compression=codec,
                attrs=attrs,
                schema_mode=mode,
            )
            done.append((window, written))
            report(window, written)
        except ShuffleError as exc:
            failed[window] = str(exc)
            report(window, exc)
        result = WindowsResult(
            {w or "": r for w, r in done}, {w or "": e for w, e in failed.items()}
        )
    pipes.report_custom_message(
        {
            EXTRAS_KEY: {
                "committed": [_result_json(w, r) for w, r in done],
                "failed": [{"window": w, "error": e} for w, e in failed.items()],
            }
        }
    )
    if failed and raise_on_failure:
        raise ShuffleWriteError(
            f"shuffle {spec.topic}: {len(failed)} of {len(done) + len(failed)} window(s) "
            f"failed and were not committed: {sorted(str(w) for w in failed)}"
        )
    return result
