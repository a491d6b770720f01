"""``KafkaShuffle``: a shuffle asset declared in a Dagster project's ``defs.yaml``.

A project writes the asset's body (a function that returns a Spark DataFrame) and declares
the rest in YAML: the asset (key, partitions), its shuffle layout, the Kafka cluster, the
jobs the commit sensor launches, the checks and the expiry schedule. The component builds
them with the library's factories (``shuffle_metadata``, ``KafkaShuffleIOManager``,
``shuffle_commit_sensor``, ``failed_region_sensor``, ``shuffle_asset_checks``,
``shuffle_expiry_job``, ``shuffle_backfill_schedule``), exactly as a Python project would.

Example ``defs/events/defs.yaml`` (the function lives in ``defs/events/source.py``)::

    type: orchestration.KafkaShuffle
    attributes:
      asset:
        key: events_by_user
        partitions_def: {type: daily, start_date: "2024-03-01"}
      fn: .source.events_by_user
      shuffle: {key: user_id, num_partitions: 8, event_time: ts, window_column: day}
      kafka:
        bootstrap_servers: "{{ env.KAFKA_BOOTSTRAP_SERVERS }}"
      consumers:
        - {job: user_clicks_job, selection: user_clicks}
      expiry: {cron: "0 3 * * *", keep_last: 30}
      backfill_schedule: {cron: "0 2 * * *", partitions: 3}

Names of what it builds, from the asset key ``k`` (as a Python identifier): the IO manager
resource ``k__shuffle_io`` (``io_manager_key`` overrides it), the producer job ``k_job``, the
sensors ``k_commits`` and ``k_failed_windows`` (with its retry job ``k_failed_windows_retry``),
the checks ``shuffle_layout``, ``shuffle_rows`` and ``shuffle_window_readable``, the expiry
job ``k_expiry`` and its schedule ``k_expiry_schedule``, the schedule ``k_backfill_schedule``.
"""

import importlib
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dagster
from dagster import (
    AssetExecutionContext,
    BackfillPolicy,
    Component,
    ComponentLoadContext,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    Definitions,
    EnvVar,
    Model,
    Resolvable,
    ResolvedAssetSpec,
    ScheduleDefinition,
    define_asset_job,
)
from pydantic import Field

from orchestration.checks import shuffle_asset_checks
from orchestration.definition import shuffle_metadata, shuffle_pool
from orchestration.io_manager import KafkaShuffleIOManager
from orchestration.maintenance import shuffle_expiry_job
from orchestration.resources import KafkaResource
from orchestration.schedules import shuffle_backfill_schedule
from orchestration.sensors import failed_region_sensor, shuffle_commit_sensor
from orchestration.shuffle.errors import ShuffleOptionError

# KafkaResource's settings that kafka.env_vars may name. The password has no plain field:
# written in defs.yaml (or rendered there from {{ env.* }}) it would show in the UI.
_KAFKA_FIELDS = (
    "bootstrap_servers",
    "security_protocol",
    "sasl_mechanism",
    "sasl_username",
    "sasl_password",
    "ssl_ca_location",
    "topic_prefix",
)


class ShuffleLayout(Resolvable, Model):
    """The shuffle's layout: the arguments of :func:`orchestration.shuffle_metadata`."""

    key: str | list[str] = Field(description="The key column, or a list of them.")
    num_partitions: int = Field(description="Partitions of the shuffle's data topic.")
    max_parallelism: int = 128
    event_time: str | None = Field(default=None, description="The event-time column.")
    topic: str | None = Field(
        default=None, description="Default: the asset key's parts joined with '.'."
    )
    window_column: str | None = Field(
        default=None,
        description="The column whose value is the partition key; lets one run write a range.",
    )
    replication_factor: int | None = None
    schema_mode: str | None = Field(
        default=None,
        description=(
            "strict (default) or merge: merge lets a run add nullable columns and widen types, "
            "as a new schema version."
        ),
    )
    refuse_outside_window: bool | None = Field(
        default=None,
        description="Refuse (not commit) a run whose rows' event times fall outside its window.",
    )


class KafkaModel(Resolvable, Model):
    """The cluster, as :class:`orchestration.KafkaResource` takes it.

    ``{{ env.NAME }}`` in a value is read when the definitions load, and so is shown in the
    UI; ``env_vars`` names the variables read when a run starts instead (Dagster's
    ``EnvVar``), which is the way to pass secrets.
    """

    bootstrap_servers: str | None = Field(default=None, description="host:port[,host:port]")
    security_protocol: str | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    ssl_ca_location: str | None = None
    topic_prefix: str | None = Field(
        default=None, description="Put before the shuffle's topic (KafkaResource.topic_prefix)."
    )
    extra: dict[str, str] = Field(
        default_factory=dict, description="Other librdkafka settings, by their dotted names."
    )
    env_vars: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Settings read from environment variables when a run starts, e.g. "
            "{sasl_password: KAFKA_PASSWORD}."
        ),
    )

    def resource(self, where: str) -> KafkaResource:
        unknown = sorted(set(self.env_vars) - set(_KAFKA_FIELDS))
        if unknown:
            raise ShuffleOptionError(
                f"{where}: kafka.env_vars sets {unknown}; the settings are {list(_KAFKA_FIELDS)}"
            )
        values: dict[str, Any] = {
            name: getattr(self, name)
            for name in _KAFKA_FIELDS
            if name != "sasl_password" and getattr(self, name) is not None
        }
        values.update({name: EnvVar(var) for name, var in self.env_vars.items()})
        if not values.get("bootstrap_servers"):
            raise ShuffleOptionError(
                f"{where}: kafka.bootstrap_servers is required (a value, "
                '"{{ env.KAFKA_BOOTSTRAP_SERVERS }}", or kafka.env_vars.bootstrap_servers)'
            )
        return KafkaResource(**values, extra=dict(self.extra))


