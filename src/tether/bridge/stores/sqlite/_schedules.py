"""Schedules on SQLite (issue #52): the schedules table, and a firing as one writer job (the
compare-and-set of the schedule's due time and the ingest of its tasks).
"""

from __future__ import annotations

import sqlite3
from typing import Final

import attrs

from ...custody._schedules import ScheduleView
from .._schedules_frame import Firing, SchedulesFrame, schedule_view
from ._db import SqliteDb
from ._made import ingest_made

ADD: Final = (
    "INSERT INTO schedules (name, spec, next_due, created_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (name) DO NOTHING"
)
SET_PAUSED: Final = (
    "UPDATE schedules SET paused = :paused, next_due = coalesce(:next_due, next_due) "
    "WHERE name = :name"
)
REMOVE: Final = "DELETE FROM schedules WHERE name = ?"
_VIEW: Final = "SELECT spec, paused, next_due, last_due, fired FROM schedules"
VIEWS: Final = f"{_VIEW} ORDER BY name"
VIEW: Final = f"{_VIEW} WHERE name = ?"
DUE: Final = (
    f"{_VIEW} INDEXED BY schedules_due WHERE paused = 0 AND next_due <= ? ORDER BY next_due LIMIT ?"
)
NEXT_DUE: Final = "SELECT min(next_due) FROM schedules INDEXED BY schedules_due WHERE paused = 0"
MOVE_ON: Final = (
    "UPDATE schedules SET next_due = :next_due, last_due = :last_due, fired = fired + :count "
    "WHERE name = :name AND next_due = :due AND paused = 0"
)


def fire(conn: sqlite3.Connection, firing: Firing, now: float) -> list[bool] | None:
    params = firing.move_on
    if conn.execute(MOVE_ON, params).rowcount != 1:
        return None
    return [
        ingest_made(conn, task, headers, now)
        for task, headers in zip(firing.tasks, firing.headers, strict=True)
    ]


@attrs.define(eq=False)
class SqliteSchedules(SchedulesFrame):
    """The schedules part on the store's ``SqliteDb``."""

    db: SqliteDb

    async def _add(self, name: str, document: str, next_due: float, now: float) -> bool:
        return bool(
            await self.db.write(  # the operator is told next: a promise
                lambda conn: conn.execute(ADD, (name, document, next_due, now)).rowcount,
                promise=True,
            )
        )

    async def _set_paused(self, name: str, paused: bool, next_due: float | None) -> bool:
        params = {"name": name, "paused": int(paused), "next_due": next_due}
        return bool(
            await self.db.write(
                lambda conn: conn.execute(SET_PAUSED, params).rowcount, promise=True
            )
        )

    async def _remove(self, name: str) -> bool:
        return bool(
            await self.db.write(lambda conn: conn.execute(REMOVE, (name,)).rowcount, promise=True)
        )

    async def _views(self, name: str | None) -> list[ScheduleView | None]:
        def op(conn: sqlite3.Connection) -> list[ScheduleView | None]:
            rows = conn.execute(VIEWS) if name is None else conn.execute(VIEW, (name,))
            return [schedule_view(row) for row in rows]

        return await self.db.read(op)

    async def _due(self, now: float, limit: int) -> list[ScheduleView | None]:
        return await self.db.read(
            lambda conn: [schedule_view(row) for row in conn.execute(DUE, (now, limit))]
        )

    async def _fire(self, firing: Firing, now: float) -> list[bool] | None:
        return await self.db.write(lambda conn: fire(conn, firing, now))

    async def _next_due(self) -> float | None:
        (due,) = await self.db.read(lambda conn: conn.execute(NEXT_DUE).fetchone())
        return None if due is None else float(due)
