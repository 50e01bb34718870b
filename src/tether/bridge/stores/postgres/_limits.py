"""Flow control on PostgreSQL (issue #38): limits, permits and waiters as SQL, and the limits
part that runs it.

An acquire with tokens to spare is ONE statement: it reads the task under the lease fence
``FOR SHARE`` (a concurrent move of the task waits for the permit's commit, and its trigger
then frees it), and updates the key's row only where ``custody._limits.decide`` would grant,
spelled in SQL: the row lock serialises acquires of one key across every process, and a
waiting acquire re-checks the condition on the row its predecessor committed. Only a refused
acquire reads the row again to say how long to wait (``decide`` itself).
"""

from __future__ import annotations

import math
from typing import Final

import attrs

from ...custody._limits import WAITER_GRACE, Granted, LimitSpec, LimitView, NoPermit, decide
from ...custody._rules import Claim
from .._common import FoundState, stale_lease, task_gone
from .._limits_frame import LimitsFrame, bucket_of, views_of
from ._connection import Conn
from ._db import PostgresDb
from ._rows import fence, seen
from ._sql import FENCE

COLS: Final = "key, rate, burst, concurrency, tokens, at, in_flight, paused_until"
_REFILLED: Final = "least(l.burst, l.tokens + greatest(0, %(now)s - l.at) * l.rate)"
"""``custody._limits.tokens_at`` in SQL."""


@attrs.frozen
class LimitsSql:
    """The statements of flow control, with the schema (quoted) filled in once."""

    s: str

    @property
    def acquire(self) -> str:
        """One row: (fence held?, the new permit's id or NULL, tokens left, rate)."""
        return (
            f"WITH f AS (SELECT t.id FROM {self.s}.tasks t WHERE {FENCE} FOR SHARE), "
            f"u AS (UPDATE {self.s}.limits l SET "
            f"tokens = CASE WHEN l.rate IS NULL THEN l.tokens "
            f"ELSE {_REFILLED} - %(weight)s END, "
            "at = greatest(l.at, %(now)s), in_flight = l.in_flight + 1 "
            "FROM f WHERE l.key = %(key)s "
            "AND (l.paused_until IS NULL OR l.paused_until <= %(now)s) "
            "AND (l.concurrency IS NULL OR l.in_flight < l.concurrency) "
            f"AND (l.rate IS NULL OR {_REFILLED} >= %(weight)s) "
            "RETURNING l.key, l.tokens, l.rate), "
            f"p AS (INSERT INTO {self.s}.permits (key, task_id, weight, at) "
            "SELECT key, %(id)s, %(weight)s, %(now)s FROM u RETURNING id), "
            f"w AS (DELETE FROM {self.s}.limit_waiters WHERE key = %(key)s "
            "AND task_id = %(id)s AND EXISTS (SELECT FROM p)) "
            "SELECT EXISTS (SELECT FROM f), (SELECT id FROM p), (SELECT tokens FROM u), "
            "(SELECT rate FROM u)"
        )

    @property
    def bucket(self) -> str:
        return f"SELECT {COLS} FROM {self.s}.limits WHERE key = %(key)s"

    @property
    def waiter(self) -> str:
        return (
            f"INSERT INTO {self.s}.limit_waiters (key, task_id, until) "
            "VALUES (%(key)s, %(id)s, %(until)s) "
            "ON CONFLICT (key, task_id) DO UPDATE SET until = excluded.until"
        )

    @property
    def set(self) -> str:
        return (
            f"INSERT INTO {self.s}.limits AS l (key, rate, burst, concurrency, tokens, at) "
            "VALUES (%(key)s, %(rate)s, %(burst)s, %(concurrency)s, %(burst)s, %(now)s) "
            "ON CONFLICT (key) DO UPDATE SET rate = excluded.rate, burst = excluded.burst, "
            "concurrency = excluded.concurrency, tokens = CASE WHEN l.rate IS NULL "
            "THEN excluded.burst ELSE least(l.tokens, excluded.burst) END"
        )

    @property
    def release(self) -> str:
        """Give a permit back and wake the run parked longest for its key: ``(id, key)`` of
        the run woken, if any (``NOTIFY``: work for the pool)."""
        s = self.s
        return (
            f"WITH d AS (DELETE FROM {s}.permits WHERE id = %(permit)s RETURNING key), "
            f"r AS (UPDATE {s}.limits l SET in_flight = greatest(l.in_flight - 1, 0) "
            "FROM d WHERE l.key = d.key RETURNING l.key), "
            f"w AS (SELECT t.id, d.key FROM d JOIN {s}.limit_waiters w ON w.key = d.key "
            f"JOIN {s}.tasks t ON t.id = w.task_id WHERE t.state = 'waiting' "
            "ORDER BY w.until, w.task_id LIMIT 1 FOR UPDATE OF t SKIP LOCKED), "
            f"u AS (UPDATE {s}.tasks t SET state = 'pending', not_before = NULL, "
            "updated_at = %(now)s FROM w WHERE t.id = w.id AND t.state = 'waiting' "
            "RETURNING t.id, w.key) "
            "SELECT id, key, pg_notify(%(chan)s, 'pending')::text FROM u"
        )

    @property
    def pause(self) -> str:
        return (
            f"INSERT INTO {self.s}.limits AS l (key, burst, tokens, at, paused_until) "
            "VALUES (%(key)s, 0, 0, %(now)s, %(until)s) ON CONFLICT (key) DO UPDATE "
            "SET paused_until = greatest(coalesce(l.paused_until, 0), excluded.paused_until)"
        )

    @property
    def all(self) -> str:
        return f"SELECT {COLS} FROM {self.s}.limits ORDER BY key"

    @property
    def waiters(self) -> str:
        return (
            f"SELECT key, count(*) FROM {self.s}.limit_waiters WHERE until > %(now)s GROUP BY key"
        )


