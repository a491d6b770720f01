"""MkDocs hooks (``mkdocs.yml``: ``hooks``): the parts of pages written at build time.

Before any page is rendered, every name the public packages export is imported: they export
lazily (a module ``__getattr__``), and the API reference (mkdocstrings, which inspects the
imported modules) sees only names that were imported.

A line ``<!-- options:<source> -->`` in a page becomes that data source's option tables,
written from the definitions the option parser uses
(``orchestration/shuffle/core/optiondefs.py``), so the site never states an option the
sources do not take. ``options_markdown`` is what the tests check the page against.
"""

from __future__ import annotations

import importlib
import re

OPTIONS = re.compile(r"^<!-- options:([\w-]+) -->$", re.M)
# The packages the API reference renders.
PUBLIC = ("orchestration", "orchestration.shuffle", "orchestration.testing")


def load_public_names() -> None:
    """Imports every name in ``__all__`` of the public packages."""
    for name in PUBLIC:
        module = importlib.import_module(name)
        for export in module.__all__:
            getattr(module, export)


def options_markdown(source: str) -> str:
    """The option tables of data source ``source``, as Markdown."""
    from orchestration.shuffle.core.optiondefs import TABLES, markdown

    if source not in TABLES:
        raise ValueError(f"no option table for data source {source!r}; known: {sorted(TABLES)}")
    return "\n".join(markdown(TABLES[source])) + "\n"


def expand(markdown_text: str) -> str:
    """``markdown_text`` with each ``<!-- options:<source> -->`` line replaced by its tables."""
    return OPTIONS.sub(lambda m: options_markdown(m.group(1)), markdown_text)


def on_config(config):
    load_public_names()
    return config


def on_page_markdown(markdown, page, config, files):
    return expand(markdown)
