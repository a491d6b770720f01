"""The embedded local stack: Apache Kafka in KRaft mode (each node broker + controller).

The jars are resolved by Maven from ``stack/kafka/pom.xml`` into ``.local/kafka/libs``. One
node by default: its data lives in ``.local/kafka/data`` so topics survive a restart, its log
goes to ``.local/kafka/broker.log``. Share groups (KIP-932) are enabled when the storage is
formatted.

- ``--nodes 3`` (or ``SHUFFLE_LOCAL_KAFKA_NODES=3``): three nodes in ``.local/kafka-3n``,
  each with its own ports (client 19292, 19294, 19296; controller one above each) and data
  directory ``node-<i>``; internal topics are replicated three times.
- ``--security sasl_ssl`` (or ``SHUFFLE_LOCAL_KAFKA_SECURITY=sasl_ssl``): the client
  listener speaks SASL_SSL with SCRAM-SHA-512 (users ``admin``, ``producer``, ``consumer``
  with passwords drawn at set-up, in ``secrets.json``, mode 0600), a TLS certificate made
  with the JDK's ``keytool`` (``tls/ca.pem`` for clients), and ACLs enforced
  (``StandardAuthorizer``; ``admin`` is a super user). In ``.local/kafka-sasl``, port 20092.

When ``KAFKA_BOOTSTRAP_SERVERS`` is set nothing local is started: every command talks to
that cluster instead.

Usage::

    python -m devstack.localstack start     # idempotent; prints the bootstrap address
    python -m devstack.localstack start --nodes 3
    python -m devstack.localstack status
    python -m devstack.localstack stop [--node 2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from devstack import startlock
from orchestration.shuffle import KafkaClient, ShuffleConnectionError
from orchestration.testing.broker import (
    KafkaStartError,
    broker_command,
    format_command,
    java_executable,
    log4j2_properties,
    new_cluster_id,
    plaintext_listeners,
    port_open,
    server_properties,
    wait_for_brokers,
)

ROOT = Path(__file__).resolve().parents[1]
POM = ROOT / "stack" / "kafka" / "pom.xml"
HOST = "127.0.0.1"


SECURITY = ("plaintext", "sasl_ssl")
USERS = ("admin", "producer", "consumer")
SCRAM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class Node:
    """One KRaft node (broker + controller) of the local stack."""

    index: int  # node.id, from 1
    home: Path
    port: int
    controller_port: int

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


@dataclass(frozen=True)
class LocalStack:
    """Where the local stack lives and listens; read from the environment when used."""

    home: Path
    port: int
    nodes: int = 1
    security: str = "plaintext"

    @property
    def libs(self) -> Path:
        return Path(
            os.environ.get("SHUFFLE_LOCAL_KAFKA_LIBS") or ROOT / ".local" / "kafka" / "libs"
        )

    @property
    def all_nodes(self) -> list[Node]:
        if self.nodes == 1:
            return [Node(1, self.home, self.port, self.port + 1)]
        return [
            Node(i, self.home / f"node-{i}", self.port + 2 * (i - 1), self.port + 2 * (i - 1) + 1)
            for i in range(1, self.nodes + 1)
        ]

    @property
    def replication(self) -> int:
        return min(3, self.nodes)

    @property
    def secure(self) -> bool:
        return self.security == "sasl_ssl"

    @property
    def tls(self) -> Path:
        return self.home / "tls"

    @property
    def secrets(self) -> Path:
        return self.home / "secrets.json"

    @property
    def stamp(self) -> Path:
        return self.home / "stack.json"


def local_stack() -> LocalStack:
    """The local stack as the environment configures it (``SHUFFLE_LOCAL_KAFKA_NODES``,
    ``_SECURITY``, ``_DIR``, ``_PORT``): where it lives, its nodes and ports."""
    nodes = int(os.environ.get("SHUFFLE_LOCAL_KAFKA_NODES") or 1)
    security = (os.environ.get("SHUFFLE_LOCAL_KAFKA_SECURITY") or "plaintext").lower()
    if nodes < 1:
        raise LocalStackError(f"SHUFFLE_LOCAL_KAFKA_NODES must be >= 1, got {nodes}")
    if security not in SECURITY:
        raise LocalStackError(
            f"SHUFFLE_LOCAL_KAFKA_SECURITY must be one of {SECURITY}, got {security!r}"
        )
    if nodes == 1 and security == "plaintext":
        default_home, default_port = ROOT / ".local" / "kafka", 19092
    else:
        name = (
            "kafka"
            + (f"-{nodes}n" if nodes > 1 else "")
            + ("-sasl" if security != "plaintext" else "")
        )
        default_home = ROOT / ".local" / name
        default_port = 19092 + 100 * (nodes - 1) + (1000 if security != "plaintext" else 0)
    home = os.environ.get("SHUFFLE_LOCAL_KAFKA_DIR") or default_home
    port = int(os.environ.get("SHUFFLE_LOCAL_KAFKA_PORT") or default_port)
    return LocalStack(Path(home), port, nodes, security)


class LocalStackError(KafkaStartError):
    """The local broker could not be set up or started; the message says where to look."""


def external_bootstrap() -> str | None:
    """The user's own cluster, when ``KAFKA_BOOTSTRAP_SERVERS`` names one."""
    value = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    return value or None


