"""SQLite's erasure of text (issue #53): a forgotten room's (``RoomStore.forget_room``), and a
finished task's whose turns retention prunes past ``--room-keep``; each the statements of one
writer job. The connection zeroes what it deletes (``_plumbing._sqlite_erase``), and the part
truncates the WAL after the commit, so the text is gone from the files too.

What a room's text is in: its tasks' rows (message, reply, reason, the room's name, headers
but those custody reads: ``KEPT_HEADERS``)
and those of the child runs they spawned, whatever their room (a child's body is made of the
room's); their journal's reasons, step records and asks; the room's turns rows, its state and
its worker affinity. The tasks' rows stay (custody never drops a task silently: a dead one is
kept until an operator acts, a delivered one until retention) with nothing but ids, states,
times and counts; the journal keeps each move's states, times and actors.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection
from typing import Final

from ...custody._conversation import ForgottenRoom
from .._common import IN_CUSTODY_SQL
from .._conversations import KEPT_HEADERS_SQL
from .._frame import Moves
from ._live_turns import REPLY_SAID
from ._rows import states

IDS: Final = "(SELECT value FROM json_each(:ids))"

ROOM_TASKS: Final = (
    "WITH RECURSIVE f(id) AS (SELECT id FROM tasks WHERE room = :room "
    "UNION SELECT c.id FROM tasks c JOIN f ON c.parent = f.id) SELECT id FROM f"
)
"""The room's tasks and their descendants: one walk of ``tasks`` (no index holds a room's
finished tasks; an operator's erasure may pay it), then each child by ``tasks_children``."""
CANCEL: Final = (
    "UPDATE tasks SET state = 'dead', lease_until = NULL, not_before = NULL, suspect = 0, "
    f"reason = :why, updated_at = :now WHERE id IN {IDS} AND state IN ({IN_CUSTODY_SQL}) "
    "RETURNING id"
)
"""Every one still in custody, ``result`` too (a reply not yet delivered is withdrawn): the
journal's trigger records each move as the operator's (the reason says so); a claimed one's
worker finds its lease gone at its next heartbeat, and its late writes are fenced out."""
ELSEWHERE: Final = (
    "SELECT room, sum((turn_seq IS NOT NULL) + "
    f"(coalesce(reply_seq, turn_seq) IS NOT NULL AND {REPLY_SAID})) FROM tasks "
    "WHERE id IN (SELECT value FROM json_each(:ids)) AND room IS NOT NULL AND room <> :room "
    "AND coalesce(reply_seq, turn_seq) IS NOT NULL GROUP BY room"
)
"""The live turns a child run holds in a room of its own, by room: that room's count drops."""
UNCOUNT: Final = "UPDATE conversations SET turns = max(turns - :n, 0) WHERE room = :room"
BLANK: Final = (
    "UPDATE tasks SET body = '', result = CASE WHEN result IS NULL THEN NULL ELSE '' END, "
    "reason = CASE WHEN state = 'dead' THEN :why END, room = NULL, headers = (SELECT "
    "json_group_object(key, value) FROM json_each(tasks.headers) "
    f"WHERE key IN ({KEPT_HEADERS_SQL})), "
    "turn_seq = NULL, reply_seq = NULL, wait_key = NULL, last_quarantine_death = NULL "
    f"WHERE id IN {IDS}"
)
"""No trigger follows (none reads an update of these alone): the counts are the part's."""
JOURNAL_TEXT: Final = (
    "UPDATE journal SET reason = NULL WHERE reason IS NOT NULL AND reason <> :why "
    f"AND (born, id) IN (SELECT created_at, id FROM tasks WHERE id IN {IDS})"
)
"""Each entry's reason may quote the text (a failure's message); its move stays."""
JOURNAL_ENTRY: Final = (
    "INSERT INTO journal (born, id, seq, at, src, dst, worker, attempt, reason, actor) "
    "SELECT t.created_at, t.id, coalesce((SELECT max(j.seq) FROM journal j "
    "WHERE j.born = t.created_at AND j.id = t.id), 0) + 1, :now, t.state, t.state, NULL, "
    f"t.attempt, :why, :actor FROM tasks t WHERE t.id IN {IDS}"
)
"""One entry per task, src = dst: its text was erased, by whom and why."""
STEPS: Final = f"DELETE FROM steps WHERE task_id IN {IDS}"
ASKS: Final = f"DELETE FROM asks WHERE task_id IN {IDS} OR room = :room"
TURNS: Final = "DELETE FROM turns WHERE room = :room"
TASK_TURNS: Final = f"DELETE FROM turns WHERE task_id IN {IDS}"
"""A child's asked or shown turns in a room of its own (the count triggers follow)."""
ROOM_ROW: Final = "SELECT turns, state IS NOT NULL FROM conversations WHERE room = :room"


