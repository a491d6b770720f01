"""The local PostgreSQL instance's dagster.yaml is one Dagster accepts: kept in PostgreSQL
through psycopg2, runs queued, one run per pool (one writer per shuffle)."""

import yaml
from dagster._core.instance.config import dagster_instance_config

from devstack import localpg


def test_the_url_names_psycopg2():
    # A bare postgresql:// URL makes SQLAlchemy 2.1 pick psycopg 3 (see devstack/localpg.py).
    assert localpg.url().startswith("postgresql+psycopg2://")
    assert localpg.url("soak").endswith("/soak")


def test_dagster_accepts_the_instance_config(tmp_path, monkeypatch):
    monkeypatch.setenv("SHUFFLE_DAGSTER_PG_URL", localpg.url())
    (tmp_path / "dagster.yaml").write_text(localpg.dagster_yaml(max_concurrent_runs=3))
    config, _ = dagster_instance_config(str(tmp_path))
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert config["concurrency"]["pools"] == {"default_limit": 1, "granularity": "run"}
    assert config["concurrency"]["runs"]["max_concurrent_runs"] == 3
    raw = yaml.safe_load(localpg.dagster_yaml())
    assert raw["storage"]["postgres"]["postgres_url"] == {"env": "SHUFFLE_DAGSTER_PG_URL"}
