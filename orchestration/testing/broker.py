"""A single-node Kafka broker for tests, from Kafka's own jars and the Java runtime Spark needs.

The jars are fetched over HTTPS from the Maven repository layout (no Maven needed), checked
against the SHA-256 digests pinned below, and cached per Kafka version in
``~/.cache/kafka-shuffle/kafka-<version>/`` (``$KAFKA_SHUFFLE_CACHE`` or ``$XDG_CACHE_HOME``
move it; ``$KAFKA_SHUFFLE_MAVEN_REPOSITORY`` names a mirror of the repository). The broker is
one KRaft node (broker and controller) on free loopback ports, with share groups on, its data
in a folder of its own, stopped and deleted by :meth:`KafkaBroker.stop`.

The pieces a broker's set-up is made of (its ``server.properties``, the storage format and
start commands, waiting for it) are shared with the checkout's development stack, which runs
one to three nodes of the same Kafka release.

Example::

    with start_kafka() as broker:
        conf = {"bootstrap.servers": broker.bootstrap_servers}
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from orchestration.shuffle.errors import ShuffleConnectionError, ShuffleError
from orchestration.shuffle.kafka.client import KafkaClient

# The release stack/kafka/pom.xml pins for the development stack (a unit test holds them
# equal), and the log4j binding that puts the broker's log in a file.
KAFKA_VERSION = "4.3.1"
# The one place the repository's address is written; a mirror replaces it.
REPOSITORY = "https://repo1.maven.org/maven2"
REPOSITORY_ENV = "KAFKA_SHUFFLE_MAVEN_REPOSITORY"
CACHE_ENV = "KAFKA_SHUFFLE_CACHE"
HOST = "127.0.0.1"

# The broker's runtime class path (kafka_2.13 and its runtime dependencies, as Maven resolves
# them, with log4j-slf4j-impl and log4j-core), as group:artifact:version and the SHA-256 of
# the jar. Pinned rather than read from the repository's own checksum files, so that a jar
# that changed there is refused, not trusted.
KAFKA_JARS: tuple[tuple[str, str], ...] = (
    (
        "at.yawk.lz4:lz4-java:1.10.2",
        "252dabd586d22149a31661a8afc1a50747714eb1a298bd4a6e780c8c91a13866",
    ),
    (
        "com.dynatrace.hash4j:hash4j:0.22.0",
        "23028a3fd006e530bf495f551083208187cafd8f80624d048eba56442f16a50e",
    ),
    (
        "com.fasterxml.jackson.core:jackson-annotations:2.21",
        "53ca085f4a150f703f49e1aabd935bd03b43e1ea3d55d135438292af22cef56b",
    ),
    (
        "com.fasterxml.jackson.core:jackson-core:2.21.2",
        "12e8655b100267b44d0f14d01b1f5082a5105e616174dc4307be1a761e92407b",
    ),
    (
        "com.fasterxml.jackson.core:jackson-databind:2.21.2",
        "8c982f01f148d805f0aaac2339011244757e0df7c6ff8951f2fa3f433b8ed849",
    ),
    (
        "com.fasterxml.jackson.dataformat:jackson-dataformat-csv:2.21.2",
        "682f8c7977e02a42748426bf54946e32e52e2f80b84b6642801ab12bd541368a",
    ),
    (
        "com.fasterxml.jackson.dataformat:jackson-dataformat-yaml:2.21.2",
        "d25551812fa0c14f37cabaa9401e63eadcea42ce36311183af5622d5bc8a1bc7",
    ),
    (
        "com.fasterxml.jackson.datatype:jackson-datatype-jdk8:2.21.2",
        "e581bbf3fc5622d16b57366dd41e10fc56921fb202879de2ef487f87dd9b30e7",
    ),
    (
        "com.github.ben-manes.caffeine:caffeine:3.2.0",
        "ec411dfdf0c03f25218648ce89861630b71680e5858a9a7278ebac8e55cab3d7",
    ),
    (
        "com.github.luben:zstd-jni:1.5.6-10",
        "b6c3237e24b8252a5a9c3a0e1ae30ef8f323412e74bd358548b7a9e527d676df",
    ),
    (
        "com.google.re2j:re2j:1.8",
        "7b52c72156dd7f98b3237a5b35c1d34fba381b21048c89208913ad80a45dfbd7",
    ),
    (
        "com.typesafe.scala-logging:scala-logging_2.13:3.9.6",
        "0ad0c3f4d89d538b3b6c300158555e266aa69cf1b5f6522aba8b5bad238eb994",
    ),
    (
        "com.yammer.metrics:metrics-core:2.2.0",
        "6b7a14a6f34c10f8683f7b5e2f39df0f07b58c7dff0e468ebbc713905c46979c",
    ),
    (
        "commons-beanutils:commons-beanutils:1.11.0",
        "9e44ba68ec9a3f21286fa2a8bbb003b735c0f69101bb43144b79f4f8aaa74709",
    ),
    (
        "commons-collections:commons-collections:3.2.2",
        "eeeae917917144a68a741d4c0dff66aa5c5c5fd85593ff217bced3fc8ca783b8",
    ),
    (
        "commons-digester:commons-digester:2.1",
        "e0b2b980a84fc6533c5ce291f1917b32c507f62bcad64198fff44368c2196a3d",
    ),
    (
        "commons-logging:commons-logging:1.3.5",
        "6d7a744e4027649fbb50895df9497d109f98c766a637062fe8d2eabbb3140ba4",
    ),
    (
        "commons-validator:commons-validator:1.10.1",
        "ed74711a78d793ca37f6075e4a1e93d107233dfd20d0bb17e32bad88d38e56aa",
    ),
    (
        "net.sf.jopt-simple:jopt-simple:5.0.4",
        "df26cc58f235f477db07f753ba5a3ab243ebe5789d9f89ecf68dd62ea9a66c28",
    ),
    (
        "net.sourceforge.argparse4j:argparse4j:0.7.0",
        "65ceb669d88f63306c680f8088bbf765bbca72d288a61a03703000076c3d3f56",
    ),
    (
        "org.apache.kafka:kafka-clients:4.3.1",
        "52501b7b47510c66f898871adaf6d2968ab7246561d44ced43643a8a587f0b36",
    ),
    (
        "org.apache.kafka:kafka-coordinator-common:4.3.1",
        "66a86b8c89718216ffa72fe4e44b9d1bdf3472e4cb9200c36a0742a25febbdba",
    ),
    (
        "org.apache.kafka:kafka-group-coordinator:4.3.1",
        "4ab56d002e1624185c874199e9e0ffb243dbeb9f68b4d0cadf48ce2f617a1126",
    ),
    (
        "org.apache.kafka:kafka-group-coordinator-api:4.3.1",
        "d81bc1a3739ff6c9b21815baae00022306342a16d3d94e6a2621201b9980a30d",
    ),
    (
        "org.apache.kafka:kafka-metadata:4.3.1",
        "4d73a96c6474a4ebdd67a1cee14da1a94cfd6bb9e6e252685ba5667d8ab7f898",
    ),
    (
        "org.apache.kafka:kafka-raft:4.3.1",
        "46abbf89806dd22d848e997cdfb1431524cab4ec88e38a7d2806e20b24a70609",
    ),
    (
        "org.apache.kafka:kafka-server:4.3.1",
        "01d736599ec3b0cdbb0480c15219170b28cdae189785e7f0c6f1f26e528eaebc",
    ),
    (
        "org.apache.kafka:kafka-server-common:4.3.1",
        "d7c719f749579a399011f0df7414de8a78f10f074a6122caa550fdb141351575",
    ),
    (
        "org.apache.kafka:kafka-share-coordinator:4.3.1",
        "8ceeed7346127e652ea5c650b217890aaff14919f967d27fadce420745bd3066",
    ),
    (
        "org.apache.kafka:kafka-storage:4.3.1",
        "97e3facddd2914a58f28ec91ef35f8da69963eab3651196e97f487924f6dac98",
    ),
    (
        "org.apache.kafka:kafka-storage-api:4.3.1",
        "bc2b22639fa554494461d101d599e01bae840d97c4f46e18fdf3d2fe41a47098",
    ),
    (
        "org.apache.kafka:kafka-tools-api:4.3.1",
        "dcf6785742e0c8ab11a0fc09c62f1192e11e997dc629669a8db82aa40d933c31",
    ),
    (
        "org.apache.kafka:kafka-transaction-coordinator:4.3.1",
        "c64aaa2a88d8fd382c4800204872917686e542043c7916c9e8797d939d8eb313",
    ),
    (
        "org.apache.kafka:kafka_2.13:4.3.1",
        "b098abef5ff878e76f60cd6c559b9baa5663ccb1b55f2837558b22c329d32423",
    ),
    (
        "org.apache.logging.log4j:log4j-api:2.25.5",
        "64777f73ea0b3104c04eb82befbdccc30a425a19e83ad06cb2f93aa303511863",
    ),
    (
        "org.apache.logging.log4j:log4j-core:2.25.5",
        "050c4f85deb48b055e9c041ac39043fbb79ce477841a11a1eb2969c86c6a0072",
    ),
    (
        "org.apache.logging.log4j:log4j-slf4j-impl:2.25.5",
        "3d25b926bc6025c47ec010459749c12aa66b9d5537ba1922d67d89a098a66607",
    ),
    (
        "org.bitbucket.b_c:jose4j:0.9.6",
        "7314af50cde9c99e8eaf43eee617a23edcc6bb43036221064355094999d837ef",
    ),
    (
        "org.hdrhistogram:HdrHistogram:2.2.2",
        "22d1d4316c4ec13a68b559e98c8256d69071593731da96136640f864fa14fad8",
    ),
    (
        "org.jspecify:jspecify:1.0.0",
        "1fad6e6be7557781e4d33729d49ae1cdc8fdda6fe477bb0cc68ce351eafdfbab",
    ),
    (
        "org.pcollections:pcollections:4.0.2",
        "2bbeef5797a241300c4f7513cd546239629ed7deda4fc0c31df90bb95f5f13ef",
    ),
    (
        "org.scala-lang:scala-library:2.13.18",
        "4e85d96ff7bc7dc627985523c3541b9917aaa08e956391380c42db21a2c4e5a0",
    ),
    (
        "org.scala-lang:scala-reflect:2.13.18",
        "6935ff1982b2ac93d695f15aa66921be2f602921277afe002f018fd8c7d6e29b",
    ),
    (
        "org.slf4j:slf4j-api:1.7.36",
        "d3ef575e3e4979678dc01bf1dcce51021493b4d11fb7f1be8ad982877c16a1c0",
    ),
    (
        "org.xerial.snappy:snappy-java:1.1.10.7",
        "4c766cb3f855415ee734b2392949a0b6f12a60879334a74518deaf6270d32e36",
    ),
    ("org.yaml:snakeyaml:2.5", "e6682acf1ace77508ef13649cbf4f8d09d2cf5457bdb61d25ffb6ac0233d78dd"),
)


class KafkaStartError(ShuffleError, RuntimeError):
    """A test broker could not be set up or started; the message says why and where to look."""


# --- the jars ------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Where fetched jars are kept: ``$KAFKA_SHUFFLE_CACHE``, else ``kafka-shuffle`` in
    ``$XDG_CACHE_HOME`` or ``~/.cache``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kafka-shuffle"


def jar_url(repository: str, coordinate: str) -> str:
    """The URL of ``group:artifact:version``'s jar in a Maven repository's layout."""
    group, artifact, version = coordinate.split(":")
    path = f"{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.jar"
    return f"{repository.rstrip('/')}/{path}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    # Several test processes (pytest-xdist workers) may fill one cache at once.
    try:
        import fcntl
    except ImportError:  # not POSIX: each process checks every digest anyway
        yield
        return
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _download(url: str, target: Path, sha256: str, timeout: float) -> None:
    partial = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.part")
    last: Exception | None = None
    try:
        for attempt in range(3):
            digest = hashlib.sha256()
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    with partial.open("wb") as out:
                        while block := response.read(1 << 20):
                            digest.update(block)
                            out.write(block)
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                # Only what may pass is tried again: not a refusal or a missing file.
                if isinstance(exc, urllib.error.HTTPError) and exc.code < 500:
                    raise KafkaStartError(f"{url}: HTTP {exc.code} {exc.reason}") from None
                reason = getattr(exc, "reason", None)
                if isinstance(reason, FileNotFoundError | PermissionError):
                    raise KafkaStartError(f"{url}: {reason}") from None
                last = exc
                time.sleep(1 + attempt)
                continue
            if digest.hexdigest() != sha256:
                raise KafkaStartError(
                    f"{url}: SHA-256 {digest.hexdigest()} is not the pinned {sha256}; the jar "
                    "was not kept"
                )
            os.replace(partial, target)
            return
        raise KafkaStartError(f"{url}: could not be fetched: {last}")
    finally:
        partial.unlink(missing_ok=True)


def fetch_kafka_jars(
    dest: Path | None = None, *, repository: str | None = None, timeout: float = 60.0
) -> Path:
    """The folder of the broker's jars, each fetched once and checked against its pinned
    SHA-256; a jar already there with the right digest is not fetched again.

    Args:
        dest: The folder; default ``kafka-<version>`` under :func:`cache_dir`.
        repository: A Maven repository's base URL; default ``$KAFKA_SHUFFLE_MAVEN_REPOSITORY``,
            else the public one.
        timeout: Seconds of silence after which one request is given up (and retried).

    Raises:
        KafkaStartError: A jar could not be fetched, or its digest is not the pinned one.
    """
    dest = dest or cache_dir() / f"kafka-{KAFKA_VERSION}"
    repository = repository or os.environ.get(REPOSITORY_ENV) or REPOSITORY
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KafkaStartError(
            f"cannot create the jar cache {dest} ({exc}); set {CACHE_ENV} to a writable folder"
        ) from None
    with _locked(dest / ".lock"):
        missing = [
            (coordinate, sha256, dest / _jar_name(coordinate))
            for coordinate, sha256 in KAFKA_JARS
            if not _holds(dest / _jar_name(coordinate), sha256)
        ]
        if missing:
            print(
                f"kafka-shuffle: fetching {len(missing)} jar(s) of Kafka {KAFKA_VERSION} "
                f"into {dest}",
                file=sys.stderr,
                flush=True,
            )
            # A few at a time: most of the wait is per request, not per byte.
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                futures = [
                    pool.submit(_download, jar_url(repository, c), path, sha256, timeout)
                    for c, sha256, path in missing
                ]
                for future in futures:
                    try:
                        future.result()
                    except KafkaStartError as exc:
                        raise KafkaStartError(
                            f"{exc} (behind a proxy or offline, {REPOSITORY_ENV} names a "
                            "mirror of the repository, and the cache can be filled by hand: "
                            f"{dest})"
                        ) from None
    return dest


def _jar_name(coordinate: str) -> str:
    _, artifact, version = coordinate.split(":")
    return f"{artifact}-{version}.jar"


def _holds(path: Path, sha256: str) -> bool:
    return path.is_file() and _sha256(path) == sha256


# --- what a node's set-up is made of (shared with the development stack) -------------------


def java_executable() -> str:
    """``$JAVA_HOME/bin/java``, else the ``java`` on the ``PATH`` (the one Spark uses)."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java:
        raise KafkaStartError(
            "a Java runtime (17+) is needed for the Kafka broker, as for Spark: set JAVA_HOME "
            "or put java on the PATH"
        )
    return java