def local_bootstrap() -> str:
    """The bootstrap address of the local stack's nodes."""
    return ",".join(f"{HOST}:{n.port}" for n in local_stack().all_nodes)


def bootstrap_servers() -> str:
    """The bootstrap address everything should use: the external cluster or the local one."""
    return external_bootstrap() or local_bootstrap()


def resolve_jars(pom: Path, dest: Path, properties: dict[str, str] | None = None) -> Path:
    """Copies the runtime jars of ``pom`` into ``dest`` with Maven, once per pom version
    (and per value of the ``properties`` given to Maven, which override the pom's)."""
    defines = [f"-D{k}={v}" for k, v in sorted((properties or {}).items())]
    digest = hashlib.sha256(pom.read_bytes() + " ".join(defines).encode()).hexdigest()
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
        *defines,
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
    resolve_jars(POM, local_stack().libs)


def listener_lines(local: LocalStack, node: Node) -> list[str]:
    """The ``server.properties`` lines of ``node``'s listeners: PLAINTEXT, or SASL_SSL with
    SCRAM, TLS and ACLs for a secure stack."""
    if not local.secure:
        return plaintext_listeners(node.port, node.controller_port)
    secrets = _secrets(local)
    store = secrets["keystore"]
    admin = secrets["admin"]
    return [
        f"listeners=SASL_SSL://{HOST}:{node.port},CONTROLLER://{HOST}:{node.controller_port}",
        f"advertised.listeners=SASL_SSL://{HOST}:{node.port}",
        "inter.broker.listener.name=SASL_SSL",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
        f"sasl.enabled.mechanisms={SCRAM}",
        f"sasl.mechanism.inter.broker.protocol={SCRAM}",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="admin" password="{admin}";',
        "ssl.keystore.type=PKCS12",
        f"ssl.keystore.location={local.tls / 'broker.p12'}",
        f"ssl.keystore.password={store}",
        f"ssl.key.password={store}",
        "ssl.truststore.type=PKCS12",
        f"ssl.truststore.location={local.tls / 'truststore.p12'}",
        f"ssl.truststore.password={store}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        # The controller listener is plaintext on the loopback address: its requests come
        # from the nodes themselves, as ANONYMOUS.
        "super.users=User:admin;User:ANONYMOUS",
        "allow.everyone.if.no.acl.found=false",
    ]


def write_configs(local: LocalStack, node: Node) -> None:
    """Writes ``node``'s ``server.properties`` and log configuration (on every start)."""
    voters = ",".join(f"{n.index}@{HOST}:{n.controller_port}" for n in local.all_nodes)
    node.home.mkdir(parents=True, exist_ok=True)
    node.config.write_text(
        server_properties(
            node_id=node.index,
            voters=voters,
            listeners=listener_lines(local, node),
            data=node.data,
            replication=local.replication,
            header="# Written by devstack/localstack.py on every start; edits are overwritten.",
        )
    )
    if local.secure:
        node.config.chmod(0o600)
    node.log_config.write_text(log4j2_properties(node.log))


def kafka_classpath() -> str:
    """The class path of the Kafka jars that :func:`ensure_jars` resolved."""
    return str(local_stack().libs / "*")


def check_stamp(local: LocalStack) -> None:
    """Refuses to start a stack formatted with another node count or security."""
    want = {"nodes": local.nodes, "security": local.security}
    if local.stamp.exists():
        have = json.loads(local.stamp.read_text())
        if have != want:
            raise LocalStackError(
                f"the local stack in {local.home} was set up with {have}, not {want}; "
                "use another SHUFFLE_LOCAL_KAFKA_DIR, or stop it and remove that folder"
            )
    else:
        local.home.mkdir(parents=True, exist_ok=True)
        local.stamp.write_text(json.dumps(want))


