"""Tasks the store makes itself (a run's child, a schedule's firing; issues #51, #52), ingested
inside the transaction that records why they were made."""

from __future__ import annotations

import sqlite3

from ...custody._rooms import DEFAULT_ROOM_POLICY
from ...custody._rules import PRIORITY_RANK, Task
from ...custody._tenants import NO_TURN
from . import _sql as sql
from ._tenants import next_turn


def ingest_made(conn: sqlite3.Connection, task: Task, headers: str, now: float) -> bool:
    """Ingest ``task`` in the job's transaction (room policy ``serial``; no open ask is
    answered: a task the store made is not the person's message); whether it is new."""
    rank, tenant = PRIORITY_RANK[task.priority], task.tenant
    turn = NO_TURN if tenant is None else next_turn(conn, tenant, rank)
    values = (task.id, task.body, task.room, rank, headers, now, now)
    return bool(
        conn.execute(sql.INGEST, (*values, DEFAULT_ROOM_POLICY, tenant, turn, task.id)).rowcount
    )
