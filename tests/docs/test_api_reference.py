"""The API reference keeps up with the public names: each package's ``__all__`` is what its
``__init__`` re-exports, and the docs build's coverage check (``docs/_ext/api_coverage.py``,
run by ``just docs-strict``) reports exactly the names the reference lacks."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

import tether
import tether.bridge

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tether", "tether.bridge", "tether.gateway", "tether.observe")


def coverage_extension() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "api_coverage", ROOT / "docs" / "_ext" / "api_coverage.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("package_name", PACKAGES)
def test_all_lists_exactly_the_re_exports(package_name: str) -> None:
    package = importlib.import_module(package_name)
    assert package.__file__ is not None
    source = Path(package.__file__).read_text(encoding="utf-8")
    exported = set(re.findall(r"^\s*from \S+ import (\w+) as \1$", source, re.MULTILINE))
    assert set(package.__all__) == exported
    assert len(package.__all__) == len(set(package.__all__))


def test_the_check_names_what_the_reference_lacks() -> None:
    check = coverage_extension()
    assert check.PACKAGES == PACKAGES
    everything = [f"{p}.{n}" for p in PACKAGES for n in importlib.import_module(p).__all__]
    everything += [*PACKAGES, "tether.Session.emit"]  # modules and members are documented too
    assert check.missing_names(everything) == []
    without = [n for n in everything if n != "tether.bridge.SqliteStore"]
    assert check.missing_names(without) == ["tether.bridge.SqliteStore"]
    # documented where it is defined counts, by identity: the same object under the same name
    defined_there = [*without, "tether.bridge.stores.sqlite.SqliteStore"]
    assert check.missing_names(defined_there) == []
    # a method or attribute of that name does not
    assert check.missing_names([*without, "tether.bridge.PoolWorker.SqliteStore"]) == [
        "tether.bridge.SqliteStore"
    ]


def test_a_constant_shows_its_own_docstring_not_its_types() -> None:
    check = coverage_extension()
    lines = ["int([x]) -> integer", "Convert a number or string to an integer."]
    check.source_docstring(
        None, "data", "tether.bridge.MAX_CLAIM_BATCH", tether.bridge.MAX_CLAIM_BATCH, None, lines
    )
    assert lines[0] == "The most leases one ``claim_many`` call hands out."
    undocumented = ["frozenset() -> empty frozenset object"]
    check.source_docstring(None, "data", "tether.ALL_KINDS", tether.ALL_KINDS, None, undocumented)
    assert undocumented == []
