"""A room's turns as SQLite keeps them since issue #49 (schema 24): a live task's message and
reply are read from its own row, ``turns`` holds the rest (asked and shown turns, and the
copies a deleted task leaves); this module merges the two, newest or oldest first.

A task row's turns: its message at ``turn_seq`` (NULL: none, pruned or forgotten) and, while
its result is stored to be said (``REPLY_SAID``), its reply at ``coalesce(reply_seq,
turn_seq)``. The schema's triggers keep ``conversations.turns`` counting both.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterable, Iterator
from operator import itemgetter
from typing import Any, Final

from ...custody._turns import Turn, TurnOutcome, TurnRole

REPLY_SAID: Final = (
    "no_send = 0 AND result IS NOT NULL AND state IN ('result', 'delivered', 'dead')"
)
"""Is a task's stored result a turn of its room (the one predicate; the schema's triggers
spell the same): a reply to be said or said, not a no-send close, not a failure."""
REPLY_OUTCOME: Final = "CASE WHEN state = 'delivered' THEN 'delivered' ELSE 'result' END"

TASKS_BEFORE: Final = (
    "SELECT turn_seq, reply_seq, id, body, created_at, result, updated_at, "
    f"{REPLY_OUTCOME}, {REPLY_SAID} FROM tasks INDEXED BY tasks_room_turns "
    "WHERE room = :room AND turn_seq < :seq ORDER BY turn_seq DESC LIMIT :n"
)
"""The newest ``n`` messages of live tasks before ``seq``: with each, its reply's fields."""
REPLIES_BEFORE: Final = (
    f"SELECT reply_seq, id, result, updated_at, {REPLY_OUTCOME} "
    "FROM tasks INDEXED BY tasks_room_replies "
    f"WHERE room = :room AND reply_seq < :seq AND {REPLY_SAID} ORDER BY reply_seq DESC LIMIT :n"
)
"""The newest ``n`` replies sitting away from their message (under an answer, or kept when
retention took the message): few rows, their own index."""
ROWS_BEFORE: Final = (
    "SELECT seq, role, task_id, text, at, outcome FROM turns "
    "WHERE room = :room AND seq < :seq ORDER BY seq DESC, role DESC LIMIT :n + 1"
)
"""In the key's order, one row more: at one seq a reply is newer than its message, which
this order reverses; ``n + 1`` rows hold the newest ``n`` in time whatever the cut."""

TASKS_OLDEST: Final = (
    f"SELECT turn_seq, reply_seq, rowid, {REPLY_SAID} FROM tasks INDEXED BY tasks_room_turns "
    "WHERE room = ? AND turn_seq IS NOT NULL ORDER BY turn_seq ASC LIMIT ?"
)
REPLIES_OLDEST: Final = (
    "SELECT reply_seq, rowid FROM tasks INDEXED BY tasks_room_replies "
    f"WHERE room = ? AND reply_seq IS NOT NULL AND {REPLY_SAID} ORDER BY reply_seq ASC LIMIT ?"
)
ROWS_OLDEST: Final = (
    "SELECT seq, role FROM turns WHERE room = ? ORDER BY seq ASC, role ASC LIMIT ? + 1"
)
"""As ``ROWS_BEFORE``, from the oldest."""
DELETE_ROW: Final = "DELETE FROM turns WHERE room = ? AND seq = ? AND role = ?"
HIDE_MESSAGE: Final = (
    "UPDATE tasks SET turn_seq = NULL, reply_seq = CASE WHEN reply_seq IS NULL AND "
    f"{REPLY_SAID} THEN turn_seq ELSE reply_seq END WHERE rowid = ?"
)
"""Retention took a live task's message: its reply, if said, stays where it is."""
HIDE_BOTH: Final = "UPDATE tasks SET turn_seq = NULL, reply_seq = NULL WHERE rowid = ?"
UNCOUNT: Final = "UPDATE conversations SET turns = max(turns - ?, 0) WHERE room = ?"

EVERY_SEQ: Final = 1 << 62
"""Above any message number: a bound that takes the whole room."""


