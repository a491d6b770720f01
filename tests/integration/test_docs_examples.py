"""The README's and the docs site's blocks marked ``<!-- run: spark -->`` run as written, on
the test session and broker (tests/unit/test_docs.py finds them and runs the rest).

Each block runs with three changes that keep a run to itself: the local broker's address
``127.0.0.1:19092`` becomes the test broker's, the topic ``flights.by_tailnum`` one of this
run's own, and the absolute folders ``/tables/``, ``/chk/`` and ``/data/`` folders under
``tmp_path``. The blocks run in the order of the pages (README.md first) in one namespace,
so a page's stream reads the shuffle the README's example wrote.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.integration.test_readme_dagster import events, run_asset_function  # noqa: F401
from tests.unit.test_docs import Block, spark_blocks

pytestmark = pytest.mark.integration

BLOCKS = spark_blocks()
COMPONENT = re.compile(r"# src/\S+/source\.py\n")


def as_run_here(block: Block, bootstrap: str, topic: str, tmp) -> str:
    code = block.code.replace("127.0.0.1:19092", bootstrap)
    code = code.replace('"flights.by_tailnum"', repr(topic))
    for folder in ("/tables/", "/chk/", "/data/"):
        code = code.replace(f'"{folder}', f'"{tmp}{folder}')
    return code


def test_there_are_blocks_to_run():
    assert any(not COMPONENT.match(b.code) for b in BLOCKS), BLOCKS
    assert any(COMPONENT.match(b.code) for b in BLOCKS), BLOCKS


@pytest.mark.timeout(240)
def test_engine_blocks_run_as_written(spark, bootstrap, unique, tmp_path):
    topic = unique("docs.flights")
    namespace: dict = {"__name__": "__main__"}
    for block in BLOCKS:
        if COMPONENT.match(block.code):
            continue
        code = as_run_here(block, bootstrap, topic, tmp_path)
        started = time.monotonic()
        exec(compile(code, block.id, "exec"), namespace)
        print(f"{block.id}: {time.monotonic() - started:.1f} s")
    # The streaming guide's sink holds the README's window: two aircraft, counted.
    counts = spark.read.parquet(str(tmp_path / "tables" / "per_window")).collect()
    assert sorted((r["tailnum"], r["count"]) for r in counts) == [("N14228", 2), ("N24211", 1)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if COMPONENT.match(b.code)], ids=lambda b: b.id
)
def test_component_asset_functions_return_the_days_rows(block, events, spark):  # noqa: F811
    # `events` writes a day of events under <tmp>/data/events (test_readme_dagster.py).
    code = block.code.replace('"/data/', f'"{events.data}/')
    run_asset_function(code, events)
