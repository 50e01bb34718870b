"""Durable runs on SQLite (issue #35): the steps table, parks and wake-ups, as SQL and as the
steps part's writer jobs (each in the writer's group commit, under the lease fence).

The writer holds the write lock for a whole job: the fence read, the task's total and the
insert of one ``record_step`` see the same rows, so a run whose lease is gone records
nothing and nothing can record for a task after another attempt claimed it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, Final

import attrs

from ...custody._records import StepRecord, WaitingRuns
from ...custody._rules import Claim
from ...custody._steps import MAX_TASK_STEP_BYTES, over_task_limit
from .._steps_frame import StepsFrame
from . import _sql as sql
from ._db import SqliteDb
from ._rows import stale
from ._sql import DEAD_MATCHING, FENCE_NAMED, IDS

STEPS: Final = "SELECT name, value, at, attempt, size FROM steps WHERE task_id = ? ORDER BY seq"
STEP: Final = (
    "SELECT name, value, at, attempt, size FROM steps WHERE task_id = :id AND name = :name"
)
FENCED: Final = f"SELECT 1 FROM tasks WHERE {FENCE_NAMED}"
STEP_TOTAL: Final = (
    "SELECT coalesce(sum(size), 0), coalesce(max(seq), 0) FROM steps WHERE task_id = :id"
)
STEP_INSERT: Final = (
    "INSERT INTO steps (task_id, name, seq, value, at, attempt, size) "
    "VALUES (:id, :name, :seq, :value, :now, :attempt, :size)"
)
PARK: Final = (
    "UPDATE tasks SET state = 'waiting', owner = NULL, lease_until = NULL, "
    f"not_before = :until, reason = :why, updated_at = :now WHERE {FENCE_NAMED}"
)
WAKE_DUE: Final = (
    "UPDATE tasks SET state = 'pending', updated_at = :now WHERE id IN ("
    "SELECT id FROM tasks INDEXED BY tasks_sleeping WHERE state = 'waiting' "
    "AND not_before <= :now ORDER BY not_before LIMIT :limit) AND state = 'waiting' "
    "RETURNING id, not_before"
)
WAITING_RUNS: Final = (
    "SELECT count(*), min(not_before) FROM tasks INDEXED BY tasks_sleeping WHERE state = 'waiting'"
)
FORGET_IDS: Final = (
    "DELETE FROM steps WHERE task_id IN "
    f"(SELECT id FROM tasks WHERE state = 'dead' AND id IN {IDS})"
)
FORGET_MATCHING: Final = f"DELETE FROM steps WHERE task_id IN ({DEAD_MATCHING})"
TIME_OUT: Final = (
    "UPDATE asks SET status = 'timeout' WHERE task_id = ? AND status = 'open' AND deadline <= ?"
)


def steps_of(conn: sqlite3.Connection, id: str) -> list[StepRecord]:
    return [StepRecord(*row) for row in conn.execute(STEPS, (id,))]


def record_step(conn: sqlite3.Connection, params: dict[str, Any]) -> StepRecord | None:
    """Record one step under the fence (the writer's job); None if fenced out. The first
    record of a name is kept (a repeat returns it)."""
    if conn.execute(FENCED, params).fetchone() is None:
        return None
    row = conn.execute(STEP, params).fetchone()
    if row is not None:
        return StepRecord(*row)
    total, seq = conn.execute(STEP_TOTAL, params).fetchone()
    if total + params["size"] > MAX_TASK_STEP_BYTES:
        raise over_task_limit(params["name"], total, params["size"])
    conn.execute(STEP_INSERT, {**params, "seq": seq + 1})
    return StepRecord(
        params["name"], params["value"], params["now"], params["attempt"], params["size"]
    )


def wake_due(conn: sqlite3.Connection, now: float, limit: int) -> list[str]:
    rows = conn.execute(WAKE_DUE, {"now": now, "limit": limit}).fetchall()
    return [id for _, id in sorted((due, id) for id, due in rows)]


def waiting_runs(conn: sqlite3.Connection) -> WaitingRuns:
    count, first = conn.execute(WAITING_RUNS).fetchone()
    return WaitingRuns(int(count), None if first is None else float(first))


def forget_dead_steps(
    conn: sqlite3.Connection,
    ids: Sequence[str] | None,
    text: str | None,
    limit: int,
    skip: str | None = None,
) -> None:
    if ids is None:
        conn.execute(FORGET_MATCHING, (text, limit, skip))
    else:
        conn.execute(FORGET_IDS, (json.dumps(list(ids)),))


def time_out(conn: sqlite3.Connection, ids: Sequence[str], now: float) -> None:
    """The reconciler woke ``ids``: an ask still open past its deadline timed out (issue #36)."""
    conn.executemany(TIME_OUT, [(id, now) for id in ids])


@attrs.define(eq=False)
class SqliteSteps(StepsFrame):
    """The steps part: steps, parks and wake-ups on the store's ``SqliteDb``."""

    db: SqliteDb

    async def _steps(self, id: str) -> list[StepRecord]:
        return await self.db.read(lambda conn: steps_of(conn, id))

    async def _record_step(
        self, claim: Claim, name: str, value: str, size: int, now: float
    ) -> StepRecord:
        params = {
            **sql.fence_params(claim, now),
            "attempt": claim.attempt,  # the record's: which attempt's run recorded it
            "name": name,
            "value": value,
            "size": size,
        }

        def op(conn: sqlite3.Connection) -> StepRecord:
            record = record_step(conn, params)
            if record is None:
                raise stale(conn, claim, now, f"record step {name!r} of")
            return record

        return await self.db.write(op, promise=True)  # the step's effect has left already

    async def _park(self, claim: Claim, until: float, why: str, now: float) -> None:
        params = {**sql.fence_params(claim, now), "until": until, "why": why}

        def op(conn: sqlite3.Connection) -> None:
            if conn.execute(PARK, params).rowcount != 1:
                raise stale(conn, claim, now, "park")

        await self.db.write(op)

    async def _wake_due(self, limit: int, now: float) -> list[str]:
        def op(conn: sqlite3.Connection) -> list[str]:
            ids = wake_due(conn, now, limit)
            time_out(conn, ids, now)  # an ask past its deadline (issue #36)
            return ids

        return await self.db.write(op)

    async def waiting_runs(self) -> WaitingRuns:
        return await self.db.read(waiting_runs)

    async def forget_dead_steps(
        self, ids: Sequence[str] | None, text: str | None, limit: int, skip: str | None = None
    ) -> None:
        await self.db.write(lambda conn: forget_dead_steps(conn, ids, text, limit, skip))
