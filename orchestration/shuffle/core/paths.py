"""Where a queue's output lives: a plain path, a ``file:`` URI or a URI of any file system
``pyarrow.fs`` resolves (``s3://`` or Spark's ``s3a://``, ``gs://``, ``hdfs://``, ``abfs://``,
...), spelled for pyarrow and for Spark; how a file is made visible whole on each file
system; and whether the executors of a Spark session can share a local path.

Pure but for :func:`open_filesystem`, the one place the engine turns a location into a
``pyarrow.fs`` file system.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

from orchestration.shuffle.errors import ShuffleOptionError

# A URI scheme is at least two characters: "C:\\data" is a Windows path, not a URI.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
# Spark (Hadoop) and pyarrow spell S3 differently: Hadoop's current connector is s3a
# (s3n and s3 are its retired ones), pyarrow knows s3 only.
_S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
# pyarrow says gcs or gs; Hadoop's connector registers gs.
_GCS_SCHEMES = frozenset({"gs", "gcs"})
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass(frozen=True)
class Location:
    """An output location as given and in the spellings pyarrow and Spark understand.

    Attributes:
        given: the location as the caller wrote it (shown in errors).
        scheme: the URI scheme, lower case; ``""`` for a plain path.
        arrow: for pyarrow: an absolute local path (plain path or ``file:``), or a URI that
            ``pyarrow.fs.FileSystem.from_uri`` resolves (``s3a://`` becomes ``s3://``).
        spark: for Spark's readers: a plain path stays as it is (resolved to an absolute
            one), ``file:`` stays ``file:``, ``s3://`` becomes ``s3a://``.

    Example::

        loc = parse_location("s3a://bucket/scores")
        loc.arrow, loc.spark  # "s3://bucket/scores", "s3a://bucket/scores"
    """

    given: str
    scheme: str
    arrow: str
    spark: str

    @property
    def is_local(self) -> bool:
        """Whether the location is on this machine's local file system (plain or ``file:``)."""
        return self.scheme in ("", "file")

    def child(self, name: str) -> str:
        """The location of file ``name`` in this one, in the caller's spelling (for errors)."""
        return f"{self.given.rstrip('/')}/{name}"


def parse_location(output: str | os.PathLike[str]) -> Location:
    """The :class:`Location` of a directory given as a plain path or a URI; raises
    :class:`ShuffleOptionError` for one that names no directory."""
    given = os.fspath(output)
    if not isinstance(given, str) or not given.strip():
        raise ShuffleOptionError(f"output must be a path or a URI, got {output!r}")
    found = _SCHEME.match(given)
    if found is None:
        path = os.path.abspath(given)
        return Location(given, "", path, path)
    scheme = found.group(1).lower()
    parts = urllib.parse.urlsplit(given)
    if scheme == "file":
        path = urllib.parse.unquote(parts.path)
        if parts.netloc not in ("", "localhost") or not path.startswith("/"):
            raise ShuffleOptionError(
                f"output {given!r}: a file: URI names an absolute path on this machine "
                "(file:///data/out)"
            )
        path = os.path.normpath(path)
        return Location(given, "file", path, "file://" + path)
    if not parts.netloc:
        raise ShuffleOptionError(
            f"output {given!r}: a {scheme}: URI needs a bucket, container or host "
            f"({scheme}://<bucket>/<prefix>)"
        )
    rest = parts.path.rstrip("/")
    query = f"?{parts.query}" if parts.query else ""
    if scheme in _S3_SCHEMES:
        return Location(
            given, scheme, f"s3://{parts.netloc}{rest}{query}", f"s3a://{parts.netloc}{rest}"
        )
    if scheme in _GCS_SCHEMES:
        return Location(
            given, scheme, f"gs://{parts.netloc}{rest}{query}", f"gs://{parts.netloc}{rest}"
        )
    # Any other scheme: pyarrow resolves it or says it cannot; Spark gets it as it is, since
    # Hadoop's connectors (hdfs, viewfs, abfs, abfss, ...) use the same names.
    return Location(
        given, scheme, f"{scheme}://{parts.netloc}{rest}{query}", f"{scheme}://{parts.netloc}{rest}"
    )


