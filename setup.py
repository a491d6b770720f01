"""The package's one build step beyond pyproject.toml: compile the JVM read path.

Every build of the package (``pip wheel``, ``pip install``, from a checkout, a git URL or the
source distribution) runs Maven over ``jvm/`` (``jvm/build_jvm.py``) and puts the jar and
kafka-clients in ``orchestration/shuffle/spark/jars/`` of the wheel. An editable install
builds them into the source tree instead, only when a source is newer than the jar (as
``devstack/jvm.py`` does). ``KAFKA_SHUFFLE_SKIP_JVM=1`` builds without them.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
JARS = Path("orchestration", "shuffle", "spark", "jars")


def _build_jvm():
    # Loaded by path: the build's working directory is not necessarily on sys.path.
    spec = importlib.util.spec_from_file_location("build_jvm", HERE / "jvm" / "build_jvm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithJvm(build_py):
    def run(self) -> None:
        super().run()
        jvm = _build_jvm()
        if jvm.skipped():
            print(f"{jvm.SKIP_ENV} is set: the JVM read path is left out", file=sys.stderr)
            if not self.editable_mode:
                # An earlier build's jars may still be in build/lib.
                shutil.rmtree(Path(self.build_lib) / JARS, ignore_errors=True)
            return
        try:
            if self.editable_mode:
                jvm.ensure(HERE / JARS)
            else:
                work = Path(self.get_finalized_command("build").build_temp) / "jvm"
                jvm.build(Path(self.build_lib) / JARS, work=work)
        except jvm.JvmBuildError as exc:
            # The message says what to install; a traceback through setuptools would bury it.
            sys.exit(f"error: {exc}")


setup(cmdclass={"build_py": BuildPyWithJvm})
