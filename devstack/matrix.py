"""The test matrix: a smoke subset of the tests on every PySpark and Dagster minor the package
declares, each in a fresh virtualenv, with the wheel a clean clone builds.

The combinations come from ``pyproject.toml`` alone: every minor of ``pyspark`` and of
``dagster`` that the declared ranges admit, crossed. A wheel is built once from a clean clone
of the committed tree (its build compiles the JVM read path with Maven, as a user's does).
Each combination gets a new virtualenv under ``.local/matrix/`` holding that wheel with that
PySpark (and its Spark Connect extra) and that Dagster (the newest patch of each minor),
pytest and nothing of the development set, and runs :data:`SMOKE` there, then
:data:`CONNECT_SMOKE` on a Spark Connect session, against the local broker (or
``KAFKA_BOOTSTRAP_SERVERS``). The tests run from a folder that mirrors the checkout but for
the library, so ``orchestration`` is the installed wheel's (checked before they run).

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
IT = "tests/integration/"
SMOKE = [
    "tests/unit",
    # Keyed writes from rows and from a Parquet scan, read back on both read paths.
    IT + "test_shuffle.py::test_round_trip_columns_types_and_partitions",
    IT + "test_columnar_write.py::test_same_rows_key_groups_and_partitions_as_the_row_path",
    # The JVM jar loads on this Spark: grouping by the key plans no Exchange.
    IT + "test_jvm_read.py::test_keyed_operations_plan_no_exchange",
    # apply_per_key and aggregate_shuffle group as Spark's own operators do.
    IT + "test_grouping_as_spark.py::test_per_key_work_groups_as_apply_in_pandas",
    IT + "test_grouping_as_spark.py::test_per_key_function_forms_as_apply_in_pandas",
    IT + "test_grouping_as_spark.py::test_aggregation_groups_as_group_by",
    # kafka-records, batch on both paths and streaming.
    IT + "test_records.py::test_columns_and_types_are_sparks",
    IT + "test_records.py::test_stream_metrics_and_group_offsets_behind",
    # Queue mode (share groups).
    IT + "test_queue.py::test_more_consumers_than_partitions_all_get_work",
    # Streaming: limited micro-batches, or on a line without admission control the refusal
    # by version and every committed row without a limit.
    IT + "test_streaming.py::test_max_runs_per_trigger_gives_one_run_per_batch",
    IT + "test_streaming.py::test_restart_from_checkpoint_reads_every_run_once",
    # The Dagster integration: a user's shuffle asset and its consumer, materialized.
    IT + "test_user_project.py::test_user_project_end_to_end",
]
# On a Spark Connect session (a local one the tests start): writes, reads, per-key work.
CONNECT_SMOKE = [
    IT + "test_connect.py::test_write_read_plan_and_aggregate",
    IT + "test_connect.py::test_apply_per_key_every_mode_and_the_key_guard",
    IT + "test_connect.py::test_stream_available_now_into_a_memory_table",
]
TEST_TOOLS = ["pytest>=8", "pytest-timeout>=2.3", "pytest-xdist>=3.6"]
# Not mirrored into the folder the tests run from: the library (the wheel's is used), and
# what is the checkout's own.
NOT_MIRRORED = {"orchestration", ".git", ".venv", "site", "dist", "build"}


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


def _run(cmd: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path = ROOT) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    if done.returncode != 0:
        tail = log.read_text().splitlines()[-40:]
        raise SystemExit(f"failed ({done.returncode}): {' '.join(cmd)}\n" + "\n".join(tail))


def build_wheel(log: Path) -> Path:
    """The wheel of a clean clone of the committed tree (what ``pip install`` of the
    repository builds, the JVM read path's jars included), built once per matrix run."""
    clone, dist = WORK / "clone", WORK / "dist"
    shutil.rmtree(clone, ignore_errors=True)
    shutil.rmtree(dist, ignore_errors=True)
    _run(["git", "clone", "-q", "--no-local", str(ROOT), str(clone)], log)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KAFKA_SHUFFLE_SKIP_JVM")}
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(clone)],
         log, env)  # fmt: skip
    (wheel,) = dist.glob("kafka_shuffle-*.whl")
    return wheel


def mirror() -> Path:
    """A folder of links to the checkout's top level but for the library, where the tests
    run: they import the installed wheel's ``orchestration``, the checkout's tests and
    development tools (``pythonpath`` of its pyproject.toml is that folder)."""
    stage = WORK / "checkout-without-library"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    for entry in ROOT.iterdir():
        # An editable install's metadata would stand for the wheel's (and its entry points).
        if entry.name not in NOT_MIRRORED and not entry.name.endswith(".egg-info"):
            (stage / entry.name).symlink_to(entry)
    return stage


