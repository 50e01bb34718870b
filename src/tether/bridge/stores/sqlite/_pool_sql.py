"""The pool's statements in SQLite: the lead's view, assignments and room affinity.

Each function runs inside a writer (or reader) job on the connection it is given, so a sweep's
read, plan and assignments share one transaction (``SqliteStore.plan_and_assign``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Final

from ...custody._store import Assignment, PoolView, Queued, WorkerInfo
from .._common import RANK_PRIORITY
from .._rooms_sql import room_busy, room_gate

ROOM_GATE: Final = room_gate("t", "tasks", "rowid", "o.no_send = 0")
"""May candidate ``t`` run now, by its room's policy: the lead plans only with those."""


def pool_view(conn: sqlite3.Connection, at: float, pending_limit: int, skip: str) -> PoolView:
    """The pool as one transaction sees it (``skip``: a JSON list of rooms to read past)."""
    pending: list[Queued] = []
    rooms: dict[str, str] = {}
    for id, room, rank, keeper in conn.execute(
        "SELECT t.id, t.room, t.priority, r.worker FROM tasks t "
        "LEFT JOIN rooms r ON r.room = t.room WHERE t.state = 'pending' "
        "AND (t.not_before IS NULL OR t.not_before <= ?) "
        "AND t.suspect = 0 "  # suspects are claimed alone, never planned (custody._crashes)
        "AND (t.room IS NULL OR t.room NOT IN (SELECT value FROM json_each(?))) "
        f"AND {ROOM_GATE} "
        "ORDER BY t.priority, t.rowid LIMIT ?",
        (at, skip, pending_limit),
    ):
        pending.append(Queued(id, room, RANK_PRIORITY[rank]))
        if keeper is not None:
            rooms[room] = keeper
    return PoolView(
        at=at,
        workers=tuple(read_workers(conn)),
        assigned=tuple(
            Assignment(*r)
            for r in conn.execute(
                "SELECT id, owner, room, updated_at FROM tasks "
                "WHERE state = 'assigned' ORDER BY updated_at, rowid"
            )
        ),
        claims=dict(
            conn.execute(
                "SELECT owner, count(*) FROM tasks WHERE state = 'claimed' GROUP BY owner"
            ).fetchall()
        ),
        pending=tuple(pending),
        rooms=rooms,
        busy_rooms=frozenset(r[0] for r in conn.execute(room_busy("tasks"))),
        next_due=next_due(conn, at),
    )


DUE: Final = "(not_before IS NULL OR not_before <= ?)"
"""A pending task that is not waiting out a retry backoff (the parameter: now)."""


# -- crashes and suspects (custody._crashes): named parameters :worker, :prefix, :now, :until

_DUE_T: Final = "(t.not_before IS NULL OR t.not_before <= :now)"
_IN_PROCESS: Final = (
    "(c.owner = :worker OR (:prefix IS NOT NULL AND substr(c.owner, 1, length(:prefix)) = :prefix))"
)
_SUSPECT_READY: Final = f"t.state = 'pending' AND t.suspect = 1 AND {_DUE_T} AND {ROOM_GATE}"
SUSPECT_FLAGS: Final = (
    "SELECT EXISTS (SELECT 1 FROM tasks c WHERE c.suspect = 1 AND c.state = 'claimed' "
    f"AND {_IN_PROCESS}), "
    "EXISTS (SELECT 1 FROM tasks c WHERE c.suspect = 1 AND c.state = 'claimed'), "
    f"EXISTS (SELECT 1 FROM tasks t WHERE {_SUSPECT_READY}), "
    "EXISTS (SELECT 1 FROM tasks a WHERE a.state = 'assigned' AND a.owner = :worker)"
)
"""A suspect claimed in the worker's process; one claimed anywhere; one waiting to run; an
assignment of the worker's (none: its claim skips the UPDATE of its assignments)."""
PROCESS_BUSY: Final = (
    f"SELECT EXISTS (SELECT 1 FROM tasks c WHERE c.state = 'claimed' AND {_IN_PROCESS})"
)
CLAIM_SUSPECT: Final = (
    "UPDATE tasks SET state = 'claimed', owner = :worker, lease_until = :until, "
    "not_before = NULL, updated_at = :now WHERE rowid = (SELECT t.rowid FROM tasks t "
    f"WHERE {_SUSPECT_READY} "
    "ORDER BY t.crashes_alone DESC, t.crash_count DESC, t.priority, t.rowid LIMIT 1) "
    "RETURNING id, body, room, priority, headers, attempt, rowid"
)
"""The next suspect, most crashed first (a poison task is convicted right after a restart)."""
EXPIRED_SELECT: Final = (
    "SELECT t.id, t.owner, t.attempt, t.lease_until, t.suspect, t.crash_count, "
    "t.crashes_alone, w.last_beat FROM tasks t LEFT JOIN workers w ON w.name = t.owner"
)
"""An expired lease's evidence for ``custody._crashes.Expired`` (add the WHERE)."""


