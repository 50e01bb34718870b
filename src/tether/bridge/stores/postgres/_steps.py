"""Durable runs on PostgreSQL (issue #35): the steps table, parks and wake-ups as SQL.

A step is recorded by ONE statement that reads the task under the lease fence ``FOR SHARE``
and inserts the step: the row lock makes a concurrent move of the task (an expiry, a cancel,
another attempt's claim) wait for the insert's commit, or the fence is read again after that
move and no longer holds. So a zombie whose lease is gone records nothing, and a run that
took over never sees a zombie's record appear after its own.
"""

from __future__ import annotations

from typing import Final

import attrs

from ...custody._steps import MAX_TASK_STEP_BYTES
from ._sql import FENCE

_COLS: Final = "name, value, at, attempt, size"


@attrs.frozen
class StepsSql:
    """The statements of durable runs, with the schema (quoted) filled in once."""

    s: str

    @property
    def steps(self) -> str:
        return f"SELECT {_COLS} FROM {self.s}.steps WHERE task_id = %(id)s ORDER BY seq, at"

    @property
    def record(self) -> str:
        """One row: (fence held?, inserted?, the task's total before, the name's earlier
        record's columns or NULLs)."""
        return (
            f"WITH f AS (SELECT t.id, t.attempt FROM {self.s}.tasks t WHERE {FENCE} FOR SHARE), "
            f"old AS (SELECT {_COLS} FROM {self.s}.steps "
            "WHERE task_id = %(id)s AND name = %(name)s), "
            "tot AS (SELECT coalesce(sum(size), 0) AS total, coalesce(max(seq), 0) AS seq "
            f"FROM {self.s}.steps WHERE task_id = %(id)s), "
            f"ins AS (INSERT INTO {self.s}.steps (task_id, name, seq, value, at, attempt, size) "
            "SELECT f.id, %(name)s, tot.seq + 1, %(value)s, %(now)s, f.attempt, %(size)s "
            "FROM f, tot WHERE NOT EXISTS (SELECT FROM old) "
            f"AND tot.total + %(size)s <= {MAX_TASK_STEP_BYTES} "
            "ON CONFLICT (task_id, name) DO NOTHING RETURNING 1) "
            "SELECT EXISTS (SELECT FROM f), EXISTS (SELECT FROM ins), tot.total, "
            "old.name, old.value, old.at, old.attempt, old.size FROM tot LEFT JOIN old ON true"
        )

    @property
    def park(self) -> str:
        return (
            f"UPDATE {self.s}.tasks t SET state = 'waiting', owner = NULL, lease_until = NULL, "
            "not_before = %(until)s, reason = %(why)s, updated_at = %(now)s "
            f"WHERE {FENCE} RETURNING t.id"
        )

    @property
    def wake_due(self) -> str:
        return (
            f"WITH due AS (SELECT id FROM {self.s}.tasks WHERE state = 'waiting' "
            "AND not_before <= %(now)s ORDER BY not_before LIMIT %(limit)s "
            "FOR UPDATE SKIP LOCKED), "
            f"u AS (UPDATE {self.s}.tasks t SET state = 'pending', updated_at = %(now)s "
            "FROM due WHERE t.id = due.id AND t.state = 'waiting' "
            "RETURNING t.id, t.not_before) "
            "SELECT id, not_before, pg_notify(%(chan)s, 'pending')::text FROM u "
            "ORDER BY not_before, id"
        )

    @property
    def waiting_runs(self) -> str:
        return f"SELECT count(*), min(not_before) FROM {self.s}.tasks WHERE state = 'waiting'"

    @property
    def forget_ids(self) -> str:
        return (
            f"DELETE FROM {self.s}.steps WHERE task_id IN (SELECT id FROM {self.s}.tasks "
            "WHERE state = 'dead' AND id = ANY(%(ids)s::text[]))"
        )

    @property
    def forget_matching(self) -> str:
        return (
            f"DELETE FROM {self.s}.steps WHERE task_id IN (SELECT id FROM {self.s}.tasks "
            "WHERE state = 'dead' "
            "AND (%(text)s::text IS NULL OR strpos(reason, %(text)s::text) > 0) "
            "AND (%(skip)s::text IS NULL OR reason IS NULL "
            "OR left(reason, length(%(skip)s::text)) <> %(skip)s::text) "
            "ORDER BY updated_at, seq LIMIT %(limit)s)"
        )
