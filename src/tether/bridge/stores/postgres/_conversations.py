"""PostgresStore's conversations (issue #34): the history window, the state written with a
result, the text a streaming run has shown, an operator's look and erasure, retention.

As in SQLite (``sqlite._conversations``) the turns of custody moves are written by the
schema's triggers; this module writes only what no custody move carries. The state is written
in one transaction with the result: the room's row is locked (``FOR UPDATE``), the result's
compare-and-set runs, then the version is compared, so two runs of a ``concurrent`` room on
two bridges cannot both store a state based on the same version.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from ...custody._conversation import (
    HISTORY_OUTCOMES,
    Conversation,
    ConversationCounts,
    RoomView,
    StateConflict,
    Turn,
    decode_state,
)
from ...custody._rules import Claim, InvalidTask
from .._conversations import FORGOTTEN_REASON, ConversationFrame
from ._connection import Conn
from ._db import PostgresDb
from ._rows import complete_params

_OUTCOMES: Final = ", ".join(f"'{o}'" for o in sorted(HISTORY_OUTCOMES))


def lock_rooms_sql(s: str) -> str:
    """Take the conversation rows of a batch's rooms, in the rooms' order, before its tasks
    are inserted: the ingest trigger numbers each room's messages under its row's lock, and
    two bridges ingesting batches that share rooms would otherwise lock them in their batches'
    orders (a deadlock). A new room's row is made here (its count starts at 0)."""
    return (
        f"INSERT INTO {s}.conversations AS c (room) "
        "SELECT r FROM (SELECT DISTINCT unnest(%(rooms)s::text[]) AS r) x "
        "WHERE r IS NOT NULL ORDER BY r "
        "ON CONFLICT (room) DO UPDATE SET next_seq = c.next_seq"
    )


