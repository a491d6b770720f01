"""What is written from the data sources' option tables
(``orchestration/shuffle/core/optiondefs.py``): README's option tables, between
``<!-- options:<source>:start -->`` and ``<!-- options:<source>:end -->``.
``tests/unit/test_options.py`` fails while one differs from what the tables give.

Usage::

    python -m devstack.optiondocs --write    # rewrite what differs
    python -m devstack.optiondocs --check    # list what differs, exit 1 if anything does
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from orchestration.shuffle.core.optiondefs import TABLES, markdown

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _block(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- {re.escape(name)}:start -->\n)(.*?)(<!-- {name}:end -->)", re.S)


def readme_blocks() -> dict[str, str]:
    """Each marker name of README and the text its block holds."""
    return {
        f"options:{source}": "\n".join(markdown(table)) + "\n"
        for source, table in TABLES.items()
    }


def _readme(text: str) -> str:
    for name, block in readme_blocks().items():
        pattern = _block(name)
        if not pattern.search(text):
            raise SystemExit(f"README.md has no <!-- {name}:start/end --> markers")
        text = pattern.sub(lambda m, b=block: m.group(1) + b + m.group(3), text)
    return text


# Each file written from the tables, and how its new text is made from its current one.
WRITTEN: dict[Path, Callable[[str], str]] = {README: _readme}


def stale() -> list[Path]:
    """The files whose written parts differ from what the tables give."""
    return [path for path, make in WRITTEN.items() if make(path.read_text()) != path.read_text()]


def main(argv: list[str]) -> int:
    if argv not in (["--write"], ["--check"]):
        print(__doc__)
        return 2
    differ = stale()
    for path in differ:
        if argv == ["--write"]:
            path.write_text(WRITTEN[path](path.read_text()))
            print(f"wrote {path.relative_to(ROOT)}")
        else:
            print(f"{path.relative_to(ROOT)} differs from the option tables")
    return 1 if differ and argv == ["--check"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
