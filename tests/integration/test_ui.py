"""The Dagster UI, for real: the webserver on workspace.yaml and headless Chromium."""

import asyncio
import base64
import datetime as dt
import html
import json
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


class Browser:
    """Headless Chromium driven through its DevTools protocol: for the pages whose content
    shows only after a click (the Plots view of an asset's metadata is not in its URL)."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path

    def run(self, steps):
        """Runs ``steps(page)`` (a coroutine function) on a fresh page; returns its value."""
        port = free_port()
        cmd = [
            chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={self.tmp_path / 'cdp'}", "--window-size=1600,1400",
            "--hide-scrollbars", f"--remote-debugging-port={port}", "about:blank",
        ]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            return asyncio.run(self._drive(port, steps))
        finally:
            proc.terminate()
            proc.wait(30)

    async def _drive(self, port: int, steps):
        import websockets

        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=2) as r:
                    targets = json.load(r)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        target = next(t for t in targets if t["type"] == "page")
        async with websockets.connect(target["webSocketDebuggerUrl"], max_size=None) as ws:
            return await steps(Page(ws))


class Page:
    """One page of :class:`Browser`: navigate, wait for text, click by text, read, shoot."""

    def __init__(self, ws):
        self.ws = ws
        self.calls = 0

    async def call(self, method: str, **params):
        self.calls += 1
        me = self.calls
        await self.ws.send(json.dumps({"id": me, "method": method, "params": params}))
        while True:
            message = json.loads(await self.ws.recv())
            if message.get("id") == me:
                assert "error" not in message, message
                return message["result"]

    async def js(self, expression: str):
        found = await self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        return found["result"].get("value")

    async def open(self, url: str) -> None:
        await self.call("Page.navigate", url=url)

    async def text(self) -> str:
        return await self.js("document.body ? document.body.innerText : ''") or ""

    async def wait_for(self, *texts: str, seconds: float = 90) -> str:
        """The page's text once it holds every one of ``texts`` (or as it is at the end)."""
        deadline = time.monotonic() + seconds
        while True:
            text = await self.text()
            if all(t in text for t in texts) or time.monotonic() > deadline:
                return text
            await asyncio.sleep(1)

    async def click(self, label: str) -> bool:
        """Clicks the last button (or button-like element) whose text is ``label``."""
        return await self.js(
            "(() => { const found = Array.from(document.querySelectorAll("
            "'button, [role=button]')).filter(b => b.innerText.trim() === "
            + json.dumps(label)
            + "); if (!found.length) return false; found[found.length - 1].click();"
            " return true; })()"
        )

    async def click_text(self, text: str) -> bool:
        """Clicks the innermost element whose text is ``text`` (a link, a list item)."""
        return await self.js(
            "(() => { const e = Array.from(document.querySelectorAll('*')).find("
            "e => e.childElementCount === 0 && e.innerText && e.innerText.trim() === "
            + json.dumps(text)
            + "); if (!e) return false; e.click(); return true; })()"
        )

    async def shoot(self, path: Path, near: str | None = None) -> None:
        """A PNG of the page, scrolled to the element whose text is ``near`` first."""
        if near is not None:
            await self.js(
                "(() => { const e = Array.from(document.querySelectorAll('*')).find("
                "e => e.childElementCount === 0 && e.innerText && e.innerText.trim() === "
                + json.dumps(near)
                + "); if (e) e.scrollIntoView({block: 'start'}); })()"
            )
            await asyncio.sleep(1)
        shot = await self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))


async def plots_of(page: Page, url: str, series: list[str]) -> str:
    """The text of an asset's Overview once its metadata shows as plots over time (Plots,
    then Events: for a partitioned asset the plots are by partition first)."""
    await page.open(url)
    await page.wait_for("Metadata", "Table")
    assert await page.click("Plots"), f"no Plots toggle on {url}"
    await page.wait_for("Events", seconds=20)
    await page.click("Events")
    return await page.wait_for(*series, seconds=60)


# What a user must find, by name, on the pages of the shuffle and of a consumer.
SHUFFLE_SERIES = [
    "shuffle/watermark_epoch_s",
    "shuffle/shuffle_watermark_epoch_s",
    "shuffle/event_time_max_epoch_s",
    "shuffle/commit_delay_s",
]
CONSUMER_SERIES = ["shuffle/lag_windows", "shuffle/lag_s"]
# Where the screenshots are kept; SHUFFLE_DOCS_SCREENSHOTS=1 writes them into the docs too.
SHOTS = ROOT / ".local" / "ui"
DOCS_SHOTS = ROOT / "docs" / "guides" / "watching"


