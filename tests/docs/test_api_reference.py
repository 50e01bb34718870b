"""The API reference keeps up with the public names: each tier's ``__init__`` re-exports each
name once (``from ._x import Y as Y``), nothing else is public in it, and the docs build's
coverage check (``docs/_ext/api_coverage.py``, run by ``just docs-strict``) reports exactly the
names the reference lacks and exactly the objects it documents that no tier exports."""

from __future__ import annotations

import importlib
import importlib.util
import json
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import tether
import tether.bridge.custody

ROOT = Path(__file__).resolve().parents[2]
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
LAZY = (
    "tether",
    "tether.bridge",
    "tether.bridge.client",
    "tether.bridge.custody",
    "tether.bridge.pool",
    "tether.bridge.runs",
)
"""The tiers that load their names on first use (issue #56: ``tether --help`` imports none of
them), each name then kept as a plain attribute."""


def coverage_extension() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "api_coverage", ROOT / "docs" / "_ext" / "api_coverage.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def public_namespace(module: ModuleType) -> set[str]:
    """What ``module`` holds under a public name, loaded or not yet (``dir``), its
    subpackages aside."""
    return {
        name
        for name in dir(module)
        if not name.startswith("_") and not isinstance(getattr(module, name), ModuleType)
    }


def test_the_check_knows_every_tier() -> None:
    assert coverage_extension().TIERS == TIERS


@pytest.mark.parametrize("tier", TIERS)
def test_a_tier_writes_each_name_once_and_exports_nothing_else(tier: str) -> None:
    package = importlib.import_module(tier)
    exported = coverage_extension().exported_names(tier)
    assert len(exported) == len(set(exported))
    assert not hasattr(package, "__all__")  # one way to say what is public: `Y as Y`
    assert public_namespace(package) == set(exported)
    for name in exported:
        assert getattr(package, name) is not None


def test_the_lazy_names_load_on_first_use_only() -> None:
    """In a fresh interpreter: importing a lazy tier loads none of its names; asking for one
    loads it; an unknown name is an AttributeError."""
    probe = (
        "import importlib, json, sys\n"
        "found = {}\n"
        "for tier, names in json.loads(sys.argv[1]).items():\n"
        "    package = importlib.import_module(tier)\n"
        "    before = sorted(set(names) & set(vars(package)))\n"
        "    getattr(package, names[-1])\n"
        "    try:\n"
        "        package.Nope\n"
        "    except AttributeError as exc:\n"
        "        refused = 'has no attribute' in str(exc)\n"
        "    found[tier] = [before, names[-1] in vars(package), refused]\n"
        "print(json.dumps(found))\n"
    )
    names = {tier: coverage_extension().exported_names(tier) for tier in LAZY}
    done = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(names)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {tier: [[], True, True] for tier in LAZY}


def test_a_package_that_is_not_a_tier_exports_nothing() -> None:
    """``tether.bridge.client``, ``service``, ``stores`` and the like are rooms: their public
    names reach users through a tier, so what is public is decided in one place."""
    check = coverage_extension()
    rooms = [
        info.name
        for info in pkgutil.walk_packages(tether.__path__, "tether.")
        if info.ispkg and info.name not in TIERS and "._" not in info.name
    ]
    assert "tether.bridge.stores.sqlite" in rooms
    for room in rooms:
        assert check.exported_names(room) == [], room
        assert public_namespace(importlib.import_module(room)) == set(), room


def test_the_check_names_what_the_reference_lacks() -> None:
    check = coverage_extension()
    everything = [f"{t}.{n}" for t in TIERS for n in check.exported_names(t)]
    everything += [*TIERS, "tether.Session.emit"]  # modules and members are documented too
    assert check.missing_names(everything) == []
    without = [n for n in everything if n != "tether.bridge.SqliteStore"]
    assert check.missing_names(without) == ["tether.bridge.SqliteStore"]
    # documented where it is defined counts, by identity: the same object under the same name
    defined_there = [*without, "tether.bridge.stores.sqlite._store.SqliteStore"]
    assert check.missing_names(defined_there) == []
    # a method or attribute of that name does not
    assert check.missing_names([*without, "tether.bridge.pool.PoolWorker.SqliteStore"]) == [
        "tether.bridge.SqliteStore"
    ]
    # a name two tiers export is covered by one entry: custody's Task is tether.bridge's
    only_once = [n for n in everything if n != "tether.bridge.custody.Task"]
    assert check.missing_names(only_once) == []


def test_the_check_names_what_the_reference_documents_but_no_tier_exports() -> None:
    check = coverage_extension()
    documented = {t: "module" for t in TIERS}
    documented |= {
        "tether.bridge.SqliteStore": "class",
        "tether.bridge.SqliteStore.open": "method",
        "tether.bridge.custody.Store": "class",
        "tether.bridge.custody.MAX_CLAIM_BATCH": "data",
        "tether.bridge.pool.plan_sweep": "function",
    }
    assert check.stray_names(documented) == []
    strays = {
        "tether.bridge.stores": "module",  # a room, not a tier
        "tether.bridge.stores.sqlite.SqliteStore": "class",
        "tether.bridge.Store": "class",  # the implementer's tier holds it
        "tether.bridge.plan_sweep": "function",
        "tether.bridge.pool._lead.MIN_WINDOW": "data",
    }
    assert check.stray_names(documented | strays) == sorted(strays)


def test_a_constant_shows_its_own_docstring_not_its_types() -> None:
    check = coverage_extension()
    lines = ["int([x]) -> integer", "Convert a number or string to an integer."]
    check.source_docstring(
        None,
        "data",
        "tether.bridge.custody.MAX_CLAIM_BATCH",
        tether.bridge.custody.MAX_CLAIM_BATCH,
        None,
        lines,
    )
    assert lines[0] == "The most leases one ``claim_many`` call hands out."
    undocumented = ["frozenset() -> empty frozenset object"]
    check.source_docstring(None, "data", "tether.ALL_KINDS", tether.ALL_KINDS, None, undocumented)
    assert undocumented == []
