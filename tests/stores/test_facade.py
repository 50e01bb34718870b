"""A store's role methods are its parts' methods: each ``Via`` names the part whose frame
defines the method, on both stores, and a method taken from the class is called as a
function is."""

from __future__ import annotations

import sys
from pathlib import Path

import attrs

from tether.bridge import PostgresStore, SqliteStore, Task
from tether.bridge.stores._facade import Parts, StoreFacade, Via


def _delegations() -> dict[str, Via[object, ..., object]]:
    return {
        name: value
        for cls in (StoreFacade, SqliteStore, PostgresStore)
        for name, value in vars(cls).items()
        if isinstance(value, Via)
    }


def test_every_delegation_names_the_part_whose_frame_defines_the_method() -> None:
    fields = attrs.fields_dict(attrs.resolve_types(Parts))
    wrong = []
    for name, via in _delegations().items():
        frame = fields[via.part].type
        owner = getattr(sys.modules[via.method.__module__], via.method.__qualname__.split(".")[0])
        if not (isinstance(frame, type) and issubclass(owner, frame)):
            wrong.append(f"{name} -> {via.part}")  # the part is no {owner}
    assert wrong == []


async def test_a_role_method_is_its_parts_method_bound(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path / "c.db") as store:
        for name, via in _delegations().items():
            method = getattr(store, name)
            assert method.__self__ is getattr(store.parts, via.part), name
        assert await SqliteStore.ingest(store, Task("t1", "a"))  # taken from the class
        assert await store.state("t1") is not None
