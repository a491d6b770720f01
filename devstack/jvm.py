"""Builds the JVM read path (``jvm/``, Maven) into ``orchestration/shuffle/spark/jars`` of the
checkout, where the editable install finds it.

The build itself is ``jvm/build_jvm.py``, the one a wheel's build runs too (``setup.py``);
this module only points it at the checkout's package folder. It is skipped while the jar is
newer than every file of ``jvm/``, so repeated ``scripts/dev`` commands cost nothing.

Usage::

    python -m devstack.jvm          # idempotent; prints the jars' folder
"""

from __future__ import annotations

import sys
from pathlib import Path

from jvm.build_jvm import JvmBuildError, ensure, skipped, up_to_date

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["JvmBuildError", "built", "ensure_jvm_jars", "jars_dir"]


def jars_dir() -> Path:
    """Where the built jar and kafka-clients go (inside the library package)."""
    import orchestration.shuffle.spark as spark_pkg

    return Path(spark_pkg.__file__).resolve().parent / "jars"


def built(dest: Path | None = None) -> bool:
    """Whether the jars are in place and newer than every source file."""
    return up_to_date(dest or jars_dir())


def ensure_jvm_jars() -> Path:
    """Builds the jars with Maven unless they are up to date; returns their folder."""
    dest = jars_dir()
    ensure(dest)
    return dest


def main() -> int:
    if skipped():
        print("the JVM read path is not built (KAFKA_SHUFFLE_SKIP_JVM)", file=sys.stderr)
        return 0
    try:
        print(ensure_jvm_jars())
    except JvmBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
