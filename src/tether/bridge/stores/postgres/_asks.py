"""Questions to the person on PostgreSQL (issue #36): the asks table as SQL, and the asks
part's operations that record an ask, take an answer at ingest (``answers``) and close an ask
the gateway cannot show.

An ask takes its room's conversation row first (as ingest does), then its task's: an ingest
into the room waits for the ask's commit and then sees it open, so the room's next message
from its senders is its answer; the order of the two locks is ingest's, so the two never deadlock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import attrs

from ...custody._asks import ANSWER_OWNER, ANSWERS_PREFIX, AskRecord, Question
from ...custody._rules import Claim
from .._asks_frame import AsksFrame
from ._connection import Conn
from ._db import PostgresDb
from ._sql import NO_DELIVERY_LEASE
from ._steps import StepsSql

_UTF8: Final = "utf-8"
_ERRORS: Final = "surrogatepass"
_COLS: Final = "name, seq, question, status, deadline, at, answer, answer_id, posted, answer_from"


def _text(data: bytes | None) -> str | None:
    return None if data is None else bytes(data).decode(_UTF8, _ERRORS)


def ask_of(row: Sequence[Any]) -> AskRecord:
    name, seq, question, status, deadline, at, answer, answer_id, posted, senders = row
    text = _text(question)
    assert text is not None
    return AskRecord(
        name, seq, text, status, deadline, at, _text(answer), answer_id, posted, senders
    )


def answer_sql(s: str) -> str:
    """Ingest's part, for one new message ``%(answer)s`` of ``%(room)s``: if an ask of the
    room is open for the message's sender (the oldest, its task waiting on it), the ask
    answered, its task pending (its reply to sit under the answer) and the message a no-send
    result; the asking task's id, or no row."""
    return (
        f"WITH a AS (SELECT a.task_id, a.name FROM {s}.asks a "
        f"JOIN {s}.tasks w ON w.id = a.task_id AND w.state = 'waiting' "
        "AND w.not_before = a.deadline "  # parked by this ask, not by a later sleep
        "WHERE a.room = %(room)s AND a.status = 'open' AND (a.answer_from IS NULL OR "
        f"(SELECT headers::json ->> 'sender' FROM {s}.tasks WHERE id = %(answer)s) "
        "= ANY(a.answer_from)) "  # issue #48: only the senders it names, or anyone
        "ORDER BY a.at, a.task_id LIMIT 1 FOR UPDATE OF a, w), "
        f"ans AS (UPDATE {s}.asks x SET status = 'answered', answer_id = %(answer)s, "
        f"answer = (SELECT body FROM {s}.tasks WHERE id = %(answer)s) FROM a "
        "WHERE x.task_id = a.task_id AND x.name = a.name RETURNING x.task_id), "
        f"wake AS (UPDATE {s}.tasks t SET state = 'pending', not_before = NULL, "
        # its reply goes under the answer (issue #49: the answer's number, read off its row)
        f"reply_seq = coalesce((SELECT turn_seq FROM {s}.tasks WHERE id = %(answer)s), "
        "t.reply_seq), "
        "updated_at = %(now)s FROM ans WHERE t.id = ans.task_id AND t.state = 'waiting' "
        "RETURNING t.id), "
        f"closed AS (UPDATE {s}.tasks t SET state = 'result', result = ''::bytea, "
        "no_send = true, owner = %(owner)s, lease_until = NULL, "
        f"{NO_DELIVERY_LEASE}, reason = %(prefix)s || wake.id, updated_at = %(now)s "
        "FROM wake WHERE t.id = %(answer)s AND t.state = 'pending' RETURNING t.id) "
        "SELECT wake.id, pg_notify(%(chan)s, 'pending')::text FROM wake"
    )


def answers(
    conn: Conn, s: str, channel: str, fresh: Sequence[tuple[str, str]], now: float
) -> list[tuple[str, str]]:
    """Take each new message ``(id, room)`` (in arrival order) as an open ask's answer
    where its room has one: ``(asking task, message)`` per answer taken."""
    asking = conn.execute(  # one look for the batch: most rooms have no open ask
        f"SELECT DISTINCT room FROM {s}.asks "
        "WHERE status = 'open' AND room = ANY(%(rooms)s::text[])",
        {"rooms": sorted({room for _, room in fresh})},
    ).fetchall()
    if not asking:
        return []
    rooms = {row[0] for row in asking}
    sql = answer_sql(s)
    params: dict[str, Any] = {"now": now, "owner": ANSWER_OWNER, "prefix": ANSWERS_PREFIX}
    params["chan"] = channel
    taken: list[tuple[str, str]] = []
    for id, room in [(id, room) for id, room in fresh if room in rooms]:
        row = conn.execute(sql, {**params, "answer": id, "room": room}).fetchone()
        if row is not None:
            taken.append((str(row[0]), id))
    return taken


