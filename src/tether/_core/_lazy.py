"""A package's re-exports, loaded on first use (PEP 562): ``tether --help`` must not pay for
httpx, cattrs and every store to name its verbs (issue #56).

The package keeps its ``from ._x import Y as Y`` lines, each name written once, under ``if
TYPE_CHECKING:`` (type checkers and the API reference read them there); at run time
:func:`lazy_exports` reads those same lines from the package's source and imports a name's
module the first time someone asks for the name.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path


def lazy_exports(
    package: str, init_file: str
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose ``__init__`` is ``init_file``."""
    sources: dict[str, str] | None = None

    def where() -> dict[str, str]:
        nonlocal sources
        if sources is None:
            sources = _exported_sources(package, Path(init_file).read_text(encoding="utf-8"))
        return sources

    def __getattr__(name: str) -> object:
        module_name = where().get(name)
        if module_name is None:
            return _submodule(package, name)
        value = getattr(importlib.import_module(module_name), name)
        globals_of(package)[name] = value  # the next read is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals_of(package)) | set(where()))

    return __getattr__, __dir__


def _submodule(package: str, name: str) -> object:
    """``package.name`` as an attribute, as when the package imported it eagerly (code that
    reads ``tether.bridge.pool`` after ``import tether.bridge`` keeps working)."""
    try:
        return importlib.import_module(f"{package}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{package}.{name}":
            raise
    raise AttributeError(f"module {package!r} has no attribute {name!r}")


def globals_of(package: str) -> dict[str, object]:
    return importlib.import_module(package).__dict__


def _exported_sources(package: str, source: str) -> dict[str, str]:
    """``{name: absolute module}`` for each ``from .m import name as name`` under ``if
    TYPE_CHECKING:`` in ``source``."""
    found: dict[str, str] = {}
    for statement in ast.parse(source).body:
        if not (isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.unparse(statement.test)):
            continue
        for inner in statement.body:
            if isinstance(inner, ast.ImportFrom):
                relative = "." * inner.level + (inner.module or "")
                module = importlib.util.resolve_name(relative, package)
                found.update((a.name, module) for a in inner.names if a.asname == a.name)
    return found
