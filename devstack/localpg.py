"""A PostgreSQL server on this machine for a Dagster instance as teams run it: the machine's
PostgreSQL server binaries (``pg_config --bindir``), a data directory and a port of the
project's own, and a ``dagster.yaml`` that keeps the instance in it and queues runs.

    python -m devstack.localpg start     # idempotent; prints the database URL
    python -m devstack.localpg status
    python -m devstack.localpg stop
    python -m devstack.localpg env       # `eval "$(...)"`: DAGSTER_HOME and the URL

The server runs as the ``postgres`` user when this runs as root (PostgreSQL refuses to run
as root), listens on 127.0.0.1 only, and trusts local connections (a development server:
nothing else reaches it). Settings (read when used): ``SHUFFLE_PG_PORT`` (default 15432),
``SHUFFLE_PG_DIR`` (default ``.local/postgres``).

Dagster reaches it with SQLAlchemy's ``postgresql+psycopg2://`` URL: a bare
``postgresql://`` URL (and the ``postgres_db:`` form of ``dagster.yaml``, which builds one)
makes SQLAlchemy 2.1 choose psycopg 3, which ``dagster-postgres`` does not install and
whose server-side parameters its daemon's ``NOTIFY`` does not take.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from devstack import startlock

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
USER = "dagster"
DATABASE = "dagster"


class LocalPgError(RuntimeError):
    """The local PostgreSQL server could not be started; the message says where to look."""


def home() -> Path:
    return Path(os.environ.get("SHUFFLE_PG_DIR") or ROOT / ".local" / "postgres")


def port() -> int:
    return int(os.environ.get("SHUFFLE_PG_PORT", "15432"))


def url(database: str = DATABASE) -> str:
    """The SQLAlchemy URL of ``database`` on the local server (psycopg2, see module doc)."""
    return f"postgresql+psycopg2://{USER}@{HOST}:{port()}/{database}"


def bindir() -> Path:
    """The folder of the machine's PostgreSQL server binaries (``pg_config --bindir``)."""
    pg_config = shutil.which("pg_config")
    found = None
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        if out.returncode == 0:
            found = Path(out.stdout.strip())
    if found is None or not (found / "pg_ctl").exists():
        candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
        found = candidates[-1].parent if candidates else None
    if found is None:
        raise LocalPgError(
            "PostgreSQL's server binaries (initdb, pg_ctl, postgres) were not found: install "
            "PostgreSQL 15 or newer (e.g. apt-get install postgresql) or put pg_config on "
            "the PATH"
        )
    return found


