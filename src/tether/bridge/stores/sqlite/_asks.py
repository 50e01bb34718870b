"""Questions to the person on SQLite (issue #36): the asks table as SQL, and the asks part's
writer jobs that record an ask, take an answer at ingest and close an ask the gateway cannot
show.

The writer runs one job at a time, so an ingest either sees an ask committed (and takes its
message as the answer) or runs before it (and the message is an ordinary one).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, Final

import attrs

from ...custody._asks import ANSWER_OWNER, AskRecord, Question, answers_reason
from ...custody._rules import Claim
from .._asks_frame import AsksFrame
from . import _sql as sql
from ._db import SqliteDb
from ._rows import stale
from ._steps import PARK

_COLS: Final = "name, seq, question, status, deadline, at, answer, answer_id, posted, answer_from"
ASKS: Final = f"SELECT {_COLS} FROM asks WHERE task_id = ? ORDER BY seq"
ASK: Final = f"SELECT {_COLS} FROM asks WHERE task_id = :id AND name = :name"
ASK_INSERT: Final = (
    "INSERT INTO asks (task_id, name, seq, room, question, status, deadline, at, answer_from) "
    "SELECT :id, :name, coalesce((SELECT max(seq) FROM asks WHERE task_id = :id), 0) + 1, "
    ":room, :text, 'open', :until, :now, :answer_from"
)
ASKED_SEQ: Final = (
    "INSERT INTO conversations (room, next_seq) VALUES (:room, 1) "
    "ON CONFLICT (room) DO UPDATE SET next_seq = next_seq + 1"
)
ASKED_TURN: Final = (
    "INSERT INTO turns (room, seq, role, task_id, text, at, outcome) "
    "SELECT room, next_seq, 'assistant', :id, :text, :now, 'asked' "
    "FROM conversations WHERE room = :room"
)
OPEN_ASK: Final = (
    "SELECT a.task_id, a.name FROM asks a INDEXED BY asks_open "
    "JOIN tasks w ON w.id = a.task_id AND w.state = 'waiting' AND w.not_before = a.deadline "
    "WHERE a.room = :room AND a.status = 'open' AND (a.answer_from IS NULL OR EXISTS ("
    "SELECT 1 FROM json_each(a.answer_from) f, tasks m "
    "WHERE m.id = :answer AND f.value = json_extract(m.headers, '$.sender'))) "
    "ORDER BY a.at, a.task_id LIMIT 1"
)
"""The room's oldest open ask that message ``:answer`` may answer (its sender is one the ask
names, or the ask takes anyone's) whose task waits on it: parked by this ask, until its
deadline (a cancelled asker's ask, or one its re-driven run left for a durable sleep, takes
nothing)."""
ANSWER: Final = (
    "UPDATE asks SET status = 'answered', answer = :body, answer_id = :answer "
    "WHERE task_id = :asker AND name = :name AND status = 'open'"
)
WAKE_ASKER: Final = (
    "UPDATE tasks SET state = 'pending', not_before = NULL, updated_at = :now, "
    "reply_seq = coalesce((SELECT turn_seq FROM tasks WHERE id = :answer), reply_seq) "
    "WHERE id = :id AND state = 'waiting'"
)
"""The asker pending again, its reply to sit under the answer (the answer's own turn)."""
CLOSE_ANSWER: Final = (
    "UPDATE tasks SET state = 'result', result = '', no_send = 1, owner = :owner, "
    "lease_until = NULL, reason = :why, updated_at = :now WHERE id = :answer AND state = 'pending'"
)
UNPOSTED: Final = (
    "SELECT task_id, name, seq, question FROM asks INDEXED BY asks_unposted "
    "WHERE posted = 0 AND status <> 'unsupported' ORDER BY at, task_id, seq LIMIT ?"
)
POSTED: Final = "UPDATE asks SET posted = 1 WHERE task_id = ? AND name = ?"
UNSUPPORTED: Final = (
    "UPDATE asks SET status = 'unsupported', posted = 1 "
    "WHERE task_id = ? AND name = ? AND status = 'open'"
)


def ask_of(row: Sequence[Any]) -> AskRecord:
    name, seq, question, status, deadline, at, answer, answer_id, posted, senders = row
    answer_from = None if senders is None else json.loads(senders)
    return AskRecord(
        name, seq, question, status, deadline, at, answer, answer_id, bool(posted), answer_from
    )


def answer(conn: sqlite3.Connection, id: str, room: str, body: str, now: float) -> str | None:
    """Ingest's part (the new message ``id`` of ``room``): if an ask of the room is open for
    this message's sender, its answer is this message: the ask answered, its task pending (no
    attempt spent), this message closed as a no-send result. The asking task's id, or None."""
    row = conn.execute(OPEN_ASK, {"room": room, "answer": id}).fetchone()
    if row is None:
        return None
    asker, name = row
    conn.execute(ANSWER, {"body": body, "answer": id, "asker": asker, "name": name})
    conn.execute(WAKE_ASKER, {"id": asker, "now": now, "answer": id})
    why = answers_reason(asker)
    conn.execute(CLOSE_ANSWER, {"owner": ANSWER_OWNER, "why": why, "now": now, "answer": id})
    return str(asker)


@attrs.define(eq=False)
class SqliteAsks(AsksFrame):
    """The asks part: the ask operations on the store's ``SqliteDb``."""

    db: SqliteDb

    async def _asks(self, id: str) -> list[AskRecord]:
        return await self.db.read(lambda c: [ask_of(r) for r in c.execute(ASKS, (id,))])

    async def _ask(
        self,
        claim: Claim,
        name: str,
        text: str,
        until: float,
        why: str,
        now: float,
        answer_from: tuple[str, ...] | None,
    ) -> AskRecord:
        room = claim.task.room
        params = {**sql.fence_params(claim, now), "name": name, "text": text, "room": room}
        params["answer_from"] = None if answer_from is None else json.dumps(answer_from)

        def op(conn: sqlite3.Connection) -> AskRecord:
            old = conn.execute(ASK, params).fetchone()
            deadline = until if old is None else float(old[4])
            if conn.execute(PARK, {**params, "until": deadline, "why": why}).rowcount != 1:
                raise stale(conn, claim, now, "ask for")
            if old is not None:
                return ask_of(old)
            conn.execute(ASK_INSERT, {**params, "until": deadline})
            if room is not None:
                conn.execute(ASKED_SEQ, params)
                conn.execute(ASKED_TURN, params)
            return ask_of(conn.execute(ASK, params).fetchone())

        return await self.db.write(op)

    async def _unposted_questions(self, limit: int) -> list[Question]:
        rows = await self.db.read(lambda c: c.execute(UNPOSTED, (limit,)).fetchall())
        return await self.db.promised([Question(*row) for row in rows])

    async def _question_posted(self, id: str, name: str) -> bool:
        return await self.db.write(lambda c: c.execute(POSTED, (id, name)).rowcount == 1)

    async def _ask_unsupported(self, id: str, name: str, now: float) -> bool:
        def op(conn: sqlite3.Connection) -> bool:
            if conn.execute(UNSUPPORTED, (id, name)).rowcount != 1:
                return False
            return conn.execute(WAKE_ASKER, {"id": id, "now": now, "answer": None}).rowcount == 1

        return await self.db.write(op)