# pyarrow file systems of object stores, one per bucket and process: opening a client
# costs more than reading a Parquet footer.
_STORES: dict[str, Any] = {}


def open_filesystem(location: Location) -> tuple[Any, str]:
    """The ``pyarrow.fs`` file system of ``location`` and the location's path on it.

    A local location opens the local file system; any other is resolved by
    ``pyarrow.fs.FileSystem.from_uri`` from its pyarrow spelling. S3's endpoint, region and
    keys come from the environment (``AWS_ENDPOINT_URL``, ``AWS_REGION``,
    ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``), as pyarrow reads them, on the driver
    and on each executor. Raises :class:`ShuffleOptionError` naming the location when
    pyarrow cannot open it.
    """
    import pyarrow as pa
    import pyarrow.fs as pafs

    if location.is_local:
        return pafs.LocalFileSystem(), location.arrow
    scheme, rest = location.arrow.split("://", 1)
    try:
        if scheme not in ("s3", "gs"):
            return pafs.FileSystem.from_uri(location.arrow)
        # Object stores name a file "bucket/key".
        bucket = rest.split("?", 1)[0].split("/", 1)[0]
        store = f"{scheme}://{bucket}"
        fs = _STORES.get(store)
        if fs is None:
            fs = _STORES[store] = pafs.FileSystem.from_uri(store)[0]
        return fs, rest.split("?", 1)[0]
    except (OSError, pa.ArrowException) as exc:
        raise ShuffleOptionError(
            f"{location.given!r}: pyarrow cannot open its file system: {exc}"
        ) from None


@dataclass(frozen=True)
class AtomicWrite:
    """How a file is written so that a reader lists it only whole.

    Attributes:
        rename: write it under a hidden name (``.<name>.tmp``, which Spark's readers skip),
            then rename it to its name. Otherwise the final name is written in one upload.
        fsync: sync the file and then its directory through the operating system, so that
            a crash after the rename cannot leave a renamed but empty file (a local disk).
    """

    rename: bool
    fsync: bool


def atomic_write(type_name: str) -> AtomicWrite:
    """How to write a whole file on the ``pyarrow.fs`` file system of ``type_name``
    (``FileSystem.type_name``); raises :class:`ShuffleOptionError` for one whose behaviour
    is not known here.

    The one place that decides it, per file system:

    - ``local``: a file is visible in its directory from its creation on, while it is
      being written, and a rename within a file system is atomic: hidden name, fsync,
      rename, fsync of the directory.
    - ``hdfs``: a file being written is listed (with its length growing), and the
      NameNode renames atomically: hidden name, rename.
    - ``abfs``: Arrow's Azure output stream creates the blob when it opens and may commit
      blocks before it closes, so an unfinished blob can be listed; an account with a
      hierarchical namespace renames atomically (without one the rename fails, loudly,
      and the hidden blob is never read): hidden name, rename.
    - ``s3`` and ``gcs``: an object store has no rename (a copy and a delete, not atomic),
      and an object is visible only once its upload completed (one PUT, a completed
      multipart or a finalised resumable upload): the final name, in one upload.
    - ``mock``: pyarrow's in-memory file system lives in one process: what Spark tasks
      wrote there would vanish with their worker. Refused.
    """
    if type_name == "local":
        return AtomicWrite(rename=True, fsync=True)
    if type_name == "mock":
        raise ShuffleOptionError(
            "file system 'mock' is pyarrow's in-memory one, private to each process: files "
            "Spark tasks wrote there would be lost; use a shared location"
        )
    if type_name in ("hdfs", "abfs"):
        return AtomicWrite(rename=True, fsync=False)
    if type_name in ("s3", "gcs"):
        return AtomicWrite(rename=False, fsync=False)
    raise ShuffleOptionError(
        f"file system {type_name!r}: it is not known whether it renames atomically or "
        "publishes an upload only whole, so queue output cannot be written there safely; "
        "use a local path, s3a://, gs://, hdfs:// or abfs://"
    )


