"""What is written from the data sources' option tables
(``orchestration/shuffle/core/optiondefs.py``): the JVM sources' copy of the tables,
``OptionTables.java``, which ``OptionCheck.java`` checks options against.
``tests/unit/test_options.py`` fails while it differs from what the tables give. (The docs
site's option tables are written from the same definitions when it is built:
``docs/hooks.py``.)

Usage::

    python -m devstack.optiondocs --write    # rewrite what differs
    python -m devstack.optiondocs --check    # list what differs, exit 1 if anything does
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from orchestration.shuffle.core.optiondefs import BATCH, STREAM, TABLES, OptionTable

ROOT = Path(__file__).resolve().parents[1]
JAVA = ROOT / "jvm/src/main/java/io/kafkashuffle/spark/OptionTables.java"


def _java_string(text: str, indent: int = 0) -> str:
    """A Java string literal; a long one as literals joined by ``+`` over lines, each line
    under 100 characters at ``indent``."""
    width = 96 - indent - 6
    pieces: list[str] = []
    for word in re.split(r"(?<= )", text):
        if pieces and len(pieces[-1]) + len(word) <= width:
            pieces[-1] += word
        else:
            pieces.append(word)
    literals = ['"' + p.replace("\\", "\\\\").replace('"', '\\"') + '"' for p in pieces or [""]]
    return f"\n{' ' * indent}    + ".join(literals)


def _java_name(source: str) -> str:
    return source.replace("kafka-", "").replace("-", "_").upper()


def _java_table(table: OptionTable) -> list[str]:
    def flag(value: bool) -> str:
        return "true" if value else "false"

    lines = [
        f"  static final OptionCheck {_java_name(table.source)} =",
        "      new OptionCheck(",
        f"          {_java_string(table.source)},",
        "          new OptionCheck.Option[] {",
    ]
    for d in table.options:
        default = "null" if d.default is None else _java_string(d.default)
        minimum = "null" if d.minimum is None else f"{d.minimum}L"
        lines += [
            "            new OptionCheck.Option(",
            f"                {_java_string(d.name)},",
            f"                {flag(BATCH in d.modes)},",
            f"                {flag(STREAM in d.modes)},",
            f"                {flag(d.set_by is None)},",
            f"                {default},",
            f"                {minimum}),",
        ]
    lines += ["          },", "          new OptionCheck.Refused[] {"]
    for r in table.refused:
        lines += [
            "            new OptionCheck.Refused(",
            f"                {_java_string(r.name)},",
            f"                {_java_string(r.reason, 16)},",
            f"                {flag(r.spark_kafka)}),",
        ]
    lines += ["          },", "          new OptionCheck.Renamed[] {"]
    for n in table.renamed:
        lines += [
            "            new OptionCheck.Renamed(",
            f"                {_java_string(n.name)},",
            f"                {_java_string(n.new)},",
            f"                {_java_string(n.reason, 16)}),",
        ]
    lines += ["          });", ""]
    return lines


def java_tables() -> str:
    """``OptionTables.java``: every source's table, for ``OptionCheck.java``."""
    lines = [
        "package io.kafkashuffle.spark;",
        "",
        "/**",
        " * Every data source's options, written by {@code python -m devstack.optiondocs --write}",
        " * from {@code orchestration/shuffle/core/optiondefs.py}, where they are declared: edit",
        " * them there.",
        " */",
        "final class OptionTables {",
        "  private OptionTables() {}",
        "",
    ]
    for table in TABLES.values():
        lines += _java_table(table)
    lines += [
        "  /** The table of data source {@code source}. */",
        "  static OptionCheck of(String source) {",
        "    switch (source) {",
    ]
    for source in TABLES:
        lines += [f"      case {_java_string(source)}:", f"        return {_java_name(source)};"]
    lines += [
        "      default:",
        '        throw new IllegalArgumentException("no option table for data source " + source);',
        "    }",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


# Each file written from the tables, and how its new text is made from its current one.
WRITTEN: dict[Path, Callable[[str], str]] = {JAVA: lambda _: java_tables()}


def stale() -> list[Path]:
    """The files whose written parts differ from what the tables give."""
    return [path for path, make in WRITTEN.items() if make(_text(path)) != _text(path)]


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def main(argv: list[str]) -> int:
    if argv not in (["--write"], ["--check"]):
        print(__doc__)
        return 2
    differ = stale()
    for path in differ:
        if argv == ["--write"]:
            path.write_text(WRITTEN[path](_text(path)))
            print(f"wrote {path.relative_to(ROOT)}")
        else:
            print(f"{path.relative_to(ROOT)} differs from the option tables")
    return 1 if differ and argv == ["--check"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