def new_cluster_id() -> str:
    """A KRaft cluster id: a base64url-encoded 16-byte UUID without padding.

    Ids that begin with "-" are drawn again (as Kafka's own generator does): command-line
    tools read them as options.
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_ports(count: int) -> list[int]:
    """Ports nothing listens on now (held open together so that they differ)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind((HOST, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def plaintext_listeners(port: int, controller_port: int) -> list[str]:
    """The ``server.properties`` lines of a PLAINTEXT client listener on the loopback address."""
    return [
        f"listeners=PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        f"advertised.listeners=PLAINTEXT://{HOST}:{port}",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    ]


def server_properties(
    *,
    node_id: int,
    voters: str,
    listeners: list[str],
    data: Path,
    replication: int = 1,
    header: str = "",
) -> str:
    """A KRaft node's ``server.properties`` (broker and controller in one process).

    Args:
        voters: ``controller.quorum.voters``, ``<id>@<host>:<port>,...``.
        listeners: The listener lines (:func:`plaintext_listeners`, or secured ones).
        replication: Replicas of the internal topics (the node count, up to three).
    """
    rf = replication
    lines = [
        *([header] if header else []),
        "process.roles=broker,controller",
        f"node.id={node_id}",
        f"controller.quorum.voters={voters}",
        *listeners,
        "controller.listener.names=CONTROLLER",
        f"log.dirs={data}",
        "num.partitions=1",
        f"default.replication.factor={rf}",
        f"offsets.topic.replication.factor={rf}",
        f"transaction.state.log.replication.factor={rf}",
        f"transaction.state.log.min.isr={max(1, rf - 1)}",
        f"share.coordinator.state.topic.replication.factor={rf}",
        f"share.coordinator.state.topic.min.isr={max(1, rf - 1)}",
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
    return "\n".join(lines)


def log4j2_properties(log: Path) -> str:
    """A log4j2 configuration that writes the broker's log (warnings of log4j itself aside)
    to the file ``log``."""
    return "\n".join(
        [
            "status = warn",
            "appender.file.type = File",
            "appender.file.name = file",
            f"appender.file.fileName = {log}",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = [%d] %p %m (%c)%n",
            "rootLogger.level = info",
            "rootLogger.appenderRef.file.ref = file",
            "",
        ]
    )


def format_command(
    java: str, classpath: str, cluster_id: str, config: Path, extra: list[str] | None = None
) -> list[str]:
    """The command that formats a node's storage, with share groups on."""
    return [
        java,
        "-cp",
        classpath,
        "kafka.tools.StorageTool",
        "format",
        # "--cluster-id=<id>" in one argument: an id may begin with "-", which the
        # tool's argument parser would otherwise take for an option.
        f"--cluster-id={cluster_id}",
        "-c",
        str(config),
        # Share groups are on by default in recent releases; say so explicitly anyway.
        "--feature",
        "share.version=1",
        *(extra or []),
    ]


def broker_command(
    java: str, classpath: str, heap: str, log_config: Path, config: Path
) -> list[str]:
    """The command that runs a node."""
    return [
        java,
        f"-Xmx{heap}",
        f"-Xms{heap}",
        "-XX:+UseG1GC",
        f"-Dlog4j2.configurationFile={log_config}",
        "-cp",
        classpath,
        "kafka.Kafka",
        str(config),
    ]


def wait_for_brokers(
    kafka: dict[str, str],
    brokers: int,
    ports: list[int],
    deadline: float,
    exited: Callable[[], str | None],
    where: str = "",
) -> None:
    """Returns once ``brokers`` brokers answer on ``kafka``'s settings; raises
    :class:`KafkaStartError` when ``exited`` says a node's process ended (its message) or at
    ``deadline`` (``time.monotonic()``), adding ``where`` (where to look) to the message."""
    client = KafkaClient(kafka)
    while time.monotonic() < deadline:
        gone = exited()
        if gone:
            raise KafkaStartError(gone)
        if all(port_open(HOST, p) for p in ports):
            try:
                if client.check_reachable(timeout=5) >= brokers:
                    return
            except ShuffleConnectionError:
                pass
        time.sleep(0.5)
    raise KafkaStartError(f"the Kafka broker did not accept connections in time{where}")


# --- a broker for one test session ---------------------------------------------------------


@dataclass
class KafkaBroker:
    """A running single-node broker that :func:`start_kafka` started."""

    bootstrap_servers: str
    home: Path
    process: subprocess.Popen = field(repr=False)
    remove_home: bool = False

    @property
    def log(self) -> Path:
        return self.home / "broker.log"

    def stop(self, timeout: float = 30.0) -> None:
        """Stops the broker (a clean shutdown, then a kill after ``timeout`` seconds) and
        deletes its data."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.home if self.remove_home else self.home / "data", ignore_errors=True)

    def __enter__(self) -> KafkaBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def start_kafka(
    home: Path | None = None,
    *,
    jars: Path | None = None,
    heap: str = "512m",
    timeout: float = 120.0,
) -> KafkaBroker:
    """Starts a single-node KRaft broker on free loopback ports and waits until it answers.

    Args:
        home: A folder for its configuration, data and log (``broker.log``); default a new
            temporary folder, deleted by :meth:`KafkaBroker.stop` (else only its data is).
        jars: The folder of Kafka's jars; default :func:`fetch_kafka_jars`'s.
        heap: The broker JVM's heap.
        timeout: Seconds to wait for it to answer.

    Raises:
        KafkaStartError: No Java, jars that could not be fetched, or a broker that did not
            start (the end of its log is in the message).
    """
    java = java_executable()
    classpath = str((jars or fetch_kafka_jars()) / "*")
    remove_home = home is None
    home = Path(tempfile.mkdtemp(prefix="kafka-shuffle-broker-")) if home is None else home
    home.mkdir(parents=True, exist_ok=True)
    port, controller_port = free_ports(2)
    config, log_config, log = (
        home / "server.properties",
        home / "log4j2.properties",
        home / "broker.log",
    )
    config.write_text(
        server_properties(
            node_id=1,
            voters=f"1@{HOST}:{controller_port}",
            listeners=plaintext_listeners(port, controller_port),
            data=home / "data",
        )
    )
    log_config.write_text(log4j2_properties(log))
    formatted = subprocess.run(
        format_command(java, classpath, new_cluster_id(), config),
        capture_output=True,
        text=True,
    )
    if formatted.returncode != 0:
        raise KafkaStartError(
            f"formatting the broker's storage in {home} failed:\n"
            f"{formatted.stdout[-3000:]}{formatted.stderr[-3000:]}"
        )
    with (home / "stdout.log").open("ab") as out:
        # In the starting process's session: a test run interrupted with Ctrl-C takes the
        # broker with it.
        process = subprocess.Popen(
            broker_command(java, classpath, heap, log_config, config),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=home,
        )
    broker = KafkaBroker(f"{HOST}:{port}", home, process, remove_home)

    def exited() -> str | None:
        if process.poll() is None:
            return None
        return (
            f"the Kafka broker exited with code {process.returncode} while starting; "
            f"the end of its output:\n{_tail(home / 'stdout.log')}\n{_tail(log)}"
        )

    try:
        wait_for_brokers(
            {"bootstrap.servers": broker.bootstrap_servers},
            1,
            [port],
            time.monotonic() + timeout,
            exited,
        )
    except KafkaStartError as exc:
        # Read before stop(), which may delete the folder the log is in.
        message = str(exc) if process.poll() is not None else f"{exc}; its log ends:\n{_tail(log)}"
        broker.stop(timeout=5)
        raise KafkaStartError(message) from None
    except BaseException:
        broker.stop(timeout=5)
        raise
    return broker
