"""Builds the JVM read path (this folder, Maven) into the jars the Python package ships.

One build for both of its users: ``setup.py`` (a wheel or an editable install, from a
checkout or from the source distribution, which holds this folder) and ``devstack/jvm.py``
(a checkout's set-up). Standard library only, so that it runs in a build's isolated
environment, and outside the library, which never builds anything.

Maven compiles against Spark's published artifacts (``provided`` scope, see ``pom.xml``) and
copies kafka-clients beside the jar; both land in a folder that holds nothing else, so the
library finds exactly one of each there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parent
POM = PROJECT / "pom.xml"
# The Maven artifactId: the jar is <ARTIFACT>-<version>.jar.
ARTIFACT = "kafka-shuffle-spark_2.13"
# Set to 1 to build the Python package without the JVM read path (reads then take the
# Python source).
SKIP_ENV = "KAFKA_SHUFFLE_SKIP_JVM"


class JvmBuildError(RuntimeError):
    """The JVM read path could not be built; the message says why and what to do."""


def skipped() -> bool:
    """Whether the environment asks for a package without the JVM read path."""
    return os.environ.get(SKIP_ENV, "").strip().lower() in ("1", "true", "yes")


def _javac() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").exists():
        return str(Path(home) / "bin" / "javac")
    return shutil.which("javac")


def missing_tools() -> list[str]:
    """What of Maven and a JDK is not installed, each with what to install."""
    missing = []
    if shutil.which("mvn") is None:
        missing.append("Maven ('mvn', 3.6 or newer; e.g. apt-get install maven)")
    if _javac() is None:
        missing.append("a JDK 17 or newer ('javac'; e.g. apt-get install openjdk-17-jdk-headless)")
    return missing


def _sources() -> list[Path]:
    return [POM, *(p for p in (PROJECT / "src").rglob("*") if p.is_file())]


def jars_in(folder: Path) -> list[Path]:
    """The read path's jar and kafka-clients in ``folder``, or [] unless both are there."""
    jars = sorted(folder.glob(f"{ARTIFACT}-*.jar"))
    clients = sorted(folder.glob("kafka-clients-*.jar"))
    if len(jars) != 1 or len(clients) != 1:
        return []
    return [jars[0], clients[0]]


def up_to_date(dest: Path) -> bool:
    """Whether ``dest`` holds the jars, newer than every source file."""
    jars = jars_in(dest)
    if not jars:
        return False
    newest = max(p.stat().st_mtime for p in _sources())
    return jars[0].stat().st_mtime > newest


def build(dest: Path, *, work: Path | None = None, quiet: bool = True) -> list[Path]:
    """Runs ``mvn clean package`` and puts the jar and kafka-clients in ``dest``.

    ``dest`` is replaced whole (no jar of an earlier version stays). ``work`` is Maven's
    build folder (default ``jvm/target``): a package build passes its own, so that it leaves
    nothing in the source tree. Returns the two jars' paths.

    Raises:
        JvmBuildError: Maven or a JDK is missing, or the build failed (with Maven's output).
    """
    missing = missing_tools()
    if missing:
        raise JvmBuildError(
            "building the JVM read path of kafka-shuffle (jvm/) needs "
            + " and ".join(missing)
            + f"; install them, or set {SKIP_ENV}=1 to build without the JVM read path "
            "(shuffles are then read by the Python source)"
        )
    work = (work or PROJECT / "target").resolve()
    cmd = ["mvn", "-B", "-f", str(POM), f"-Dkafkashuffle.build.directory={work}"]
    if quiet:
        cmd.append("-q")
    print(f"building the JVM read path with Maven from {POM} ...", file=sys.stderr, flush=True)
    proc = subprocess.run([*cmd, "clean", "package"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise JvmBuildError(
            f"Maven could not build {POM} (exit {proc.returncode}; it needs a JDK 17 or newer "
            f"and Spark's artifacts from a Maven repository):\n"
            f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    jar = [p for p in work.glob(f"{ARTIFACT}-*.jar") if not p.name.endswith("-sources.jar")]
    clients = list((work / "runtime").glob("kafka-clients-*.jar"))
    if len(jar) != 1 or len(clients) != 1:
        raise JvmBuildError(f"Maven built {jar + clients} in {work}: expected one jar of each")
    staging = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for path in (jar[0], clients[0]):
        shutil.copy2(path, staging / path.name)
    # Newer than the sources even when Maven kept a jar's old time stamp.
    (staging / jar[0].name).touch()
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return jars_in(dest)


def ensure(dest: Path) -> list[Path]:
    """:func:`build` unless ``dest`` is :func:`up_to_date`; returns the jars' paths."""
    if up_to_date(dest):
        return jars_in(dest)
    return build(dest)
