"""The test harness's pieces that need no broker: fetching Kafka's jars (from a repository
in a temporary folder), the node's settings, the window failures, and how pytest finds the
plugin."""

import hashlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from orchestration.shuffle.testing import fail_window_writes, write_attempts_to_fail
from orchestration.testing import broker
from orchestration.testing.broker import KafkaStartError, fetch_kafka_jars

ROOT = Path(__file__).resolve().parents[2]


def publish(repo: Path, coordinate: str, content: bytes) -> str:
    """Puts a jar where a Maven repository keeps it; returns its SHA-256."""
    url = broker.jar_url(repo.as_uri(), coordinate)
    path = Path(url.removeprefix("file://"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return hashlib.sha256(content).hexdigest()


@pytest.fixture
def repo(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    jars = (
        ("org.example:a-lib:1.0", publish(root, "org.example:a-lib:1.0", b"A" * 3000)),
        ("org.example.deep:b_2.13:2.1-x", publish(root, "org.example.deep:b_2.13:2.1-x", b"B")),
    )
    monkeypatch.setattr(broker, "KAFKA_JARS", jars)
    return root


def test_jars_are_fetched_by_the_repository_layout_and_kept(repo, tmp_path):
    dest = fetch_kafka_jars(tmp_path / "cache", repository=repo.as_uri())
    assert sorted(p.name for p in dest.glob("*.jar")) == ["a-lib-1.0.jar", "b_2.13-2.1-x.jar"]
    assert (dest / "a-lib-1.0.jar").read_bytes() == b"A" * 3000
    # Held: a second call with the repository gone fetches nothing.
    fetch_kafka_jars(tmp_path / "cache", repository=(tmp_path / "gone").as_uri())


def test_a_jar_whose_digest_differs_is_refused_and_not_kept(repo, tmp_path):
    publish(repo, "org.example:a-lib:1.0", b"tampered")
    with pytest.raises(KafkaStartError, match="a-lib-1.0.jar: SHA-256 .* is not the pinned"):
        fetch_kafka_jars(tmp_path / "cache", repository=repo.as_uri())
    assert not (tmp_path / "cache" / "a-lib-1.0.jar").exists()
    assert not list((tmp_path / "cache").glob(".*.part"))


def test_a_cached_jar_that_changed_is_fetched_again(repo, tmp_path):
    dest = fetch_kafka_jars(tmp_path / "cache", repository=repo.as_uri())
    (dest / "b_2.13-2.1-x.jar").write_bytes(b"truncated")
    fetch_kafka_jars(dest, repository=repo.as_uri())
    assert (dest / "b_2.13-2.1-x.jar").read_bytes() == b"B"


def test_a_missing_jar_names_its_url_and_the_mirror_setting(repo, tmp_path):
    (repo / "org" / "example" / "a-lib" / "1.0" / "a-lib-1.0.jar").unlink()
    with pytest.raises(KafkaStartError, match=r"a-lib/1.0/a-lib-1.0.jar.*KAFKA_SHUFFLE_MAVEN_REPO"):
        fetch_kafka_jars(tmp_path / "cache", repository=repo.as_uri())


def test_the_cache_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("KAFKA_SHUFFLE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert broker.cache_dir() == tmp_path / "xdg" / "kafka-shuffle"
    monkeypatch.setenv("KAFKA_SHUFFLE_CACHE", str(tmp_path / "mine"))
    assert broker.cache_dir() == tmp_path / "mine"


def test_the_pinned_jars_are_the_development_stacks_kafka_release():
    pom = (ROOT / "stack" / "kafka" / "pom.xml").read_text()
    kafka = re.search(r"<kafka.version>(.*?)</kafka.version>", pom).group(1)
    log4j = re.search(r"<log4j.version>(.*?)</log4j.version>", pom).group(1)
    assert broker.KAFKA_VERSION == kafka
    pinned = dict(broker.KAFKA_JARS)
    for needed in (
        f"org.apache.kafka:kafka_2.13:{kafka}",
        f"org.apache.kafka:kafka-server:{kafka}",
        f"org.apache.kafka:kafka-clients:{kafka}",
        f"org.apache.logging.log4j:log4j-core:{log4j}",
        f"org.apache.logging.log4j:log4j-slf4j-impl:{log4j}",
    ):
        assert needed in pinned, needed
    assert all(re.fullmatch(r"[0-9a-f]{64}", d) for d in pinned.values())
    assert len({c.split(":")[1] for c in pinned}) == len(pinned)


def test_a_single_node_is_its_own_quorum_with_one_replica(tmp_path):
    text = broker.server_properties(
        node_id=1,
        voters="1@127.0.0.1:9093",
        listeners=broker.plaintext_listeners(9092, 9093),
        data=tmp_path / "data",
    )
    conf = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    assert conf["process.roles"] == "broker,controller"
    assert conf["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert conf["offsets.topic.replication.factor"] == "1"
    assert conf["transaction.state.log.min.isr"] == "1"
    assert conf["auto.create.topics.enable"] == "false"
    first, second = broker.free_ports(2)
    assert first != second


def test_a_window_failure_is_used_up_by_the_writes_it_names():
    with fail_window_writes("d2", topic="t-a.events", times=1):
        assert write_attempts_to_fail("t-a.events", "d1") == 0
        assert write_attempts_to_fail("t-b.events", "d2") == 0
        assert write_attempts_to_fail("t-a.events", "d2") > 1000
        assert write_attempts_to_fail("t-a.events", "d2") == 0
    with fail_window_writes("d2", times=2):
        assert write_attempts_to_fail("any", "d2") > 0
        assert write_attempts_to_fail("other", "d2") > 0
        assert write_attempts_to_fail("any", "d2") == 0
    with fail_window_writes("d3"):
        pass
    # Left unused, it ends with its block.
    assert write_attempts_to_fail("any", "d3") == 0


def test_pytest_finds_the_plugin_and_loading_it_loads_no_spark_kafka_or_dagster():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    module = project["entry-points"]["pytest11"]["kafka_shuffle"]
    assert module == "orchestration.testing.plugin"
    code = (
        f"import sys, {module} as p\n"
        "print([n for n in ('shuffle_kafka', 'shuffle_spark', 'shuffle_io_manager',"
        " 'shuffle_topic_prefix') if not hasattr(p, n)])\n"
        "print([m for m in ('pyspark', 'confluent_kafka', 'dagster') if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.split("\n")[:2] == ["[]", "[]"]
