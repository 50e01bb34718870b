"""Flow control on SQLite (issue #38): limits, permits and waiters as the limits part's writer
jobs, each in the writer's group commit under the lease fence; the arithmetic is
``custody._limits.decide``.

The writer holds the write lock for a whole job, so the bucket read, the decision and its
writes of one acquire see the same rows as every other process's.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

import attrs

from ...custody._limits import WAITER_GRACE, Granted, LimitSpec, LimitView, NoPermit, decide
from ...custody._rules import Claim
from .._limits_frame import LimitsFrame, bucket_of, views_of
from . import _sql as sql
from ._db import SqliteDb
from ._rows import stale
from ._sql import FENCE_NAMED

COLS: Final = "key, rate, burst, concurrency, tokens, at, in_flight, paused_until"
BUCKET: Final = f"SELECT {COLS} FROM limits WHERE key = ?"
FENCED: Final = f"SELECT 1 FROM tasks WHERE {FENCE_NAMED}"
SET: Final = (
    "INSERT INTO limits (key, rate, burst, concurrency, tokens, at) "
    "VALUES (:key, :rate, :burst, :concurrency, :burst, :now) "
    "ON CONFLICT (key) DO UPDATE SET rate = excluded.rate, burst = excluded.burst, "
    "concurrency = excluded.concurrency, "
    "tokens = CASE WHEN rate IS NULL THEN excluded.burst ELSE min(tokens, excluded.burst) END"
)
SPEND: Final = (
    "UPDATE limits SET tokens = :tokens, at = max(at, :now), in_flight = in_flight + 1 "
    "WHERE key = :key"
)
PERMIT: Final = "INSERT INTO permits (key, task_id, weight, at) VALUES (:key, :id, :weight, :now)"
WAITER: Final = (
    "INSERT INTO limit_waiters (key, task_id, until) VALUES (:key, :id, :until) "
    "ON CONFLICT (key, task_id) DO UPDATE SET until = excluded.until"
)
SERVED: Final = "DELETE FROM limit_waiters WHERE key = :key AND task_id = :id"
RELEASE: Final = "DELETE FROM permits WHERE id = ? RETURNING key"
RELEASED: Final = "UPDATE limits SET in_flight = max(in_flight - 1, 0) WHERE key = ?"
PAUSE: Final = (
    "INSERT INTO limits (key, burst, tokens, at, paused_until) VALUES (:key, 0, 0, :now, :until) "
    "ON CONFLICT (key) DO UPDATE SET paused_until = max(coalesce(paused_until, 0), :until)"
)
WAKE_WAITER: Final = (
    "UPDATE tasks SET state = 'pending', not_before = NULL, updated_at = :now WHERE id = ("
    "SELECT w.task_id FROM limit_waiters w JOIN tasks t ON t.id = w.task_id "
    "WHERE w.key = :key AND t.state = 'waiting' ORDER BY w.until, w.task_id LIMIT 1) "
    "AND state = 'waiting' RETURNING id"
)
"""The run parked longest for a permit of ``key`` made pending again: a permit came free."""
ALL: Final = f"SELECT {COLS} FROM limits ORDER BY key"
WAITERS: Final = "SELECT key, count(*) FROM limit_waiters WHERE until > ? GROUP BY key"


def acquire(conn: sqlite3.Connection, params: dict[str, Any]) -> Granted | NoPermit | None:
    """One acquire (the writer's job); None if fenced out."""
    if conn.execute(FENCED, params).fetchone() is None:
        return None
    row = conn.execute(BUCKET, (params["key"],)).fetchone()
    if row is None:
        return Granted(None)
    now = params["now"]
    outcome = decide(bucket_of(row), params["weight"], now)
    if isinstance(outcome, NoPermit):
        wait = outcome.seconds if outcome.seconds is not None else 0.0
        conn.execute(WAITER, {**params, "until": now + wait + WAITER_GRACE})
        return outcome
    _key, rate, _burst, _concurrency, tokens, *_ = row
    tokens = outcome.tokens if rate is not None else tokens
    conn.execute(SPEND, {**params, "tokens": tokens})
    permit = conn.execute(PERMIT, params).lastrowid
    conn.execute(SERVED, params)
    return Granted(permit, outcome.tokens)


def release(conn: sqlite3.Connection, permit: int, now: float) -> list[tuple[str, str]]:
    """Give ``permit`` back and wake the run parked longest for its key: ``(id, key)`` of
    the run woken, if any."""
    row = conn.execute(RELEASE, (permit,)).fetchone()
    if row is None:
        return []
    (key,) = row
    conn.execute(RELEASED, (key,))
    woken = conn.execute(WAKE_WAITER, {"key": key, "now": now}).fetchall()
    return [(id, key) for (id,) in woken]


def views(conn: sqlite3.Connection, now: float) -> list[LimitView]:
    waiting = dict(conn.execute(WAITERS, (now,)).fetchall())
    return views_of(conn.execute(ALL).fetchall(), waiting, now)


@attrs.define(eq=False)
class SqliteLimits(LimitsFrame):
    """The limits part: buckets, permits and waiters on the store's ``SqliteDb``."""

    db: SqliteDb

    async def _set_limit(self, spec: LimitSpec, now: float) -> None:
        params = {**attrs.asdict(spec), "now": now}
        await self.db.write(lambda conn: conn.execute(SET, params))

    async def _acquire_permit(
        self, claim: Claim, key: str, weight: float, now: float
    ) -> Granted | NoPermit:
        params = {**sql.fence_params(claim, now), "key": key, "weight": weight}

        def op(conn: sqlite3.Connection) -> Granted | NoPermit:
            outcome = acquire(conn, params)
            if outcome is None:
                raise stale(conn, claim, now, f"acquire a permit of {key!r} for")
            return outcome

        return await self.db.write(op)

    async def _release_permit(self, permit: int, now: float) -> list[tuple[str, str]]:
        return await self.db.write(lambda conn: release(conn, permit, now))

    async def _pause_limit(self, key: str, until: float, now: float) -> None:
        params = {"key": key, "until": until, "now": now}
        await self.db.write(lambda conn: conn.execute(PAUSE, params))

    async def _limit_views(self, now: float) -> list[LimitView]:
        return await self.db.read(lambda conn: views(conn, now))
