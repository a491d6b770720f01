"""The Dagster UI, for real: the webserver on workspace.yaml and headless Chromium."""

import html
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# What each code location of workspace.yaml shows on its group's page: the producer team's
# assets, and the consumer team's with the shuffle they declare (an asset of the other).
ASSETS = {
    "flights_producer": ["flights", "flights_by_tailnum", "flights_missing_tailnum"],
    "flights_consumers": [
        "flights_by_tailnum",
        "aircraft_daily_utilization",
        "aircraft_delay_streaks",
        "carrier_hourly_otp",
    ],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("headless Chromium is required for the UI test (Debian package 'chromium')")


@pytest.fixture(scope="module")
def dagster_home(tmp_path_factory) -> Path:
    """The webserver's DAGSTER_HOME: runs executed with an instance of it show in the UI."""
    home = tmp_path_factory.mktemp("dagster_home")
    # No "join the community" dialog over the pages (nor telemetry from a test).
    (home / "dagster.yaml").write_text("nux:\n  enabled: false\ntelemetry:\n  enabled: false\n")
    return home


@pytest.fixture(scope="module")
def webserver(dagster_home):
    home = dagster_home
    port = free_port()
    log = open(home / "webserver.log", "w")  # noqa: SIM115 - closed in teardown
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("dagster-webserver")), "-w", "workspace.yaml",
         "-h", "127.0.0.1", "-p", str(port)],
        cwd=ROOT, env={**os.environ, "DAGSTER_HOME": str(home)}, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            with urllib.request.urlopen(f"{url}/server_info", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            log.close()
            pytest.fail(
                f"dagster-webserver did not start: {(home / 'webserver.log').read_text()[-3000:]}"
            )
        time.sleep(1)
    yield url
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def render(url: str, tmp_path: Path, budget_ms: int = 30000, screenshot: Path | None = None) -> str:
    """The page's DOM once its scripts ran; with ``screenshot``, a PNG of it instead."""
    output = [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    cmd = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={tmp_path / 'chrome'}", "--window-size=1600,1400",
        "--hide-scrollbars", f"--virtual-time-budget={budget_ms}", *output, url,
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def page_text(dom: str) -> str:
    """The text a reader sees: the DOM without scripts, styles and tags, one space apart."""
    dom = re.sub(r"(?s)<(script|style)\b.*?</\1>", " ", dom)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", dom)).split())


def test_asset_graph_shows_every_asset(webserver, tmp_path):
    from assets.pipeline import PIPELINE_GROUP

    # The code locations load in the background; give each page a few tries.
    deadline = time.monotonic() + 120
    for location, assets in ASSETS.items():
        page = f"{webserver}/locations/{location}/asset-groups/{PIPELINE_GROUP}"
        missing = assets
        while missing and time.monotonic() < deadline:
            dom = render(page, tmp_path)
            missing = [a for a in assets if f">{a}<" not in dom]
        assert missing == [], f"not on the asset graph page {page}: {missing}"
    # The global lineage page lists the pipeline's group.
    assert PIPELINE_GROUP in render(f"{webserver}/asset-groups", tmp_path)


def test_asset_page_shows_the_row_count_and_columns_of_a_shuffle(
    dagster_home, webserver, bootstrap, spark, tmp_path, monkeypatch
):
    """A day of the reference pipeline's producer, run on the webserver's instance: the
    shuffle asset's page shows the materialization's row count and the layout's columns."""
    from dagster import DagsterInstance

    from assets.pipeline import FLIGHTS_BY_TAILNUM
    from assets.warehouse import WarehouseResource
    from jobs.definitions import build_defs
    from jobs.pipeline import PRODUCER_JOB
    from orchestration import KafkaResource

    defs = build_defs(
        topic=f"ui.flights.by_tailnum-{uuid.uuid4().hex[:8]}",
        num_partitions=2,
        max_parallelism=16,
        resources={
            "kafka": KafkaResource(bootstrap_servers=bootstrap),
            "warehouse": WarehouseResource(path=str(tmp_path / "warehouse")),
        },
    )
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    with DagsterInstance.get() as instance:
        result = defs.resolve_job_def(PRODUCER_JOB).execute_in_process(
            instance=instance, partition_key="2013-01-01"
        )
    assert result.success
    (mat,) = [
        m
        for m in result.asset_materializations_for_node(FLIGHTS_BY_TAILNUM.path[-1])
        if m.asset_key == FLIGHTS_BY_TAILNUM
    ]
    rows = mat.metadata["dagster/row_count"].value
    columns = [(c.name, c.type) for c in mat.metadata["dagster/column_schema"].value.columns]
    assert rows > 100 and len(columns) > 5

    page = f"{webserver}/assets/{FLIGHTS_BY_TAILNUM.to_user_string()}"
    # The row count as the UI writes numbers, and each column with its type next to it.
    wanted = [f"Row count {rows:,}", *(f"{name} {kind}" for name, kind in columns)]
    deadline = time.monotonic() + 120
    missing = wanted
    while missing and time.monotonic() < deadline:
        text = page_text(render(page, tmp_path))
        missing = [w for w in wanted if w not in text]
    assert missing == [], f"not on {page}: {missing}\n{text[:3000]}"

    shot = ROOT / ".local" / "ui" / "flights_by_tailnum.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    shot.unlink(missing_ok=True)
    render(page, tmp_path, screenshot=shot)
    assert shot.stat().st_size > 10_000
    print(f"screenshot of {page}: {shot}")
