"""MinIO, the local S3 server's binary, built from the Go module proxy with ``go install``
into ``.local/go/bin`` (module cache and build cache under ``.local/go`` too), once per
pinned version.

It needs only the standard library and Go, so that it can run before the checkout's
virtualenv exists: ``.ci/run`` builds it beside the lint step, and ``devstack.locals3``
(the server) finds it built.

Usage::

    python3 -m devstack.minio     # prints the binary's path
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# MinIO's last source release on the Go module proxy (the repository is archived; the
# proxy serves it as a pseudo-version of its final commit).
MINIO_MODULE = "github.com/minio/minio"
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"


class MinioBuildError(RuntimeError):
    """MinIO could not be built; the message says why."""


def go_dir() -> Path:
    return ROOT / ".local" / "go"


def binary() -> Path:
    return go_dir() / "bin" / "minio"


def built() -> bool:
    """Whether the binary at the pinned version is there."""
    stamp = binary().with_name("minio.version")
    return binary().exists() and stamp.exists() and stamp.read_text() == MINIO_VERSION


def build() -> Path:
    """Builds MinIO with ``go install`` unless built already; returns the binary."""
    if built():
        return binary()
    go = shutil.which("go")
    if go is None:
        raise MinioBuildError(
            f"Go ('go') is needed to build MinIO ({MINIO_MODULE}@{MINIO_VERSION}); install it"
        )
    env = dict(os.environ)
    env.update(
        {
            "GOPATH": str(go_dir()),
            "GOBIN": str(binary().parent),
            "GOCACHE": str(go_dir() / "cache"),
            "GOMODCACHE": str(go_dir() / "pkg" / "mod"),
            # The module cache stays removable (go makes it read-only otherwise).
            "GOFLAGS": "-modcacherw",
            "CGO_ENABLED": "0",
        }
    )
    print(f"building MinIO with go install ({MINIO_VERSION}) ...", file=sys.stderr, flush=True)
    proc = subprocess.run(
        [go, "install", f"{MINIO_MODULE}@{MINIO_VERSION}"], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0 or not binary().exists():
        raise MinioBuildError(
            f"go install {MINIO_MODULE}@{MINIO_VERSION} failed (exit {proc.returncode}):\n"
            f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    binary().with_name("minio.version").write_text(MINIO_VERSION)
    return binary()


def main() -> int:
    try:
        print(build())
    except MinioBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
