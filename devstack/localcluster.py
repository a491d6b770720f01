"""A Spark standalone cluster on this machine, for development: a master and two workers.

    python -m devstack.localcluster start    # idempotent; prints the master URL
    python -m devstack.localcluster status
    python -m devstack.localcluster stop

Started from the installed PySpark's ``spark-class`` (the pip package ships no
``start-master.sh``). Each worker offers one core and bounded memory, so a job really runs
in two executor JVMs with Python workers of their own. Logs and work directories live under
``.local/spark``. Settings (read when used): ``SHUFFLE_CLUSTER_PORT`` (master, default 17077;
its web UI the next port, workers' UIs after it), ``SHUFFLE_CLUSTER_WORKER_MEMORY``
(default ``2g``), ``SHUFFLE_CLUSTER_WORKER_CORES`` (cores each worker offers, default 1; more
than the machine has lets several applications share it), ``SHUFFLE_CLUSTER_DIR``.

Then: ``SPARK_MASTER=spark://127.0.0.1:17077 scripts/dev main``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"
WORKERS = 2
ROOT = Path(__file__).resolve().parents[1]


class LocalClusterError(RuntimeError):
    """The local cluster could not be started; the message says where to look."""


def _home() -> Path:
    return Path(os.environ.get("SHUFFLE_CLUSTER_DIR") or ROOT / ".local" / "spark")


def _port() -> int:
    return int(os.environ.get("SHUFFLE_CLUSTER_PORT", "17077"))


def master_url() -> str:
    return f"spark://{HOST}:{_port()}"


def _spark_class() -> str:
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not path.exists():
        raise LocalClusterError(f"{path} is missing; is PySpark installed with its launcher?")
    return str(path)


def _processes() -> list[tuple[str, list[str]]]:
    port = _port()
    memory = os.environ.get("SHUFFLE_CLUSTER_WORKER_MEMORY", "2g")
    cores = os.environ.get("SHUFFLE_CLUSTER_WORKER_CORES", "1")
    spark_class = _spark_class()
    procs = [
        (
            "master",
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", HOST,
             "--port", str(port), "--webui-port", str(port + 1)],
        )
    ]  # fmt: skip
    for i in range(1, WORKERS + 1):
        procs.append(
            (
                f"worker-{i}",
                [spark_class, "org.apache.spark.deploy.worker.Worker", master_url(),
                 "--host", HOST, "--cores", cores, "--memory", memory,
                 "--webui-port", str(port + 1 + i), "--work-dir", str(_home() / f"worker-{i}")],
            )
        )  # fmt: skip
    return procs


def _pid(name: str) -> int | None:
    try:
        pid = int((_home() / f"{name}.pid").read_text().strip())
        os.kill(pid, 0)
        return pid
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None
    except PermissionError:
        return None


def master_state(timeout: float = 2.0) -> dict | None:
    """The master's state from its web UI, or None while the UI is not up or not yet
    answering whole (a starting master may answer with an empty or partial body)."""
    try:
        url = f"http://{HOST}:{_port() + 1}/json/"
        with urllib.request.urlopen(url, timeout=timeout) as r:
            state = json.loads(r.read())
    except (OSError, ValueError, http.client.HTTPException):
        return None
    return state if isinstance(state, dict) else None


def _alive_workers() -> int:
    state = master_state()
    if not state:
        return 0
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


def start(timeout: float = 120.0) -> str:
    """Starts the master and workers that are not running; waits until all workers are
    registered. Returns the master URL."""
    home = _home()
    home.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": HOST,
        "SPARK_LOG_DIR": str(home / "logs"),
        "SPARK_NO_DAEMONIZE": "1",
        # Executors' Python workers run the interpreter that has the project installed.
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
    }
    for name, cmd in _processes():
        if _pid(name) is not None:
            continue
        with open(home / f"{name}.log", "ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                cwd=home,
            )
        (home / f"{name}.pid").write_text(str(proc.pid))
        if name == "master":
            _wait(lambda: master_state() is not None, timeout, "the master's web UI")
    _wait(lambda: _alive_workers() >= WORKERS, timeout, f"{WORKERS} registered workers")
    return master_url()


def _wait(ready, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.5)
    raise LocalClusterError(f"the local Spark cluster did not show {what} in time; see {_home()}")


def _wait_gone(name: str, pid: int, timeout: float) -> None:
    """Until process ``name`` (``pid``) has exited, or ``timeout``; reaps it if ours."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _pid(name) == pid:
        time.sleep(0.2)
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def stop(timeout: float = 30.0) -> bool:
    stopped = False
    for name, _ in reversed(_processes()):
        pid = _pid(name)
        if pid is not None:
            stopped = True
            os.killpg(pid, signal.SIGTERM)
            _wait_gone(name, pid, timeout)
            if _pid(name) == pid:
                os.killpg(pid, signal.SIGKILL)
        (_home() / f"{name}.pid").unlink(missing_ok=True)
    return stopped


def kill_worker(index: int) -> int | None:
    """Kills worker ``index`` (1-based) and its executors at once, as a lost machine would;
    :func:`start` brings it back. Returns the killed process's id, or None if not running."""
    name = f"worker-{index}"
    pid = _pid(name)
    if pid is None:
        return None
    os.killpg(pid, signal.SIGKILL)
    _wait_gone(name, pid, 10)
    (_home() / f"{name}.pid").unlink(missing_ok=True)
    return pid


def status() -> str:
    running = [name for name, _ in _processes() if _pid(name) is not None]
    if not running:
        return f"local Spark cluster: stopped (logs in {_home()})"
    return (
        f"local Spark cluster: {master_url()}, running {running}, "
        f"{_alive_workers()} worker(s) alive; web UI http://{HOST}:{_port() + 1}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devstack.localcluster", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("command", choices=["start", "stop", "status"])
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            print(start())
        elif args.command == "stop":
            print(
                "local Spark cluster stopped" if stop() else "local Spark cluster was not running"
            )
        else:
            print(status())
    except LocalClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
