"""The ``KafkaShuffle`` component, used as a project that is not ours uses it: a components
project in a temporary folder (``pyproject.toml``, a ``defs.yaml``, the asset's function and
a plain consumer asset), loaded with Dagster's public loader, materialized through the
definitions it builds, on the real broker, Spark and a Dagster instance."""

import textwrap
import uuid

import pytest
from dagster import (
    BackfillPolicy,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    EnvVar,
    TimeWindowPartitionsDefinition,
    build_defs_for_component,
    build_sensor_context,
    instance_for_test,
    load_from_defs_folder,
)
from pyspark.sql import functions as F

from orchestration import KafkaResource, KafkaShuffle, KafkaShuffleIOManager
from orchestration.shuffle import ShuffleOptionError, read_shuffle, shuffle_log

pytestmark = pytest.mark.integration

D1, D2 = "2024-03-01", "2024-03-02"
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"

DEFS_YAML = """\
type: orchestration.KafkaShuffle
attributes:
  asset:
    key: events_by_user
    group_name: clicks
    partitions_def:
      type: daily
      start_date: "2024-03-01"
  fn: .source.events_by_user
  shuffle:
    key: user_id
    num_partitions: 3
    max_parallelism: 12
    event_time: ts
    window_column: day
    topic: {topic}
  kafka:
    bootstrap_servers: "{{{{ env.KAFKA_BOOTSTRAP_SERVERS }}}}"
  consumers:
    - job: user_clicks_job
      selection: user_clicks
  sensors:
    minimum_interval_seconds: 30
    max_retries: 1
  expiry:
    cron: "0 3 * * *"
    keep_last: 1
    min_age_minutes: 0
  backfill_schedule:
    cron: "0 2 * * *"
    partitions: 3
"""

# The asset's body: the day's rows, made by Spark alone (no Python function runs in the
# executors, which could not import this project's modules).
SOURCE_PY = """\
from functools import reduce

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def rows_of(day: str) -> int:
    return 60 * int(day[-2:])


def events_by_user(context):
    spark = SparkSession.getActiveSession()
    days = [
        spark.range(rows_of(day)).select(
            F.concat(F.lit("user-"), (F.col("id") % 20).cast("string")).alias("user_id"),
            F.lit(day).alias("day"),
            F.timestamp_seconds(
                F.unix_timestamp(F.lit(day), "yyyy-MM-dd") + F.col("id") * 60
            ).alias("ts"),
            (F.col("id") % 5).alias("clicks"),
        )
        for day in context.partition_keys
    ]
    return reduce(lambda a, b: a.unionByName(b), days)
"""

CLICKS_PY = """\
import dagster as dg
from pyspark.sql import DataFrame
from pyspark.sql import functions as F


@dg.asset(partitions_def=dg.DailyPartitionsDefinition(start_date="2024-03-01"))
def user_clicks(events_by_user: DataFrame) -> dg.MaterializeResult:
    per_user = events_by_user.groupBy("user_id").agg(F.sum("clicks").alias("clicks")).collect()
    return dg.MaterializeResult(
        metadata={"users": len(per_user), "clicks": sum(r["clicks"] for r in per_user)}
    )
"""


def rows_of(day: str) -> int:
    return 60 * int(day[-2:])


def clicks_of(day: str) -> int:
    return sum(i % 5 for i in range(rows_of(day)))


