"""The one primitive every part of a SQLite store runs on: a read on the reader's connection,
a write as one job of the writer thread, and a promise made durable.

The store builds one ``SqliteDb`` at open and hands it to each part (``_store``); a part never
touches a connection but through it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import attrs

from ...._plumbing._sqlite_writer import SqliteWriter

T = TypeVar("T")


@attrs.define(eq=False)
class SqliteDb:
    """A SQLite store's writer and reader (implementer tier: tests reach the file through it,
    never through a store's private fields)."""

    writer: SqliteWriter
    """One thread, one connection; each job is a savepoint in a group commit."""
    reader: SqliteWriter
    """Reads run on their own connection and thread: in WAL mode they see every committed
    change without waiting behind the writer's batch and its fsync (a lead's sweep or
    delivery's look is then a read, not a wait for someone else's commit)."""
    path: Path | None = None
    """The file, for what runs outside any transaction on a connection of its own (the WAL's
    truncation after an erasure); None for a store that only reads."""

    async def read(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """Run the read-only ``op`` in one read transaction (a consistent snapshot)."""
        return await self.reader.run(op, readonly=True)

    async def write(
        self,
        op: Callable[[sqlite3.Connection], T],
        *,
        promise: bool = False,
        committed: Callable[[T], None] | None = None,
    ) -> T:
        """Run ``op`` as one job of the writer (its own savepoint in a group commit); with
        ``promise``, return once its commit is durable (a promise is made on it). See
        ``SqliteWriter.run`` for ``committed``."""
        return await self.writer.run(op, promise=promise, committed=committed)

    async def promised(self, found: list[T]) -> list[T]:
        """``found`` (a read), once what it found is durable: a promise is made on each."""
        if found and self.writer.barrier is not None:
            await self.writer.sync()
        return found
