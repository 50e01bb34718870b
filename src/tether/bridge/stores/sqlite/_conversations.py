"""SqliteStore's conversations (issue #34): the history window, the state written with a
result, the text a streaming run has shown, an operator's look and erasure, retention.

A live task's turns are its own row, merged with the ``turns`` rows by ``_live_turns``
(schema 24, issue #49); this module writes only what no custody move carries.
"""

from __future__ import annotations

import sqlite3
from typing import Final, TypeVar

import attrs
import trio

from ...._plumbing._sqlite_erase import truncate_wal
from ...custody._conversation import (
    HISTORY_OUTCOMES,
    Conversation,
    ConversationCounts,
    ForgottenRoom,
    RoomView,
    StateConflict,
    decode_state,
)
from ...custody._rules import Claim, InvalidTask
from .._conversations import PRUNED_REASON, ConversationFrame
from .._frame import Moves
from . import _erase as erase
from . import _live_turns as live_turns
from . import _sql as sql
from ._db import SqliteDb
from ._rows import stale

T = TypeVar("T")

TASK_TURN: Final = "SELECT room, turn_seq FROM tasks WHERE id = ?"
"""A live task's room and its message's number there (NULL: none kept)."""
DELETED_TASK_TURN: Final = (
    "SELECT room, max(seq) FROM turns WHERE task_id = ? AND role = 'user' HAVING count(*) > 0"
)
"""A deleted task's room and message number, from the copy its deletion left (the newest,
should a forgotten room have seen its id before); no row if none. An aggregate: no sorter."""
STATE: Final = "SELECT state, version FROM conversations WHERE room = ?"
ROOM: Final = "SELECT turns, state, version, state_bytes FROM conversations WHERE room = ?"
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
    "SELECT room, turn_seq, 'assistant', id, :text, :now, 'shown' FROM tasks "
    "WHERE id = :id AND state = 'claimed' AND owner = :worker AND run_no = :run "
    "AND turn_seq IS NOT NULL "
    "ON CONFLICT (room, seq, role) DO UPDATE SET text = excluded.text, at = excluded.at "
    "WHERE outcome = 'shown'"
)
"""The text a streaming run has shown, under its message, while its lease holds (a row of
its own until the result replaces it: ``turns_reply``)."""
OVERFULL: Final = "SELECT room, turns - ? FROM conversations WHERE turns > ? LIMIT ?"
"""Rooms holding more than ``keep`` turns, and how many over: the room's counter (kept by the
triggers in the moves' own transactions) says it without reading a turn."""
PRUNE_ROOMS: Final = "DELETE FROM rooms WHERE room IN (SELECT room FROM rooms WHERE at < ? LIMIT ?)"
"""Stale affinities: a walk of the rooms' rows (one per room ever run), a slice at a time."""
COUNTS: Final = "SELECT rooms, turns, state_bytes FROM conversation_totals"
"""Kept by triggers on ``conversations`` (issue #56): one row at any number of rooms."""
WAL_WAIT_S: Final = 10.0
"""How long an erasure's WAL truncation waits for the readers still on an older snapshot."""


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
            count, state, version, size = row
            turns = live_turns.newest(conn, room, limit)
            return RoomView(room, turns, int(count), decode_state(state), int(version), size)

        return await self.db.read(op)

    async def _forget_room(self, room: str, why: str, now: float) -> tuple[ForgottenRoom, Moves]:
        forgotten, moved = await self.db.write(
            lambda conn: erase.forget_room(conn, room, why, now), promise=True
        )
        if self.db.path is not None:  # the older pages go from the WAL too
            path = self.db.path
            scrubbed = await trio.to_thread.run_sync(truncate_wal, path, WAL_WAIT_S)
            forgotten = attrs.evolve(forgotten, scrubbed=scrubbed)
        return forgotten, moved

    async def _prune_turns(self, keep: int, limit: int) -> int:
        now = self.host.clock()

        def op(conn: sqlite3.Connection) -> int:
            deleted = 0
            hidden: set[int] = set()
            for room, over in conn.execute(OVERFULL, (keep, keep, limit)).fetchall():
                n, rows = live_turns.prune_oldest(conn, room, min(over, limit - deleted))
                deleted += n
                hidden |= rows
                if deleted >= limit:
                    break
            erase.blank_pruned(conn, hidden, PRUNED_REASON, now)
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
    if at is None:  # deleted by retention: its copy says where it was
        at = conn.execute(DELETED_TASK_TURN, (task_id,)).fetchone()
    if at is None or at[0] is None:
        return Conversation()
    room, seq = at
    history = (
        ()
        if seq is None
        else live_turns.newest(conn, room, limit, before=seq, outcomes=HISTORY_OUTCOMES)
    )
    state = conn.execute(STATE, (room,)).fetchone()
    if state is None:
        return Conversation(history)
    return Conversation(history, decode_state(state[0]), int(state[1]))
