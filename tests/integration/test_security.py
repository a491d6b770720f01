"""The whole path over SASL_SSL (SCRAM-SHA-512 users, TLS made with keytool) with ACLs, on
a local stack of its own: who may write, who may only read, and what is refused."""

import contextlib
import io
import json
import os
import re
import time
from pathlib import Path

import pytest
from dagster import build_sensor_context, instance_for_test

from jobs.definitions import KAFKA_SECURITY_ENV, kafka_resource
from orchestration.shuffle import (
    ShuffleConnectionError,
    ShuffleError,
    ShuffleOptionError,
    ShuffleSpec,
    aggregate_shuffle,
    grant_shuffle_access,
    read_records,
    read_shuffle,
    shuffle_commits_since,
    write_shuffle,
)
from tests.conftest import jvm_read_off, jvm_read_on
from tests.integration.stacks import secure_users

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def users():
    with secure_users() as confs:
        yield confs


def rows(spark, n=3000):
    return spark.range(n).selectExpr("concat('k', cast(id % 41 as string)) as k", "id")


def spec_for(topic):
    return ShuffleSpec(topic=topic, key="k", num_partitions=3, max_parallelism=24)


def tables(spark) -> list[str]:
    return [r.tableName for r in spark.sql("SHOW TABLES IN shuffle").collect()]


def explained(df) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain(True)
    return out.getvalue()


def refused_quickly(call, *match):
    started = time.monotonic()
    with pytest.raises(ShuffleError) as failure:
        call()
    took = time.monotonic() - started
    text = str(failure.value)
    assert took < 5, (took, text)
    for m in match:
        assert m in text, text
    return text


def test_writer_writes_reader_reads_and_nothing_else(spark, kafka_conf, users, unique):
    admin, producer, consumer = users["admin"], users["producer"], users["consumer"]
    topic = unique("secure")
    assert (
        grant_shuffle_access(
            topic, kafka=admin, writers=["User:producer"], readers=["User:consumer"]
        )
        > 0
    )
    res = write_shuffle(rows(spark), spec_for(topic), kafka=producer, window="d1")
    assert res.rows == 3000
    # The reader reads, aggregates and follows commits.
    got = read_shuffle(spark, topic, kafka=consumer)
    assert got.count() == 3000
    agg = aggregate_shuffle(spark, topic, kafka=consumer, aggregations={"n": ("*", "count")})
    assert sum(r.n for r in agg.collect()) == 3000
    commits, _ = shuffle_commits_since(topic, kafka=consumer)
    assert [c.run_id for c in commits] == [res.run_id]
    # The session's catalog is first built for the plaintext cluster, where the shuffle is
    # not; Spark keeps that catalog for the session, and it follows the settings given next.
    plain = jvm_read_on(spark, kafka_conf)
    try:
        assert topic not in tables(spark)
    finally:
        jvm_read_off(spark, plain)
    # On the JVM read path too: the catalog's librdkafka-style SASL_SSL settings are
    # translated for the Java client (PEM trust store, the JAAS login of the user).
    keys = jvm_read_on(spark, consumer)
    try:
        assert topic in tables(spark)
        on_jvm = read_shuffle(spark, topic, kafka=consumer, engine="jvm")
        assert on_jvm.count() == 3000
        assert spark.sql(f"SELECT count(*) FROM shuffle.`{topic}`").first()[0] == 3000
        jvm_plan = explained(on_jvm)
    finally:
        jvm_read_off(spark, keys)
    # ... but may not write it.
    text = refused_quickly(
        lambda: write_shuffle(rows(spark, 10), spec_for(topic), kafka=consumer, window="d2"),
        "not authorized",
    )
    # The writer may not write another shuffle it was not granted.
    refused_quickly(
        lambda: write_shuffle(rows(spark, 10), spec_for(unique("other")), kafka=producer),
        "not authorized",
    )
    # No password in errors or plans.
    for conf in users.values():
        assert conf["sasl.password"] not in text
        assert conf["sasl.password"] not in explained(got)
        assert conf["sasl.password"] not in jvm_plan


def test_a_prefix_grant_covers_every_shuffle_under_the_prefix(spark, users, unique):
    admin, producer, consumer = users["admin"], users["producer"], users["consumer"]
    prefix = unique("team") + "."
    grant_shuffle_access(
        prefix, kafka=admin, writers=["User:producer"], readers=["User:consumer"], prefixed=True
    )
    # Shuffles named after the grant, as a deployment with this topic_prefix creates them.
    for name in ("events", "sessions"):
        res = write_shuffle(rows(spark, 500), spec_for(prefix + name), kafka=producer)
        assert res.rows == 500
        assert read_shuffle(spark, prefix + name, kafka=consumer).count() == 500
    refused_quickly(
        lambda: write_shuffle(rows(spark, 10), spec_for(prefix + "x"), kafka=consumer),
        "not authorized",
    )
    # A name that merely shares the prefix's first letters is another deployment's.
    refused_quickly(
        lambda: write_shuffle(rows(spark, 10), spec_for(prefix[:-1] + "-x"), kafka=producer),
        "not authorized",
    )


