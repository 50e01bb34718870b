"""Rewind and fork on SQLite (issue #53): an operator's writer jobs over a run's records.

A rewind drops a dead run's records from a step on (and the asks asked since), before its
re-drive; a fork ingests the run's message again as a new task with the records before the
step copied, in one job, journaled as the operator's.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from ...custody._records import OperatorOutcome
from ...custody._versions import fork_id, forked_task
from .._common import ingest_headers
from .._operator_frame import fork_refused, forked, rewind_refusal
from ._made import ingest_made
from ._rows import record

NAMES: Final = "SELECT name FROM steps WHERE task_id = ? ORDER BY seq"
AT: Final = "SELECT seq, at FROM steps WHERE task_id = ? AND name = ?"
DROP_STEPS: Final = "DELETE FROM steps WHERE task_id = ? AND seq >= ?"
DROP_ASKS: Final = "DELETE FROM asks WHERE task_id = ? AND at >= ?"
FORGOTTEN: Final = (
    "SELECT id FROM tasks WHERE id IN (SELECT value FROM json_each(?1)) AND state = 'dead' "
    "AND reason = ?2"
)
TAKEN: Final = "SELECT 1 FROM tasks WHERE id = ?1 UNION ALL SELECT 1 FROM tombstones WHERE id = ?1"
"""An id a fork cannot take: a task's, or a pruned one's (its tombstone refuses the ingest)."""
COPY_STEPS: Final = (
    "INSERT INTO steps (task_id, name, seq, value, at, attempt, size, version, call) "
    "SELECT :new, name, seq, value, at, 1, size, version, call FROM steps "
    "WHERE task_id = :id AND seq < :seq AND substr(name, 1, 7) NOT IN ('~spawn:', '~join:')"
)
"""A fork's copies: no fingerprint (its arguments may name its own id, ``run.key``: never
compared), and no children (a fork spawns and joins its own)."""
COPY_ASKS: Final = (
    "INSERT INTO asks (task_id, name, seq, room, question, status, deadline, at, answer, "
    "answer_id, posted) SELECT :new, name, seq, room, question, status, deadline, at, "
    "answer, answer_id, posted FROM asks WHERE task_id = :id AND at < :at AND status != 'open'"
)
JOURNAL_NOTE: Final = (
    "INSERT INTO journal (born, id, seq, at, src, dst, worker, attempt, reason, actor) "
    "SELECT t.created_at, t.id, coalesce((SELECT max(j.seq) FROM journal j "
    "WHERE j.born = t.created_at AND j.id = t.id), 0) + 1, :now, t.state, t.state, NULL, "
    "t.attempt, :why, 'operator' FROM tasks t WHERE t.id = :new"
)


def drop_steps_from(conn: sqlite3.Connection, id: str, step: str) -> int | OperatorOutcome:
    names = [name for (name,) in conn.execute(NAMES, (id,))]
    refused = rewind_refusal(id, record(conn, id), names, step)
    if refused is not None:
        return refused
    seq, at = conn.execute(AT, (id, step)).fetchone()
    dropped = int(conn.execute(DROP_STEPS, (id, seq)).rowcount)
    conn.execute(DROP_ASKS, (id, at))
    return dropped


def fork(
    conn: sqlite3.Connection,
    id: str,
    step: str,
    room: str | None,
    why: str,
    now: float,
    max_body_bytes: int,
) -> OperatorOutcome:
    source = record(conn, id)
    names = [name for (name,) in conn.execute(NAMES, (id,))]
    refused = fork_refused(id, source, names, step)
    if refused is not None:
        return refused
    assert source is not None
    seq, at = conn.execute(AT, (id, step)).fetchone()
    n = 1
    while conn.execute(TAKEN, (fork_id(id, n),)).fetchone() is not None:
        n += 1
    task = forked_task(source.task, fork_id(id, n), step, room)
    if not ingest_made(conn, task, ingest_headers(task, max_body_bytes), now):
        raise AssertionError(f"fork {task.id!r} was not ingested: its id was free")
    params = {"new": task.id, "id": id, "seq": seq, "at": at, "now": now, "why": why}
    copied = int(conn.execute(COPY_STEPS, params).rowcount)
    conn.execute(COPY_ASKS, params)
    conn.execute(JOURNAL_NOTE, params)
    return forked(id, task.id, step, copied)