_Dated = tuple[int, int, TurnRole, str, str, float, TurnOutcome]
"""(seq, after, role, text, task id, at, outcome): a turn with its place in time; at one seq
the message (after 0) comes before its reply (after 1)."""
_WHEN: Final = itemgetter(0, 1)


def newest(
    conn: sqlite3.Connection,
    room: str,
    limit: int,
    *,
    before: int = EVERY_SEQ,
    outcomes: Collection[str] | None = None,
) -> tuple[Turn, ...]:
    """The newest ``limit`` turns of ``room`` before message ``before``, oldest first (with
    ``outcomes``, only those): a bounded read of each source.

    A room's tasks mostly hold a message and its reply each, so the newest ``limit // 2 + 1``
    tasks usually hold every live turn of the window; the newest ``limit`` are read only when
    they do not (every turn of a task not read is older than the oldest task read)."""
    if not limit:
        return ()
    args = {"room": room, "seq": before, "n": limit}
    away = [*_moved(conn.execute(REPLIES_BEFORE, args))]
    away.extend(_rows(conn.execute(ROWS_BEFORE, args), outcomes))
    few = limit // 2 + 1
    tasks = conn.execute(TASKS_BEFORE, {**args, "n": few}).fetchall()
    dated = sorted([*away, *_live(tasks)], key=_WHEN)
    if len(tasks) == few and (len(dated) < limit or dated[-limit][0] < tasks[-1][0]):
        tasks = conn.execute(TASKS_BEFORE, args).fetchall()
        dated = sorted([*away, *_live(tasks)], key=_WHEN)
    return tuple(
        Turn(role, text, id, float(at), outcome)
        for *_, role, text, id, at, outcome in dated[-limit:]
    )


def _live(rows: Iterable[Any]) -> Iterator[_Dated]:
    for seq, reply_seq, id, body, created, result, updated, outcome, said in rows:
        yield seq, 0, "user", body, id, created, "received"
        if said and reply_seq is None:
            yield seq, 1, "assistant", result, id, updated, outcome


def _moved(rows: Iterable[Any]) -> Iterator[_Dated]:
    for seq, id, result, updated, outcome in rows:
        yield seq, 1, "assistant", result, id, updated, outcome


def _rows(rows: Iterable[Any], outcomes: Collection[str] | None) -> Iterator[_Dated]:
    for seq, role, id, text, at, outcome in rows:
        if outcomes is None or outcome in outcomes:
            yield seq, int(role == "assistant"), role, text, id, at, outcome


def prune_oldest(conn: sqlite3.Connection, room: str, n: int) -> tuple[int, set[int]]:
    """Remove the ``n`` oldest turns of ``room`` (fewer if it holds fewer): rows deleted, live
    ones hidden on their task; the room's count follows. The number removed, and the rowids
    of the tasks whose turns were hidden (the caller erases the finished ones' text)."""
    cut: list[tuple[int, int, str, Any]] = []  # (seq, after, where, key): ordered as ``_Dated``
    for seq, reply_seq, rowid, said in conn.execute(TASKS_OLDEST, (room, n)):
        cut.append((seq, 0, "message", rowid))
        if said and reply_seq is None:
            cut.append((seq, 1, "reply", rowid))
    cut.extend((seq, 1, "reply", rowid) for seq, rowid in conn.execute(REPLIES_OLDEST, (room, n)))
    cut.extend(
        (seq, role == "assistant", "row", role)
        for seq, role in conn.execute(ROWS_OLDEST, (room, n))
    )
    cut.sort(key=_WHEN)
    del cut[n:]
    messages = {key for _, _, where, key in cut if where == "message"}
    replies = {key for _, _, where, key in cut if where == "reply"}
    conn.executemany(HIDE_BOTH, [(rowid,) for rowid in replies])
    conn.executemany(HIDE_MESSAGE, [(rowid,) for rowid in messages - replies])
    conn.executemany(DELETE_ROW, [(room, seq, key) for seq, _, where, key in cut if where == "row"])
    live = len(messages) + len(replies)
    if live:
        conn.execute(UNCOUNT, (live, room))
    return len(cut), messages | replies