def _as_server_user(cmd: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root: as root, run its tools as the postgres user.
    if os.geteuid() != 0:
        return cmd
    try:
        pwd.getpwnam("postgres")
    except KeyError as exc:
        raise LocalPgError(
            "running as root, and there is no 'postgres' user to run the server as: "
            "create one (useradd postgres) or run as another user"
        ) from exc
    return ["runuser", "-u", "postgres", "--", *cmd]


def _own(path: Path) -> None:
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        for p in [path, *path.rglob("*")]:
            os.chown(p, entry.pw_uid, entry.pw_gid)


def _listening(timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((HOST, port()), timeout=timeout):
            return True
    except OSError:
        return False


def _data() -> Path:
    return home() / "data"


def _run(cmd: list[str], what: str) -> str:
    done = subprocess.run(_as_server_user(cmd), capture_output=True, text=True)
    if done.returncode != 0:
        raise LocalPgError(f"{what} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def start(timeout: float = 60.0) -> str:
    """Starts the server (creating its data directory and database once); returns the URL."""
    if _listening():
        return url()
    with startlock.held(home()):
        return url() if _listening() else _start(timeout)


def _start(timeout: float) -> str:
    bins = bindir()
    data = _data()
    home().mkdir(parents=True, exist_ok=True)
    # The server user must reach its data directory through the project's folders.
    for parent in [home(), *home().parents]:
        if parent == Path("/"):
            break
        mode = parent.stat().st_mode
        if os.geteuid() == 0 and not mode & 0o001:
            os.chmod(parent, mode | 0o001)
    fresh = not (data / "PG_VERSION").exists()
    if fresh:
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True)
        _own(home())
        _run(
            [str(bins / "initdb"), "-D", str(data), "-U", USER, "--auth=trust",
             "--encoding=UTF8", "--no-instructions"],
            "initdb",
        )  # fmt: skip
    _own(home())
    sockets = home() / "sockets"
    sockets.mkdir(exist_ok=True)
    _own(sockets)
    options = f"-p {port()} -c listen_addresses={HOST} -k {sockets}"
    _run(
        [str(bins / "pg_ctl"), "-D", str(data), "-l", str(home() / "server.log"), "-o",
         options, "-w", "-t", str(int(timeout)), "start"],
        f"starting PostgreSQL (its log: {home() / 'server.log'})",
    )  # fmt: skip
    deadline = time.monotonic() + timeout
    while not _listening():
        if time.monotonic() > deadline:
            raise LocalPgError(f"PostgreSQL did not listen on {port()}; see {home()}")
        time.sleep(0.2)
    exists = _run(
        [str(bins / "psql"), "-h", HOST, "-p", str(port()), "-U", USER, "-d", "postgres",
         "-tAc", f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'"],
        "checking the database",
    )  # fmt: skip
    if exists.strip() != "1":
        _run(
            [str(bins / "createdb"), "-h", HOST, "-p", str(port()), "-U", USER, DATABASE],
            "creating the database",
        )
    return url()


def create_database(name: str) -> str:
    """A new, empty database ``name`` on the running server (one dropped first if it is
    there); returns its URL. For a run of its own, e.g. the soak's instance."""
    bins = bindir()
    common = ["-h", HOST, "-p", str(port()), "-U", USER]
    _run([str(bins / "dropdb"), *common, "--if-exists", name], f"dropping database {name}")
    _run([str(bins / "createdb"), *common, name], f"creating database {name}")
    return url(name)


def stop(timeout: float = 30.0) -> bool:
    """Stops the server; False if it was not running."""
    if not (_data() / "postmaster.pid").exists():
        return False
    _run(
        [str(bindir() / "pg_ctl"), "-D", str(_data()), "-m", "fast", "-w", "-t",
         str(int(timeout)), "stop"],
        "stopping PostgreSQL",
    )  # fmt: skip
    return True


def dagster_yaml(*, max_concurrent_runs: int = 4) -> str:
    """An instance kept in the local server, runs queued: at most ``max_concurrent_runs`` at
    once, and one at a time of those whose steps share a pool (a shuffle's writers share
    ``orchestration.shuffle_pool(topic)``): the queue holds such a run until the pool is
    free."""
    return f"""\
telemetry:
  enabled: false
run_retries:
  enabled: true
storage:
  postgres:
    postgres_url:
      env: SHUFFLE_DAGSTER_PG_URL
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
concurrency:
  runs:
    max_concurrent_runs: {max_concurrent_runs}
  pools:
    default_limit: 1
    granularity: run
"""


def dagster_home() -> Path:
    """A DAGSTER_HOME whose instance is the local server's (written once)."""
    path = home() / "dagster"
    path.mkdir(parents=True, exist_ok=True)
    yaml = path / "dagster.yaml"
    text = dagster_yaml()
    if not yaml.exists() or yaml.read_text() != text:
        yaml.write_text(text)
    return path


def env_lines() -> list[str]:
    return [
        f"export SHUFFLE_DAGSTER_PG_URL={url()}",
        f"export DAGSTER_HOME={dagster_home()}",
    ]


def status() -> str:
    if _listening():
        return f"postgres at {url()} (data in {_data()})"
    return "postgres: not running"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["start", "stop", "status", "env"])
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            print(start())
            dagster_home()
        elif args.command == "stop":
            print("stopped" if stop() else "postgres: not running")
        elif args.command == "env":
            print("\n".join(env_lines()))
        else:
            print(status())
            return 0 if _listening() else 1
    except LocalPgError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
