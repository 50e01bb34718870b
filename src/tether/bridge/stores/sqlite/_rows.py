"""What every SQLite part reads the same way: a task, a record, the state of ids, why a fence
missed, the workers, a room noted for its worker (run in the writer's or the reader's thread).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from ...custody._records import WorkerInfo
from ...custody._rules import Claim, CustodyState, Result, Task, TaskRecord
from .._common import FoundState, record_from_row, stale_lease, task_from_row, unknown_task
from .._frame import Moves
from . import _sql as sql


def task_of(row: Sequence[Any]) -> Task:
    return task_from_row(row, row[1])


def claim_of(row: Sequence[Any], worker: str, until: float, *, suspect: bool = False) -> Claim:
    """A claim from a claiming statement's row: the task's five columns (``_sql.TASK_COLS``),
    then ``attempt, rowid, run_no`` (and the turn, read by ``queue_place``)."""
    _id, _body, _room, _rank, _headers, attempt, _rowid, run, *_ = row
    return Claim(task_of(row), worker, attempt, until, run, suspect=suspect)


def queue_place(row: Sequence[Any]) -> tuple[Any, ...]:
    """A claimed row's place in the queue (``_sql.QUEUE_ORDER``): rank, turn, rowid."""
    _id, _body, _room, rank, _headers, _attempt, rowid, _run, turn = row
    return (rank, turn, rowid)


def result_of(row: Sequence[Any]) -> Result:
    """A ready result from ``_sql.READY``'s row: the task's columns, then ``result, owner,
    attempt, no_send``."""
    *_, result, owner, attempt, no_send = row
    return Result(task_of(row), result, owner, attempt, bool(no_send))


def record(conn: sqlite3.Connection, id: str) -> TaskRecord | None:
    row = conn.execute(sql.GET, (id,)).fetchone()
    if row is None:
        return None
    return record_of(row)


def record_of(row: Sequence[Any]) -> TaskRecord:
    return record_from_row(row, str)


def require(conn: sqlite3.Connection, id: str) -> TaskRecord:
    rec = record(conn, id)
    if rec is None:
        raise unknown_task(id)
    return rec


def states(conn: sqlite3.Connection, ids: Sequence[str]) -> Moves:
    """The state of each of ``ids`` that exists."""
    rows = conn.execute(sql.STATES, (json.dumps(list(ids)),))
    return {id: CustodyState(state) for id, state in rows}


def stale(conn: sqlite3.Connection, claim: Claim, now: float, verb: str) -> Exception:
    """Why ``claim``'s fence missed, read in the same job."""
    rec = record(conn, claim.task.id)
    seen = (
        None
        if rec is None
        else FoundState(rec.state, rec.owner, rec.attempt, rec.lease_until, rec.reason, run=rec.run)
    )
    return stale_lease(seen, claim, now, verb)


def note_room(conn: sqlite3.Connection, room: str, worker: str, now: float) -> None:
    conn.execute(sql.NOTE_ROOM, (room, worker, now))


def workers(conn: sqlite3.Connection) -> list[WorkerInfo]:
    return [WorkerInfo(*r) for r in conn.execute(sql.WORKERS)]


def next_due(conn: sqlite3.Connection, now: float) -> float | None:
    (due,) = conn.execute(sql.NEXT_DUE, (now,)).fetchone()
    return None if due is None else float(due)
