"""``python -m devstack.soak`` (``scripts/dev soak``): see :mod:`devstack.soak`."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from devstack import localcluster, localpg, localstack
from devstack.soak import faults as fault_plan
from devstack.soak import verify

ROOT = Path(__file__).resolve().parents[2]
KAFKA_PORT = 31192
CLUSTER_PORT = 17177
STACK_ENV = {
    "SHUFFLE_LOCAL_KAFKA_NODES": "3",
    "SHUFFLE_LOCAL_KAFKA_SECURITY": "plaintext",
    "SHUFFLE_LOCAL_KAFKA_PORT": str(KAFKA_PORT),
    "SHUFFLE_CLUSTER_PORT": str(CLUSTER_PORT),
    # Over-subscribed on purpose: the application, two runs and their executors share them.
    "SHUFFLE_CLUSTER_WORKER_CORES": "4",
    "SHUFFLE_CLUSTER_WORKER_MEMORY": "3g",
}
RUN_LIMIT = "  config:\n    max_concurrent_runs: 2\n"
POOL_LIMITS = """\
concurrency:
  runs:
    max_concurrent_runs: 2
  pools:
    default_limit: 1
    granularity: run
"""
DAGSTER_YAML = f"""\
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
{RUN_LIMIT}run_retries:
  enabled: true
  max_retries: 2
run_monitoring:
  enabled: true
  start_timeout_seconds: 300
  poll_interval_seconds: 15
telemetry:
  enabled: false
