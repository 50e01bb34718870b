"""SQLite virtual machine steps of what a store does: a cost that cannot flake on a busy
machine, so a test can say "this does not grow with that" without timing anything."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from tether._plumbing._sqlite_writer import SqliteWriter


@asynccontextmanager
async def vm_steps(
    thread: SqliteWriter, *, every: int = 1, readonly: bool = False
) -> AsyncIterator[list[int]]:
    """Count the VM steps ``thread``'s connection runs while the block runs, in units of
    ``every`` steps: ``[count]``, read after the block (``readonly``: a reader thread)."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0  # go on

    def watch(conn: sqlite3.Connection) -> None:
        conn.set_progress_handler(count, every)

    def unwatch(conn: sqlite3.Connection) -> None:
        conn.set_progress_handler(None, 0)

    await thread.run(watch, readonly=readonly)
    try:
        yield steps
    finally:
        await thread.run(unwatch, readonly=readonly)
