"""A local S3-compatible object store: MinIO on 127.0.0.1, and Spark's S3A connector.

MinIO is built from the Go module proxy with ``go install`` into ``.local/go/bin`` (module
cache and build cache under ``.local/go`` too), once per pinned version
(:mod:`devstack.minio`). The server keeps
its objects in ``.local/s3/data`` and logs to ``.local/s3/server.log``; its credentials are
drawn the first time and kept in ``.local/s3/secrets.json`` (mode 0600). ``start`` creates
the bucket ``shuffle-dev``.

The Spark side: Hadoop's ``hadoop-aws`` (at the Hadoop version pyspark ships) with its AWS
SDK, resolved by Maven from ``stack/s3a/pom.xml`` into ``.local/s3a/libs``, and a
``spark-defaults.conf`` in ``.local/s3/spark-conf`` that puts them on the class path and
points ``s3a://`` at the local server. ``env`` prints what a shell evaluates to use both::

    eval "$(python -m devstack.locals3 env)"
    # AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION: pyarrow's
    # S3 file system (and any AWS SDK) read these; S3A reads the two keys.
    # SPARK_CONF_DIR: every SparkSession started afterwards (a classic one, or the Connect
    # server of `scripts/dev connect start`) reads its spark-defaults.conf.

Usage::

    python -m devstack.locals3 start     # idempotent; prints the endpoint
    python -m devstack.locals3 status
    python -m devstack.locals3 stop
    python -m devstack.locals3 env
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from devstack import minio, startlock
from devstack.localstack import LocalStackError, resolve_jars
from orchestration.testing.broker import port_open

ROOT = Path(__file__).resolve().parents[1]
POM = ROOT / "stack" / "s3a" / "pom.xml"
HOST = "127.0.0.1"
BUCKET = "shuffle-dev"
REGION = "us-east-1"


class LocalS3Error(LocalStackError):
    """The local object store could not be built or started; the message says why."""


def _local() -> Path:
    return ROOT / ".local"


def port() -> int:
    """The server's port: ``$SHUFFLE_LOCAL_S3_PORT``, default 19000."""
    return int(os.environ.get("SHUFFLE_LOCAL_S3_PORT", "19000"))


def endpoint() -> str:
    return f"http://{HOST}:{port()}"


def _home() -> Path:
    return _local() / "s3"


def binary() -> Path:
    return minio.binary()


def s3a_libs() -> Path:
    return _local() / "s3a" / "libs"


def spark_conf_dir() -> Path:
    return _home() / "spark-conf"


