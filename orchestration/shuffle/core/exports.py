"""Lazy package exports: a name is imported from its module on first use. Pure Python."""

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str], namespace: dict) -> Callable:
    """A module ``__getattr__`` for ``package`` that imports ``exports[name]`` (a submodule)
    on first use and keeps the value in ``namespace`` (the package's globals)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    return __getattr__