def test_a_week_and_a_stalled_day_show_as_plots_and_a_failed_check(
    dagster_home, webserver, bootstrap, spark, tmp_path, monkeypatch
):
    """The reference pipeline on a week, then a day with no commit, on the webserver's
    instance: the shuffle's page plots its watermark series, a consumer's page its lag
    series, and the shuffle's checks show shuffle_watermark_progress failed."""
    from dagster import DagsterInstance, build_sensor_context

    from assets.pipeline import flights_pipeline
    from assets.warehouse import WarehouseResource
    from devstack.runner import LocalRunner
    from jobs.definitions import build_defs
    from jobs.pipeline import COMMIT_SENSOR, PRODUCER_JOB, PROGRESS_SENSOR, REGION_SENSOR
    from orchestration import KafkaResource, shuffle_progress_sensor

    topic = f"ui.watch.flights-{uuid.uuid4().hex[:8]}"
    defs = build_defs(
        topic=topic,
        num_partitions=2,
        max_parallelism=16,
        resources={
            "kafka": KafkaResource(bootstrap_servers=bootstrap),
            "warehouse": WarehouseResource(path=str(tmp_path / "warehouse")),
        },
    )
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    with DagsterInstance.get() as instance:
        runner = LocalRunner(defs, instance)
        assert runner.run(PRODUCER_JOB, partition_range=("2013-01-01", "2013-01-07")).success
        runner.settle(COMMIT_SENSOR, REGION_SENSOR)
        assert all(o.success for o in runner.outcomes)

        def report(sensor) -> list:
            with build_sensor_context(
                instance=instance, resources=defs.resources, definitions=defs
            ) as ctx:
                events = list(sensor(ctx).asset_events)
            for event in events:
                instance.report_runless_asset_event(event)
            return events

        # The progress sensor's tick: the watermark asset is materialized, the check passes.
        ticked = report(defs.resolve_sensor_def(PROGRESS_SENSOR))
        assert sorted(type(e).__name__ for e in ticked) == [
            "AssetCheckEvaluation",
            "AssetMaterialization",
        ]
        assert all(e.passed for e in ticked if hasattr(e, "passed"))
        # Then no commit for longer than the shuffle allows: a day here is a second (the
        # pipeline's own limit is a day and a quarter), and the next tick fails the check.
        pipeline = flights_pipeline(topic, num_partitions=2, max_parallelism=16)
        stalled = shuffle_progress_sensor(
            "stalled", asset=pipeline.shuffle, stall_after=dt.timedelta(seconds=1)
        )
        time.sleep(2.5)
        (failed,) = report(stalled)
        assert not failed.passed

    SHOTS.mkdir(parents=True, exist_ok=True)
    found: dict[str, str] = {}

    async def look(page: Page) -> None:
        found["shuffle"] = await plots_of(
            page, f"{webserver}/assets/flights_by_tailnum", SHUFFLE_SERIES
        )
        await page.shoot(SHOTS / "shuffle-plots.png", near="Plots")
        found["consumer"] = await plots_of(
            page, f"{webserver}/assets/aircraft_daily_utilization", CONSUMER_SERIES
        )
        await page.shoot(SHOTS / "consumer-plots.png", near="Plots")
        await page.open(f"{webserver}/assets/flights_by_tailnum?view=checks")
        await page.wait_for("shuffle_watermark_progress", "Failed")
        assert await page.click_text("shuffle_watermark_progress")
        found["checks"] = await page.wait_for("stalled", "Failed")
        await page.shoot(SHOTS / "shuffle-checks.png")

    Browser(tmp_path).run(look)
    for name, series in (("shuffle", SHUFFLE_SERIES), ("consumer", CONSUMER_SERIES)):
        missing = [s for s in series if s not in found[name]]
        assert missing == [], f"not plotted on the {name}'s page: {missing}\n{found[name][:3000]}"
    checks = found["checks"]
    # The check's page: failed, and why (its description says the watermark stalled).
    assert "shuffle_watermark_progress" in checks and "Failed" in checks, checks[:3000]
    assert "stalled: past the 1 s allowed" in checks, checks[:3000]
    for shot in ("shuffle-plots.png", "consumer-plots.png", "shuffle-checks.png"):
        assert (SHOTS / shot).stat().st_size > 10_000, shot
    if os.environ.get("SHUFFLE_DOCS_SCREENSHOTS") == "1":
        DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
        for shot in ("shuffle-plots.png", "consumer-plots.png", "shuffle-checks.png"):
            shutil.copyfile(SHOTS / shot, DOCS_SHOTS / shot)
