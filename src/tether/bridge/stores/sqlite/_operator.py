"""The operator's moves on SQLite (``OperatorStore``): re-drive and cancel as the operator
part's writer jobs, each made durable before it returns (a person was told).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

import attrs

from ...custody._records import OperatorOutcome
from ...custody._rules import CustodyState
from .._frame import Moves
from .._operator import CANCELLED_PREFIX, FORGOTTEN_REASON
from .._operator_frame import OperatorFrame
from . import _rewind
from . import _sql as sql
from ._db import SqliteDb
from ._rows import states


@attrs.define(eq=False)
class SqliteOperator(OperatorFrame):
    """The operator part on the store's ``SqliteDb``."""

    db: SqliteDb

    async def _redrive(self, ids: Sequence[str], why: str, now: float) -> tuple[Moves, Moves]:
        return await self.db.write(lambda conn: redrive_rows(conn, ids, why, now), promise=True)

    async def _redrive_dead(
        self, text: str | None, limit: int, why: str, now: float, *, include_cancelled: bool
    ) -> tuple[list[str], Moves, Moves]:
        skip = None if include_cancelled else CANCELLED_PREFIX

        def op(conn: sqlite3.Connection) -> tuple[list[str], Moves, Moves]:
            ids = [r[0] for r in conn.execute(sql.DEAD_MATCHING, (text, limit, skip))]
            return ids, *redrive_rows(conn, ids, why, now)

        return await self.db.write(op, promise=True)

    async def _cancel(self, ids: Sequence[str], why: str, now: float) -> tuple[Moves, Moves]:
        def op(conn: sqlite3.Connection) -> tuple[Moves, Moves]:
            # the writer holds the write lock: the states read here are the ones the UPDATE sees
            seen = states(conn, ids)
            rows = conn.execute(sql.CANCEL, (why, now, json.dumps(list(ids)))).fetchall()
            return {r[0]: seen[r[0]] for r in rows}, seen

        return await self.db.write(op, promise=True)

    async def _forgotten(self, ids: Sequence[str]) -> set[str]:
        params = (json.dumps(list(ids)), FORGOTTEN_REASON)
        return await self.db.read(
            lambda conn: {id for (id,) in conn.execute(_rewind.FORGOTTEN, params)}
        )

    async def _drop_steps_from(self, id: str, step: str) -> int | OperatorOutcome:
        return await self.db.write(lambda conn: _rewind.drop_steps_from(conn, id, step))

    async def _fork(
        self, id: str, step: str, room: str | None, why: str, now: float
    ) -> OperatorOutcome:
        limit = self.host.max_body_bytes
        return await self.db.write(
            lambda conn: _rewind.fork(conn, id, step, room, why, now, limit), promise=True
        )


def redrive_rows(
    conn: sqlite3.Connection, ids: Sequence[str], why: str, now: float
) -> tuple[Moves, Moves]:
    """dead -> pending for those of ``ids`` that are dead: fresh attempts, due now, nothing of
    the dead run kept (owner, lease, stored reply, stall and dead-notice markers, crash counts
    and the suspect mark: the operator vouches for it). Returns
    (moved: id -> dead, seen: every existing id -> its state before)."""
    seen = states(conn, ids)
    rows = conn.execute(sql.REDRIVE, (why, now, json.dumps(list(ids)))).fetchall()
    moved = [r[0] for r in rows]
    conn.execute(sql.REDRIVE_CLEAR_STALLS, (json.dumps(moved),))
    return dict.fromkeys(moved, CustodyState.DEAD), seen