class ConsumerJob(Resolvable, Model):
    """A job the commit sensor launches, per complete window, for the assets it selects."""

    job: str = Field(description="The job's name.")
    selection: str = Field(
        description="A Dagster asset selection, e.g. 'user_clicks' or 'group:clicks'."
    )


class SensorSettings(Resolvable, Model):
    """The commit sensor and the failed-window sensor."""

    running: bool = Field(default=False, description="Start them running when deployed.")
    minimum_interval_seconds: int = 15
    max_retries: int = Field(
        default=2,
        description="Re-runs of a window that failed to commit; 0: no failed-window sensor.",
    )


class CheckSettings(Resolvable, Model):
    """The shuffle's asset checks (``shuffle_layout``, ``shuffle_rows``,
    ``shuffle_window_readable``)."""

    enabled: bool = True
    blocking: bool = True


class ExpirySettings(Resolvable, Model):
    """A scheduled expiry job (:func:`orchestration.shuffle_expiry_job`): its ages are that
    job's run config's (:class:`orchestration.maintenance.ExpiryConfig`), by the same names
    and in the same units, handed over as they are."""

    cron: str = Field(description="When it runs, e.g. '0 3 * * *'.")
    keep_last: int | None = Field(default=None, description="Windows kept, the newest.")
    older_than_hours: float | None = Field(
        default=None, description="Expire runs committed longer ago than this many hours."
    )
    min_age_minutes: float = Field(
        default=60, description="Never expire a run younger than this many minutes."
    )
    timezone: str | None = None
    running: bool = Field(default=False, description="Start the schedule running when deployed.")


class BackfillScheduleSettings(Resolvable, Model):
    """A schedule that re-materializes the trailing partitions in one range run
    (:func:`orchestration.shuffle_backfill_schedule`)."""

    cron: str = Field(description="When it runs, e.g. '0 2 * * *'.")
    partitions: int = Field(description="How many trailing partitions each run re-materializes.")
    timezone: str | None = None
    running: bool = Field(default=False, description="Start the schedule running when deployed.")


