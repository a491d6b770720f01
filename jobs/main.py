"""The main job: the reference pipeline over a range of days, on the configured stack.

Through Dagster, in the workspace's two code locations: a backfill of the producer over the
range (one run, one Spark session, one committed shuffle run per day), then the sensors: the
consumer location's commit sensor launches the three consumer jobs for every complete day,
and the producer location's failed-region sensor retries what fails; last, one tick of the
sensors that watch the shuffle's progress and its consumers' lag, whose check results and
watermark materialization are recorded as the daemon records them.
Runs are recorded in ``$DAGSTER_HOME`` (``scripts/dev`` sets ``.local/dagster``), so
``scripts/dev ui`` shows them. Configuration: the environment variables of
:mod:`jobs.definitions`. Prints rows per asset per day, the shuffle's watermark, what the
watching sensors found and where outputs are.

    scripts/dev main                                  # 2013-01-01 .. 2013-01-07
    scripts/dev main --start 2013-03-01 --end 2013-03-31
    SHUFFLE_MAIN_START=2013-06-01 SHUFFLE_MAIN_END=2013-06-03 scripts/dev main
"""

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path

from dagster import DagsterInstance

# The project's own local instance: no usage statistics leave the machine, Dagster's run
# retries are on (the consumer jobs rely on them under a daemon), and so are its freshness
# policies (a preview in Dagster 1.13; the shuffle's watermark asset has one); the
# library's own log lines (which path a write took, and why) reach each run's log.
INSTANCE_YAML = """\
telemetry:
  enabled: false
run_retries:
  enabled: true
freshness:
  enabled: true
python_logs:
  managed_python_loggers: [orchestration]
  python_log_level: INFO
"""


def instance() -> DagsterInstance:
    home = Path(os.environ.setdefault("DAGSTER_HOME", os.path.abspath(".local/dagster")))
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(INSTANCE_YAML)
    return DagsterInstance.get()


def _day(text: str) -> str:
    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text!r}") from None


def _resolved(outcome, outcomes) -> bool:
    """A failed run is resolved when it was retried and every retry succeeded or was resolved."""
    retries = [
        o
        for o in outcomes
        if outcome.run_id in (o.tags.get("shuffle/retry_of"), o.tags.get("dagster/parent_run_id"))
    ]
    return bool(retries) and all(r.success or _resolved(r, outcomes) for r in retries)


