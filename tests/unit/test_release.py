"""A release is one version everywhere a user sees one: the installed package's metadata
(``orchestration.__version__``), pyproject.toml and the changelog's newest entry."""

import re
import tomllib
from pathlib import Path

import orchestration

ROOT = Path(__file__).resolve().parents[2]


def _declared() -> str:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]["version"]


def test_version_comes_from_the_installed_package():
    assert orchestration.__version__ == _declared()


def test_the_changelog_opens_with_this_version():
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), flags=re.M)
    # Changes made since the release are listed above it, under "Unreleased" (once, first).
    if headings[:1] == ["Unreleased"]:
        headings = headings[1:]
    assert headings and headings[0] == _declared(), headings[:3]
