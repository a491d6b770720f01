"""Builds the JVM read path (``jvm/``, Maven) into ``orchestration/shuffle/spark/jars``.

The jar is compiled against the jars of the installed PySpark (Spark, Arrow, Jackson, Scala:
each passed to Maven by path, so the versions match by construction) and copied with
kafka-clients, which Maven resolves, next to the library's code: a wheel built after set-up
carries them, and :func:`orchestration.shuffle.jvm_spark_conf` finds them there. The build is
skipped while the jar is newer than every file of ``jvm/``.

Usage::

    python -m devstack.jvm          # idempotent; prints the jars' folder
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "jvm"
POM = PROJECT / "pom.xml"
JAR_NAME = "kafka-shuffle-jvm.jar"

# pom property -> the file name prefix of the pyspark jar it names.
PYSPARK_JARS = {
    "spark-sql.jar": "spark-sql_",
    "spark-sql-api.jar": "spark-sql-api_",
    "spark-catalyst.jar": "spark-catalyst_",
    "spark-core.jar": "spark-core_",
    "spark-common-utils.jar": "spark-common-utils_",
    "spark-unsafe.jar": "spark-unsafe_",
    "scala-library.jar": "scala-library-",
    "arrow-vector.jar": "arrow-vector-",
    "arrow-format.jar": "arrow-format-",
    "arrow-memory-core.jar": "arrow-memory-core-",
    "arrow-compression.jar": "arrow-compression-",
    "flatbuffers-java.jar": "flatbuffers-java-",
    "jackson-core.jar": "jackson-core-",
    "jackson-databind.jar": "jackson-databind-",
    "jackson-annotations.jar": "jackson-annotations-",
    "slf4j-api.jar": "slf4j-api-",
    "kryo-shaded.jar": "kryo-shaded-",
    "lz4-java.jar": "lz4-java-",
}


class JvmBuildError(RuntimeError):
    """The JVM read path could not be built; the message says why."""


def jars_dir() -> Path:
    """Where the built jar and kafka-clients go (inside the library package)."""
    import orchestration.shuffle.spark as spark_pkg

    return Path(spark_pkg.__file__).resolve().parent / "jars"


def pyspark_jars() -> Path:
    """The jars folder of the PySpark this interpreter imports."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def _pyspark_jar(folder: Path, prefix: str) -> Path:
    # The version follows the prefix: "spark-sql_2.13-..." but not "spark-sql-api_...".
    found = sorted(p for p in folder.glob(f"{prefix}*.jar") if p.name[len(prefix)].isdigit())
    if len(found) != 1:
        raise JvmBuildError(
            f"expected one {prefix}<version>.jar in {folder}, found {[p.name for p in found]}"
        )
    return found[0]


def _newest_source() -> float:
    sources = [POM, *(p for p in (PROJECT / "src").rglob("*") if p.is_file())]
    return max(p.stat().st_mtime for p in sources)


def built(dest: Path | None = None) -> bool:
    """Whether the jars are in place and newer than every source file."""
    dest = dest or jars_dir()
    jar = dest / JAR_NAME
    if not jar.exists() or not list(dest.glob("kafka-clients-*.jar")):
        return False
    return jar.stat().st_mtime > _newest_source()


def ensure_jvm_jars() -> Path:
    """Builds the jar with Maven unless it is up to date; returns the jars' folder."""
    dest = jars_dir()
    if built(dest):
        return dest
    if shutil.which("mvn") is None:
        raise JvmBuildError(f"Maven ('mvn') is needed to build {PROJECT}; install it")
    folder = pyspark_jars()
    props = [f"-Dpyspark.jars={folder}"] + [
        f"-D{prop}={_pyspark_jar(folder, prefix)}" for prop, prefix in PYSPARK_JARS.items()
    ]
    print(f"building the JVM read path with Maven from {POM} ...", file=sys.stderr, flush=True)
    proc = subprocess.run(
        ["mvn", "-q", "-B", "-f", str(POM), "package", *props], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise JvmBuildError(
            f"Maven could not build {POM} (exit {proc.returncode}):\n"
            f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    target = PROJECT / "target"
    staging = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copy2(target / JAR_NAME, staging / JAR_NAME)
    for dep in (target / "runtime").glob("*.jar"):
        shutil.copy2(dep, staging / dep.name)
    # The copy is newer than the sources even when the build reused old classes.
    (staging / JAR_NAME).touch()
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return dest


def main() -> int:
    try:
        print(ensure_jvm_jars())
    except JvmBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