def _secrets(local: LocalStack) -> dict[str, str]:
    """The SCRAM passwords and the key store password, drawn once (file mode 0600)."""
    if not local.secrets.exists():
        local.home.mkdir(parents=True, exist_ok=True)
        values = {u: secrets.token_urlsafe(18) for u in (*USERS, "keystore")}
        fd = os.open(local.secrets, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(values, f)
    return json.loads(local.secrets.read_text())


def _keytool() -> str:
    java_home = os.environ.get("JAVA_HOME")
    tool = str(Path(java_home) / "bin" / "keytool") if java_home else shutil.which("keytool")
    if not tool:
        raise LocalStackError("the JDK's keytool is needed for the SASL_SSL stack")
    return tool


def _ensure_tls(local: LocalStack) -> None:
    """A self-signed certificate for 127.0.0.1 (key store), its PEM for clients (ca.pem) and
    a trust store holding it for the nodes' own connections."""
    if (local.tls / "truststore.p12").exists():
        return
    local.tls.mkdir(parents=True, exist_ok=True)
    pw = _secrets(local)["keystore"]
    steps = [
        [
            "-genkeypair",
            "-alias",
            "broker",
            "-keyalg",
            "RSA",
            "-keysize",
            "2048",
            "-validity",
            "3650",
            "-dname",
            "CN=127.0.0.1",
            "-ext",
            "SAN=ip:127.0.0.1,dns:localhost",
            "-keystore",
            str(local.tls / "broker.p12"),
            "-storetype",
            "PKCS12",
            "-storepass",
            pw,
            "-keypass",
            pw,
        ],
        [
            "-exportcert",
            "-alias",
            "broker",
            "-rfc",
            "-file",
            str(local.tls / "ca.pem"),
            "-keystore",
            str(local.tls / "broker.p12"),
            "-storepass",
            pw,
        ],
        [
            "-importcert",
            "-noprompt",
            "-alias",
            "broker",
            "-file",
            str(local.tls / "ca.pem"),
            "-keystore",
            str(local.tls / "truststore.p12"),
            "-storetype",
            "PKCS12",
            "-storepass",
            pw,
        ],
    ]
    for args in steps:
        proc = subprocess.run([_keytool(), *args], capture_output=True, text=True)
        if proc.returncode != 0:
            raise LocalStackError(f"keytool {args[0]} failed:\n{proc.stdout}{proc.stderr}")


def _cluster_id_of(local: LocalStack) -> str:
    path = local.home / "cluster.id"
    if not path.exists():
        local.home.mkdir(parents=True, exist_ok=True)
        path.write_text(new_cluster_id())
    return path.read_text().strip()


def _ensure_formatted(local: LocalStack, node: Node) -> None:
    if (node.data / "meta.properties").exists():
        return
    node.data.mkdir(parents=True, exist_ok=True)
    cmd = format_command(java_executable(), kafka_classpath(), _cluster_id_of(local), node.config)
    if local.secure:
        # SCRAM users are part of the initial metadata, so nodes can authenticate to each
        # other from their first start.
        for user, pw in _secrets(local).items():
            if user in USERS:
                cmd += ["--add-scram", f"{SCRAM}=[name={user},password={pw}]"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        out = proc.stdout + proc.stderr
        for pw in _secrets(local).values() if local.secure else ():
            out = out.replace(pw, "***")
        raise LocalStackError(f"formatting Kafka storage in {node.data} failed:\n{out}")


def _pid(node: Node) -> int | None:
    try:
        pid = int(node.pid.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def client_config(user: str = "admin") -> dict[str, str]:
    """The librdkafka settings of the local stack for ``user`` (SASL_SSL) or anyone."""
    local = local_stack()
    conf = {"bootstrap.servers": local_bootstrap()}
    if local.secure:
        conf.update(
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": SCRAM,
                "sasl.username": user,
                "sasl.password": _secrets(local)[user],
                "ssl.ca.location": str(local.tls / "ca.pem"),
            }
        )
    return conf


def _wait_ready(local: LocalStack, deadline: float, pids: dict[int, int]) -> None:
    def exited() -> str | None:
        for node in local.all_nodes:
            if node.index in pids and _pid(node) != pids[node.index]:
                return (
                    f"Kafka node {node.index} exited during start-up; "
                    f"see {node.log} and {node.home / 'stdout.log'}"
                )
        return None

    try:
        wait_for_brokers(
            client_config("admin"),
            local.nodes,
            [n.port for n in local.all_nodes],
            deadline,
            exited,
            f"; see {', '.join(str(n.log) for n in local.all_nodes)}",
        )
    except KafkaStartError as exc:
        raise LocalStackError(str(exc)) from None


def _start_node(local: LocalStack, node: Node) -> int:
    heap = os.environ.get("SHUFFLE_LOCAL_KAFKA_HEAP", "768m" if local.nodes == 1 else "512m")
    cmd = broker_command(java_executable(), kafka_classpath(), heap, node.log_config, node.config)
    with open(node.home / "stdout.log", "ab") as out:
        # A new session so the broker outlives the shell (or test run) that started it.
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=node.home,
        )
    node.pid.write_text(str(proc.pid))
    return proc.pid


def start(timeout: float = 120.0, node: int | None = None) -> str:
    """Starts the local stack's nodes that are not running (or checks an external cluster).

    Args:
        node: only this node (1-based), e.g. to bring back one that was stopped.

    Returns:
        The bootstrap address to use.
    """
    external = external_bootstrap()
    if external:
        KafkaClient({"bootstrap.servers": external}).check_reachable()
        return external
    local = local_stack()
    with startlock.held(local.home):
        return _start(local, timeout, node)


def _start(local: LocalStack, timeout: float, node: int | None) -> str:
    check_stamp(local)
    pids: dict[int, int] = {}
    to_start = []
    for n in local.all_nodes:
        if node is not None and n.index != node:
            continue
        pid = _pid(n)
        if pid is not None:
            pids[n.index] = pid
            continue
        for port in (n.port, n.controller_port):
            if port_open(HOST, port):
                raise LocalStackError(
                    f"port {port} is taken by a process this project did not start; stop it, "
                    "or set SHUFFLE_LOCAL_KAFKA_PORT, or point KAFKA_BOOTSTRAP_SERVERS at that "
                    "cluster"
                )
        to_start.append(n)
    if to_start:
        ensure_jars()
        if local.secure:
            _ensure_tls(local)
        for n in to_start:
            write_configs(local, n)
            _ensure_formatted(local, n)
        for n in to_start:
            pids[n.index] = _start_node(local, n)
    _wait_ready(local, time.monotonic() + timeout, pids)
    return local_bootstrap()


def stop(timeout: float = 60.0, node: int | None = None, kill: bool = False) -> bool:
    """Stops the local stack's nodes (a clean shutdown, then a kill after ``timeout``).

    Args:
        node: only this node (1-based).
        kill: SIGKILL at once, as a crash would.

    Returns:
        True if a node was running.
    """
    local = local_stack()
    ran = False
    nodes = [n for n in local.all_nodes if node is None or n.index == node]
    pids = {}
    for n in nodes:
        pid = _pid(n)
        if pid is None:
            n.pid.unlink(missing_ok=True)
            continue
        ran = True
        pids[n.index] = pid
        os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for n in nodes:
        pid = pids.get(n.index)
        if pid is None:
            continue
        while time.monotonic() < deadline and _pid(n) == pid:
            time.sleep(0.2)
            _reap(pid)
        if _pid(n) == pid:
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
            _reap(pid)
        n.pid.unlink(missing_ok=True)
    return ran


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
            n = KafkaClient({"bootstrap.servers": external}).check_reachable(timeout=5)
            return f"external cluster {external}: reachable ({n} broker(s))"
        except ShuffleConnectionError as exc:
            return f"external cluster {external}: NOT reachable ({exc})"
    local = local_stack()
    lines = []
    for n in local.all_nodes:
        pid = _pid(n)
        name = "local broker" if local.nodes == 1 else f"local node {n.index}"
        if pid is None:
            lines.append(f"{name}: stopped (data in {n.data})")
        else:
            state = "accepting connections" if port_open(HOST, n.port) else "starting"
            lines.append(f"{name}: running, pid {pid}, {HOST}:{n.port}, {state}; log {n.log}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devstack.localstack", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("command", choices=["start", "stop", "kill", "status", "bootstrap"])
    parser.add_argument("--nodes", type=int, help="KRaft nodes (default 1)")
    parser.add_argument("--security", choices=SECURITY, help="client listener security")
    parser.add_argument("--node", type=int, help="start / stop / kill only this node")
    args = parser.parse_args(argv)
    if args.nodes is not None:
        os.environ["SHUFFLE_LOCAL_KAFKA_NODES"] = str(args.nodes)
    if args.security is not None:
        os.environ["SHUFFLE_LOCAL_KAFKA_SECURITY"] = args.security
    try:
        if args.command == "start":
            print(start(node=args.node))
        elif args.command in ("stop", "kill"):
            ran = stop(node=args.node, kill=args.command == "kill")
            print("local broker stopped" if ran else "local broker was not running")
        elif args.command == "status":
            print(status())
        else:
            print(bootstrap_servers())
    except (KafkaStartError, ShuffleConnectionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
