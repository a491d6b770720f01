"""The README's Dagster sections run as written.

Every Python block under a ``##`` heading that names Dagster is run here, unless an HTML
comment ``<!-- not run: why -->`` stands right before it; a block this test has no way to
run fails it, so a new example is either run or says why not. Two changes are made to a
block, both to keep a run to itself: its data folder ``/data/`` becomes a temporary folder
holding a day of events, and its ``KafkaResource`` gets a ``topic_prefix`` of the run's own
(the example's topics would otherwise be shared by every run against one broker).

- A block that defines ``defs = Definitions(...)`` is saved as a file and materialized with
  ``dagster asset materialize`` on a persistent instance (``DAGSTER_HOME``), so each step
  runs in a process of its own on Dagster's default multiprocess executor, as in a
  deployment.
- A component's asset function (a block headed ``# src/.../source.py``) is called with a
  context of one partition, in this process, and must return that day's rows.
"""

import os
import random
import re
import subprocess
import sys
import types
import uuid
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from dagster import AssetKey, DagsterEventType, DagsterInstance, DagsterRunStatus

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->\s*$", re.S)


@dataclass(frozen=True)
class Block:
    heading: str
    line: int
    code: str
    not_run: str | None

    @property
    def id(self) -> str:
        return f"{self.heading[:40]}@{self.line}"


def dagster_blocks(text: str) -> list[Block]:
    """The Python blocks under the ``##`` headings that name Dagster (their ``###`` parts
    included), each with the reason of a ``not run`` comment right before it."""
    blocks = []
    heading = None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            heading = line[3:] if "Dagster" in line else None
        elif heading and line.strip() == "```python":
            end = lines.index("```", i + 1)
            before = "\n".join(lines[max(0, i - 3) : i]).rstrip()
            marker = NOT_RUN.search(before)
            blocks.append(
                Block(heading, i + 1, "\n".join(lines[i + 1 : end]) + "\n", marker and marker[1])
            )
            i = end
        elif line.startswith("```"):
            # Another language's block: skip it whole, its lines may start with '## '.
            i = lines.index("```", i + 1)
        i += 1
    return blocks


BLOCKS = dagster_blocks((ROOT / "README.md").read_text())


def test_the_dagster_sections_have_python_blocks():
    # The README's project; the docs' Dagster guide has the rest (tests/unit/test_docs.py
    # loads its full project, tests/integration/test_docs_examples.py runs its component's
    # asset function with run_asset_function below).
    assert len([b for b in BLOCKS if b.not_run is None]) >= 1, BLOCKS


@pytest.fixture
def events(tmp_path):
    """A day of events in ``<tmp>/data/events/day=<day>/`` (Hive-style: the day is in the
    folder's name, not in the file), drawn at random."""
    day = (date(2024, 3, 1) + timedelta(days=random.randrange(900))).isoformat()
    rng = np.random.default_rng(7)
    n = 300
    frame = pd.DataFrame(
        {
            "user_id": [f"user-{i}" for i in rng.integers(0, 25, n)],
            "ts": pd.Timestamp(day, tz="UTC") + pd.to_timedelta(rng.integers(0, 86_400, n), "s"),
            "clicks": rng.integers(0, 5, n).astype("int64"),
        }
    )
    folder = tmp_path / "data" / "events" / f"day={day}"
    folder.mkdir(parents=True)
    frame.to_parquet(
        folder / "part-0.parquet",
        index=False,
        coerce_timestamps="us",
        allow_truncated_timestamps=True,
    )
    return types.SimpleNamespace(day=day, frame=frame, data=tmp_path / "data", root=tmp_path)


KAFKA = 'KafkaResource(bootstrap_servers=EnvVar("KAFKA_BOOTSTRAP_SERVERS"))'


def as_run_here(block: Block, data: Path) -> str:
    code = block.code.replace('"/data/', f'"{data}/').replace("f'/data/", f"f'{data}/")
    prefix = f"readme-{uuid.uuid4().hex[:10]}."
    return code.replace(KAFKA, f"{KAFKA[:-1]}, topic_prefix={prefix!r})")


