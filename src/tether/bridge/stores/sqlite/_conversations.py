"""SqliteStore's conversations (issue #34): the history window, the state written with a
result, the text a streaming run has shown, an operator's look and erasure, retention.

The turns of custody moves are written by the schema's triggers (``_schema``, 10 -> 11); this
module writes only what no custody move carries.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Final, TypeVar

import attrs

from ...custody._conversation import (
    HISTORY_OUTCOMES,
    Conversation,
    ConversationCounts,
    RoomView,
    StateConflict,
    Turn,
    decode_state,
    turn_from_row,
)
from ...custody._rules import Claim, InvalidTask
from .._conversations import FORGOTTEN_REASON, ConversationFrame
from . import _sql as sql
from ._db import SqliteDb
from ._rows import stale

T = TypeVar("T")

_SHOWN: Final = ", ".join(f"'{o}'" for o in sorted(HISTORY_OUTCOMES))
TASK_TURN: Final = (
    "SELECT room, max(seq) FROM turns WHERE task_id = ? AND role = 'user' HAVING count(*) > 0"
)
"""The room and number of a task's message (the newest, should a forgotten room have seen
its id before); no row if it has none. An aggregate: no sorter for the one row."""
WINDOW: Final = (
    "SELECT role, text, task_id, at, outcome, seq FROM turns "
    f"WHERE room = ? AND seq < ? AND outcome IN ({_SHOWN}) "
    "ORDER BY seq DESC, role DESC LIMIT ?"
)
"""The turns before a message, newest first in the index's own order (walked backwards on
``turns_key``: bounded, no sorter). In time a reply comes after its message of the same
``seq``, which this order reverses; read with ``limit + 1`` (``window``), those rows hold the
newest ``limit`` turns in time order whatever the cut."""
TASK_ROOM: Final = "SELECT room FROM tasks WHERE id = ?"
STATE: Final = "SELECT state, version FROM conversations WHERE room = ?"
ROOM: Final = "SELECT turns, state, version, state_bytes FROM conversations WHERE room = ?"
ROOM_TURNS: Final = (
    "SELECT role, text, task_id, at, outcome FROM turns WHERE room = ? "
    "ORDER BY seq DESC, role ASC LIMIT ?"
)
SAVE_STATE: Final = (
    "INSERT INTO conversations (room, state, version, state_bytes) "
    "VALUES (:room, :state, 1, :size) ON CONFLICT (room) DO UPDATE SET "
    "state = excluded.state, version = version + 1, state_bytes = excluded.state_bytes "
    "WHERE version = :base RETURNING version"
)
"""The room's new state if its version is still ``:base``, 0 here (a room without a row is
at 0), in one statement: no row back is a conflict."""
SAVE_STATE_ON: Final = (
    "UPDATE conversations SET state = :state, version = version + 1, state_bytes = :size "
    "WHERE room = :room AND version = :base RETURNING version"
)
"""``SAVE_STATE`` for a base above 0 (a room without a row is at 0: no insert can match)."""
SHOWN: Final = (
    "INSERT INTO turns (room, seq, role, task_id, text, at, outcome) "
    "SELECT u.room, u.seq, 'assistant', u.task_id, :text, :now, 'shown' FROM turns u "
    "JOIN tasks t ON t.id = u.task_id AND t.room = u.room "
    "WHERE u.task_id = :id AND u.role = 'user' AND t.state = 'claimed' "
    "AND t.owner = :worker AND t.run_no = :run "
    "ORDER BY u.seq DESC LIMIT 1 "
    "ON CONFLICT (room, seq, role) DO UPDATE SET text = excluded.text, at = excluded.at "
    "WHERE outcome = 'shown'"
)
FINISHED: Final = (
    "SELECT id, state, attempt FROM tasks WHERE room = ? AND state IN ('delivered', 'dead')"
)
ERASE_BODIES: Final = (
    "UPDATE tasks SET body = '', result = CASE WHEN result IS NULL THEN NULL ELSE '' END "
    "WHERE room = ? AND state IN ('delivered', 'dead')"
)
JOURNAL_FORGOTTEN: Final = (
    "INSERT INTO journal (born, id, seq, at, src, dst, worker, attempt, reason, actor) "
    "SELECT t.created_at, t.id, coalesce((SELECT max(j.seq) FROM journal j "
    "WHERE j.born = t.created_at AND j.id = t.id), 0) + 1, :now, t.state, t.state, NULL, "
    "t.attempt, :reason, 'operator' FROM tasks t WHERE t.id = :id"
)
OVERFULL: Final = "SELECT room, turns - ? FROM conversations WHERE turns > ? LIMIT ?"
"""Rooms holding more than ``keep`` turns, and how many over: the room's counter (kept by the
turn triggers in the moves' own transactions) says it without reading a turn."""
PRUNE_OLDEST: Final = (
    "DELETE FROM turns WHERE (room, seq, role) IN (SELECT room, seq, role FROM turns "
    "WHERE room = ? ORDER BY seq ASC, role DESC LIMIT ?)"
)
"""The room's ``n`` oldest turns: a walk of ``n`` rows from the start of its key, each deleted
by key; linear in the rows removed, whatever ``keep`` is (issue #56: the statement before
re-walked the ``keep`` newest turns for every row). In time a message ('user') comes before
its reply ('assistant') of the same ``seq``: oldest first is ``seq ASC, role DESC``."""
PRUNE_ROOMS: Final = "DELETE FROM rooms WHERE room IN (SELECT room FROM rooms WHERE at < ? LIMIT ?)"
"""Stale affinities: a walk of the rooms' rows (one per room ever run), a slice at a time."""
COUNTS: Final = "SELECT rooms, turns, state_bytes FROM conversation_totals"
"""Kept by triggers on ``conversations`` (issue #56): one row at any number of rooms."""


