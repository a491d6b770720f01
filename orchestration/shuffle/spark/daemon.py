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

Only imports happen before the fork: none of these modules starts a thread of its own when
imported (numpy's BLAS and pyarrow's allocator start theirs, and both are fork-safe, as every
``multiprocessing`` program that imports them before forking relies on). A module that cannot
be imported is skipped: the worker then imports what it needs itself, as it would anyway.
"""

import importlib

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


if __name__ == "__main__":
    preload()
    from pyspark import daemon

    daemon.manager()
