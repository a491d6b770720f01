"""Spark's Python worker daemon, with the engine's modules imported before it forks.

Spark starts Python workers by forking them from one daemon process per executor, and stops
workers that have been idle for a minute. A worker forked from Spark's own daemon
(``pyspark.daemon``) then imports pyarrow, pandas and the engine again before its first
task: 1-2 s on a busy machine, paid by the first Python task after every idle minute (a
notebook's next cell, a Dagster run's next step). Forked from this daemon, which imported
them once, a worker starts with them loaded.

Spark runs it as ``python -m orchestration.shuffle.spark.daemon`` when a session has
``spark.python.daemon.module`` set to this module (:data:`DAEMON_SETTING`, which
:func:`~orchestration.shuffle.spark.session.session_settings` and
:func:`~orchestration.shuffle.spark.jvm.jvm_spark_conf` give); every executor's Python must
then have the package installed, as its Python read path already needs.

A worker's first task also puts Spark's files directory on ``sys.path`` and calls
``importlib.invalidate_caches()``, which on Python 3.11 makes every zip archive finder in
``sys.path_importer_cache`` read its archive's directory again: one finder per package
imported from ``pyspark.zip`` (16 after the imports here, more as a worker imports), about
80 ms of every new worker on an idle machine, and more while the executor is busy. The
daemon installs finders for zip archives that read an archive's directory again only when
the archive changed (:class:`ArchiveFinder`, :func:`keep_archive_listings`).

It imports the worker module Spark names too (``pyspark.worker``), which Spark's own daemon
imports in each worker after the fork.

Last, it freezes what the imports allocated out of the garbage collector's reach
(``gc.freeze()``, as Python's documentation advises before forking): a collection in a
worker (the daemon runs a full one after each task of a reused worker) would otherwise visit
every object of pandas and pyarrow, about 20 ms each time, and first copy every page they
live on, about 40 ms more in each new worker.

Only imports happen before the fork: none of these modules starts a thread of its own when
imported (numpy's BLAS and pyarrow's allocator start theirs, and both are fork-safe, as every
``multiprocessing`` program that imports them before forking relies on). A module that cannot
be imported is skipped: the worker then imports what it needs itself, as it would anyway.
"""

import gc
import importlib
import os
import sys
import zipimport

# The Spark setting, and this module's name as it is given there.
DAEMON_SETTING = "spark.python.daemon.module"
DAEMON_MODULE = "orchestration.shuffle.spark.daemon"

PRELOADED = (
    "numpy",
    "pyarrow",
    "pyarrow.compute",
    "pyarrow.ipc",
    "pandas",
    "orchestration.shuffle.spark.reader",
    "orchestration.shuffle.spark.writer",
    "orchestration.shuffle.spark.perkey",
)


def preload(modules: tuple[str, ...] = PRELOADED) -> list[str]:
    """Imports ``modules``; returns those that could not be imported."""
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


class ArchiveFinder(zipimport.zipimporter):
    """zipimport's finder of a zip archive on ``sys.path``, whose ``invalidate_caches``
    reads the archive's directory again only when the archive's size or modification time
    changed since it was read: ``importlib.invalidate_caches()`` then costs a ``stat`` per
    finder instead of parsing the archive's directory once per finder."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._stamp = _stamp(self.archive)

    def invalidate_caches(self) -> None:
        stamp = _stamp(self.archive)
        if stamp is None or stamp != self._stamp:
            super().invalidate_caches()
            self._stamp = stamp


def keep_archive_listings() -> int:
    """Makes zip archives on ``sys.path`` found by :class:`ArchiveFinder` from now on: in
    ``sys.path_hooks`` in place of zipimport's own, and in place of the finders made so far
    (from the directories zipimport keeps, without reading the archives again); returns how
    many finders were replaced."""
    sys.path_hooks[:] = [
        ArchiveFinder if hook is zipimport.zipimporter else hook for hook in sys.path_hooks
    ]
    replaced = 0
    for path, finder in list(sys.path_importer_cache.items()):
        if isinstance(finder, zipimport.zipimporter) and not isinstance(finder, ArchiveFinder):
            try:
                sys.path_importer_cache[path] = ArchiveFinder(path)
            except ImportError:  # the archive is gone: zipimport's finder stays
                continue
            replaced += 1
    return replaced


def worker_module(argv: list[str]) -> str:
    """The module Spark's daemon runs in each worker: the one Spark names after the daemon's
    (``pyspark.worker``, or a planner's ``pyspark.sql.worker.*``), as ``pyspark.daemon``
    reads it."""
    if len(argv) > 1 and argv[1].startswith("pyspark"):
        return argv[1]
    return "pyspark.worker"


def prepare(modules: tuple[str, ...] = PRELOADED, worker: str | None = None) -> list[str]:
    """What the daemon does before it forks a worker: imports ``modules`` and the worker
    module ``worker`` (which ``pyspark.daemon`` would import in each worker after the fork:
    about 60 ms of every new worker on an idle machine), installs :class:`ArchiveFinder` and
    freezes the objects allocated so far; returns the modules that could not be imported."""
    missing = preload(modules + ((worker,) if worker else ()))
    keep_archive_listings()
    gc.freeze()
    return missing


if __name__ == "__main__":
    prepare(worker=worker_module(sys.argv))
    from pyspark import daemon

    daemon.manager()