def test_unauthenticated_and_wrong_passwords_are_refused_in_seconds(spark, users, unique):
    consumer = users["consumer"]
    plain = {"bootstrap.servers": consumer["bootstrap.servers"]}
    refused_quickly(lambda: read_shuffle(spark, unique("t"), kafka=plain), "security.protocol")
    wrong = {**consumer, "sasl.password": "not-the-password"}
    text = refused_quickly(
        lambda: read_shuffle(spark, unique("t"), kafka=wrong), "authentication failed"
    )
    assert "not-the-password" not in text
    no_ca = {k: v for k, v in consumer.items() if k != "ssl.ca.location"}
    refused_quickly(lambda: read_shuffle(spark, unique("t"), kafka=no_ca), "TLS failed")
    with pytest.raises(ShuffleConnectionError):
        write_shuffle(rows(spark, 10), spec_for(unique("t")), kafka=wrong)


def test_dagster_project_through_env_vars_never_shows_the_password(
    spark, users, unique, tmp_path, monkeypatch
):
    from tests.integration.test_user_project import D1, events_of, make_project

    producer, admin = users["producer"], users["admin"]
    topic = unique("user.events.secure")
    grant_shuffle_access(topic, kafka=admin, writers=["User:producer"])
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": producer["bootstrap.servers"],
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": producer["sasl.mechanism"],
        "KAFKA_SASL_USERNAME": "producer",
        "KAFKA_SASL_PASSWORD": producer["sasl.password"],
        "KAFKA_SSL_CA_LOCATION": producer["ssl.ca.location"],
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    kafka = kafka_resource(os.environ)
    assert set(KAFKA_SECURITY_ENV.values()) <= set(env)
    data, out = tmp_path / "data", tmp_path / "out"
    out.mkdir()
    (data / f"day={D1}").mkdir(parents=True)
    events_of(D1, 1).to_parquet(
        data / f"day={D1}" / "part-0.parquet",
        index=False,
        coerce_timestamps="us",
        allow_truncated_timestamps=True,
    )
    defs = make_project(topic, str(data), str(out), env["KAFKA_BOOTSTRAP_SERVERS"], kafka=kafka)
    password = env["KAFKA_SASL_PASSWORD"]
    with instance_for_test() as instance:
        for job in ("events_job", "user_clicks_job"):
            result = defs.resolve_job_def(job).execute_in_process(
                instance=instance, partition_key=D1
            )
            assert result.success
        sensor = defs.resolve_sensor_def("events_commits")
        with build_sensor_context(
            instance=instance, resources=defs.resources, definitions=defs
        ) as ctx:
            tick = sensor(ctx)
        assert [r.partition_key for r in tick.run_requests] == [D1]
        # Nothing Dagster recorded (run logs, metadata, run configs) holds the password.
        runs = instance.get_runs()
        assert len(runs) == 2
        dumped = "\n".join(str(e) for run in runs for e in instance.all_logs(run.run_id))
        assert "events_by_user" in dumped and "shuffle/run_id" in dumped
        assert password not in dumped
        for run in runs:
            assert password not in json.dumps(run.run_config, default=str)
            assert password not in str(run.tags)
        # Nor any file of the instance (its SQLite storages).
        assert files_holding(Path(instance.root_directory), {"password": password}) == []
    assert json.loads((out / f"{D1}.json").read_text())


def spark_style(conf: dict[str, str]) -> dict[str, str]:
    """A user's settings as a Spark ``format("kafka")`` job has them (``kafka.`` taken off):
    the Java client's names only, no librdkafka spelling."""
    login = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{conf["sasl.username"]}" password="{conf["sasl.password"]}";'
    )
    return {
        "bootstrap.servers": conf["bootstrap.servers"],
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": conf["sasl.mechanism"],
        "sasl.jaas.config": login,
        "ssl.truststore.location": conf["ssl.ca.location"],
        "ssl.truststore.type": "PEM",
        "ssl.endpoint.identification.algorithm": "",
        "client.id": "spark-etl",
    }


