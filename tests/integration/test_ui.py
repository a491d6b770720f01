"""The Dagster UI, for real: the webserver on workspace.yaml and headless Chromium."""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ASSETS = [
    "flights",
    "flights_by_tailnum",
    "flights_missing_tailnum",
    "aircraft_daily_utilization",
    "aircraft_delay_streaks",
    "carrier_hourly_otp",
]


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
def webserver(tmp_path_factory):
    home = tmp_path_factory.mktemp("dagster_home")
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


def render(url: str, tmp_path: Path, budget_ms: int = 30000) -> str:
    cmd = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={tmp_path / 'chrome'}", "--window-size=1600,1000",
        f"--virtual-time-budget={budget_ms}", "--dump-dom", url,
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_asset_graph_shows_every_asset(webserver, tmp_path):
    from assets.pipeline import PIPELINE_GROUP

    page = f"{webserver}/locations/kafka_shuffle/asset-groups/{PIPELINE_GROUP}"
    # The code location loads in the background; give the page a few tries.
    deadline = time.monotonic() + 120
    missing = ASSETS
    while missing and time.monotonic() < deadline:
        dom = render(page, tmp_path)
        missing = [a for a in ASSETS if f">{a}<" not in dom]
    assert missing == [], f"not on the asset graph page {page}: {missing}"
    # The global lineage page lists the pipeline's group.
    assert PIPELINE_GROUP in render(f"{webserver}/asset-groups", tmp_path)
