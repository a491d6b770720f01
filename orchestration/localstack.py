"""The embedded local stack: a single-node Apache Kafka broker (KRaft, broker + controller).

The broker's jars are resolved by Maven from ``stack/kafka/pom.xml`` into
``.local/kafka/libs``; its data lives in ``.local/kafka/data`` so topics survive a restart;
its log goes to ``.local/kafka/broker.log``. Share groups (KIP-932) are enabled when the
storage is formatted.

When ``KAFKA_BOOTSTRAP_SERVERS`` is set nothing local is started: every command talks to
that cluster instead.

Usage::

    python -m orchestration.localstack start     # idempotent; prints the bootstrap address
    python -m orchestration.localstack status
    python -m orchestration.localstack stop
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from orchestration.shuffle._kafka import check_reachable
from orchestration.shuffle.errors import ShuffleConnectionError

ROOT = Path(__file__).resolve().parents[1]
POM = ROOT / "stack" / "kafka" / "pom.xml"
HOST = "127.0.0.1"


@dataclass(frozen=True)
class _Local:
    """Where the local broker lives and listens; read from the environment when used."""

    home: Path
    port: int

    @property
    def libs(self) -> Path:
        return self.home / "libs"

    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def config(self) -> Path:
        return self.home / "server.properties"

    @property
    def log_config(self) -> Path:
        return self.home / "log4j2.properties"

    @property
    def log(self) -> Path:
        return self.home / "broker.log"

    @property
    def pid(self) -> Path:
        return self.home / "broker.pid"


def _local() -> _Local:
    home = os.environ.get("SHUFFLE_LOCAL_KAFKA_DIR") or ROOT / ".local" / "kafka"
    return _Local(Path(home), int(os.environ.get("SHUFFLE_LOCAL_KAFKA_PORT", "19092")))


class LocalStackError(RuntimeError):
    """The local broker could not be set up or started; the message says where to look."""


def external_bootstrap() -> str | None:
    """The user's own cluster, when ``KAFKA_BOOTSTRAP_SERVERS`` names one."""
    value = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    return value or None


def local_bootstrap() -> str:
    return f"{HOST}:{_local().port}"


def bootstrap_servers() -> str:
    """The bootstrap address everything should use: the external cluster or the local one."""
    return external_bootstrap() or local_bootstrap()


