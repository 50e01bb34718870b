"""Schedules on PostgreSQL (issue #52): the schedules table, and a firing as one transaction
(the compare-and-set of the schedule's due time, then the ingest of its tasks). Processes that
fire at once skip a schedule another holds (``SKIP LOCKED``) and make nothing twice: the ingest
is idempotent by id.
"""

from __future__ import annotations

import attrs

from ...custody._schedules import ScheduleView
from .._schedules_frame import Firing, SchedulesFrame, schedule_view
from ._connection import Conn
from ._db import PostgresDb
from ._made import ingest_made, made_params


@attrs.frozen
class SchedulesSql:
    """The statements of schedules, with the schema (quoted) filled in once."""

    s: str

    @property
    def add(self) -> str:
        return (
            f"INSERT INTO {self.s}.schedules (name, spec, next_due, created_at) "
            "VALUES (%(name)s, %(spec)s, %(next_due)s, %(now)s) ON CONFLICT (name) DO NOTHING"
        )

    @property
    def set_paused(self) -> str:
        return (
            f"UPDATE {self.s}.schedules SET paused = %(paused)s, "
            "next_due = coalesce(%(next_due)s, next_due) WHERE name = %(name)s"
        )

    @property
    def remove(self) -> str:
        return f"DELETE FROM {self.s}.schedules WHERE name = %(name)s"

    @property
    def view(self) -> str:
        return f"SELECT spec, paused, next_due, last_due, fired FROM {self.s}.schedules"

    @property
    def due(self) -> str:
        return (
            f"{self.view} WHERE NOT paused AND next_due <= %(now)s ORDER BY next_due "
            "LIMIT %(limit)s"
        )

    @property
    def next_due(self) -> str:
        return f"SELECT min(next_due) FROM {self.s}.schedules WHERE NOT paused"

    @property
    def move_on(self) -> str:
        """The compare-and-set of a firing: the schedule row, locked (another firing of it
        skips it), moved on only if still due at the time read."""
        return (
            f"WITH s AS (SELECT name FROM {self.s}.schedules WHERE name = %(name)s "
            "AND next_due = %(due)s AND NOT paused FOR UPDATE SKIP LOCKED) "
            f"UPDATE {self.s}.schedules t SET next_due = %(next_due)s, last_due = %(last_due)s, "
            "fired = fired + %(count)s FROM s WHERE t.name = s.name RETURNING 1"
        )


@attrs.define(eq=False)
class PostgresSchedules(SchedulesFrame):
    """The schedules part on the store's ``PostgresDb``."""

    db: PostgresDb
    _sql: SchedulesSql = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._sql = SchedulesSql(self.db.s)

    async def _add(self, name: str, document: str, next_due: float, now: float) -> bool:
        sql = self._sql.add
        params = {"name": name, "spec": document, "next_due": next_due, "now": now}
        return await self.db.run(lambda conn: bool(conn.execute(sql, params).rowcount))

    async def _set_paused(self, name: str, paused: bool, next_due: float | None) -> bool:
        sql, params = self._sql.set_paused, {"name": name, "paused": paused, "next_due": next_due}
        return await self.db.run(lambda conn: bool(conn.execute(sql, params).rowcount))

    async def _remove(self, name: str) -> bool:
        sql = self._sql.remove
        return await self.db.run(lambda conn: bool(conn.execute(sql, {"name": name}).rowcount))

    async def _views(self, name: str | None) -> list[ScheduleView | None]:
        sql = self._sql.view + (" ORDER BY name" if name is None else " WHERE name = %(name)s")
        return await self.db.run(
            lambda conn: [schedule_view(row) for row in conn.execute(sql, {"name": name})]
        )

    async def _due(self, now: float, limit: int) -> list[ScheduleView | None]:
        sql, params = self._sql.due, {"now": now, "limit": limit}
        return await self.db.run(
            lambda conn: [schedule_view(row) for row in conn.execute(sql, params)]
        )

    async def _fire(self, firing: Firing, now: float) -> list[bool] | None:
        move_on = self._sql.move_on
        params = firing.move_on
        ingests = [
            made_params(self.db, task, headers, now)
            for task, headers in zip(firing.tasks, firing.headers, strict=True)
        ]

        def op(conn: Conn) -> list[bool] | None:
            with conn.transaction():
                if conn.execute(move_on, params).fetchone() is None:
                    return None
                return [ingest_made(conn, self.db, ingest) for ingest in ingests]

        return await self.db.run(op)

    async def _next_due(self) -> float | None:
        sql = self._sql.next_due

        def op(conn: Conn) -> float | None:
            row = conn.execute(sql).fetchone()
            return None if row is None or row[0] is None else float(row[0])

        return await self.db.run(op)