class KafkaShuffle(Component, Resolvable, Model):
    """A shuffle asset and what runs around it, declared in a project's ``defs.yaml``.

    ``fn`` is called with the asset's ``AssetExecutionContext`` (if it takes an argument)
    and returns a Spark DataFrame; everything else is built from the library's factories.
    Each field's description (in the component's schema) says what it sets.

    Example::

        type: orchestration.KafkaShuffle
        attributes:
          asset: {key: events_by_user, partitions_def: {type: daily, start_date: "2024-03-01"}}
          fn: .source.events_by_user
          shuffle: {key: user_id, num_partitions: 8, window_column: day}
          kafka: {bootstrap_servers: "{{ env.KAFKA_BOOTSTRAP_SERVERS }}"}
    """

    asset: ResolvedAssetSpec = Field(
        description="The asset: key, partitions_def, group_name, deps, kinds, owners, ..."
    )
    fn: str = Field(
        description=(
            "The function that returns the asset's Spark DataFrame: 'module.function', or "
            "'.module.function' relative to this defs.yaml's folder."
        )
    )
    shuffle: ShuffleLayout = Field(description="The shuffle's layout.")
    kafka: KafkaModel = Field(description="The Kafka cluster.")
    consumers: list[ConsumerJob] = Field(
        default_factory=list,
        description="Jobs the commit sensor launches for each complete window.",
    )
    sensors: SensorSettings = Field(default_factory=SensorSettings)
    checks: CheckSettings = Field(default_factory=CheckSettings)
    expiry: ExpirySettings | None = Field(
        default=None, description="A scheduled expiry job; none if absent."
    )
    backfill_schedule: BackfillScheduleSettings | None = Field(
        default=None,
        description="A schedule re-materializing the trailing partitions; none if absent.",
    )
    io_manager_key: str | None = Field(
        default=None, description="The IO manager resource's key; default '<asset>__shuffle_io'."
    )
    compression: str = Field(
        default="lz4", description="Compression of the frames written: lz4, zstd or none."
    )

    def build_defs(self, context: ComponentLoadContext) -> Definitions:
        name = self.asset.key.to_python_identifier()
        where = f"KafkaShuffle {self.asset.key.to_user_string()}"
        io_key = self.io_manager_key or f"{name}__shuffle_io"
        body = _load_function(self.fn, context, where)
        layout = self.shuffle
        metadata = shuffle_metadata(
            key=layout.key,
            num_partitions=layout.num_partitions,
            max_parallelism=layout.max_parallelism,
            event_time=layout.event_time,
            topic=layout.topic,
            window_column=layout.window_column,
            replication_factor=layout.replication_factor,
            schema_mode=layout.schema_mode,
            refuse_outside_window=layout.refuse_outside_window,
        )
        spec = self.asset.merge_attributes(metadata=metadata).with_io_manager_key(io_key)
        takes_context = bool(inspect.signature(body).parameters)

        # A range of partitions in one run needs the window column to split it by; without
        # one, a backfill runs one partition per run. (multi_asset is named through its
        # module: dg's registry scan of this module lists every Dagster object it holds.)
        @dagster.multi_asset(
            name=name,
            specs=[spec],
            # One writer of the shuffle at a time, where the instance limits its pools.
            pool=shuffle_pool(layout.topic or ".".join(spec.key.path)),
            backfill_policy=(
                BackfillPolicy.single_run()
                if layout.window_column
                else BackfillPolicy.multi_run(max_partitions_per_run=1)
            ),
        )
        def _shuffle_asset(context: AssetExecutionContext):
            return body(context) if takes_context else body()

        producer = define_asset_job(f"{name}_job", selection=[spec.key])
        consumers = [define_asset_job(c.job, selection=c.selection) for c in self.consumers]
        sensor_status = (
            DefaultSensorStatus.RUNNING if self.sensors.running else DefaultSensorStatus.STOPPED
        )
        sensors = [
            shuffle_commit_sensor(
                f"{name}_commits",
                asset=_shuffle_asset,
                jobs=consumers,
                minimum_interval_seconds=self.sensors.minimum_interval_seconds,
                default_status=sensor_status,
            )
        ]
        if self.sensors.max_retries > 0:
            sensors.append(
                failed_region_sensor(
                    f"{name}_failed_windows",
                    jobs=[producer],
                    assets=[_shuffle_asset],
                    max_retries=self.sensors.max_retries,
                    minimum_interval_seconds=self.sensors.minimum_interval_seconds,
                    default_status=sensor_status,
                )
            )
        checks = (
            shuffle_asset_checks(_shuffle_asset, blocking=self.checks.blocking)
            if self.checks.enabled
            else []
        )
        jobs: list[Any] = [producer, *consumers]
        schedules = []
        if self.expiry is not None:
            expiry = self.expiry
            expiry_job = shuffle_expiry_job(
                f"{name}_expiry",
                asset=_shuffle_asset,
                keep_last=expiry.keep_last,
                older_than_hours=expiry.older_than_hours,
                min_age_minutes=expiry.min_age_minutes,
            )
            jobs.append(expiry_job)
            schedules.append(
                ScheduleDefinition(
                    name=f"{name}_expiry_schedule",
                    job=expiry_job,
                    cron_schedule=expiry.cron,
                    execution_timezone=expiry.timezone,
                    default_status=(
                        DefaultScheduleStatus.RUNNING
                        if expiry.running
                        else DefaultScheduleStatus.STOPPED
                    ),
                )
            )
        if self.backfill_schedule is not None:
            backfill = self.backfill_schedule
            schedules.append(
                shuffle_backfill_schedule(
                    f"{name}_backfill_schedule",
                    asset=_shuffle_asset,
                    job=producer,
                    partitions=backfill.partitions,
                    cron_schedule=backfill.cron,
                    execution_timezone=backfill.timezone,
                    default_status=(
                        DefaultScheduleStatus.RUNNING
                        if backfill.running
                        else DefaultScheduleStatus.STOPPED
                    ),
                )
            )
        io_manager = KafkaShuffleIOManager(
            kafka=self.kafka.resource(where), compression=self.compression
        )
        return Definitions(
            assets=[_shuffle_asset],
            asset_checks=checks,
            jobs=jobs,
            sensors=sensors,
            schedules=schedules,
            resources={io_key: io_manager},
        )


def _load_function(ref: str, context: ComponentLoadContext, where: str) -> Callable[..., Any]:
    """The function ``ref`` names: ``module.attr``, or ``.module.attr`` relative to the
    component's folder (as ``type: .Name`` is in a ``defs.yaml``)."""
    module_name, _, attr = ref.rpartition(".")
    if not module_name or not attr:
        raise ShuffleOptionError(f"{where}: fn {ref!r} must be 'module.function'")
    if ref.startswith("."):
        module_name = _folder_module(context) + module_name
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ShuffleOptionError(f"{where}: fn {ref!r}: no module {module_name!r} ({exc})") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ShuffleOptionError(f"{where}: fn {ref!r}: {module_name} has no function {attr!r}")
    return fn


def _folder_module(context: ComponentLoadContext) -> str:
    """The Python module of the folder that holds the component's ``defs.yaml``."""
    path = context.component_path.file_path
    folder = path.parent if path.is_file() else path
    relative: Sequence[str] = (
        Path(folder).absolute().relative_to(Path(context.defs_module_path).absolute()).parts
    )
    return ".".join([context.defs_module_name, *relative])
