"""The main job: runs the project's pipeline on the configured stack through Dagster.

Run it with ``scripts/dev main``; it uses (and keeps) a Dagster instance under
``$DAGSTER_HOME`` (default ``.local/dagster``), so the runs show up in ``scripts/dev ui``.
"""

import os
import sys
from pathlib import Path

from dagster import DagsterInstance, materialize

ROOT = Path(__file__).resolve().parents[1]


def instance() -> DagsterInstance:
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(ROOT / ".local" / "dagster")))
    home.mkdir(parents=True, exist_ok=True)
    return DagsterInstance.get()


def main(argv: list[str] | None = None) -> int:
    from assets.stack_check import kafka_stack_check
    from orchestration.definitions import defs

    result = materialize(
        [kafka_stack_check], instance=instance(), resources=defs.resources, raise_on_error=False
    )
    if not result.success:
        print("the stack check failed; see the run's logs in the Dagster UI", file=sys.stderr)
        return 1
    md = result.asset_materializations_for_node("kafka_stack_check")[0].metadata
    print(
        f"stack check: {md['produced'].value} records written and {md['read_back'].value} read "
        f"back through topic {md['topic'].value}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