def test_spark_style_settings_write_and_read_on_both_paths(spark, kafka_conf, users, unique):
    admin, producer, consumer = (spark_style(users[u]) for u in ("admin", "producer", "consumer"))
    topic = unique("spark-names")
    grant_shuffle_access(topic, kafka=admin, writers=["User:producer"], readers=["User:consumer"])
    res = write_shuffle(rows(spark), spec_for(topic), kafka=producer, window="d1")
    assert res.rows == 3000
    records = {"subscribe": topic, **{f"kafka.{k}": v for k, v in consumer.items()}}
    on_python = read_shuffle(spark, topic, kafka=consumer, engine="python")
    assert on_python.count() == 3000
    python_records = read_records(spark, records, engine="python")
    frames = python_records.count()
    assert frames > 0
    # Built for the plaintext cluster first, as a session's catalog may be; it follows the
    # Java client's settings given next, which the JVM path uses as they are.
    jvm_read_off(spark, jvm_read_on(spark, kafka_conf))
    keys = jvm_read_on(spark, consumer)
    try:
        assert (
            spark.conf.get("spark.sql.catalog.shuffle.kafka.sasl.jaas.config")
            == (consumer["sasl.jaas.config"])
        )
        on_jvm = read_shuffle(spark, topic, kafka=consumer, engine="jvm")
        assert on_jvm.count() == 3000
        assert sorted(on_jvm.collect()) == sorted(on_python.collect())
        jvm_records = read_records(spark, records, engine="jvm")
        assert jvm_records.count() == frames
        plans = [explained(df) for df in (on_python, python_records, on_jvm, jvm_records)]
    finally:
        jvm_read_off(spark, keys)
    for user in users.values():
        assert all(user["sasl.password"] not in plan for plan in plans)
    # The reader may not write, in these names too; the error shows no password.
    text = refused_quickly(
        lambda: write_shuffle(rows(spark, 10), spec_for(topic), kafka=consumer, window="d2"),
        "not authorized",
    )
    assert users["consumer"]["sasl.password"] not in text


def test_spark_style_settings_librdkafka_cannot_use_are_refused_naming_them(spark, users, unique):
    consumer = spark_style(users["consumer"])
    password = users["consumer"]["sasl.password"]
    jks = {**consumer, "ssl.truststore.type": "JKS", "ssl.truststore.password": password}
    wrong = {**consumer, "sasl.password": "not-" + password}
    for settings, says in (
        (jks, "ssl.truststore.type=PEM"),
        (wrong, "'sasl.jaas.config' and 'sasl.password' disagree"),
    ):
        text = refused_quickly(lambda s=settings: read_shuffle(spark, unique("t"), kafka=s), says)
        assert password not in text
    with pytest.raises(ShuffleOptionError, match="ssl.truststore.location"):
        write_shuffle(rows(spark, 10), spec_for(unique("t")), kafka=jks)


UI_QUERY = """
query Everything($repo: RepositorySelector!) {
  runsOrError {
    ... on Runs { results { runId status runConfigYaml tags { key value } } }
  }
  allTopLevelResourceDetailsOrError(repositorySelector: $repo) {
    ... on ResourceDetailsList {
      results {
        name
        configuredValues { key value type }
        nestedResources { name resource { configuredValues { key value type } } }
      }
    }
  }
  assetNodes { assetKey { path } description metadataEntries { label description } }
}
"""

UI_RUN_QUERY = """
query RunLogs($runId: ID!) {
  logsForRun(runId: $runId) {
    ... on EventConnection {
      events {
        __typename
        ... on MessageEvent { message }
        ... on MaterializationEvent {
          metadataEntries {
            label
            ... on TextMetadataEntry { text }
            ... on JsonMetadataEntry { jsonString }
            ... on UrlMetadataEntry { url }
            ... on PathMetadataEntry { path }
          }
        }
      }
    }
  }
}
"""


