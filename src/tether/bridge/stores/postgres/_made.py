"""Tasks the store makes itself (a run's child, a schedule's firing; issues #51, #52), ingested
inside the transaction that records why they were made."""

from __future__ import annotations

from typing import Any

from ...custody._rooms import DEFAULT_ROOM_POLICY
from ...custody._rules import PRIORITY_RANK, Task
from ...custody._tenants import NO_TURN
from ._connection import Conn
from ._conversations import lock_rooms_sql
from ._db import PostgresDb
from ._rows import encode
from ._tenants import turns as tenant_turns


def made_params(db: PostgresDb, task: Task, headers: str, now: float) -> dict[str, Any]:
    """``Sql.ingest``'s parameters for ``task`` (room policy ``serial``)."""
    return {
        "ids": [task.id],
        "bodies": [encode(task.body)],
        "rooms": [task.room],
        "ranks": [PRIORITY_RANK[task.priority]],
        "headers": [headers],
        "tenants": [task.tenant],
        "fairs": [NO_TURN],
        "queues": [task.queue],
        "parents": [task.parent],
        "now": now,
        "chan": db.channel,
        "policy": DEFAULT_ROOM_POLICY,
    }


def ingest_made(conn: Conn, db: PostgresDb, params: dict[str, Any]) -> bool:
    """Ingest the task of ``made_params`` in the caller's transaction (no open ask is
    answered: a task the store made is not the person's message); whether it is new."""
    if params["rooms"][0] is not None:
        conn.execute(lock_rooms_sql(db.s), params)
    if params["tenants"][0] is not None:
        params["fairs"] = tenant_turns(conn.execute(db.sql.turns, params).fetchall(), params)
    return bool(conn.execute(db.sql.ingest, params).fetchall())
