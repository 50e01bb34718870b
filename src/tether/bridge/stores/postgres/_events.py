"""Events on PostgreSQL (issue #52): the events table, a send (keep and wake) and a wait's
park, each one transaction that first takes the key's lock (a transaction advisory lock):
a park that ran first is woken by the send; a send that ran first is seen by the park.
"""

from __future__ import annotations

from typing import Any

import attrs

from ...custody._events import EVENT_WAIT, Event, EventWaiter
from ...custody._rules import Claim, CustodyState
from .._common import FoundState, stale_lease, task_gone
from .._events_frame import EventsFrame
from ._connection import Conn
from ._db import PostgresDb
from ._rows import fence, one, seen
from ._sql import FENCE

_COLS = "id, key, body, at, until"


@attrs.frozen
class EventsSql:
    """The statements of events, with the schema (quoted) filled in once."""

    s: str

    @property
    def lock(self) -> str:
        return "SELECT pg_advisory_xact_lock(hashtext(%(lock)s))"

    @property
    def insert(self) -> str:
        return (
            f"INSERT INTO {self.s}.events ({_COLS}) VALUES (%(id)s, %(key)s, %(body)s, "
            "%(at)s, %(until)s) ON CONFLICT (id) DO NOTHING RETURNING 1"
        )

    @property
    def kept(self) -> str:
        return f"SELECT {_COLS} FROM {self.s}.events WHERE id = %(id)s"

    @property
    def wake(self) -> str:
        return (
            f"WITH w AS (UPDATE {self.s}.tasks SET state = 'pending', not_before = NULL, "
            "updated_at = %(now)s WHERE wait_key = %(key)s AND state = 'waiting' "
            f"AND reason LIKE '{EVENT_WAIT}%%' RETURNING id) "
            "SELECT id, pg_notify(%(chan)s, 'pending')::text FROM w"
        )

    @property
    def _untaken(self) -> str:
        return (
            f"FROM {self.s}.events WHERE key = %(key)s AND until > %(now)s "
            "AND id <> ALL(%(taken)s::text[])"
        )

    @property
    def take(self) -> str:
        return f"SELECT {_COLS} {self._untaken} ORDER BY at, id LIMIT 1"

    @property
    def park(self) -> str:
        return (
            f"WITH e AS (SELECT EXISTS (SELECT {self._untaken}) AS came) "
            f"UPDATE {self.s}.tasks t SET state = CASE WHEN e.came THEN 'pending' "
            "ELSE 'waiting' END, owner = NULL, lease_until = NULL, "
            "not_before = CASE WHEN e.came THEN NULL ELSE %(until)s END, "
            "reason = CASE WHEN e.came THEN t.reason ELSE %(why)s END, wait_key = %(key)s, "
            f"updated_at = %(now)s FROM e WHERE {FENCE} RETURNING t.state"
        )

    @property
    def notify(self) -> str:
        return "SELECT pg_notify(%(chan)s, 'pending')"

    @property
    def events(self) -> str:
        return (
            f"SELECT {_COLS} FROM {self.s}.events "
            "WHERE (%(key)s::text IS NULL OR key = %(key)s) AND until > %(now)s "
            "ORDER BY at, id LIMIT %(limit)s"
        )

    @property
    def drop(self) -> str:
        return f"DELETE FROM {self.s}.events WHERE id = %(id)s"

    @property
    def waiters(self) -> str:
        return (
            f"SELECT id, wait_key, not_before FROM {self.s}.tasks WHERE wait_key IS NOT NULL "
            f"AND state = 'waiting' AND reason LIKE '{EVENT_WAIT}%%' ORDER BY wait_key, id"
        )

    @property
    def prune(self) -> str:
        return (
            f"DELETE FROM {self.s}.events WHERE id IN (SELECT id FROM {self.s}.events "
            "WHERE until <= %(now)s ORDER BY until LIMIT %(limit)s) RETURNING id"
        )


def event_of(row: tuple[Any, ...]) -> Event:
    id, key, body, at, until = row
    return Event(id, key, body, float(at), float(until))


@attrs.define(eq=False)
class PostgresEvents(EventsFrame):
    """The events part on the store's ``PostgresDb``."""

    db: PostgresDb
    _sql: EventsSql = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._sql = EventsSql(self.db.s)

    def _lock(self, key: str) -> str:
        return f"tether-event:{self.db.schema}:{key}"

    async def _send(self, event: Event, now: float) -> tuple[Event | None, bool, list[str]]:
        q = self._sql
        params: dict[str, Any] = attrs.asdict(event)
        params.update(now=now, chan=self.db.channel, lock=self._lock(event.key))

        def op(conn: Conn) -> tuple[Event | None, bool, list[str]]:
            with conn.transaction():
                conn.execute(q.lock, params)
                while conn.execute(q.insert, params).fetchone() is None:
                    row = conn.execute(q.kept, params).fetchone()
                    if row is None:  # the kept one was dropped (TTL, operator) meanwhile
                        continue
                    kept = event_of(row)
                    same = kept.key == event.key and kept.body == event.body
                    return (kept if same else None), False, []
                return event, True, [r[0] for r in conn.execute(q.wake, params)]

        return await self.db.run(op, promise=True)  # the sender hears of it next

    async def _take(self, key: str, taken: list[str], now: float) -> Event | None:
        sql, params = self._sql.take, {"key": key, "now": now, "taken": taken}

        def op(conn: Conn) -> Event | None:
            row = conn.execute(sql, params).fetchone()
            return None if row is None else event_of(row)

        return await self.db.run(op)

    async def _park(
        self, claim: Claim, key: str, taken: list[str], until: float, why: str, now: float
    ) -> CustodyState:
        q, state_sql = self._sql, self.db.sql.cas_state
        params = fence(claim, now)
        params.update(
            key=key, taken=taken, until=until, why=why, chan=self.db.channel, lock=self._lock(key)
        )

        def op(conn: Conn) -> CustodyState | FoundState | None:
            with conn.transaction():
                conn.execute(q.lock, params)
                row = conn.execute(q.park, params).fetchone()
                if row is None:
                    return seen(conn, state_sql, params)
                state = CustodyState(row[0])
                if state is CustodyState.PENDING:
                    conn.execute(q.notify, params)
                return state

        outcome = await self.db.run(op)
        if isinstance(outcome, CustodyState):
            return outcome
        if outcome is None:
            raise task_gone(claim.task.id, "park")
        raise stale_lease(outcome, claim, now, "park")

    async def _events(self, key: str | None, limit: int, now: float) -> list[Event]:
        sql, params = self._sql.events, {"key": key, "limit": limit, "now": now}
        return await self.db.run(lambda conn: [event_of(r) for r in conn.execute(sql, params)])

    async def _drop(self, id: str) -> bool:
        sql = self._sql.drop
        return await self.db.run(lambda conn: bool(conn.execute(sql, {"id": id}).rowcount))

    async def _waiters(self) -> list[EventWaiter]:
        sql = self._sql.waiters
        return await self.db.run(
            lambda conn: [
                EventWaiter(id, key, one((due,))) for id, key, due in conn.execute(sql, {})
            ]
        )

    async def _prune(self, now: float, limit: int) -> list[str]:
        sql, params = self._sql.prune, {"now": now, "limit": limit}
        return await self.db.run(lambda conn: [r[0] for r in conn.execute(sql, params)])