def watch(instance: DagsterInstance, locations: list, names: list[str]) -> list:
    """Ticks each watching sensor of ``names`` once and records what it reports (check
    results, the watermark's materialization), as the daemon records a sensor's asset
    events; returns those events."""
    from dagster import build_sensor_context

    events = []
    for name in names:
        defs = next(d for d in locations if any(s.name == name for s in d.sensors or ()))
        with build_sensor_context(
            instance=instance, resources=defs.resources, definitions=defs
        ) as context:
            result = defs.resolve_sensor_def(name)(context)
        for event in getattr(result, "asset_events", None) or ():
            instance.report_runless_asset_event(event)
            events.append(event)
    return events


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/dev main", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--start", type=_day, default=os.environ.get("SHUFFLE_MAIN_START", "2013-01-01")
    )
    parser.add_argument(
        "--end",
        type=_day,
        default=os.environ.get("SHUFFLE_MAIN_END", "2013-01-07"),
        help="last day, inclusive",
    )
    args = parser.parse_args(argv)
    if args.end < args.start:
        parser.error(f"--end {args.end} is before --start {args.start}")

    from jobs.definitions import EnvironmentNotSet, require_env

    try:
        require_env()
    except EnvironmentNotSet as exc:
        parser.error(f"{exc}; scripts/dev main sets it")

    from assets.pipeline import CONSUMERS, FLIGHTS_BY_TAILNUM
    from devstack.runner import LocalRunner
    from jobs.definitions import consumer_defs, kafka_client, producer_defs
    from jobs.pipeline import (
        COMMIT_SENSOR,
        LAG_SENSOR,
        PRODUCER_JOB,
        PROGRESS_SENSOR,
        REGION_SENSOR,
        RUNNING_TOTALS_JOB,
    )
    from orchestration.definition import shuffle_asset
    from orchestration.shuffle import shuffle_log, shuffle_watermark
    from orchestration.shuffle.spark.jvm import choose_engine

    started = time.monotonic()
    # The workspace's two code locations, the producer team's and the consumer team's.
    runner = LocalRunner(
        [producer_defs, consumer_defs],
        instance(),
        log_level=os.environ.get("SHUFFLE_RUN_LOG_LEVEL", "WARNING"),
        progress=lambda line: print(line, flush=True),
    )
    print(f"producer backfill {args.start} .. {args.end} (one run), then the sensors:", flush=True)
    runner.run(PRODUCER_JOB, partition_range=(args.start, args.end))
    runner.settle(COMMIT_SENSOR, REGION_SENSOR)
    totals = runner.run(RUNNING_TOTALS_JOB)
    watched = watch(runner.instance, [producer_defs, consumer_defs], [PROGRESS_SENSOR, LAG_SENSOR])

    res = producer_defs.resources
    kafka = kafka_client(producer_defs)
    spec = producer_defs.resolve_assets_def(FLIGHTS_BY_TAILNUM).specs_by_key[FLIGHTS_BY_TAILNUM]
    topic = shuffle_asset("flights_by_tailnum", ["flights_by_tailnum"], spec.metadata).topic
    warehouse = res["warehouse"]
    log = shuffle_log(topic, kafka=kafka)
    days = [
        (dt.date.fromisoformat(args.start) + dt.timedelta(days=i)).isoformat()
        for i in range(
            (dt.date.fromisoformat(args.end) - dt.date.fromisoformat(args.start)).days + 1
        )
    ]
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    names = ["flights", "flights_missing_tailnum", *CONSUMERS]
    print()
    headers = ["flights_by_tailnum", *names]
    widths = [max(len(h), 8) + 2 for h in headers]
    print(f"{'day':<11}" + "".join(f"{h:>{w}}" for h, w in zip(headers, widths, strict=True)))
    for day in days:
        commit = next(iter(log.visible(windows=[day])), None)
        cells = [str(commit.rows) if commit else "-"]
        for n in names:
            path = warehouse.day_path(n, day)
            rows = warehouse.read_table(path).num_rows if warehouse.exists(path) else "-"
            cells.append(str(rows))
        print(f"{day:<11}" + "".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)))
    failed = [o for o in runner.outcomes if not o.success]
    retried = [
        o
        for o in runner.outcomes
        if o.tags.get("shuffle/retry") or o.tags.get("dagster/retry_number")
    ]
    wm = shuffle_watermark(topic, kafka=kafka)
    print()
    print(
        f"shuffle topic     {topic} ({len(log.commits)} committed runs, "
        f"{len(log.latest_by_window())} windows)"
    )
    print(f"watermark         {wm.isoformat() if wm is not None else 'none'}")
    for event in watched:
        if hasattr(event, "check_name"):
            state = "passed" if event.passed else f"FAILED ({event.severity.value})"
            where = f"{event.check_name} of {event.asset_key.to_user_string()}"
            print(f"{'check':<17} {where}: {state}")
    catalog = choose_engine(spark, kafka, "auto")
    print(
        "shuffle reads     "
        + (f"on the JVM (catalog '{catalog}')" if catalog else "by the Python source")
    )
    if totals.success:
        md = totals.result.asset_materializations_for_node("aircraft_running_totals")[0].metadata
        print(
            f"running totals    {md['aircraft'].value} aircraft, {md['rows_read'].value} rows "
            f"read in {md['micro_batches'].value} micro-batch(es) -> {md['path'].value}"
        )
    print(f"outputs           {warehouse.root()}/<asset>/day=YYYY-MM-DD/")
    print(
        f"dagster runs      {len(runner.outcomes)} ({len(failed)} failed, {len(retried)} retries); "
        f"DAGSTER_HOME={os.environ['DAGSTER_HOME']}"
    )
    print(f"took              {time.monotonic() - started:.0f}s")
    unresolved = [o for o in failed if not _resolved(o, runner.outcomes)]
    if unresolved:
        print(
            f"FAILED: {[(o.job_name, o.partition, o.run_id) for o in unresolved]}", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
