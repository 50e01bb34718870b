"""SQLite's file gives pruned space back (issue #56): new files are made with ``auto_vacuum =
INCREMENTAL`` and retention returns their free pages a bounded step at a time; the WAL is cut
back to ``WAL_SIZE_LIMIT`` after each checkpoint instead of staying at its high-water mark.

A file made before keeps ``auto_vacuum`` off (SQLite switches it only by a full ``VACUUM``:
minutes of an exclusive lock and twice the disk on a large file, so never on its own at open);
docs/guide/bridge.md says how to switch it once, with the bridge stopped.
"""

from __future__ import annotations

import abc
import logging
import sqlite3
from collections.abc import Callable
from typing import Final, TypeVar

from .._frame import StoreFrame

log = logging.getLogger("tether.bridge.sqlite")

T = TypeVar("T")

WAL_SIZE_LIMIT: Final = 64 * 1024 * 1024
"""Bytes the WAL file keeps after a checkpoint resets it (``journal_size_limit``)."""


PRUNE_WORKERS: Final = (
    "DELETE FROM workers WHERE name IN (SELECT name FROM workers WHERE last_beat < ? LIMIT ?)"
)


def make_space_settings(conn: sqlite3.Connection) -> None:
    """Before the migration makes the tables: a new file vacuums incrementally (a no-op on a
    file that has tables); and the WAL's size limit."""
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")


def vacuums_incrementally(conn: sqlite3.Connection) -> bool:
    (mode,) = conn.execute("PRAGMA auto_vacuum").fetchone()
    return int(mode) == 2


class SqliteSpace(StoreFrame):
    """``reclaim_space`` and ``prune_workers`` on SqliteStore's writer. Mixed into
    ``SqliteStore``."""

    @abc.abstractmethod
    async def _write(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """A write transaction on the writer's connection (``SqliteStore._write``)."""

    async def _reclaim_space(self, pages: int) -> int:
        def op(conn: sqlite3.Connection) -> int:
            (free,) = conn.execute("PRAGMA freelist_count").fetchone()
            if not free or not vacuums_incrementally(conn):
                return 0
            # a page per statement: Python's sqlite3 steps a statement that returns no columns
            # once, and ``incremental_vacuum(N)`` frees one page per step
            for _ in range(min(int(free), pages)):
                conn.execute("PRAGMA incremental_vacuum(1)")
            (left,) = conn.execute("PRAGMA freelist_count").fetchone()
            return int(free) - int(left)

        return await self._write(op)

    async def _prune_workers(self, before: float, limit: int) -> int:
        return await self._write(lambda conn: conn.execute(PRUNE_WORKERS, (before, limit)).rowcount)
