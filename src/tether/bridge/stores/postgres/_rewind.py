"""Rewind and fork on PostgreSQL (issue #53): an operator's transactions over a run's records.

A rewind drops a dead run's records from a step on (and the asks asked since), before its
re-drive; a fork ingests the run's message again as a new task with the records before the
step copied, in one transaction, journaled as the operator's. The source task's row is
locked first (``FOR UPDATE``): a rewind and a run's record never interleave.
"""

from __future__ import annotations

from ...custody._records import OperatorOutcome
from ...custody._rules import TaskRecord
from ...custody._versions import fork_id, forked_task
from .._common import ingest_headers
from .._operator_frame import fork_refused, forked, rewind_refusal
from ._connection import Conn
from ._db import PostgresDb
from ._made import ingest_made, made_params
from ._rows import record_of


def _source(conn: Conn, db: PostgresDb, id: str) -> tuple[TaskRecord | None, list[str]]:
    """``id``'s task, its row locked, and its recorded step names in order."""
    conn.execute(f"SELECT 1 FROM {db.s}.tasks WHERE id = %s FOR UPDATE", (id,))
    row = conn.execute(db.sql.get, {"id": id}).fetchone()
    names = conn.execute(
        f"SELECT name FROM {db.s}.steps WHERE task_id = %s ORDER BY seq", (id,)
    ).fetchall()
    return None if row is None else record_of(row), [name for (name,) in names]


def _at(conn: Conn, db: PostgresDb, id: str, step: str) -> tuple[int, float]:
    row = conn.execute(
        f"SELECT seq, at FROM {db.s}.steps WHERE task_id = %s AND name = %s", (id, step)
    ).fetchone()
    assert row is not None
    return int(row[0]), float(row[1])


def drop_steps_from(conn: Conn, db: PostgresDb, id: str, step: str) -> int | OperatorOutcome:
    with conn.transaction():
        refused = rewind_refusal(id, *_source(conn, db, id), step)
        if refused is not None:
            return refused
        seq, at = _at(conn, db, id, step)
        dropped = conn.execute(
            f"DELETE FROM {db.s}.steps WHERE task_id = %s AND seq >= %s", (id, seq)
        ).rowcount
        conn.execute(f"DELETE FROM {db.s}.asks WHERE task_id = %s AND at >= %s", (id, at))
    return int(dropped)


def fork(
    conn: Conn,
    db: PostgresDb,
    id: str,
    step: str,
    room: str | None,
    why: str,
    now: float,
    max_body_bytes: int,
) -> OperatorOutcome:
    s = db.s
    with conn.transaction():
        source, names = _source(conn, db, id)
        refused = fork_refused(id, source, names, step)
        if refused is not None:
            return refused
        assert source is not None
        seq, at = _at(conn, db, id, step)
        n = 1
        taken = (
            f"SELECT 1 FROM {s}.tasks WHERE id = %(id)s "
            f"UNION ALL SELECT 1 FROM {s}.tombstones WHERE id = %(id)s"
        )  # a pruned task's tombstone refuses the ingest of its id
        while conn.execute(taken, {"id": fork_id(id, n)}).fetchone():
            n += 1
        task = forked_task(source.task, fork_id(id, n), step, room)
        made = made_params(db, task, ingest_headers(task, max_body_bytes), now)
        if not ingest_made(conn, db, made):
            raise AssertionError(f"fork {task.id!r} was not ingested: its id was free")
        params = {"new": task.id, "id": id, "seq": seq, "at": at, "now": now, "why": why}
        copied = conn.execute(
            f"INSERT INTO {s}.steps (task_id, name, seq, value, at, attempt, size, version, "
            "call) SELECT %(new)s, name, seq, value, at, 1, size, version, call "
            f"FROM {s}.steps WHERE task_id = %(id)s AND seq < %(seq)s "
            "AND left(name, 7) NOT IN ('~spawn:', '~join:')",
            params,
        ).rowcount
        conn.execute(
            f"INSERT INTO {s}.asks (task_id, name, seq, room, question, status, deadline, at, "
            "answer, answer_id, posted) SELECT %(new)s, name, seq, room, question, status, "
            f"deadline, at, answer, answer_id, posted FROM {s}.asks WHERE task_id = %(id)s "
            "AND at < %(at)s AND status != 'open'",
            params,
        )
        conn.execute(
            f"INSERT INTO {s}.journal (id, at, src, dst, worker, attempt, reason, actor) "
            "VALUES (%(new)s, %(now)s, 'pending', 'pending', NULL, 1, %(why)s, 'operator')",
            params,
        )
    return forked(id, task.id, step, int(copied))
