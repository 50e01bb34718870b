"""The operator's moves on PostgreSQL (``OperatorStore``): re-drive and cancel as the operator
part's statements, each flushed before it returns (a person was told).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ...custody._records import OperatorOutcome
from ...custody._rules import CustodyState
from .._frame import Moves
from .._operator import CANCELLED_PREFIX, FORGOTTEN_REASON
from .._operator_frame import OperatorFrame
from . import _rewind
from ._db import PostgresDb


@attrs.define(eq=False)
class PostgresOperator(OperatorFrame):
    """The operator part on the store's ``PostgresDb``."""

    db: PostgresDb

    async def _redrive(self, ids: Sequence[str], why: str, now: float) -> tuple[Moves, Moves]:
        params = {"ids": list(ids), "reason": why, "now": now, "chan": self.db.channel}
        return await self._operator(self.db.sql.redrive, params)

    async def _redrive_dead(
        self, text: str | None, limit: int, why: str, now: float, *, include_cancelled: bool
    ) -> tuple[list[str], Moves, Moves]:
        text = None if text is None else self.host.stored_text(text)
        params = {
            "text": text,
            "limit": limit,
            "reason": why,
            "now": now,
            "chan": self.db.channel,
            "skip": None if include_cancelled else CANCELLED_PREFIX,
        }
        moved, seen = await self._operator(self.db.sql.redrive_dead, params)
        return list(seen), moved, seen

    async def _cancel(self, ids: Sequence[str], why: str, now: float) -> tuple[Moves, Moves]:
        params = {"ids": list(ids), "reason": why, "now": now}
        return await self._operator(self.db.sql.cancel, params)

    async def _forgotten(self, ids: Sequence[str]) -> set[str]:
        sql = (
            f"SELECT id FROM {self.db.s}.tasks WHERE id = ANY(%(ids)s::text[]) "
            "AND state = 'dead' AND reason = %(reason)s"
        )
        params = {"ids": list(ids), "reason": FORGOTTEN_REASON}
        return await self.db.run(lambda conn: {id for (id,) in conn.execute(sql, params)})

    async def _drop_steps_from(self, id: str, step: str) -> int | OperatorOutcome:
        db = self.db
        return await db.run(lambda conn: _rewind.drop_steps_from(conn, db, id, step))

    async def _fork(
        self, id: str, step: str, room: str | None, why: str, now: float
    ) -> OperatorOutcome:
        db, limit = self.db, self.host.max_body_bytes
        return await db.run(
            lambda conn: _rewind.fork(conn, db, id, step, room, why, now, limit), promise=True
        )

    async def _operator(self, sql: str, params: Mapping[str, Any]) -> tuple[Moves, Moves]:
        """Run an operator move: (moved: id -> the state it left, seen: id -> state read)."""
        rows = await self.db.run(lambda conn: conn.execute(sql, params).fetchall(), promise=True)
        # each row: the id, the state read, moved? (and a notice sent, for a re-drive)
        seen = {id: CustodyState(state) for id, state, *_ in rows}
        moved = {id: CustodyState(state) for id, state, changed, *_ in rows if changed}
        return moved, seen
