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

from ...custody._children import MAX_CHILDREN, ChildView, SpawnError, orphan_reason
from ...custody._records import StepRecord, WaitingRuns
from ...custody._rules import Claim, CustodyState, Task, TaskRecord
from ...custody._steps import MAX_TASK_STEP_BYTES, over_task_limit, step_is_a_promise
from ...custody._versions import InFlight
from .._steps_frame import StepsFrame
from . import _sql as sql
from ._db import SqliteDb
from ._made import ingest_made
from ._rows import record_of, stale
from ._sql import DEAD_MATCHING, FENCE_NAMED, IDS

_COLS: Final = "name, value, at, attempt, size, version, fingerprint, call"
STEPS: Final = f"SELECT {_COLS} FROM steps WHERE task_id = ? ORDER BY seq"
STEP: Final = f"SELECT {_COLS} FROM steps WHERE task_id = :id AND name = :name"
FENCED: Final = f"SELECT 1 FROM tasks WHERE {FENCE_NAMED}"
STEP_TOTAL: Final = (
    "SELECT coalesce(sum(size), 0), coalesce(max(seq), 0) FROM steps WHERE task_id = :id"
)
STEP_INSERT: Final = (
    "INSERT INTO steps (task_id, name, seq, value, at, attempt, size, version, fingerprint, "
    "call) VALUES (:id, :name, :seq, :value, :now, :attempt, :size, :version, :fingerprint, "
    ":call)"
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
RUNNING: Final = "('pending', 'assigned', 'claimed', 'waiting')"
"""The states of a task whose run is not over (a stored reply's is)."""
_FIRST_VERSION: Final = (
    "(SELECT s.version FROM steps s WHERE s.task_id = t.id ORDER BY s.seq LIMIT 1)"
)
"""The version a task's runs began under (its first record's): what it counts under."""
VERSIONS: Final = (
    f"SELECT {_FIRST_VERSION} AS v, count(*) AS n FROM tasks t "
    f"WHERE t.state IN {RUNNING} GROUP BY v ORDER BY n DESC, v"
)
OF_VERSION: Final = (
    f"SELECT {sql.RECORD_COLS} FROM tasks t WHERE t.state IN {RUNNING} "
    f"AND {_FIRST_VERSION} IS :version ORDER BY t.rowid LIMIT :limit"
)
TIME_OUT: Final = (
    "UPDATE asks SET status = 'timeout' WHERE task_id = ? AND status = 'open' AND deadline <= ?"
)


CHILD_COUNT: Final = "SELECT count(*) FROM tasks INDEXED BY tasks_children WHERE parent = :id"
CHILDREN: Final = (
    "SELECT id, state, result, reason FROM tasks INDEXED BY tasks_children "
    f"WHERE parent = ? AND id IN {IDS}"
)
_LIVE: Final = "parent IS NOT NULL AND state IN ('pending', 'assigned', 'claimed', 'waiting')"
"""A live child: ``tasks_live_children``'s predicate, word for word (SQLite's planner reads
it)."""
AWAIT: Final = (
    "UPDATE tasks SET awaited = (id IN (SELECT value FROM json_each(:ids))) "
    "WHERE parent = :id AND (awaited = 1 OR id IN (SELECT value FROM json_each(:ids)))"
)
"""The children of this join awaited, and only they: an earlier join's (one that timed out)
no longer hold the parent's wake."""
PARK_JOIN: Final = (
    "UPDATE tasks SET state = CASE WHEN j.live THEN 'waiting' ELSE 'pending' END, "
    "owner = NULL, lease_until = NULL, not_before = CASE WHEN j.live THEN :until END, "
    "reason = CASE WHEN j.live THEN :why ELSE reason END, updated_at = :now "
    "FROM (SELECT EXISTS (SELECT 1 FROM tasks INDEXED BY tasks_live_children "
    f"WHERE parent = :id AND {_LIVE} AND awaited = 1) AS live) j "
    f"WHERE {FENCE_NAMED} RETURNING state"
)
_JOINERS_DONE: Final = (
    "SELECT id FROM tasks INDEXED BY tasks_sleeping WHERE state = 'waiting' "
    "AND reason LIKE 'joining %' AND NOT EXISTS (SELECT 1 FROM tasks c "
    "INDEXED BY tasks_live_children WHERE c.parent = tasks.id AND c.parent IS NOT NULL "
    "AND c.state IN ('pending', 'assigned', 'claimed', 'waiting') AND c.awaited = 1)"
)
"""Joining parents none of whose awaited children is live (the trigger's wake missed)."""
WAKE_JOINED: Final = (
    "UPDATE tasks SET state = 'pending', not_before = NULL, updated_at = :now "
    f"WHERE id IN ({_JOINERS_DONE} LIMIT :limit) RETURNING id"
)
_ORPHANS: Final = (
    "SELECT c.id, c.state, c.parent, p.state FROM tasks c INDEXED BY tasks_live_children "
    "LEFT JOIN tasks p ON p.id = c.parent "
    "WHERE c.parent IS NOT NULL AND c.state IN ('pending', 'assigned', 'claimed', 'waiting') "
    "AND (p.id IS NULL OR p.state IN ('result', 'delivered', 'dead'))"
)
ORPHANS: Final = f"{_ORPHANS} LIMIT :limit"
TO_SETTLE: Final = f"SELECT EXISTS ({_ORPHANS}) OR EXISTS ({_JOINERS_DONE})"
"""Is there a joiner to wake or an orphan to cancel? (Read first: an idle pass writes
nothing.)"""
CANCEL_ORPHAN: Final = (
    "UPDATE tasks SET state = 'dead', owner = NULL, lease_until = NULL, not_before = NULL, "
    "reason = :why, updated_at = :now WHERE id = :id AND state = :was"
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
        params["name"],
        params["value"],
        params["now"],
        params["attempt"],
        params["size"],
        params["version"],
        params["fingerprint"],
        params["call"],
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


def spawn(
    conn: sqlite3.Connection, params: dict[str, Any], child: Task, headers: str
) -> tuple[StepRecord, bool] | None:
    """A parent's spawn (the writer's job): its record if kept, else the child ingested and
    the record inserted; None if fenced out."""
    if conn.execute(FENCED, params).fetchone() is None:
        return None
    row = conn.execute(STEP, params).fetchone()
    if row is not None:
        return StepRecord(*row), False
    (count,) = conn.execute(CHILD_COUNT, params).fetchone()
    if count >= MAX_CHILDREN:
        raise SpawnError(
            f"task {params['id']!r} has spawned {count} children: a parent may spawn at most "
            f"{MAX_CHILDREN}"
        )
    new = ingest_made(conn, child, headers, params["now"])
    record = record_step(conn, params)
    assert record is not None  # the fence held above, in this job
    return record, new


def children_of(conn: sqlite3.Connection, parent: str, ids: Sequence[str]) -> list[ChildView]:
    return [
        ChildView(id, CustodyState(state), result, reason)
        for id, state, result, reason in conn.execute(CHILDREN, (parent, json.dumps(list(ids))))
    ]


def settle_children(
    conn: sqlite3.Connection, now: float, limit: int
) -> tuple[list[str], list[tuple[str, CustodyState, str]]]:
    woken = [id for (id,) in conn.execute(WAKE_JOINED, {"now": now, "limit": limit})]
    cancelled: list[tuple[str, CustodyState, str]] = []
    while len(cancelled) < limit:  # a cancelled child's own children are orphans next round
        found = conn.execute(ORPHANS, {"limit": limit - len(cancelled)}).fetchall()
        for id, was, parent, ended in found:
            why = orphan_reason(parent, ended)
            conn.execute(CANCEL_ORPHAN, {"id": id, "was": was, "why": why, "now": now})
            cancelled.append((id, CustodyState(was), why))
        if not found:
            break
    return woken, cancelled


@attrs.define(eq=False)
class SqliteSteps(StepsFrame):
    """The steps part: steps, parks and wake-ups on the store's ``SqliteDb``."""

    db: SqliteDb

    async def _steps(self, id: str) -> list[StepRecord]:
        return await self.db.read(lambda conn: steps_of(conn, id))

    async def _record_step(
        self,
        claim: Claim,
        name: str,
        value: str,
        size: int,
        now: float,
        version: str | None,
        fingerprint: str | None,
        call: str | None,
    ) -> StepRecord:
        params = {
            **sql.fence_params(claim, now),
            "attempt": claim.attempt,  # the record's: which attempt's run recorded it
            "name": name,
            "value": value,
            "size": size,
            "version": version,
            "fingerprint": fingerprint,
            "call": call,
        }

        def op(conn: sqlite3.Connection) -> StepRecord:
            record = record_step(conn, params)
            if record is None:
                raise stale(conn, claim, now, f"record step {name!r} of")
            return record

        return await self.db.write(op, promise=step_is_a_promise(name))

    async def _spawn(
        self,
        claim: Claim,
        step: str,
        value: str,
        child: Task,
        headers: str,
        now: float,
        version: str | None,
        fingerprint: str,
    ) -> tuple[StepRecord, bool]:
        params = {
            **sql.fence_params(claim, now),
            "attempt": claim.attempt,
            "name": step,
            "value": value,
            "size": len(value.encode("utf-8")),
            "version": version,
            "fingerprint": fingerprint,
            "call": None,
        }

        def op(conn: sqlite3.Connection) -> tuple[StepRecord, bool]:
            done = spawn(conn, params, child, headers)
            if done is None:
                raise stale(conn, claim, now, f"spawn {step!r} of")
            return done

        return await self.db.write(op)

    async def _children(self, parent: str, ids: Sequence[str]) -> list[ChildView | None]:
        found = {c.id: c for c in await self.db.read(lambda conn: children_of(conn, parent, ids))}
        return [found.get(id) for id in ids]

    async def _park_join(
        self, claim: Claim, ids: Sequence[str], until: float, why: str, now: float
    ) -> CustodyState:
        params = {**sql.fence_params(claim, now), "until": until, "why": why}
        params["ids"] = json.dumps(list(ids))

        def op(conn: sqlite3.Connection) -> CustodyState:
            conn.execute(AWAIT, params)
            row = conn.execute(PARK_JOIN, params).fetchone()
            if row is None:
                raise stale(conn, claim, now, "park")
            return CustodyState(row[0])

        return await self.db.write(op)

    async def _settle_children(
        self, limit: int, now: float
    ) -> tuple[list[str], list[tuple[str, CustodyState, str]]]:
        if not (await self.db.read(lambda conn: conn.execute(TO_SETTLE).fetchone()))[0]:
            return [], []
        return await self.db.write(lambda conn: settle_children(conn, now, limit))

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

    async def versions_in_flight(self) -> list[InFlight]:
        return await self.db.read(
            lambda conn: [InFlight(v, int(n)) for v, n in conn.execute(VERSIONS)]
        )

    async def _records_of_version(self, version: str | None, limit: int) -> list[TaskRecord]:
        params = {"version": version, "limit": limit}
        return await self.db.read(
            lambda conn: [record_of(row) for row in conn.execute(OF_VERSION, params)]
        )

    async def forget_dead_steps(
        self, ids: Sequence[str] | None, text: str | None, limit: int, skip: str | None = None
    ) -> None:
        await self.db.write(lambda conn: forget_dead_steps(conn, ids, text, limit, skip))