def _master_on_this_host(master: str) -> bool:
    m = master.strip().lower()
    if m == "local" or m.startswith(("local[", "local-cluster[")):
        return True
    if m.startswith("spark://"):
        # A standalone master listening on a loopback address only has workers on its own
        # host (HA masters are listed comma-separated).
        hosts = [h.rsplit(":", 1)[0].strip("[]") for h in m[len("spark://") :].split(",")]
        return bool(hosts) and all(h in LOOPBACK_HOSTS for h in hosts)
    return False


def check_shared(
    location: Location,
    *,
    master: str | None = None,
    connect_host: str | None = None,
    what: str = "output",
) -> None:
    """Refuses a local ``location`` the session's executors may not share with the driver.

    A plain or ``file:`` path is one machine's disk: executors on other hosts would write
    files there that the driver never lists. It is accepted when the session runs on this
    host: a classic session whose ``master`` (``spark.master``) is ``local``,
    ``local[...]``, ``local-cluster[...]`` or a standalone master on a loopback address; a
    Spark Connect session (whose server's master the client cannot see) whose server
    (``connect_host``) is on a loopback address. Anything else raises
    :class:`ShuffleOptionError` saying why and what to use instead.
    """
    if not location.is_local:
        return
    if connect_host is not None:
        host = connect_host.strip().strip("[]").lower()
        if host in LOOPBACK_HOSTS:
            return
        where = (
            f"the session is a Spark Connect session of the server at {connect_host!r}, whose "
            "executors may run on other hosts (a Connect client cannot see the server's master)"
        )
    elif master is None or _master_on_this_host(master):
        return
    else:
        where = f"the Spark master is {master!r}, whose executors may run on other hosts"
    raise ShuffleOptionError(
        f"{what} {location.given!r} is a path on this machine's local disk, but {where}: "
        "files written there by an executor elsewhere would never be seen here. Use a "
        "location every executor and the driver share, e.g. s3a://<bucket>/<prefix> "
        "(or gs://, hdfs://, abfs://)"
    )


def _endpoint_host(endpoint: str | None) -> str | None:
    """An S3 endpoint as host[:port], lower case; None for AWS itself (unset or amazonaws)."""
    if not endpoint or not endpoint.strip():
        return None
    text = endpoint.strip().lower()
    text = text.split("://", 1)[1] if "://" in text else text
    host = text.split("/", 1)[0]
    return None if host.endswith("amazonaws.com") or host.endswith("amazonaws.com.cn") else host


def endpoint_mismatch(
    location: Location, *, spark_endpoint: str | None, arrow_endpoint: str | None
) -> str | None:
    """Why Spark and pyarrow would reach different stores for an ``s3``/``s3a`` location, or
    None when they reach the same one (or the location is not on S3).

    The engine writes and reads some files with pyarrow (queue output, the columnar write
    path's Parquet sources) and Spark reads or lists the same ones through Hadoop's S3A:
    both must talk to one endpoint.

    Args:
        location: The location.
        spark_endpoint: S3A's endpoint for the location's bucket
            (``spark.hadoop.fs.s3a.bucket.<bucket>.endpoint`` or
            ``spark.hadoop.fs.s3a.endpoint``), None when unset (AWS).
        arrow_endpoint: pyarrow's (``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``), None
            when unset (AWS).
    """
    if location.scheme not in _S3_SCHEMES:
        return None
    spark_host, arrow_host = _endpoint_host(spark_endpoint), _endpoint_host(arrow_endpoint)
    if spark_host == arrow_host:
        return None
    spark_side = spark_endpoint if spark_host else "AWS (spark.hadoop.fs.s3a.endpoint is unset)"
    arrow_side = arrow_endpoint if arrow_host else "AWS (AWS_ENDPOINT_URL is unset)"
    return (
        f"Spark's S3A connector reaches {spark_side} but pyarrow reaches {arrow_side}: both "
        "must name the same store. Set spark.hadoop.fs.s3a.endpoint when the session is "
        "built, or AWS_ENDPOINT_URL in the environment of the driver and of the executors "
        "(spark.executorEnv.AWS_ENDPOINT_URL)"
    )