def resolve_jars(pom: Path, dest: Path) -> Path:
    """Copies the runtime jars of ``pom`` into ``dest`` with Maven, once per pom version."""
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()
    stamp = dest / ".pom-sha256"
    if stamp.exists() and stamp.read_text() == digest:
        return dest
    if shutil.which("mvn") is None:
        raise LocalStackError(f"Maven ('mvn') is needed to fetch the jars of {pom}; install it")
    staging = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    print(f"resolving jars with Maven from {pom} ...", file=sys.stderr, flush=True)
    cmd = [
        "mvn",
        "-q",
        "-B",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={staging}",
        "-DincludeScope=runtime",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise LocalStackError(
            f"Maven could not resolve the jars of {pom} (exit {proc.returncode}):\n"
            f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    (staging / ".pom-sha256").write_text(digest)
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return dest


def ensure_jars() -> None:
    """Resolves the broker's jars with Maven, once per version of the pom."""
    resolve_jars(POM, _local().libs)


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java:
        raise LocalStackError("a Java runtime (17+) is needed for the local Kafka broker")
    return java


def _write_configs() -> None:
    controller = _local().port + 1
    _local().config.write_text(
        "\n".join(
            [
                "# Written by orchestration/localstack.py on every start; edits are overwritten.",
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@{HOST}:{controller}",
                f"listeners=PLAINTEXT://{HOST}:{_local().port},CONTROLLER://{HOST}:{controller}",
                f"advertised.listeners=PLAINTEXT://{HOST}:{_local().port}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                f"log.dirs={_local().data}",
                "num.partitions=1",
                # A single node can only hold one replica of the internal topics.
                "offsets.topic.replication.factor=1",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                # Tests create many short-lived groups; waiting for more members only slows them.
                "group.initial.rebalance.delay.ms=0",
                # Share-group members get their assignment on a heartbeat: a 1 s heartbeat lets
                # a queue start working in about a second instead of five. Short record locks
                # (1 s minimum) let tests see a killed consumer's records come back quickly.
                "group.share.heartbeat.interval.ms=1000",
                "group.share.min.heartbeat.interval.ms=1000",
                "group.share.min.record.lock.duration.ms=1000",
                # Shuffle topics set their own retention; keep the broker default generous.
                "log.retention.hours=-1",
                "auto.create.topics.enable=false",
                "",
            ]
        )
    )
    _local().log_config.write_text(
        "\n".join(
            [
                "status = warn",
                "appender.file.type = File",
                "appender.file.name = file",
                f"appender.file.fileName = {_local().log}",
                "appender.file.layout.type = PatternLayout",
                "appender.file.layout.pattern = [%d] %p %m (%c)%n",
                "rootLogger.level = info",
                "rootLogger.appenderRef.file.ref = file",
                "",
            ]
        )
    )


def _classpath() -> str:
    return str(_local().libs / "*")


def _ensure_formatted() -> None:
    if (_local().data / "meta.properties").exists():
        return
    _local().data.mkdir(parents=True, exist_ok=True)
    cmd = [
        _java(),
        "-cp",
        _classpath(),
        "kafka.tools.StorageTool",
        "format",
        # "--cluster-id=<id>" in one argument: an id may begin with "-", which the
        # tool's argument parser would otherwise take for an option.
        f"--cluster-id={_cluster_id()}",
        "-c",
        str(_local().config),
        # Share groups are on by default in recent releases; say so explicitly anyway.
        "--feature",
        "share.version=1",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise LocalStackError(
            f"formatting Kafka storage in {_local().data} failed:\n{proc.stdout}{proc.stderr}"
        )


def _cluster_id() -> str:
    """A KRaft cluster id: a base64url-encoded 16-byte UUID without padding.

    Ids that begin with "-" are drawn again (as Kafka's own generator does): command-line
    tools read them as options.
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _pid() -> int | None:
    try:
        pid = int(_local().pid.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def _port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _wait_ready(deadline: float, pid: int) -> None:
    conf = {"bootstrap.servers": local_bootstrap()}
    while time.monotonic() < deadline:
        if _pid() != pid:
            raise LocalStackError(
                "the local Kafka broker exited during start-up; "
                f"see {_local().log} and {_local().home / 'stdout.log'}"
            )
        if _port_open(HOST, _local().port):
            try:
                check_reachable(conf, timeout=5)
                return
            except ShuffleConnectionError:
                pass
        time.sleep(0.5)
    raise LocalStackError(
        f"the local Kafka broker did not accept connections in time; see {_local().log}"
    )


def start(timeout: float = 120.0) -> str:
    """Starts the local broker unless one is running (or an external cluster is configured).

    Returns:
        The bootstrap address to use.
    """
    external = external_bootstrap()
    if external:
        check_reachable({"bootstrap.servers": external})
        return external
    pid = _pid()
    if pid is not None:
        _wait_ready(time.monotonic() + timeout, pid)
        return local_bootstrap()
    if _port_open(HOST, _local().port):
        raise LocalStackError(
            f"port {_local().port} is taken by a process this project did not start; stop it, "
            "or set "
            "SHUFFLE_LOCAL_KAFKA_PORT, or point KAFKA_BOOTSTRAP_SERVERS at that cluster"
        )
    ensure_jars()
    _write_configs()
    _ensure_formatted()
    heap = os.environ.get("SHUFFLE_LOCAL_KAFKA_HEAP", "768m")
    cmd = [
        _java(),
        f"-Xmx{heap}",
        f"-Xms{heap}",
        "-XX:+UseG1GC",
        f"-Dlog4j2.configurationFile={_local().log_config}",
        "-cp",
        _classpath(),
        "kafka.Kafka",
        str(_local().config),
    ]
    with open(_local().home / "stdout.log", "ab") as out:
        # A new session so the broker outlives the shell (or test run) that started it.
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=_local().home,
        )
    _local().pid.write_text(str(proc.pid))
    _wait_ready(time.monotonic() + timeout, proc.pid)
    return local_bootstrap()


def stop(timeout: float = 60.0) -> bool:
    """Stops the local broker (a clean shutdown, then a kill after ``timeout``).

    Returns:
        True if a broker was running.
    """
    pid = _pid()
    if pid is None:
        _local().pid.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _pid() == pid:
        time.sleep(0.2)
        _reap(pid)
    if _pid() == pid:
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        _reap(pid)
    _local().pid.unlink(missing_ok=True)
    return True


def _reap(pid: int) -> None:
    # The broker is our child when this process started it; collect it so it stops existing.
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def status() -> str:
    external = external_bootstrap()
    if external:
        try:
            n = check_reachable({"bootstrap.servers": external}, timeout=5)
            return f"external cluster {external}: reachable ({n} broker(s))"
        except ShuffleConnectionError as exc:
            return f"external cluster {external}: NOT reachable ({exc})"
    pid = _pid()
    if pid is None:
        return f"local broker: stopped (data in {_local().data})"
    state = "accepting connections" if _port_open(HOST, _local().port) else "starting"
    return f"local broker: running, pid {pid}, {local_bootstrap()}, {state}; log {_local().log}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orchestration.localstack", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("command", choices=["start", "stop", "status", "bootstrap"])
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            print(start())
        elif args.command == "stop":
            print("local broker stopped" if stop() else "local broker was not running")
        elif args.command == "status":
            print(status())
        else:
            print(bootstrap_servers())
    except (LocalStackError, ShuffleConnectionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
