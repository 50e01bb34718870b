"""Events on SQLite (issue #52): the events table, a send (keep and wake) and a wait's park as
writer jobs; the one writer orders a send and a park, so neither misses the other.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Final

import attrs

from ...custody._events import EVENT_WAIT, Event, EventWaiter
from ...custody._rules import Claim, CustodyState
from .._events_frame import EventsFrame
from . import _sql as sql
from ._db import SqliteDb
from ._rows import stale
from ._sql import FENCE_NAMED

_COLS: Final = "id, key, body, at, until"
KEPT: Final = f"SELECT {_COLS} FROM events WHERE id = ?"
INSERT: Final = f"INSERT INTO events ({_COLS}) VALUES (?, ?, ?, ?, ?)"
WAKE: Final = (
    "UPDATE tasks SET state = 'pending', not_before = NULL, updated_at = :now "
    "WHERE id IN (SELECT id FROM tasks INDEXED BY tasks_wait_key WHERE wait_key = :key "
    f"AND wait_key IS NOT NULL) AND state = 'waiting' AND reason LIKE '{EVENT_WAIT}%' "
    "RETURNING id"
)
_UNTAKEN: Final = (
    "FROM events INDEXED BY events_key WHERE key = :key AND until > :now "
    "AND id NOT IN (SELECT value FROM json_each(:taken))"
)
TAKE: Final = f"SELECT {_COLS} {_UNTAKEN} ORDER BY at, id LIMIT 1"
PARK: Final = (
    "UPDATE tasks SET state = CASE WHEN e.came THEN 'pending' ELSE 'waiting' END, "
    "owner = NULL, lease_until = NULL, not_before = CASE WHEN e.came THEN NULL ELSE :until END, "
    "reason = CASE WHEN e.came THEN reason ELSE :why END, wait_key = :key, updated_at = :now "
    f"FROM (SELECT EXISTS (SELECT 1 {_UNTAKEN}) AS came) e WHERE {FENCE_NAMED} RETURNING state"
)
EVENTS: Final = f"SELECT {_COLS} FROM events WHERE until > ? ORDER BY at, id LIMIT ?"
KEY_EVENTS: Final = (
    f"SELECT {_COLS} FROM events WHERE key = ? AND until > ? ORDER BY at, id LIMIT ?"
)
DROP: Final = "DELETE FROM events WHERE id = ?"
WAITERS: Final = (
    "SELECT id, wait_key, not_before FROM tasks INDEXED BY tasks_wait_key "
    f"WHERE wait_key IS NOT NULL AND state = 'waiting' AND reason LIKE '{EVENT_WAIT}%' "
    "ORDER BY wait_key, id"
)
EXPIRED: Final = "SELECT 1 FROM events INDEXED BY events_until WHERE until <= ? LIMIT 1"
PRUNE: Final = (
    "DELETE FROM events WHERE id IN (SELECT id FROM events INDEXED BY events_until "
    "WHERE until <= ? ORDER BY until LIMIT ?) RETURNING id"
)


def event_of(row: tuple[Any, ...]) -> Event:
    id, key, body, at, until = row
    return Event(id, key, body, float(at), float(until))


def send(
    conn: sqlite3.Connection, event: Event, now: float
) -> tuple[Event | None, bool, list[str]]:
    row = conn.execute(KEPT, (event.id,)).fetchone()
    if row is not None:
        kept = event_of(row)
        same = kept.key == event.key and kept.body == event.body
        return (kept if same else None), False, []
    conn.execute(INSERT, (event.id, event.key, event.body, event.at, event.until))
    return event, True, [id for (id,) in conn.execute(WAKE, {"key": event.key, "now": now})]


@attrs.define(eq=False)
class SqliteEvents(EventsFrame):
    """The events part on the store's ``SqliteDb``."""

    db: SqliteDb

    async def _send(self, event: Event, now: float) -> tuple[Event | None, bool, list[str]]:
        return await self.db.write(lambda conn: send(conn, event, now), promise=True)

    async def _take(self, key: str, taken: list[str], now: float) -> Event | None:
        params = {"key": key, "now": now, "taken": json.dumps(taken)}
        row = await self.db.read(lambda conn: conn.execute(TAKE, params).fetchone())
        return None if row is None else event_of(row)

    async def _park(
        self, claim: Claim, key: str, taken: list[str], until: float, why: str, now: float
    ) -> CustodyState:
        params = {**sql.fence_params(claim, now), "until": until, "why": why, "key": key}
        params["taken"] = json.dumps(taken)

        def op(conn: sqlite3.Connection) -> CustodyState:
            row = conn.execute(PARK, params).fetchone()
            if row is None:
                raise stale(conn, claim, now, "park")
            return CustodyState(row[0])

        return await self.db.write(op)

    async def _events(self, key: str | None, limit: int, now: float) -> list[Event]:
        def op(conn: sqlite3.Connection) -> list[Event]:
            rows = (
                conn.execute(EVENTS, (now, limit))
                if key is None
                else conn.execute(KEY_EVENTS, (key, now, limit))
            )
            return [event_of(row) for row in rows]

        return await self.db.read(op)

    async def _drop(self, id: str) -> bool:
        return bool(
            await self.db.write(lambda conn: conn.execute(DROP, (id,)).rowcount, promise=True)
        )

    async def _waiters(self) -> list[EventWaiter]:
        return await self.db.read(lambda conn: [EventWaiter(*row) for row in conn.execute(WAITERS)])

    async def _prune(self, now: float, limit: int) -> list[str]:
        if await self.db.read(lambda conn: conn.execute(EXPIRED, (now,)).fetchone()) is None:
            return []  # read first: an idle pass writes nothing
        return await self.db.write(lambda conn: [id for (id,) in conn.execute(PRUNE, (now, limit))])