def next_due(conn: sqlite3.Connection, now: float) -> float | None:
    """The earliest not-before still ahead of ``now`` (the ``tasks_waiting`` index), or None."""
    (due,) = conn.execute(
        "SELECT min(not_before) FROM tasks WHERE state = 'pending' AND not_before > ?", (now,)
    ).fetchone()
    return None if due is None else float(due)


def assign_pairs(
    conn: sqlite3.Connection, pairs: Sequence[tuple[str, str]], now: float
) -> tuple[list[bool], set[str]]:
    """Assign each pending ``(id, worker)`` in one statement (a sweep assigns dozens per commit);
    a repeated id: the first pair decides, later ones are False. Returns the answers and the
    ids that moved."""
    if not pairs:
        return [], set()
    first: dict[str, int] = {}
    for n, (id, _) in enumerate(pairs):
        first.setdefault(id, n)
    unique = json.dumps([pairs[n] for n in sorted(first.values())])
    rows = conn.execute(
        "UPDATE tasks SET state = 'assigned', owner = v.worker, not_before = NULL, "
        "updated_at = ? "
        "FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS worker "
        "FROM json_each(?)) AS v "
        "WHERE tasks.id = v.id AND tasks.state = 'pending' AND tasks.suspect = 0 "
        "AND (tasks.not_before IS NULL OR tasks.not_before <= ?) "
        "RETURNING tasks.id, tasks.room, tasks.owner",
        (now, unique, now),
    ).fetchall()
    rows.sort(key=lambda row: first[row[0]])  # a room goes to its last pair's worker
    for _, room, worker in rows:
        if room is not None:
            note_room(conn, room, worker, now)
    moved = {id for id, _, _ in rows}
    return [id in moved and first[id] == n for n, (id, _) in enumerate(pairs)], moved


def assign_one(conn: sqlite3.Connection, id: str, worker: str, now: float) -> bool:
    row = conn.execute(
        "UPDATE tasks SET state = 'assigned', owner = ?, not_before = NULL, updated_at = ? "
        f"WHERE id = ? AND state = 'pending' AND {DUE} AND suspect = 0 RETURNING room",
        (worker, now, id, now),
    ).fetchone()
    if row is None:
        return False
    if row[0] is not None:
        note_room(conn, row[0], worker, now)
    return True


def note_room(conn: sqlite3.Connection, room: str, worker: str, now: float) -> None:
    conn.execute(
        "INSERT INTO rooms (room, worker, at) VALUES (?, ?, ?) "
        "ON CONFLICT (room) DO UPDATE SET worker = excluded.worker, at = excluded.at",
        (room, worker, now),
    )


def read_workers(conn: sqlite3.Connection) -> list[WorkerInfo]:
    return [
        WorkerInfo(*r)
        for r in conn.execute(
            "SELECT name, role, capacity, last_beat, started_at FROM workers ORDER BY name"
        )
    ]
