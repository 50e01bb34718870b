"""PostgresStore's retention part (issue #56): delivered tasks and their tombstones pruned, and
members gone for longer than the retention period. Space is autovacuum's: ``reclaim_space``
keeps the frame's 0.
"""

from __future__ import annotations

import attrs

from .._retention import RetentionFrame
from ._db import PostgresDb


@attrs.define(eq=False)
class PostgresRetention(RetentionFrame):
    """The retention part on the store's ``PostgresDb``."""

    db: PostgresDb

    async def _prune_delivered(self, before: float, limit: int) -> int:
        sql = self.db.sql.prune
        return await self.db.run(
            lambda conn: conn.execute(sql, {"before": before, "limit": limit}).rowcount
        )

    async def _prune_tombstones(self, before: float, limit: int) -> int:
        sql = self.db.sql.prune_tombstones
        return await self.db.run(
            lambda conn: conn.execute(sql, {"before": before, "limit": limit}).rowcount
        )

    async def _prune_workers(self, before: float, limit: int) -> int:
        s = self.db.s
        return await self.db.run(
            lambda conn: (
                conn.execute(
                    f"DELETE FROM {s}.workers WHERE name IN (SELECT name FROM {s}.workers "
                    "WHERE last_beat < %s LIMIT %s)",
                    (before, limit),
                ).rowcount
            )
        )

    async def _prune_waiters(self, before: float, limit: int) -> int:
        s = self.db.s
        return await self.db.run(
            lambda conn: (
                conn.execute(
                    f"DELETE FROM {s}.limit_waiters WHERE (key, task_id) IN (SELECT w.key, "
                    f"w.task_id FROM {s}.limit_waiters w WHERE w.until < %s AND NOT EXISTS "
                    f"(SELECT 1 FROM {s}.tasks t WHERE t.id = w.task_id "
                    "AND t.state = 'waiting') LIMIT %s)",
                    (before, limit),
                ).rowcount
            )
        )