def files_holding(root, secrets: dict[str, str]) -> list[str]:
    """``name: path`` of each file under ``root`` whose bytes hold a secret's value."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        found += [f"{name}: {path}" for name, value in secrets.items() if value.encode() in data]
    return found


@pytest.mark.timeout(600)
def test_a_dagster_run_in_step_processes_leaves_no_secret_in_storage_logs_or_ui(users, tmp_path):
    """The README's project, its Kafka resource over SASL_SSL from environment variables,
    materialized with ``dagster asset materialize`` (a process per step, compute logs
    captured) on a persistent instance, with S3 keys in the environment too: no secret's
    value is in the instance's files (SQLite storages, compute logs), the command's output,
    or what the UI's GraphQL API serves (runs, logs, resources, asset metadata)."""
    import subprocess
    import sys

    from dagster import DagsterInstance, DagsterRunStatus
    from dagster_graphql.test.utils import (
        define_out_of_process_context,
        execute_dagster_graphql,
        infer_repository_selector,
    )

    from devstack import locals3
    from tests.integration.test_readme_dagster import BLOCKS, KAFKA, as_run_here
    from tests.integration.test_user_project import D1, events_of

    # A day of events where the README's project reads them (the day in the folder's name).
    data = tmp_path / "data"
    (data / "events" / f"day={D1}").mkdir(parents=True)
    events_of(D1, 1).drop(columns="day").to_parquet(
        data / "events" / f"day={D1}" / "part-0.parquet",
        index=False,
        coerce_timestamps="us",
        allow_truncated_timestamps=True,
    )
    producer, admin = users["producer"], users["admin"]
    (block,) = [b for b in BLOCKS if "defs = Definitions(" in b.code and not b.not_run]
    code = as_run_here(block, data)
    prefix = re.search(r"topic_prefix='([^']+)'", code)[1]
    sasl = ", ".join(f"{f}=EnvVar({v!r})" for f, v in KAFKA_SECURITY_ENV.items())
    code = code.replace(f"{KAFKA[:-1]}, topic_prefix=", f"{KAFKA[:-1]}, {sasl}, topic_prefix=")
    assert "KAFKA_SASL_PASSWORD" in code
    # The Kafka resource top-level too, so that the UI's resource page shows its settings.
    code = code.replace('"spark": spark,', '"spark": spark, "kafka": kafka,')
    grant_shuffle_access(prefix, kafka=admin, writers=["User:producer"], prefixed=True)
    example = tmp_path / "secure_example.py"
    example.write_text(code)
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    s3 = locals3.env()
    secrets = {
        "KAFKA_SASL_PASSWORD": producer["sasl.password"],
        "AWS_SECRET_ACCESS_KEY": s3["AWS_SECRET_ACCESS_KEY"],
        "AWS_ACCESS_KEY_ID": s3["AWS_ACCESS_KEY_ID"],
    }
    env = {
        **os.environ,
        **s3,
        "DAGSTER_HOME": str(home),
        "PYSPARK_PYTHON": sys.executable,
        "KAFKA_BOOTSTRAP_SERVERS": producer["bootstrap.servers"],
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": producer["sasl.mechanism"],
        "KAFKA_SASL_USERNAME": "producer",
        "KAFKA_SASL_PASSWORD": producer["sasl.password"],
        "KAFKA_SSL_CA_LOCATION": producer["ssl.ca.location"],
    }
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "dagster"),
            "asset",
            "materialize",
            "-f",
            str(example),
            "--select",
            "events_by_user,user_clicks",
            "--partition",
            D1,
        ],
        capture_output=True,
        text=True,
        timeout=540,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-6000:]
    output = done.stdout + done.stderr
    assert [name for name, value in secrets.items() if value in output] == []
    # What the instance stored: runs, event logs (metadata, messages), compute logs.
    stored = [p for p in home.rglob("*") if p.is_file()]
    assert any(p.suffix == ".db" for p in stored), stored
    assert any(p.suffix in (".err", ".out") and p.stat().st_size for p in stored), stored
    assert files_holding(home, secrets) == []
    # What the UI shows, through its GraphQL API, with the project loaded by a code server
    # whose environment has the secrets (as a deployment's would).
    os_env = {k: os.environ.get(k) for k in env}
    os.environ.update({k: v for k, v in env.items() if k not in ("PYSPARK_PYTHON",)})
    try:
        with DagsterInstance.from_config(str(home)) as instance:
            (run,) = instance.get_runs()
            assert run.status == DagsterRunStatus.SUCCESS
            with define_out_of_process_context(str(example), "defs", instance) as ctx:
                answer = execute_dagster_graphql(
                    ctx, UI_QUERY, {"repo": infer_repository_selector(ctx)}
                )
                logs = execute_dagster_graphql(ctx, UI_RUN_QUERY, {"runId": run.run_id})
    finally:
        for k, v in os_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    shown = json.dumps([answer.data, logs.data])
    assert not answer.errors and not logs.errors, (answer.errors, logs.errors)
    # The UI shows the resource's settings (the password by its variable's name) and the
    # run's events, and no secret's value.
    assert "shuffle/run_id" in shown, shown[:3000]
    assert '{"key": "sasl_password", "value": "KAFKA_SASL_PASSWORD", "type": "ENV_VAR"}' in (
        shown
    ), shown[:3000]
    assert [name for name, value in secrets.items() if value in shown] == []
