"""Flow control on PostgreSQL (issue #38): limits, permits and waiters as SQL.

An acquire with tokens to spare is ONE statement: it reads the task under the lease fence
``FOR SHARE`` (a concurrent move of the task waits for the permit's commit, and its trigger
then frees it), and updates the key's row only where ``custody._limits.decide`` would grant,
spelled in SQL: the row lock serialises acquires of one key across every process, and a
waiting acquire re-checks the condition on the row its predecessor committed. Only a refused
acquire reads the row again to say how long to wait (``decide`` itself).
"""

from __future__ import annotations

from typing import Final

import attrs

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