def forget_room(
    conn: sqlite3.Connection, room: str, why: str, now: float
) -> tuple[ForgottenRoom, Moves]:
    """Erase ``room`` (``RoomStore.forget_room``) in the writer's transaction: what was
    erased, and the tasks cancelled with the state each left."""
    args = {"room": room, "why": why, "now": now}
    row = conn.execute(ROOM_ROW, args).fetchone()
    ids = [id for (id,) in conn.execute(ROOM_TASKS, args)]
    args["ids"] = json.dumps(ids)
    seen = states(conn, ids)
    cancelled = [id for (id,) in conn.execute(CANCEL, args)]
    for other, n in conn.execute(ELSEWHERE, args).fetchall():
        conn.execute(UNCOUNT, {"room": other, "n": n})
    conn.execute(BLANK, args)
    conn.execute(JOURNAL_TEXT, args)
    moved = set(cancelled)
    finished = json.dumps([id for id in ids if id not in moved])
    conn.execute(JOURNAL_ENTRY, {**args, "ids": finished, "actor": "operator"})
    steps = conn.execute(STEPS, args).rowcount
    asks = conn.execute(ASKS, args).rowcount
    conn.execute(TURNS, args)
    conn.execute(TASK_TURNS, args)
    conn.execute("DELETE FROM conversations WHERE room = :room", args)
    conn.execute("DELETE FROM rooms WHERE room = :room", args)
    forgotten = ForgottenRoom(
        room,
        turns=0 if row is None else int(row[0]),
        state=row is not None and bool(row[1]),
        tasks=len(ids),
        cancelled=len(cancelled),
        steps=steps,
        asks=asks,
    )
    return forgotten, {id: seen[id] for id in cancelled}


BLANK_PRUNED: Final = (
    "UPDATE tasks SET body = '', result = CASE WHEN result IS NULL OR reply_seq IS NOT NULL "
    "THEN result ELSE '' END WHERE rowid IN (SELECT value FROM json_each(:rowids)) "
    "AND state = 'delivered' AND turn_seq IS NULL "
    "AND (body <> '' OR (result <> '' AND reply_seq IS NULL)) RETURNING id"
)
"""Of the task rows whose turns a prune hid, the delivered ones: the message's text goes (its
turn is gone), the reply's too once it is no longer a turn (``reply_seq`` NULL). A task still
in custody keeps its text (it has yet to run or be delivered), and so does a dead one: an
operator may re-drive, rewind or fork it, and it would run an empty message."""


def blank_pruned(conn: sqlite3.Connection, rowids: Collection[int], why: str, now: float) -> None:
    """Erase from their rows the text of the finished tasks among ``rowids`` whose turns a
    prune took, each journaled (``PRUNED_REASON``) by the bridge."""
    if not rowids:
        return
    blanked = [id for (id,) in conn.execute(BLANK_PRUNED, {"rowids": json.dumps(list(rowids))})]
    if blanked:
        entry = {"ids": json.dumps(blanked), "now": now, "why": why, "actor": "bridge"}
        conn.execute(JOURNAL_ENTRY, entry)