"""


def log(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def rss_mib(pid: int | None, *, tree: bool = True) -> float:
    """Resident memory of ``pid``, with its descendants when ``tree`` (a PySpark driver and
    its JVM; not the daemon, whose descendants are the runs it launched)."""
    if pid is None:
        return 0.0
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir() if tree else ():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


class Soak:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.out: Path = args.out.resolve()
        self.env = {
            **os.environ,
            **STACK_ENV,
            "SHUFFLE_LOCAL_KAFKA_DIR": str(self.out / "kafka"),
            "SHUFFLE_CLUSTER_DIR": str(self.out / "spark"),
            "SOAK_OUT": str(self.out),
            "SOAK_ROWS_PER_DAY": str(args.rows_per_day),
            "DAGSTER_HOME": str(self.out / "dagster_home"),
            "PYSPARK_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        # This process manages the stacks (devstack reads its settings from the environment)
        # and verifies through the same Dagster instance.
        mine = ("SOAK_", "SHUFFLE_", "DAGSTER_")
        os.environ.update({k: v for k, v in self.env.items() if k.startswith(mine)})
        os.environ.pop("KAFKA_BOOTSTRAP_SERVERS", None)
        self.daemon: subprocess.Popen | None = None
        self.app: subprocess.Popen | None = None
        self.pg_url: str | None = None  # the instance's database with --postgres
        self.rss: dict[str, list[tuple[float, float]]] = {"driver": [], "daemon": []}
        self.rss_pid: dict[str, list[int]] = {}
        self.load: list[tuple[float, float]] = []
        self.faults: list[dict] = []
        self.done = threading.Event()
        self.start_t = time.time()

    # -- processes ---------------------------------------------------------------------

    def start_stacks(self) -> None:
        self.bootstrap = localstack.start()
        self.env["KAFKA_BOOTSTRAP_SERVERS"] = self.bootstrap
        self.conf = {"bootstrap.servers": self.bootstrap}
        self.master = localcluster.start()
        self.env["SPARK_MASTER"] = self.master
        log(f"Kafka: 3 nodes at {self.bootstrap}; Spark: {self.master} (2 workers)")

    def start_daemon(self) -> None:
        home = self.out / "dagster_home"
        home.mkdir(exist_ok=True)
        config = DAGSTER_YAML
        if self.args.postgres:
            # The instance in a database of its own on the local PostgreSQL server, made
            # once per soak: a daemon started again (a fault) keeps its history.
            if self.pg_url is None:
                localpg.start()
                self.pg_url = localpg.create_database("soak")
                log(f"Dagster instance in PostgreSQL: {self.pg_url}")
            config += f"storage:\n  postgres:\n    postgres_url: {self.pg_url}\n"
            # One run at a time per pool, as devstack/localpg.py's instance: the producer's
            # runs (shuffle_pool) never overlap, retries by the failed-region sensor included.
            # Dagster takes the run limit from the same block then.
            config = config.replace(RUN_LIMIT, "") + POOL_LIMITS
        (home / "dagster.yaml").write_text(config)
        workspace = self.out / "workspace.yaml"
        workspace.write_text(textwrap.dedent(f"""\
            load_from:
              - python_module:
                  module_name: devstack.soak.definitions
                  attribute: producer_defs
                  location_name: soak_producer
                  working_directory: {ROOT}
              - python_module:
                  module_name: devstack.soak.definitions
                  attribute: consumer_defs
                  location_name: soak_consumers
                  working_directory: {ROOT}
            """))  # fmt: skip
        exe = Path(sys.executable).with_name("dagster-daemon")
        out = open(self.out / "daemon.log", "a")  # noqa: SIM115 - the daemon's for its life
        self.daemon = subprocess.Popen(
            [str(exe), "run", "-w", str(workspace)], cwd=ROOT, env=self.env, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def stop_daemon(self, sig: int = signal.SIGTERM) -> None:
        if self.daemon is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.daemon.pid, sig)
        try:
            self.daemon.wait(90)
        except subprocess.TimeoutExpired:
            os.kill(self.daemon.pid, signal.SIGKILL)
            self.daemon.wait(30)
        self.daemon = None

    def start_app(self) -> None:
        out = open(self.out / "app.log", "a")  # noqa: SIM115 - the app's for its life
        self.app = subprocess.Popen(
            [sys.executable, "-m", "devstack.soak.app", "--out", str(self.out),
             "--bootstrap", self.bootstrap, "--master", self.master],
            cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def sample(self) -> None:
        """RSS every 5 s of the long-lived processes while they run: the application's
        driver (Python and its JVM) and the daemon (its own process; the runs it launches
        are processes of their own)."""
        while not self.done.wait(5):
            now = time.time()
            self.load.append((now, os.getloadavg()[0]))
            for name, proc, tree in (("driver", self.app, True), ("daemon", self.daemon, False)):
                if proc is not None and proc.poll() is None:
                    self.rss[name].append((now, rss_mib(proc.pid, tree=tree)))
                    self.rss_pid.setdefault(name, []).append(proc.pid)

    # -- faults ------------------------------------------------------------------------

    def plant_run_faults(self) -> None:
        """The faults a Dagster run takes (:data:`fault_plan.AT_START`), planted before the
        daemon starts, on the days of the first producer run (the sensor's first range): its
        last day fails its write (the days before it are committed, the failed-region sensor
        re-runs it), and one consumer's run of the first day raises once."""
        import random

        from devstack.soak.definitions import CONSUMERS, FIRST_DAY

        rng = random.Random(f"{self.args.seed}-at-start")
        first = dt.date.fromisoformat(FIRST_DAY)
        days_per_run = int(self.env.get("SOAK_DAYS_PER_RUN", "2"))
        for kind in fault_plan.AT_START:
            record: dict = {"t": time.time(), "kind": kind}
            if kind == "producer_run_fails":
                day = (first + dt.timedelta(days=max(1, days_per_run) - 1)).isoformat()
                (self.out / "faults" / f"producer-{day}").touch()
                record.update(day=day)
            elif kind == "consumer_run_fails":
                asset = rng.choice(CONSUMERS)
                (self.out / "faults" / f"consumer-{asset}-{FIRST_DAY}").touch()
                record.update(day=FIRST_DAY, asset=asset)
            record["t_end"] = time.time()
            self.faults.append(record)
            log(f"fault: {kind} planted ({record['day']})")

    def _inject_into(self, kind: str, box: dict) -> None:
        box["done"] = self.inject(kind)

    def inject(self, kind: str) -> dict:
        import random

        rng = random.Random(f"{self.args.seed}-{len(self.faults)}")
        record = {"t": time.time(), "kind": kind}
        faults_dir = self.out / "faults"
        if kind in ("broker", "controller"):
            local = localstack.local_stack()
            leader = fault_plan.quorum_leader([n.data for n in local.all_nodes])
            nodes = [n.index for n in local.all_nodes]
            if kind == "controller" and leader is not None:
                node = leader
            else:
                node = rng.choice([n for n in nodes if n != leader] or nodes)
            record.update(node=node, leader=leader)
            localstack.stop(node=node, kill=True)
            time.sleep(rng.uniform(5, 15))
            localstack.start(node=node)
        elif kind == "spark_worker":
            worker = rng.choice(range(1, localcluster.WORKERS + 1))
            record.update(node=worker, pid=localcluster.kill_worker(worker))
            time.sleep(rng.uniform(3, 8))
            localcluster.start()
        elif kind == "daemon":
            self.stop_daemon()
            time.sleep(2)
            self.start_daemon()
        elif kind == "producer_task_fails":
            (faults_dir / "stream-task").touch()
        else:
            raise ValueError(f"not a scheduled fault: {kind}")
        record["t_end"] = time.time()
        return record

    # -- the run -----------------------------------------------------------------------

    def run(self) -> int:
        if self.out.exists():
            with contextlib.suppress(Exception):
                localstack.stop(kill=True)
                localcluster.stop()
            shutil.rmtree(self.out)
        (self.out / "faults").mkdir(parents=True)
        try:
            return self._run()
        finally:
            self.done.set()
            if not self.args.keep:
                self.shutdown()

    def shutdown(self) -> None:
        if self.app is not None and self.app.poll() is None:
            self.app.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.app.wait(60)
            if self.app.poll() is None:
                self.app.kill()
        self.stop_daemon()
        localcluster.stop()
        localstack.stop()

    def _run(self) -> int:
        self.start_stacks()
        self.plant_run_faults()
        self.start_daemon()
        self.start_app()
        threading.Thread(target=self.sample, daemon=True).start()
        self.start_t = time.time()
        duration = self.args.minutes * 60
        warmup = min(90.0, duration * 0.25)
        plan = fault_plan.schedule(self.args.seed, duration * 0.85 - warmup)
        log(f"running {self.args.minutes} min; faults at "
            + ", ".join(f"{warmup + f.at:.0f}s {f.kind}" for f in plan))  # fmt: skip
        next_report = self.start_t + 30
        for fault in plan:
            next_report = self._wait_until(self.start_t + warmup + fault.at, next_report)
            log(f"fault: {fault.kind}")
            # In a thread, so that progress is reported while a node comes back.
            box: dict = {}
            worker = threading.Thread(target=self._inject_into, args=(fault.kind, box))
            worker.start()
            next_report = self._wait_until(None, next_report, worker)
            done = box.get("done") or {"t": time.time(), "kind": fault.kind, "error": "raised"}
            self.faults.append(done)
            log(f"fault: {fault.kind} done ({done.get('node', done.get('day', ''))})")
        self._wait_until(self.start_t + duration, next_report)
        end = time.time()
        log("draining: producers stop, consumers catch up")
        drained = self.drain()
        self.stop_daemon()
        return self.report(end, drained)

    def _wait_until(
        self, deadline: float | None, next_report: float, worker: threading.Thread | None = None
    ) -> float:
        """Until ``deadline`` (or until ``worker`` ends), reporting progress every 30 s and
        starting the daemon again should it exit; returns when the next report is due."""
        while worker.is_alive() if worker else time.time() < (deadline or 0):
            if self.app is not None and self.app.poll() is not None:
                raise SystemExit(f"the soak application exited ({self.app.returncode}); "
                                 f"see {self.out / 'app.log'}")  # fmt: skip
            if self.daemon is not None and self.daemon.poll() is not None:
                log("the daemon exited; starting it again (see daemon.log)")
                self.start_daemon()
            if time.time() >= next_report:
                self.progress()
                next_report += 30
            time.sleep(1)
        return next_report

    def progress(self) -> None:
        timeline = verify.events(self.out)
        commits = sum(1 for e in timeline if e["event"] == "stream_commit")
        batches = sum(1 for e in timeline if e["event"] == "stream_batch")
        accepted = sum(e["accepted"] for e in timeline if e["event"] == "queue_result")
        days = 0
        with contextlib.suppress(Exception):
            from dagster import AssetKey, DagsterInstance

            instance = DagsterInstance.from_config(str(self.out / "dagster_home"))
            days = len(instance.get_materialized_partitions(AssetKey("soak_totals")))
        driver = self.rss["driver"][-1][1] if self.rss["driver"] else 0
        daemon = self.rss["daemon"][-1][1] if self.rss["daemon"] else 0
        log(f"{time.time() - self.start_t:5.0f}s: stream commits {commits}, consumer batches "
            f"{batches}, queue accepted {accepted}, days consumed {days}; RSS driver "
            f"{driver:.0f} MiB, daemon {daemon:.0f} MiB")  # fmt: skip

    def drain(self) -> bool:
        from dagster import AssetKey, DagsterInstance, RunsFilter

        from devstack.soak.definitions import ACTIVE, CONSUMERS

        instance = DagsterInstance.from_config(str(self.out / "dagster_home"))
        deadline = time.time() + self.args.drain_minutes * 60
        # The faults planted for runs are on the first run's days (plant_run_faults), which
        # are produced whatever comes next: production stops now. The drain waits (up to half
        # its time) until a fault of each kind planted has been taken, what the report
        # checks; a later one of a kind already taken (a streaming task's, in a longer soak)
        # is not waited for.
        (self.out / "stop-producing").touch()
        half = time.time() + self.args.drain_minutes * 30
        kinds = {"producer-": "producer_run_fails", "stream-task": "producer_task_fails",
                 "consumer-": "consumer_run_fails"}  # fmt: skip

        def untaken_kinds() -> set[str]:
            taken = {e["kind"] for e in verify.events(self.out) if e["event"] == "fault_taken"}
            planted = {
                kind
                for p in (self.out / "faults").iterdir()
                if p.suffix != ".taken"
                for prefix, kind in kinds.items()
                if p.name.startswith(prefix)
            }
            return planted - taken

        # The streaming application's own fault is taken by its next micro-batch; once it
        # is, the application drains, so that the runs still to take theirs do not share
        # the machine with it (beside it, on 2 cores, a consumer run took 4-5 minutes).
        while "producer_task_fails" in untaken_kinds() and time.time() < half:
            time.sleep(2)
        (self.out / "stop-app").touch()
        while untaken_kinds() and time.time() < half:
            time.sleep(2)
        while time.time() < deadline:
            if self.daemon is not None and self.daemon.poll() is not None:
                self.start_daemon()
            produced = instance.get_materialized_partitions(AssetKey("soak_events"))
            pending = set(produced)
            for name in CONSUMERS:
                pending -= instance.get_materialized_partitions(AssetKey(name))
            active = instance.get_runs(RunsFilter(statuses=ACTIVE))
            app_done = self.app is None or self.app.poll() is not None
            if app_done and not active and not pending:
                # The sensors may still see a failed region to retry: one more quiet minute.
                time.sleep(20)
                if not instance.get_runs(RunsFilter(statuses=ACTIVE)):
                    log("drained")
                    return True
            time.sleep(5)
        log("the drain did not finish in time")
        return False

    def report(self, end: float, drained: bool) -> int:
        from dagster import DagsterInstance
        from pyspark.sql import SparkSession

        from orchestration.shuffle import session_settings

        instance = DagsterInstance.from_config(str(self.out / "dagster_home"))
        spark = SparkSession.builder.config(
            map={**session_settings("local[2]"), "spark.app.name": "soak-verify"}
        ).getOrCreate()
        timeline = verify.events(self.out)
        problems: dict[str, list[str]] = {}
        stats: dict[str, dict] = {}
        classpath = localstack.kafka_classpath()
        checks = {
            "daily shuffle": lambda: verify.check_daily(
                spark, self.conf, instance, self.out, self.args.rows_per_day
            ),
            "streaming shuffle": lambda: verify.check_stream(spark, self.conf, self.out),
            "queue": lambda: verify.check_queue(spark, self.conf, self.out, timeline, classpath),
            "leftovers": lambda: verify.check_leftovers(self.conf),
        }
        for name, check in checks.items():
            try:
                problems[name], stats[name] = check()
            except Exception as exc:  # noqa: BLE001 - a check that cannot run is a problem
                problems[name], stats[name] = [f"could not check: {type(exc).__name__}: {exc}"], {}
        taken = {e["kind"] for e in timeline if e["event"] == "fault_taken"}
        kinds = {f["kind"] for f in self.faults}
        missing = [k for k in fault_plan.KINDS if k not in kinds
                   or (k in fault_plan.TAKEN and k not in taken)]  # fmt: skip
        if missing:
            problems["faults"] = [f"kinds that did not happen (or were not taken): {missing}"]
        if not drained:
            problems["drain"] = ["the pipeline did not drain in time"]
        memory = {}
        for name, samples in self.rss.items():
            # Judged over the longest life of one process (the daemon is restarted once).
            ok, text = verify.flat(verify.longest_life(samples, self.rss_pid.get(name, [])))
            memory[name] = text
            if not ok:
                problems.setdefault("memory", []).append(f"{name} RSS grew: {text}")
        commits = verify.commit_times(self.conf)
        per_minute = verify.throughput(commits, self.start_t)
        stalls = verify.stalls(
            timeline, self.faults, self.start_t, end, self.load, os.cpu_count() or 1
        )
        runs = instance.get_runs()
        summary = {
            "minutes": self.args.minutes,
            "seed": self.args.seed,
            "passed": not any(problems.values()),
            "problems": {k: v for k, v in problems.items() if v},
            "stats": stats,
            "faults": self.faults,
            "faults_taken": sorted(taken),
            "query_failures": [e for e in timeline if e["event"] == "query_failed"],
            "queue_failures": [e for e in timeline if e["event"] == "queue_failed"],
            "dagster_runs": {
                s: sum(1 for r in runs if r.status.value == s)
                for s in sorted({r.status.value for r in runs})
            },  # fmt: skip
            "throughput_per_minute": per_minute,
            "stalls": stalls,
            "memory": memory,
            "load_average": [(round(t - self.start_t), v) for t, v in self.load],
            "rss_mib": {
                k: [(round(t - self.start_t), round(v)) for t, v in s] for k, s in self.rss.items()
            },  # fmt: skip
        }
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        verify.plot(self.out / "soak.png", self.start_t, commits, self.rss, self.faults)
        spark.stop()
        print_summary(summary, self.out)
        return 0 if summary["passed"] else 1


def print_summary(s: dict, out: Path) -> None:
    print("\n== soak summary ==")
    print(f"{s['minutes']} min, seed {s['seed']}: {'PASSED' if s['passed'] else 'FAILED'}")
    for name, st in s["stats"].items():
        print(f"  {name}: {json.dumps(st, default=str)[:400]}")
    kinds = [f["kind"] + (f"@{f['node']}" if "node" in f else "") for f in s["faults"]]
    print("  faults: " + ", ".join(kinds))
    print(f"  Dagster runs: {s['dagster_runs']}")
    print("  rows committed per minute (daily, streaming):")
    for row in s["throughput_per_minute"]:
        print(f"    min {row['minute']:3d}: {row['soak.events']:8d} {row['soak.stream']:8d}")
    print(f"  stalls > {verify.STALL_S:.0f} s: {len(s['stalls'])}")
    for st in s["stalls"]:
        print(
            f"    {st['what']} at {st['from_s']}s for {st['seconds']}s: {'; '.join(st['causes'])}"
        )
    for name, text in s["memory"].items():
        print(f"  RSS {name}: {text}")
    for name, items in s["problems"].items():
        for p in items:
            print(f"  PROBLEM [{name}]: {p}")
    print(f"  summary: {out / 'summary.json'}, plot: {out / 'soak.png'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/dev soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=ROOT / ".local" / "soak")
    parser.add_argument("--rows-per-day", type=int, default=20_000)
    parser.add_argument("--drain-minutes", type=float, default=10.0)
    parser.add_argument("--keep", action="store_true", help="leave the stacks running")
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="keep the Dagster instance in the local PostgreSQL server (scripts/dev postgres)",
    )
    args = parser.parse_args(argv)
    return Soak(args).run()


if __name__ == "__main__":
    sys.exit(main())