def write_project(root, module: str, topic: str) -> None:
    """A components project as ``create-dagster project`` lays it out."""
    (root / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""\
            [project]
            name = "{module}"
            version = "0.1.0"

            [tool.dg]
            directory_type = "project"

            [tool.dg.project]
            root_module = "{module}"
            """
        )
    )
    package = root / "src" / module
    events = package / "defs" / "events"
    events.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "defs" / "__init__.py").write_text("")
    (events / "defs.yaml").write_text(DEFS_YAML.format(topic=topic))
    (events / "source.py").write_text(SOURCE_PY)
    (package / "defs" / "clicks.py").write_text(CLICKS_PY)


@pytest.fixture
def project(tmp_path, monkeypatch, bootstrap):
    module = f"clicks_{uuid.uuid4().hex[:8]}"
    topic = f"{module}.events"
    write_project(tmp_path, module, topic)
    # As an installed project is: importable, its settings in the environment.
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", bootstrap)
    defs = load_from_defs_folder(path_within_project=tmp_path)
    with instance_for_test() as instance:
        yield dict(defs=defs, topic=topic, instance=instance)


def test_component_declares_the_shuffle(project, bootstrap):
    defs, topic = project["defs"], project["topic"]
    asset = defs.resolve_assets_def("events_by_user")
    spec = asset.specs_by_key[asset.key]
    md = {k: getattr(v, "value", v) for k, v in spec.metadata.items()}
    assert {k: v for k, v in md.items() if k.startswith("shuffle/")} == {
        "shuffle/key": "user_id",
        "shuffle/num_partitions": 3,
        "shuffle/max_parallelism": 12,
        "shuffle/event_time": "ts",
        "shuffle/window_column": "day",
        "shuffle/topic": topic,
    }
    assert spec.group_name == "clicks"
    assert isinstance(asset.partitions_def, TimeWindowPartitionsDefinition)
    assert asset.partitions_def.get_first_partition_key() == D1
    assert asset.backfill_policy == BackfillPolicy.single_run()
    io_key = asset.get_io_manager_key_for_asset_key(asset.key)
    assert io_key == "events_by_user__shuffle_io"
    io_manager = defs.resources[io_key]
    assert isinstance(io_manager, KafkaShuffleIOManager)
    # {{ env.KAFKA_BOOTSTRAP_SERVERS }} was rendered when the project loaded.
    assert io_manager.kafka.bootstrap_servers == bootstrap

    commits = defs.resolve_sensor_def("events_by_user_commits")
    assert commits.minimum_interval_seconds == 30
    assert commits.default_status == DefaultSensorStatus.STOPPED
    assert [j.name for j in commits.jobs] == ["user_clicks_job"]
    failed = defs.resolve_sensor_def("events_by_user_failed_windows")
    # The producer job, and the sensor's own job for runs of others (a backfill from the UI).
    assert [j.name for j in failed.jobs] == [
        "events_by_user_job",
        "events_by_user_failed_windows_retry",
    ]
    assert failed.minimum_interval_seconds == 30
    nightly = defs.resolve_schedule_def("events_by_user_backfill_schedule")
    assert (nightly.cron_schedule, nightly.job_name) == ("0 2 * * *", "events_by_user_job")
    assert nightly.default_status == DefaultScheduleStatus.STOPPED
    schedule = defs.resolve_schedule_def("events_by_user_expiry_schedule")
    assert schedule.cron_schedule == "0 3 * * *"
    assert schedule.job_name == "events_by_user_expiry"
    assert schedule.default_status == DefaultScheduleStatus.STOPPED
    checks = {k.name for k in defs.resolve_asset_graph().asset_check_keys}
    assert checks == {
        "shuffle_layout",
        "shuffle_rows",
        "shuffle_window_readable",
        "shuffle_event_times_in_window",
        "shuffle_watermark_progress",
    }
    consumer = defs.resolve_job_def("user_clicks_job")
    assert consumer.asset_layer.selected_asset_keys == {defs.resolve_assets_def("user_clicks").key}


def test_component_materializes_reads_and_expires(project, kafka_conf, spark):
    defs, topic, instance = project["defs"], project["topic"], project["instance"]
    # Two days in one run: the component's backfill policy and window column allow it.
    result = defs.resolve_job_def("events_by_user_job").execute_in_process(
        instance=instance, tags={RANGE_START: D1, RANGE_END: D2}
    )
    assert result.success
    assert {m.partition for m in result.asset_materializations_for_node("events_by_user")} == {
        D1,
        D2,
    }
    evaluations = result.get_asset_check_evaluations()
    assert {(e.check_name, e.passed, e.blocking) for e in evaluations} == {
        ("shuffle_layout", True, True),
        ("shuffle_rows", True, True),
        ("shuffle_window_readable", True, True),
        ("shuffle_event_times_in_window", True, True),
        # A stall is no reason to hold back a window's consumers.
        ("shuffle_watermark_progress", True, False),
    }

    log = shuffle_log(topic, kafka=kafka_conf)
    latest = log.latest_by_window()
    assert sorted(latest) == [D1, D2]
    assert {d: latest[d].rows for d in (D1, D2)} == {D1: rows_of(D1), D2: rows_of(D2)}
    rows = read_shuffle(spark, topic, kafka=kafka_conf, windows=[D1, D2])
    per_day = {
        r["day"]: (r["n"], r["clicks"])
        for r in rows.groupBy("day")
        .agg(F.count("*").alias("n"), F.sum("clicks").alias("clicks"))
        .collect()
    }
    assert per_day == {d: (rows_of(d), clicks_of(d)) for d in (D1, D2)}

    # The commit sensor asks for the declared consumer job for each complete day; the
    # consumer, a plain asset of the project, reads through the component's IO manager.
    with build_sensor_context(instance=instance, resources=defs.resources, definitions=defs) as ctx:
        tick = defs.resolve_sensor_def("events_by_user_commits")(ctx)
    assert sorted((r.job_name, r.partition_key) for r in tick.run_requests) == [
        ("user_clicks_job", D1),
        ("user_clicks_job", D2),
    ]
    request = next(r for r in tick.run_requests if r.partition_key == D2)
    consumed = defs.resolve_job_def("user_clicks_job").execute_in_process(
        instance=instance, partition_key=D2, tags=request.tags
    )
    assert consumed.success
    (mat,) = consumed.asset_materializations_for_node("user_clicks")
    assert mat.metadata["users"].value == 20
    assert mat.metadata["clicks"].value == clicks_of(D2)

    # The scheduled expiry job with the declared settings (keep the newest day only).
    expired = defs.resolve_job_def("events_by_user_expiry").execute_in_process(instance=instance)
    assert expired.success
    log = shuffle_log(topic, kafka=kafka_conf)
    assert set(log.expired) == {latest[D1].run_id}
    assert sorted(w for w in log.latest_by_window() if w is not None) == [D2]


def test_kafka_settings_from_yaml():
    shuffle = KafkaShuffle.resolve_from_yaml(
        textwrap.dedent(
            """\
            asset: {key: orders}
            fn: tests.integration.test_component.rows_of
            shuffle: {key: order_id, num_partitions: 2}
            kafka:
              bootstrap_servers: broker-1:9092
              security_protocol: SASL_SSL
              sasl_mechanism: SCRAM-SHA-512
              extra: {client.id: orders}
              env_vars: {sasl_username: ORDERS_USER, sasl_password: ORDERS_PASSWORD}
            checks: {enabled: false}
            sensors: {max_retries: 0, running: true}
            """
        )
    )
    defs = build_defs_for_component(shuffle)
    kafka = defs.resources["orders__shuffle_io"].kafka
    assert isinstance(kafka, KafkaResource)
    # Secrets stay environment variables, read when a run starts.
    assert kafka.sasl_password == EnvVar("ORDERS_PASSWORD")
    assert isinstance(kafka.sasl_password, EnvVar)
    assert (kafka.bootstrap_servers, kafka.extra) == ("broker-1:9092", {"client.id": "orders"})
    assert not list(defs.resolve_asset_graph().asset_check_keys)
    assert [s.name for s in defs.sensors] == ["orders_commits"]
    assert defs.resolve_sensor_def("orders_commits").default_status == DefaultSensorStatus.RUNNING
    assert not defs.schedules
    asset = defs.resolve_assets_def("orders")
    assert asset.partitions_def is None
    assert asset.backfill_policy == BackfillPolicy.multi_run(max_partitions_per_run=1)

    with pytest.raises(ShuffleOptionError, match="kafka.bootstrap_servers is required"):
        build_defs_for_component(
            KafkaShuffle.resolve_from_yaml(
                "asset: {key: orders}\nfn: tests.integration.test_component.rows_of\n"
                "shuffle: {key: order_id, num_partitions: 2}\n"
                "kafka: {bootstrap_servers: '{{ env.NO_SUCH_VARIABLE_SET }}'}\n"
            )
        )
    with pytest.raises(ShuffleOptionError, match="no function 'nothing'"):
        build_defs_for_component(
            KafkaShuffle.resolve_from_yaml(
                "asset: {key: orders}\nfn: tests.integration.test_component.nothing\n"
                "shuffle: {key: order_id, num_partitions: 2}\n"
                "kafka: {bootstrap_servers: broker-1:9092}\n"
            )
        )
