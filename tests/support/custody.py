"""Shared pieces of the custody conformance suite: store backends and drivers.

A backend knows how to make a fresh store location and open a store there (again, for the
reopen cases). SQLite's location is a file in the test's tmp dir; PostgreSQL's is a fresh schema
in the session's test database (creating a schema takes milliseconds, a database seconds).
"""

from __future__ import annotations

import itertools
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import attrs

from tether.bridge import CustodyState, PostgresStore, SqliteStore, Task
from tether.bridge.custody import Claim, Store

LEASE_S = 30.0
MAX_ATTEMPTS = 3


class Backend(Protocol):
    name: str

    def fresh(self) -> Any:
        """A new, empty store location."""

    async def open(self, where: Any, clock: Callable[[], float], **options: Any) -> Store:
        """Open the store at ``where`` (creating it if needed)."""


@attrs.define
class SqliteBackend:
    root: Path
    name: str = "sqlite"
    _made: int = 0

    def fresh(self) -> Path:
        self._made += 1
        return self.root / f"store-{self._made}" / "custody.db"

    async def open(self, where: Any, clock: Callable[[], float], **options: Any) -> Store:
        options.setdefault("lease_s", LEASE_S)
        options.setdefault("max_attempts", MAX_ATTEMPTS)
        return await SqliteStore.open(where, clock=clock, **options)


_schemas = itertools.count(1)


@attrs.define
class PostgresBackend:
    dsn: str
    name: str = "postgres"

    def fresh(self) -> str:
        return f"t{next(_schemas)}_{secrets.token_hex(4)}"

    async def open(self, where: Any, clock: Callable[[], float], **options: Any) -> Store:
        options.setdefault("lease_s", LEASE_S)
        options.setdefault("max_attempts", MAX_ATTEMPTS)
        options.setdefault("pool_size", 4)
        return await PostgresStore.open(self.dsn, schema=where, clock=clock, **options)


BackendFactory = Callable[[Path, Callable[[str], Any]], Backend]
"""Makes a backend from the test's tmp dir and ``request.getfixturevalue``."""

BACKENDS: dict[str, BackendFactory] = {
    "sqlite": lambda tmp_path, _fixture: SqliteBackend(tmp_path),
    "postgres": lambda _tmp_path, fixture: PostgresBackend(fixture("postgres_dsn")),
}


def worker_for(id: str) -> str:
    """A worker name of its own for each task, so drivers never pick up each other's work."""
    return "w-" + re.sub(r"[^A-Za-z0-9_-]", "_", id)[:60]


async def drive_to(store: Store, id: str, state: CustodyState, *, body: str = "hi") -> Claim | None:
    """Ingest ``id`` and move it to ``state`` the ordinary way; return the live claim if any."""
    assert await store.ingest(Task(id, body))
    if state is CustodyState.PENDING:
        return None
    if state is CustodyState.DEAD:
        await store.dead_letter(id, "test: sent to dead")
        return None
    await store.assign(id, worker_for(id))
    if state is CustodyState.ASSIGNED:
        return None
    claim = await store.claim(worker_for(id))
    assert claim is not None
    assert claim.task.id == id
    if state is CustodyState.CLAIMED:
        return claim
    if state is CustodyState.WAITING:
        await store.park(claim, store.clock() + 3600.0, "test: parked for an hour")
        return None
    await store.complete(claim, f"reply to {id}")
    if state is CustodyState.DELIVERED:
        await store.mark_delivered(id)
    return None
