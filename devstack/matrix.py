"""The test matrix: a smoke subset of the tests on every PySpark and Dagster minor the package
declares, each in a fresh virtualenv.

The combinations come from ``pyproject.toml`` alone: every minor of ``pyspark`` and of
``dagster`` that the declared ranges admit, crossed. Each combination gets a new virtualenv
under ``.local/matrix/`` holding the package's declared dependencies with that PySpark and
that Dagster (the newest patch of each minor), pytest and nothing of the development set,
and runs :data:`SMOKE` there against the local broker (or ``KAFKA_BOOTSTRAP_SERVERS``): the
unit tests, a write and a read on both read paths (the JVM jar loading on that Spark), a
stream, and a ``materialize`` of a user's shuffle asset and its consumer.

Usage::

    python -m devstack.matrix                 # every combination
    python -m devstack.matrix --oldest        # the oldest PySpark with the oldest Dagster
    python -m devstack.matrix --list          # the combinations, one per line
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".local" / "matrix"
# The minors a declared range is searched for: from the first release line that had what
# the engine needs (4.0: the Python data source API; 1.0: Dagster's asset API) on.
CANDIDATES = {
    "pyspark": [f"4.{m}" for m in range(0, 10)],
    "dagster": [f"1.{m}" for m in range(0, 30)],
}
SMOKE = [
    "tests/unit",
    "tests/integration/test_shuffle.py::test_round_trip_columns_types_and_partitions",
    "tests/integration/test_jvm_read.py::test_keyed_operations_plan_no_exchange",
    "tests/integration/test_streaming.py::test_max_runs_per_trigger_gives_one_run_per_batch",
    "tests/integration/test_user_project.py::test_user_project_end_to_end",
]
TEST_TOOLS = ["pytest>=8", "pytest-timeout>=2.3"]


@dataclass(frozen=True)
class Combination:
    pyspark: str
    dagster: str

    @property
    def name(self) -> str:
        return f"pyspark-{self.pyspark}-dagster-{self.dagster}"


def declared() -> list[Requirement]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return [Requirement(r) for r in tomllib.load(f)["project"]["dependencies"]]


def minors(requirement: Requirement) -> list[str]:
    """The minors of ``requirement``'s package that its version range admits (``X.Y.0``)."""
    found = [
        m
        for m in CANDIDATES[requirement.name]
        if requirement.specifier.contains(Version(f"{m}.0"), prereleases=False)
    ]
    if not found:
        raise SystemExit(f"{requirement} admits none of {CANDIDATES[requirement.name]}")
    return found


def combinations() -> list[Combination]:
    by_name = {r.name: r for r in declared()}
    return [
        Combination(p, d) for p in minors(by_name["pyspark"]) for d in minors(by_name["dagster"])
    ]


def _run(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    if done.returncode != 0:
        tail = log.read_text().splitlines()[-40:]
        raise SystemExit(f"failed ({done.returncode}): {' '.join(cmd)}\n" + "\n".join(tail))


def install(combo: Combination, venv: Path, log: Path) -> None:
    """A fresh virtualenv with the declared dependencies, this combination's two pinned."""
    shutil.rmtree(venv, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(venv)], log)
    pins = {"pyspark": f"pyspark=={combo.pyspark}.*", "dagster": f"dagster=={combo.dagster}.*"}
    wanted = [pins.get(r.name, str(r)) for r in declared()]
    python = str(venv / "bin" / "python")
    _run([python, "-m", "pip", "install", "-q", *wanted, *TEST_TOOLS], log)


def smoke(combo: Combination, venv: Path, log: Path, extra: list[str]) -> None:
    env = dict(os.environ)
    # As an activated virtualenv: Spark's Python workers run this interpreter too. The
    # library and the tests' helpers come from the checkout.
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYSPARK_PYTHON"] = str(venv / "bin" / "python")
    env["PYTHONPATH"] = str(ROOT)
    env["DAGSTER_HOME"] = str(venv.parent / f"{combo.name}-dagster")
    Path(env["DAGSTER_HOME"]).mkdir(parents=True, exist_ok=True)
    cmd = [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    _run([*cmd, *SMOKE, *extra], log, env)


def versions(venv: Path) -> str:
    out = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import pyspark, dagster; print(pyspark.__version__, dagster.__version__)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    spark, dag = out.stdout.split()
    return f"PySpark {spark}, Dagster {dag}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--oldest", action="store_true", help="only the oldest combination")
    parser.add_argument("--list", action="store_true", help="print the combinations and stop")
    parser.add_argument("pytest_args", nargs="*", help="more arguments for pytest")
    args = parser.parse_args(argv)
    combos = combinations()
    if args.list:
        print("\n".join(c.name for c in combos))
        return 0
    if args.oldest:
        combos = combos[:1]
    WORK.mkdir(parents=True, exist_ok=True)
    results = []
    for combo in combos:
        venv, log = WORK / combo.name, WORK / f"{combo.name}.log"
        log.write_text("")
        start = time.monotonic()
        print(f"{combo.name}: installing", file=sys.stderr, flush=True)
        install(combo, venv, log)
        installed = time.monotonic()
        print(
            f"{combo.name}: {versions(venv)}; running the smoke tests", file=sys.stderr, flush=True
        )
        smoke(combo, venv, log, args.pytest_args)
        done = time.monotonic()
        results.append(
            f"{combo.name}: {versions(venv)}: passed "
            f"(install {installed - start:.0f} s, tests {done - installed:.0f} s; log {log})"
        )
        print(results[-1], file=sys.stderr, flush=True)
    print("\n".join(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
