"""The API reference covers every public name of every tier, and nothing else: a Sphinx
extension checked by the strict build.

A tier is a public package whose ``__init__`` re-exports names, each once, as ``from ._x import
Y as Y`` (trio's style: no ``__all__``); those under ``if TYPE_CHECKING:`` load on first use
and count too. ``missing_names`` reports each exported name the reference lacks, by name and
identity: a name counts as documented if an object documented under the same name is the very
object the tier exports (so ``tether.bridge.custody.Task`` is covered by
``tether.bridge.Task``). ``stray_names`` reports each module-level object the reference
documents under a path that is not a tier's export (a private module, a room such as
``tether.bridge.stores``, a name a tier dropped). At ``env-check-consistency`` each is a
warning, which ``just docs-strict`` (part of ``just test``) turns into a failure.

Module-level constants and type aliases re-exported from private modules are not picked up by
``automodule`` (autodoc documents data only where the module's own source assigns it), so the
API pages list them with ``autodata``; ``source_docstring`` then shows the docstring written
next to the assignment in the defining module, instead of the docstring of the value's type
(``frozenset() -> empty frozenset object...``).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

TIERS = (
    "tether",
    "tether.bridge",
    "tether.bridge.client",
    "tether.bridge.custody",
    "tether.bridge.pool",
    "tether.bridge.runs",
    "tether.gateway",
    "tether.observe",
)
MODULE_LEVEL = frozenset({"class", "exception", "function", "data", "type"})
"""The Python domain's object types that a module, not a class, holds."""


def exported_names(tier: str) -> list[str]:
    """The names ``tier``'s ``__init__`` re-exports with ``from ... import Y as Y``, in source
    order (those under ``if TYPE_CHECKING:`` included), read without importing it."""
    spec = importlib.util.find_spec(tier)
    if spec is None or spec.origin is None:
        raise LookupError(f"no package {tier}")
    statements = list(ast.parse(Path(spec.origin).read_text(encoding="utf-8")).body)
    names = []
    for statement in statements:
        if isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.unparse(statement.test):
            statements.extend(statement.body)
        elif isinstance(statement, ast.ImportFrom):
            names += [a.name for a in statement.names if a.asname == a.name]
    return names


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


def missing_names(fullnames: Iterable[str], tiers: Iterable[str] = TIERS) -> list[str]:
    """``tier.name`` for each name a tier exports that the reference lacks."""
    documented = documented_objects(fullnames)
    missing = []
    for tier in tiers:
        package = importlib.import_module(tier)
        for name in exported_names(tier):
            if (name, id(getattr(package, name))) not in documented:
                missing.append(f"{tier}.{name}")
    return missing


def stray_names(objtypes: Mapping[str, str], tiers: Iterable[str] = TIERS) -> list[str]:
    """Each documented module or module-level object (``objtypes``: full name -> the Python
    domain's object type) that is not a tier or one of a tier's exported names."""
    tiers = tuple(tiers)
    exports = {tier: set(exported_names(tier)) for tier in tiers}
    stray = []
    for fullname, objtype in sorted(objtypes.items()):
        if objtype == "module":
            if fullname not in tiers:
                stray.append(fullname)
        elif objtype in MODULE_LEVEL:
            module_name, _, name = fullname.rpartition(".")
            if name not in exports.get(module_name, ()):
                stray.append(fullname)
    return stray


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
    objects = env.get_domain("py").objects
    for fullname in missing_names(objects):
        logger.warning(
            "the API reference does not document %s (add it to a docs/api page)",
            fullname,
            type="tether",
            subtype="api-coverage",
        )
    # an aliased entry is the canonical path autodoc records beside the public one
    # (``tether.bridge.pool._lead.PoolLead`` for ``tether.bridge.pool.PoolLead``)
    documented = {name: entry.objtype for name, entry in objects.items() if not entry.aliased}
    for fullname in stray_names(documented):
        logger.warning(
            "the API reference documents %s, which no tier exports (document the public "
            "name, or export it)",
            fullname,
            type="tether",
            subtype="api-coverage",
        )


def setup(app: Any) -> dict[str, Any]:
    app.connect("autodoc-process-docstring", source_docstring)
    app.connect("env-check-consistency", check_coverage)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