def install(combo: Combination, venv: Path, log: Path, wheel: Path) -> None:
    """A fresh virtualenv with the wheel, its declared dependencies and the extras of the
    consumers without Spark (Polars, DuckDB: the docs' examples use them), this combination's
    PySpark (with its Spark Connect extra) and Dagster pinned."""
    shutil.rmtree(venv, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(venv)], log)
    pins = [f"pyspark[connect]=={combo.pyspark}.*", f"dagster=={combo.dagster}.*"]
    python = str(venv / "bin" / "python")
    # Neither from the checkout nor with it on the path: its kafka_shuffle.egg-info (an
    # editable install's) would pass for the package installed already.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    wanted = [f"{wheel}[polars,duckdb]", *pins, *TEST_TOOLS]
    _run([python, "-m", "pip", "install", "-q", *wanted], log, env, cwd=WORK)


def smoke(combo: Combination, venv: Path, log: Path, extra: list[str], stage: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # As an activated virtualenv: Spark's Python workers run this interpreter too.
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYSPARK_PYTHON"] = str(venv / "bin" / "python")
    # The tests' helpers and the development tools come from the mirror (its own folder
    # first on the path, as pytest's pythonpath puts it); the library from the wheel.
    env["PYTHONPATH"] = str(stage)
    env["DAGSTER_HOME"] = str(venv.parent / f"{combo.name}-dagster")
    Path(env["DAGSTER_HOME"]).mkdir(parents=True, exist_ok=True)
    python = str(venv / "bin" / "python")
    where = subprocess.run(
        [python, "-c", "import orchestration; print(orchestration.__file__)"],
        capture_output=True, text=True, env=env, cwd=stage, check=True,
    ).stdout.strip()  # fmt: skip
    if not where.startswith(str(venv)):
        raise SystemExit(f"{combo.name}: orchestration comes from {where}, not the wheel")
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(stage)]
    # On two workers, as `scripts/dev test` runs the default suite.
    _run([*cmd, "-n", "2", "--dist", "loadfile", *SMOKE, *extra], log, env, cwd=stage)
    _run([*cmd, "-m", "connect", *CONNECT_SMOKE, *extra], log,
         {**env, "SHUFFLE_TEST_CONNECT": "1"}, cwd=stage)  # fmt: skip


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
    parser.add_argument(
        "--only", default="", help="comma-separated combinations (names as --list prints them)"
    )
    parser.add_argument("pytest_args", nargs="*", help="more arguments for pytest")
    args = parser.parse_args(argv)
    combos = combinations()
    if args.list:
        print("\n".join(c.name for c in combos))
        return 0
    if args.oldest:
        combos = combos[:1]
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {c.name for c in combos}
        if unknown:
            raise SystemExit(f"--only: no combination {sorted(unknown)}; see --list")
        combos = [c for c in combos if c.name in wanted]
    WORK.mkdir(parents=True, exist_ok=True)
    build_log = WORK / "wheel.log"
    build_log.write_text("")
    print("building the wheel of a clean clone", file=sys.stderr, flush=True)
    began = time.monotonic()
    wheel = build_wheel(build_log)
    stage = mirror()
    results = [f"wheel {wheel.name}: built in {time.monotonic() - began:.0f} s"]
    print(results[-1], file=sys.stderr, flush=True)
    failed = []
    for combo in combos:
        venv, log = WORK / combo.name, WORK / f"{combo.name}.log"
        log.write_text("")
        start = time.monotonic()
        print(f"{combo.name}: installing", file=sys.stderr, flush=True)
        # A failed combination is reported and the next one still runs: the table says
        # where the package works, not only where it first failed.
        try:
            install(combo, venv, log, wheel)
            installed = time.monotonic()
            print(
                f"{combo.name}: {versions(venv)}; running the smoke tests",
                file=sys.stderr,
                flush=True,
            )
            smoke(combo, venv, log, args.pytest_args, stage)
        except SystemExit as exc:
            failed.append(combo.name)
            results.append(
                f"{combo.name}: FAILED after {time.monotonic() - start:.0f} s; log {log}"
            )
            print(f"{results[-1]}\n{exc}", file=sys.stderr, flush=True)
            continue
        done = time.monotonic()
        results.append(
            f"{combo.name}: {versions(venv)}: passed "
            f"(install {installed - start:.0f} s, tests {done - installed:.0f} s; log {log})"
        )
        print(results[-1], file=sys.stderr, flush=True)
    print("\n".join(results))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