def _marked(block: Block):
    """A project block materialized by ``dagster asset materialize`` (a process per step)
    is end to end through separate processes: the slow suite's."""
    project = re.search(r"^defs = Definitions\(", block.code, re.M)
    return pytest.param(block, marks=pytest.mark.slow) if project else block


@pytest.mark.timeout(600)
@pytest.mark.parametrize("block", [_marked(b) for b in BLOCKS], ids=[b.id for b in BLOCKS])
def test_readme_dagster_block_runs_as_written(block, events, bootstrap, monkeypatch, request):
    if block.not_run:
        pytest.skip(f"README says: {block.not_run}")
    code = as_run_here(block, events.data)
    assert "/data/" not in code.replace(str(events.data), ""), "a /data/ path was left"
    if re.search(r"^defs = Definitions\(", code, re.M):
        assert "topic_prefix=" in code, f"the block's Kafka resource is not {KAFKA}"
        run_definitions(code, events, bootstrap)
    elif re.match(r"# src/\S+/source\.py\n", code):
        request.getfixturevalue("spark")
        run_asset_function(code, events)
    else:
        pytest.fail(
            f"README.md line {block.line}: no way to run this block; run it here, or put "
            "'<!-- not run: <why> -->' right before it"
        )


def run_definitions(code: str, events, bootstrap: str) -> None:
    example = events.root / "readme_example.py"
    example.write_text(code)
    home = events.root / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "PYSPARK_PYTHON": sys.executable,
    }
    assets = re.findall(r"^def (\w+)\(context", code, re.M)
    assert assets == ["events_by_user", "user_clicks"], assets
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "dagster"),
            "asset",
            "materialize",
            "-f",
            str(example),
            "--select",
            ",".join(assets),
            "--partition",
            events.day,
        ],
        capture_output=True,
        text=True,
        timeout=540,
        env=env,
        cwd=events.root,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-6000:]

    with DagsterInstance.from_config(str(home)) as instance:
        (run,) = instance.get_runs()
        assert run.status == DagsterRunStatus.SUCCESS
        logs = instance.all_logs(run.run_id)
        kinds = [e.dagster_event.event_type for e in logs if e.dagster_event is not None]
        # The default executor started a process per step.
        assert kinds.count(DagsterEventType.STEP_WORKER_STARTED) >= 2
        for name in assets:
            record = instance.get_latest_materialization_event(AssetKey(name))
            assert record is not None, name
            assert record.asset_materialization.partition == events.day
        shuffle = instance.get_latest_materialization_event(AssetKey("events_by_user"))
        assert shuffle.asset_materialization.metadata["rows"].value == len(events.frame)
        checks = [
            e.dagster_event.event_specific_data
            for e in logs
            if e.dagster_event is not None
            and e.dagster_event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION
        ]
        assert checks and all(c.passed for c in checks), checks

    # The consumer's output: per user, the day's events and clicks.
    out = pd.read_parquet(events.data / "user_clicks" / f"day={events.day}")
    expected = events.frame.groupby("user_id").agg(events=("ts", "size"), clicks=("clicks", "sum"))
    got = out.set_index("user_id").sort_index()
    assert (got["day"] == events.day).all()
    assert got[["events", "clicks"]].to_dict() == expected.sort_index().to_dict()


def run_asset_function(code: str, events) -> None:
    namespace: dict = {}
    exec(compile(code, "README.md (source.py)", "exec"), namespace)
    functions = [v for k, v in namespace.items() if callable(v) and k == "events_by_user"]
    assert functions, "the block defines no events_by_user"
    context = types.SimpleNamespace(partition_keys=[events.day], partition_key=events.day)
    df = functions[0](context)
    rows = df.toPandas()
    assert len(rows) == len(events.frame)
    assert {str(d) for d in rows["day"]} == {events.day}
