"""Every Python block of README.md and of the docs site (docs/) is run by a test, or says why
not, and the generated parts of the site are what they are generated from.

The line right before a block's opening fence says how it is run (an HTML comment, which
neither GitHub nor the site shows):

- nothing: the block needs neither Spark nor Kafka; it is run here, alone, in a fresh
  Python process (a block that defines ``defs`` must also load as Dagster definitions);
- ``<!-- run: spark -->``: it needs a SparkSession and the broker;
  ``tests/integration/test_docs_examples.py`` runs it on the test session and broker;
- ``<!-- run by: tests/<path>.py -->``: that test runs it (the file must exist and name the
  page); a Dagster project among them is also loaded here, as a pure block is;
- ``<!-- not run: why -->``: nothing can run it in a test (a secured cluster, a Spark Connect
  server, a bucket); it is only compiled.

A block with no way to run fails ``test_every_block_is_run_or_says_why_not``.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MARKER = re.compile(r"^<!--\s*(not run|run by|run):\s*(.*?)\s*-->$")
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
# What a `run:` marker may name: where the block runs.
RUNNERS = {"spark": "tests/integration/test_docs_examples.py"}


@dataclass(frozen=True)
class Block:
    page: str  # relative to the checkout
    line: int  # of the opening fence, 1-based
    code: str
    kind: str  # "pure", "run", "run by", "not run" or "unmarked" (a marker it cannot read)
    how: str  # the runner, the test file or the reason

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """README.md, then every Markdown page of the site."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def python_blocks(path: Path) -> list[Block]:
    """The ``python`` blocks of a Markdown file, each with what the line before it says."""
    lines = path.read_text().splitlines()
    page = str(path.relative_to(ROOT))
    found = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, language = fence.groups()
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        if language == "python":
            code = textwrap.dedent("\n".join(lines[i + 1 : end])) + "\n"
            before = lines[i - 1].strip() if i > 0 else ""
            marker = MARKER.match(before)
            if marker:
                kind, how = marker.groups()
            elif before.startswith("<!--"):
                kind, how = "unmarked", before
            else:
                kind, how = "pure", ""
            found.append(Block(page, i + 1, code, kind, how))
        i = end + 1
    return found


BLOCKS = [block for path in pages() for block in python_blocks(path)]


def spark_blocks() -> list[Block]:
    """The blocks ``tests/integration/test_docs_examples.py`` runs, README's first, each text
    once (a page may repeat the README's example)."""
    seen: set[str] = set()
    out = []
    for block in BLOCKS:
        if block.kind == "run" and block.how == "spark" and block.code not in seen:
            seen.add(block.code)
            out.append(block)
    return out


def test_the_readme_and_the_site_have_python_blocks():
    kinds = {b.kind for b in BLOCKS}
    assert {"pure", "run", "run by", "not run"} <= kinds, kinds
    assert any(b.page == "README.md" for b in BLOCKS)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_every_block_is_run_or_says_why_not(block):
    where = f"{block.id}: "
    assert block.kind != "unmarked", where + f"unreadable marker {block.how!r}"
    if block.kind == "run":
        assert block.how in RUNNERS, where + f"'run: {block.how}', known: {sorted(RUNNERS)}"
    elif block.kind == "run by":
        test = ROOT / block.how
        assert test.is_file(), where + f"no test file {block.how}"
        assert block.page in test.read_text(), where + f"{block.how} does not name {block.page}"
    elif block.kind == "not run":
        assert len(block.how) >= 10, where + "say why the block cannot run"
    # Every block, run or not, is valid Python.
    compile(block.code, block.id, "exec")


RUN_PURE = """
import sys

code, name = sys.stdin.read(), sys.argv[1]
namespace = {"__name__": "__main__"}
exec(compile(code, name, "exec"), namespace)
defs = namespace.get("defs")
if defs is not None:
    from dagster import Definitions

    Definitions.validate_loadable(defs)
"""

# The pure blocks, and the Dagster projects another test materializes: loading them needs
# neither Spark nor Kafka, and finds a wrong name in seconds.
PURE = [
    b
    for b in BLOCKS
    if b.kind == "pure"
    or (b.kind == "run by" and re.search(r"^defs = Definitions\(", b.code, re.M))
]


@pytest.mark.parametrize("block", PURE, ids=[b.id for b in PURE])
def test_pure_block_runs(block, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", RUN_PURE, block.id],
        input=block.code,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, f"{block.id}:\n{done.stderr[-4000:]}"


def test_the_options_page_is_written_from_every_option_table():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    from orchestration.shuffle.core.optiondefs import TABLES

    page = (DOCS / "reference" / "options.md").read_text()
    stated = hooks.OPTIONS.findall(page)
    assert sorted(stated) == sorted(TABLES), "each data source's tables, once"
    built = hooks.expand(page)
    assert "<!-- options:" not in built
    for table in TABLES.values():
        for option in table.options:
            assert f"| `{option.name}` |" in built, option.name
        for refused in table.refused:
            assert f"`{refused.name}`" in built, refused.name


def test_the_performance_page_has_every_benchmark_table():
    from bench import report

    page = (DOCS / "performance.md").read_text()
    for name in [*report.TABLES, *report.WORK_TABLES]:
        assert f"<!-- bench:{name}:start -->" in page and f"<!-- bench:{name}:end -->" in page
    assert "](bench-targets.png)" in page and (DOCS / "bench-targets.png").is_file()


def test_the_readme_is_short_and_states_the_commands_ci_runs():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250, "the README is read in minutes; move detail to docs/"
    # .ci/run runs the README's test command as written.
    assert "```bash\nscripts/dev test\n```" in text
    assert "```bash\nscripts/dev main\n```" in text


def test_every_page_is_in_the_site_and_every_readme_link_resolves():
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python/name:", ""))

    def walk(nav):
        for item in nav:
            for value in item.values() if isinstance(item, dict) else [item]:
                yield from walk(value) if isinstance(value, list) else [value]

    in_nav = set(walk(config["nav"]))
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert on_disk == in_nav
    readme = (ROOT / "README.md").read_text()
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        if not re.match(r"\w+:", link):
            assert (ROOT / link).exists(), link