def pyspark_hadoop_version() -> str:
    """The Hadoop version of the installed pyspark's jars, which hadoop-aws must equal:
    it calls into hadoop-common, and another version fails at run time with missing
    methods (PySpark 4.0 and 4.1 ship Hadoop 3.4.1, 4.2 and 4.3 Hadoop 3.5.0)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    found = sorted(
        j.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
        for j in jars.glob("hadoop-client-api-*.jar")
    )
    if len(found) != 1:
        raise LocalS3Error(f"{jars} should hold one hadoop-client-api jar, it holds {found}")
    return found[0]


def ensure_jars() -> Path:
    """Resolves hadoop-aws (at the installed pyspark's Hadoop version) and its AWS SDK with
    Maven, once per version of the pom and of Hadoop."""
    return resolve_jars(POM, s3a_libs(), {"hadoop.version": pyspark_hadoop_version()})


def ensure_server() -> Path:
    """Builds MinIO with ``go install`` (once per pinned version); returns the binary."""
    try:
        return minio.build()
    except minio.MinioBuildError as exc:
        raise LocalS3Error(str(exc)) from None


def credentials() -> dict[str, str]:
    """The server's access key and secret key, drawn the first time and then kept."""
    path = _home() / "secrets.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    creds = {"access_key": "shuffle-dev", "secret_key": secrets.token_urlsafe(24)}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(creds))
    tmp.chmod(0o600)
    tmp.rename(path)
    return creds


def env() -> dict[str, str]:
    """The environment that points pyarrow, AWS SDKs and new Spark sessions at the server."""
    creds = credentials()
    write_spark_conf()
    return {
        "AWS_ENDPOINT_URL": endpoint(),
        "AWS_ACCESS_KEY_ID": creds["access_key"],
        "AWS_SECRET_ACCESS_KEY": creds["secret_key"],
        "AWS_REGION": REGION,
        "SPARK_CONF_DIR": str(spark_conf_dir()),
    }


def spark_settings() -> dict[str, str]:
    """Spark settings for ``s3a://`` paths on the local server: the S3A jars on the class
    path, the endpoint, path-style addressing. The keys come from ``AWS_ACCESS_KEY_ID`` and
    ``AWS_SECRET_ACCESS_KEY`` (S3A's default credential chain reads them)."""
    classpath = str(s3a_libs() / "*")
    return {
        "spark.driver.extraClassPath": classpath,
        "spark.executor.extraClassPath": classpath,
        "spark.hadoop.fs.s3a.endpoint": endpoint(),
        "spark.hadoop.fs.s3a.endpoint.region": REGION,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    }


def write_spark_conf() -> Path:
    """Writes ``spark-defaults.conf`` with :func:`spark_settings`; returns its folder."""
    folder = spark_conf_dir()
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["# Written by devstack/locals3.py: Spark's S3A connector on the local server."]
    lines += [f"{k} {v}" for k, v in spark_settings().items()]
    (folder / "spark-defaults.conf").write_text("\n".join(lines) + "\n")
    return folder


def _pid() -> int | None:
    try:
        pid = int((_home() / "server.pid").read_text().strip())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None
    except PermissionError:
        pass
    return pid


def _live(timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint()}/minio/health/live", timeout=timeout) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def refuse_a_foreign_server() -> None:
    """Raises :class:`LocalS3Error` when a process this checkout did not start holds the
    server's port: another checkout's server answers with credentials and data of its own,
    and its bucket would be refused as ``ACCESS_DENIED`` far from the cause."""
    if port_open(HOST, port()):
        raise LocalS3Error(
            f"port {port()} is taken by a process this checkout did not start (another "
            "checkout's S3 server?); stop it, or set SHUFFLE_LOCAL_S3_PORT"
        )


def _create_bucket() -> None:
    import pyarrow.fs as pafs

    creds = credentials()
    fs = pafs.S3FileSystem(
        access_key=creds["access_key"],
        secret_key=creds["secret_key"],
        region=REGION,
        endpoint_override=endpoint(),
        allow_bucket_creation=True,
    )
    fs.create_dir(BUCKET)


def start(timeout: float = 60.0) -> str:
    """Starts the server (building it first if needed) and creates the bucket; idempotent.
    Returns the endpoint."""
    with startlock.held(_home()):
        return _start(timeout)


def _start(timeout: float) -> str:
    ensure_jars()
    write_spark_conf()
    if _pid() is not None and _live():
        _create_bucket()
        return endpoint()
    refuse_a_foreign_server()
    exe = ensure_server()
    home = _home()
    (home / "data").mkdir(parents=True, exist_ok=True)
    creds = credentials()
    server_env = dict(os.environ)
    server_env.update(
        {
            "MINIO_ROOT_USER": creds["access_key"],
            "MINIO_ROOT_PASSWORD": creds["secret_key"],
            "MINIO_BROWSER": "off",
            "MINIO_UPDATE": "off",
        }
    )
    log = open(home / "server.log", "ab")  # noqa: SIM115 - the child keeps it open
    proc = subprocess.Popen(
        [str(exe), "server", str(home / "data"), "--address", f"{HOST}:{port()}", "--quiet"],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=server_env,
        start_new_session=True,
    )
    log.close()
    (home / "server.pid").write_text(str(proc.pid))
    deadline = time.monotonic() + timeout
    while not _live():
        if proc.poll() is not None:
            raise LocalS3Error(
                f"MinIO exited with {proc.returncode} while starting; see {home / 'server.log'}"
            )
        if time.monotonic() > deadline:
            raise LocalS3Error(
                f"MinIO did not answer on {endpoint()} within {timeout:.0f}s; "
                f"see {home / 'server.log'}"
            )
        time.sleep(0.2)
    _create_bucket()
    return endpoint()


def stop(timeout: float = 30.0) -> bool:
    """Stops the server; returns whether one was running."""
    pid = _pid()
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _pid() is not None and time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.2)
    if _pid() is not None:
        os.kill(pid, signal.SIGKILL)
    (_home() / "server.pid").unlink(missing_ok=True)
    return True


def status() -> str:
    pid = _pid()
    if pid is None:
        return f"local S3 (MinIO): stopped (data in {_home() / 'data'})"
    state = "answering" if _live() else "starting"
    return (
        f"local S3 (MinIO): running, pid {pid}, {endpoint()}, bucket {BUCKET}, {state}; "
        f"log {_home() / 'server.log'}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devstack.locals3", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("command", choices=["start", "stop", "status", "env", "build"])
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            print(start())
        elif args.command == "stop":
            print("local S3 stopped" if stop() else "local S3 was not running")
        elif args.command == "status":
            print(status())
        elif args.command == "build":
            ensure_jars()
            print(ensure_server())
        else:
            for key, value in env().items():
                print(f"export {key}={shlex.quote(value)}")
    except LocalStackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
