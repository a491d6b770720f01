"""jvm/build_jvm.py, the one build of the JVM read path: when it builds, what it refuses to
start without, and what it says (Maven itself runs in tests/integration/test_package.py)."""

import os
import time

import pytest

from jvm import build_jvm


@pytest.fixture
def no_tools(monkeypatch):
    monkeypatch.setattr(build_jvm.shutil, "which", lambda name: None)
    monkeypatch.delenv("JAVA_HOME", raising=False)


def test_without_maven_and_a_jdk_the_build_names_both_and_the_way_around(no_tools, tmp_path):
    with pytest.raises(build_jvm.JvmBuildError) as info:
        build_jvm.build(tmp_path / "jars")
    message = str(info.value)
    assert "Maven ('mvn'" in message and "a JDK 17 or newer ('javac'" in message
    assert "KAFKA_SHUFFLE_SKIP_JVM=1" in message
    assert not (tmp_path / "jars").exists()


def test_a_jdk_under_java_home_counts(no_tools, tmp_path, monkeypatch):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "javac").write_text("")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    assert [m for m in build_jvm.missing_tools() if "JDK" in m] == []


@pytest.mark.parametrize(("value", "skipped"), [("1", True), ("true", True), ("0", False)])
def test_skip_variable(monkeypatch, value, skipped):
    monkeypatch.setenv(build_jvm.SKIP_ENV, value)
    assert build_jvm.skipped() is skipped


def _jars(folder, *names):
    folder.mkdir(exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"")
    return folder


def test_up_to_date_needs_one_jar_of_each_newer_than_every_source(tmp_path):
    jar, clients = "kafka-shuffle-spark_2.13-0.1.0.jar", "kafka-clients-3.9.2.jar"
    assert not build_jvm.up_to_date(_jars(tmp_path / "only-jar", jar))
    two = _jars(tmp_path / "two", jar, clients, "kafka-shuffle-spark_2.13-0.0.9.jar")
    assert build_jvm.jars_in(two) == []
    fresh = _jars(tmp_path / "fresh", jar, clients)
    assert build_jvm.jars_in(fresh) == [fresh / jar, fresh / clients]
    assert build_jvm.up_to_date(fresh)
    # A jar older than the pom is stale.
    old = time.time() - 10 * 365 * 86400
    os.utime(fresh / jar, (old, old))
    assert not build_jvm.up_to_date(fresh)
