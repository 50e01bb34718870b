"""SqliteStore's retention part (issue #56): delivered tasks and their tombstones pruned,
members gone for longer than the retention period, and the file's free pages given back a
bounded step at a time (``_space``).
"""

from __future__ import annotations

import sqlite3

import attrs

from .._retention import RetentionFrame
from . import _sql as sql
from ._db import SqliteDb
from ._space import PRUNE_WAITERS, PRUNE_WORKERS, vacuums_incrementally


@attrs.define(eq=False)
class SqliteRetention(RetentionFrame):
    """The retention part: pruned rows and the file's free pages, on the store's ``SqliteDb``."""

    db: SqliteDb

    async def _prune_delivered(self, before: float, limit: int) -> int:
        def op(conn: sqlite3.Connection) -> int:
            gone = conn.execute(sql.PRUNE, (before, limit)).fetchall()
            conn.executemany(sql.TOMBSTONE, gone)
            return len(gone)

        return await self.db.write(op)

    async def _prune_tombstones(self, before: float, limit: int) -> int:
        return await self.db.write(
            lambda conn: conn.execute(sql.PRUNE_TOMBSTONES, (before, limit)).rowcount
        )

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

        return await self.db.write(op)

    async def _prune_workers(self, before: float, limit: int) -> int:
        return await self.db.write(
            lambda conn: conn.execute(PRUNE_WORKERS, (before, limit)).rowcount
        )

    async def _prune_waiters(self, before: float, limit: int) -> int:
        return await self.db.write(
            lambda conn: conn.execute(PRUNE_WAITERS, (before, limit)).rowcount
        )
