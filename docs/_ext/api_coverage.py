"""The API reference covers every public name: a Sphinx extension checked by the strict build.

``missing_names`` compares each public package's ``__all__`` with the objects the build
documented (the Python domain's entries), by name and identity: a name counts as documented
if an object documented under the same name is the very object the package exports (so
``tether.bridge.SqliteStore`` is covered by ``tether.bridge.stores.sqlite.SqliteStore``). At
``env-check-consistency`` each missing name is a warning, which ``just docs-strict`` (part of
``just test``) turns into a failure.

Module-level constants and type aliases re-exported from private modules are not picked up by
``automodule`` (autodoc documents data only where the module's own source assigns it), so the
API pages list them with ``autodata``; ``source_docstring`` then shows the docstring written
next to the assignment in the defining module, instead of the docstring of the value's type
(``frozenset() -> empty frozenset object...``).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Iterable
from typing import Any

PACKAGES = ("tether", "tether.bridge", "tether.gateway", "tether.observe")


def documented_objects(fullnames: Iterable[str]) -> set[tuple[str, int]]:
    """``(name, id(object))`` of each documented ``module.name`` that imports."""
    found: set[tuple[str, int]] = set()
    for fullname in fullnames:
        module_name, _, attr = fullname.rpartition(".")
        if not module_name:
            continue  # a top-level module itself
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue  # a method or attribute: its "module" is a class
        if hasattr(module, attr):
            found.add((attr, id(getattr(module, attr))))
    return found


def missing_names(fullnames: Iterable[str], packages: Iterable[str] = PACKAGES) -> list[str]:
    """``package.name`` for each name in a package's ``__all__`` the reference lacks."""
    documented = documented_objects(fullnames)
    missing = []
    for package_name in packages:
        package = importlib.import_module(package_name)
        for name in package.__all__:
            if (name, id(getattr(package, name))) not in documented:
                missing.append(f"{package_name}.{name}")
    return missing


def defining_docstring(name: str, obj: object) -> list[str] | None:
    """The docstring written after ``name = ...`` in the tether module that assigns it to
    ``obj`` (``None`` if there is none)."""
    from sphinx.pycode import ModuleAnalyzer, PycodeError

    for module_name, module in sorted(sys.modules.items()):
        if not module_name.startswith("tether.") or getattr(module, name, None) is not obj:
            continue
        try:
            docs = ModuleAnalyzer.for_module(module_name).find_attr_docs()
        except PycodeError:
            continue
        if ("", name) in docs:
            return list(docs[("", name)])
    return None


def source_docstring(
    app: Any, what: str, name: str, obj: object, options: Any, lines: list[str]
) -> None:
    """For a constant or alias documented under a public path: the docstring of its defining
    module, else nothing (never the docstring of its value's type)."""
    if what != "data" or inspect.isclass(obj) or inspect.isroutine(obj):
        return
    from sphinx.pycode import ModuleAnalyzer, PycodeError

    module_name, _, attr = name.rpartition(".")
    try:
        if ("", attr) in ModuleAnalyzer.for_module(module_name).find_attr_docs():
            return  # the page's module documents it itself
    except PycodeError:
        pass
    own = defining_docstring(attr, obj)
    if own is not None:
        lines[:] = own
    elif getattr(obj, "__doc__", None) == getattr(type(obj), "__doc__", None):
        lines[:] = []


def check_coverage(app: Any, env: Any) -> None:
    from sphinx.util import logging

    logger = logging.getLogger(__name__)
    for fullname in missing_names(env.get_domain("py").objects):
        logger.warning(
            "the API reference does not document %s (add it to a docs/api page)",
            fullname,
            type="tether",
            subtype="api-coverage",
        )


def setup(app: Any) -> dict[str, Any]:
    app.connect("autodoc-process-docstring", source_docstring)
    app.connect("env-check-consistency", check_coverage)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