@attrs.define(eq=False)
class PostgresAsks(AsksFrame):
    """The asks part: the ask operations on the store's ``PostgresDb``."""

    db: PostgresDb

    async def _asks(self, id: str) -> list[AskRecord]:
        sql = f"SELECT {_COLS} FROM {self.db.s}.asks WHERE task_id = %(id)s ORDER BY seq"
        return await self.db.run(lambda c: [ask_of(r) for r in c.execute(sql, {"id": id})])

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
        s, room = self.db.s, claim.task.room
        params: dict[str, Any] = {"id": claim.task.id, "worker": claim.worker, "run": claim.run}
        params.update(now=now, name=name, room=room, text=text.encode(_UTF8, _ERRORS), why=why)
        params["answer_from"] = None if answer_from is None else list(answer_from)
        lock = (
            f"INSERT INTO {s}.conversations AS c (room) VALUES (%(room)s) "
            "ON CONFLICT (room) DO UPDATE SET next_seq = c.next_seq"
        )
        old_sql = f"SELECT {_COLS} FROM {s}.asks WHERE task_id = %(id)s AND name = %(name)s"
        park = StepsSql(s).park
        insert = (
            f"INSERT INTO {s}.asks (task_id, name, seq, room, question, status, deadline, at, "
            "answer_from) SELECT %(id)s, %(name)s, coalesce(max(seq), 0) + 1, %(room)s, "
            "%(text)s, 'open', %(until)s, %(now)s, %(answer_from)s::text[] "
            f"FROM {s}.asks WHERE task_id = %(id)s RETURNING {_COLS}"
        )
        turn = (
            f"WITH n AS (UPDATE {s}.conversations SET next_seq = next_seq + 1 "
            "WHERE room = %(room)s RETURNING next_seq) "
            f"INSERT INTO {s}.turns (room, seq, role, task_id, text, at, outcome) "
            "SELECT %(room)s, next_seq, 'assistant', %(id)s, %(text)s, %(now)s, 'asked' FROM n"
        )

        def op(conn: Conn) -> AskRecord:
            with conn.transaction():
                if room is not None:
                    conn.execute(lock, params)
                old = conn.execute(old_sql, params).fetchone()
                params["until"] = until if old is None else float(old[4])
                if conn.execute(park, params).fetchone() is None:
                    raise self.db.missed(conn, claim, now, "ask for")
                if old is not None:
                    return ask_of(old)
                row = conn.execute(insert, params).fetchone()
                assert row is not None
                if room is not None:
                    conn.execute(turn, params)
                return ask_of(row)

        return await self.db.run(op)

    async def _unposted_questions(self, limit: int) -> list[Question]:
        sql = (
            f"SELECT task_id, name, seq, question FROM {self.db.s}.asks "
            "WHERE NOT posted AND status <> 'unsupported' ORDER BY at, task_id, seq "
            "LIMIT %(limit)s"
        )

        def op(conn: Conn) -> list[Question]:
            rows = conn.execute(sql, {"limit": limit}).fetchall()
            return [Question(id, name, seq, _text(text) or "") for id, name, seq, text in rows]

        return await self.db.run(op, promise=bool)

    async def _question_posted(self, id: str, name: str) -> bool:
        sql = (
            f"UPDATE {self.db.s}.asks SET posted = true WHERE task_id = %(id)s AND name = %(name)s"
        )
        return await self.db.run(lambda c: c.execute(sql, {"id": id, "name": name}).rowcount == 1)

    async def _ask_unsupported(self, id: str, name: str, now: float) -> bool:
        s = self.db.s
        params = {"id": id, "name": name, "now": now, "chan": self.db.channel}
        close = (
            f"UPDATE {s}.asks SET status = 'unsupported', posted = true "
            "WHERE task_id = %(id)s AND name = %(name)s AND status = 'open'"
        )
        wake = (
            f"WITH w AS (UPDATE {s}.tasks SET state = 'pending', not_before = NULL, "
            "updated_at = %(now)s WHERE id = %(id)s AND state = 'waiting' RETURNING id) "
            "SELECT id, pg_notify(%(chan)s, 'pending')::text FROM w"
        )

        def op(conn: Conn) -> bool:
            with conn.transaction():
                if conn.execute(close, params).rowcount != 1:
                    return False
                return conn.execute(wake, params).fetchone() is not None

        return await self.db.run(op)