@attrs.define(eq=False)
class PostgresLimits(LimitsFrame):
    """The limits part: buckets, permits and waiters on the store's ``PostgresDb``."""

    db: PostgresDb
    _limits_sql: LimitsSql = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._limits_sql = LimitsSql(self.db.s)

    async def _set_limit(self, spec: LimitSpec, now: float) -> None:
        sql, params = self._limits_sql.set, {**attrs.asdict(spec), "now": now}
        await self.db.run(lambda conn: conn.execute(sql, params))

    async def _acquire_permit(
        self, claim: Claim, key: str, weight: float, now: float
    ) -> Granted | NoPermit:
        params = fence(claim, now)
        params.update(key=key, weight=weight)
        q, state_sql = self._limits_sql, self.db.sql.cas_state

        def op(conn: Conn) -> Granted | NoPermit | FoundState | None:
            for _ in range(3):  # a grant between our two statements: ask again
                row = conn.execute(q.acquire, params).fetchone()
                assert row is not None
                fenced, permit, tokens, rate = row
                if not fenced:
                    return seen(conn, state_sql, params)
                if permit is not None:
                    return Granted(int(permit), math.inf if rate is None else float(tokens))
                found = conn.execute(q.bucket, params).fetchone()
                if found is None:
                    return Granted(None)
                outcome = decide(bucket_of(found), weight, now)
                if isinstance(outcome, NoPermit):
                    until = now + (outcome.seconds or 0.0) + WAITER_GRACE
                    conn.execute(q.waiter, {**params, "until": until})
                    return outcome
            return NoPermit(0.0, "contended")

        outcome = await self.db.run(op)
        if isinstance(outcome, Granted | NoPermit):
            return outcome
        if outcome is None:
            raise task_gone(claim.task.id, f"acquire a permit of {key!r} for")
        raise stale_lease(outcome, claim, now, f"acquire a permit of {key!r} for")

    async def _release_permit(self, permit: int, now: float) -> list[tuple[str, str]]:
        sql = self._limits_sql.release
        params = {"permit": permit, "now": now, "chan": self.db.channel}
        return await self.db.run(lambda conn: [(i, k) for i, k, _ in conn.execute(sql, params)])

    async def _pause_limit(self, key: str, until: float, now: float) -> None:
        sql, params = self._limits_sql.pause, {"key": key, "until": until, "now": now}
        await self.db.run(lambda conn: conn.execute(sql, params))

    async def _limit_views(self, now: float) -> list[LimitView]:
        q = self._limits_sql

        def op(conn: Conn) -> list[LimitView]:
            with conn.transaction():
                rows = conn.execute(q.all).fetchall()
                waiting = {k: int(n) for k, n in conn.execute(q.waiters, {"now": now})}
            return views_of(rows, waiting, now)

        return await self.db.run(op)