@attrs.define(eq=False)
class PostgresConversations(ConversationFrame):
    """The rooms part: conversations and rooms on the store's ``PostgresDb``."""

    db: PostgresDb

    async def _conversation(self, task_id: str, limit: int) -> Conversation:
        return await self.db.run(lambda conn: read_conversation(conn, self.db.s, task_id, limit))

    async def _complete_with_state(
        self, claim: Claim, body: str, no_send: bool, state: str, base: int, now: float
    ) -> int:
        s = self.db.s
        id = claim.task.id
        complete = self.db.sql.complete
        params = complete_params(claim, body, no_send, now, self.db.channel)
        size = len(state.encode("utf-8", "surrogatepass"))

        def op(conn: Conn) -> int:
            with conn.transaction():
                row = conn.execute(f"SELECT room FROM {s}.tasks WHERE id = %s", (id,)).fetchone()
                room = None if row is None else row[0]
                if room is not None:  # the room's lock first: the state's writers take turns
                    conn.execute(
                        f"INSERT INTO {s}.conversations (room) VALUES (%s) "
                        "ON CONFLICT (room) DO NOTHING",
                        (room,),
                    )
                    current = conn.execute(
                        f"SELECT version FROM {s}.conversations WHERE room = %s FOR UPDATE",
                        (room,),
                    ).fetchone()
                done = conn.execute(complete, params).fetchone()
                if done is None or done[0] is None:
                    raise self.db.missed(conn, claim, now, "complete")
                if room is None:
                    raise InvalidTask(f"task {id!r} has no room: a state is kept per room")
                version = 0 if current is None else int(current[0])
                if version != base:
                    raise StateConflict(
                        f"task {id!r}: room {room!r}'s state is at version {version}, the run "
                        f"read version {base}"
                    )
                (new,) = conn.execute(
                    f"UPDATE {s}.conversations SET state = %s, version = version + 1, "
                    "state_bytes = %s WHERE room = %s RETURNING version",
                    (state, size, room),
                ).fetchone() or (0,)
                return int(new)

        return await self.db.run(op)

    async def _record_shown(self, claim: Claim, text: str, now: float) -> bool:
        s = self.db.s
        sql = (
            f"INSERT INTO {s}.turns AS x (room, seq, role, task_id, text, at, outcome) "
            f"SELECT u.room, u.seq, 'assistant', u.task_id, %(text)s, %(now)s, 'shown' "
            f"FROM {s}.turns u JOIN {s}.tasks t ON t.id = u.task_id AND t.room = u.room "
            "WHERE u.task_id = %(id)s AND u.role = 'user' AND t.state = 'claimed' "
            "AND t.owner = %(worker)s AND t.run_no = %(run)s "
            "ORDER BY u.seq DESC LIMIT 1 "
            "ON CONFLICT (room, seq, role) DO UPDATE SET text = excluded.text, at = excluded.at "
            "WHERE x.outcome = 'shown'"
        )
        params = {
            "text": text.encode("utf-8", "surrogatepass"),
            "now": now,
            "id": claim.task.id,
            "worker": claim.worker,
            "run": claim.run,
        }
        return await self.db.run(lambda conn: conn.execute(sql, params).rowcount == 1)

    async def _room(self, room: str, limit: int) -> RoomView | None:
        s = self.db.s

        def op(conn: Conn) -> RoomView | None:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                row = conn.execute(
                    f"SELECT turns, state, version, state_bytes FROM {s}.conversations "
                    "WHERE room = %s",
                    (room,),
                ).fetchone()
                if row is None:
                    return None
                rows = conn.execute(
                    f"SELECT role, text, task_id, at, outcome FROM {s}.turns WHERE room = %s "
                    "ORDER BY seq DESC, role ASC LIMIT %s",
                    (room, limit),
                ).fetchall()
            turns = tuple(_turn(r) for r in reversed(rows))
            count, state, version, size = row
            return RoomView(room, turns, int(count), decode_state(state), int(version), size)

        return await self.db.run(op)

    async def _forget_room(self, room: str, now: float) -> tuple[int, int]:
        s = self.db.s

        def op(conn: Conn) -> tuple[int, int]:
            with conn.transaction():
                finished = conn.execute(
                    f"UPDATE {s}.tasks SET body = ''::bytea, "
                    "result = CASE WHEN result IS NULL THEN NULL ELSE ''::bytea END "
                    "WHERE room = %s AND state IN ('delivered', 'dead') "
                    "RETURNING id, state, attempt",
                    (room,),
                ).fetchall()
                for id, state, attempt in finished:
                    conn.execute(
                        f"INSERT INTO {s}.journal (id, at, src, dst, worker, attempt, reason, "
                        "actor) VALUES (%s, %s, %s, %s, NULL, %s, %s, 'operator')",
                        (id, now, state, state, attempt, FORGOTTEN_REASON),
                    )
                turns = conn.execute(f"DELETE FROM {s}.turns WHERE room = %s", (room,)).rowcount
                conn.execute(f"DELETE FROM {s}.conversations WHERE room = %s", (room,))
            return turns, len(finished)

        return await self.db.run(op)

    async def _prune_turns(self, keep: int, limit: int) -> int:
        s = self.db.s

        def op(conn: Conn) -> int:
            deleted = 0
            with conn.transaction():
                # the room's counter says how many are over, without reading a turn; its row
                # lock keeps two pruners off one room (each would take the same oldest turns
                # from its own count and leave fewer than ``keep``)
                rooms = conn.execute(
                    f"SELECT room, turns - %(keep)s FROM {s}.conversations "
                    "WHERE turns > %(keep)s LIMIT %(limit)s FOR UPDATE SKIP LOCKED",
                    {"keep": keep, "limit": limit},
                ).fetchall()
                for room, over in rooms:
                    # the room's oldest turns, walked on its key from the start: linear in the
                    # rows removed whatever ``keep`` is (issue #56)
                    deleted += conn.execute(
                        f"DELETE FROM {s}.turns WHERE (room, seq, role) IN (SELECT room, seq, "
                        f"role FROM {s}.turns WHERE room = %s ORDER BY seq ASC, role DESC "
                        "LIMIT %s)",
                        (room, min(over, limit - deleted)),
                    ).rowcount
                    if deleted >= limit:
                        break
            return deleted

        return await self.db.run(op)

    async def _prune_rooms(self, before: float, limit: int) -> int:
        s = self.db.s
        return await self.db.run(
            lambda conn: (
                conn.execute(
                    f"DELETE FROM {s}.rooms WHERE room IN (SELECT room FROM {s}.rooms "
                    "WHERE at < %s LIMIT %s)",
                    (before, limit),
                ).rowcount
            )
        )

    async def _conversation_counts(self) -> ConversationCounts:
        s = self.db.s

        def op(conn: Conn) -> ConversationCounts:
            row = conn.execute(
                f"SELECT count(*), coalesce(sum(turns), 0), coalesce(sum(state_bytes), 0) "
                f"FROM {s}.conversations"
            ).fetchone()
            assert row is not None
            rooms, turns, size = row
            return ConversationCounts(int(rooms), int(turns), int(size))

        return await self.db.run(op)


def _turn(row: Any) -> Turn:
    role, text, task_id, at, outcome = row
    return Turn(role, bytes(text).decode("utf-8", "surrogatepass"), task_id, float(at), outcome)


def read_conversation(conn: Conn, s: str, task_id: str, limit: int) -> Conversation:
    """The conversation of ``task_id``'s run (the turns before its message, at most ``limit``,
    its room's state and version) in one read-only snapshot; empty for a task in no room."""
    window = (
        f"SELECT role, text, task_id, at, outcome FROM {s}.turns "
        f"WHERE room = %(room)s AND seq < %(seq)s AND outcome IN ({_OUTCOMES}) "
        "ORDER BY seq DESC, role ASC LIMIT %(limit)s"
    )
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        at = conn.execute(
            f"SELECT room, seq FROM {s}.turns WHERE task_id = %s AND role = 'user' "
            "ORDER BY seq DESC LIMIT 1",
            (task_id,),
        ).fetchone()
        history: tuple[Turn, ...] = ()
        if at is None:
            row = conn.execute(f"SELECT room FROM {s}.tasks WHERE id = %s", (task_id,)).fetchone()
            if row is None or row[0] is None:
                return Conversation()
            room = row[0]
        else:
            room = at[0]
            if limit:
                params = {"room": room, "seq": at[1], "limit": limit}
                rows = conn.execute(window, params).fetchall()
                history = tuple(_turn(r) for r in reversed(rows))
        state = conn.execute(
            f"SELECT state, version FROM {s}.conversations WHERE room = %s", (room,)
        ).fetchone()
    if state is None:
        return Conversation(history)
    return Conversation(history, decode_state(state[0]), int(state[1]))