@attrs.define(eq=False)
class SqliteConversations(ConversationFrame):
    """The rooms part: conversations and rooms on the store's ``SqliteDb``."""

    db: SqliteDb

    async def _conversation(self, task_id: str, limit: int) -> Conversation:
        return await self.db.read(lambda conn: read_conversation(conn, task_id, limit))

    async def _complete_with_state(
        self, claim: Claim, body: str, no_send: bool, state: str, base: int, now: float
    ) -> int:
        id = claim.task.id
        values = (body, int(no_send), now, id, claim.worker, claim.run)
        size = len(state.encode("utf-8", "surrogatepass"))

        room = claim.task.room  # the task's room, as the store handed it out
        save = {"room": room, "state": state, "size": size, "base": base}

        def op(conn: sqlite3.Connection) -> int:
            if conn.execute(sql.COMPLETE, values).rowcount != 1:
                raise stale(conn, claim, now, "complete")
            if room is None:
                raise InvalidTask(f"task {id!r} has no room: a state is kept per room")
            saved = conn.execute(SAVE_STATE_ON if base else SAVE_STATE, save).fetchone()
            if saved is None:  # raising undoes this job's complete too
                row = conn.execute(STATE, (room,)).fetchone()
                raise StateConflict(
                    f"task {id!r}: room {room!r}'s state is at version "
                    f"{0 if row is None else int(row[1])}, the run read version {base}"
                )
            return int(saved[0])

        return await self.db.write(op)

    async def _record_shown(self, claim: Claim, text: str, now: float) -> bool:
        params = {**sql.fence_params(claim, now), "text": text}
        return await self.db.write(lambda c: c.execute(SHOWN, params).rowcount == 1)

    async def _room(self, room: str, limit: int) -> RoomView | None:
        def op(conn: sqlite3.Connection) -> RoomView | None:
            row = conn.execute(ROOM, (room,)).fetchone()
            if row is None:
                return None
            rows = conn.execute(ROOM_TURNS, (room, limit)).fetchall() if limit else []
            turns = tuple(turn_from_row(r) for r in reversed(rows))
            count, state, version, size = row
            return RoomView(room, turns, int(count), decode_state(state), int(version), size)

        return await self.db.read(op)

    async def _forget_room(self, room: str, now: float) -> tuple[int, int]:
        def op(conn: sqlite3.Connection) -> tuple[int, int]:
            finished: Sequence[Any] = conn.execute(FINISHED, (room,)).fetchall()
            conn.execute(ERASE_BODIES, (room,))
            for id, _state, _attempt in finished:
                conn.execute(JOURNAL_FORGOTTEN, {"id": id, "now": now, "reason": FORGOTTEN_REASON})
            turns = conn.execute("DELETE FROM turns WHERE room = ?", (room,)).rowcount
            conn.execute("DELETE FROM conversations WHERE room = ?", (room,))
            return turns, len(finished)

        return await self.db.write(op)

    async def _prune_turns(self, keep: int, limit: int) -> int:
        def op(conn: sqlite3.Connection) -> int:
            deleted = 0
            for room, over in conn.execute(OVERFULL, (keep, keep, limit)).fetchall():
                deleted += conn.execute(PRUNE_OLDEST, (room, min(over, limit - deleted))).rowcount
                if deleted >= limit:
                    break
            return deleted

        return await self.db.write(op)

    async def _prune_rooms(self, before: float, limit: int) -> int:
        return await self.db.write(lambda conn: conn.execute(PRUNE_ROOMS, (before, limit)).rowcount)

    async def _conversation_counts(self) -> ConversationCounts:
        def op(conn: sqlite3.Connection) -> ConversationCounts:
            rooms, turns, size = conn.execute(COUNTS).fetchone()
            return ConversationCounts(int(rooms), int(turns), int(size))

        return await self.db.read(op)


def read_conversation(conn: sqlite3.Connection, task_id: str, limit: int) -> Conversation:
    """The conversation of ``task_id``'s run: the turns before its message (at most
    ``limit``), its room's state and version; empty for a task in no room (or unknown)."""
    at = conn.execute(TASK_TURN, (task_id,)).fetchone()
    history: tuple[Turn, ...] = ()
    if at is None:
        row = conn.execute(TASK_ROOM, (task_id,)).fetchone()
        if row is None or row[0] is None:
            return Conversation()
        room = row[0]
    else:
        room = at[0]
        history = window(conn, room, at[1], limit)
    state = conn.execute(STATE, (room,)).fetchone()
    if state is None:
        return Conversation(history)
    return Conversation(history, decode_state(state[0]), int(state[1]))


def window(conn: sqlite3.Connection, room: str, seq: int, limit: int) -> tuple[Turn, ...]:
    """The newest ``limit`` turns of ``room`` before its message ``seq``, oldest first."""
    if not limit:
        return ()
    rows = conn.execute(WINDOW, (room, seq, limit + 1)).fetchall()
    rows.sort(key=_newest_first)  # a reply before its message, as in time
    return tuple(turn_from_row(r[:5]) for r in reversed(rows[:limit]))


def _newest_first(row: tuple[Any, ...]) -> tuple[int, str]:
    return -row[5], row[0]  # 'assistant' < 'user': the reply is the newer of a seq
