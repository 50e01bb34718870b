"""The pool's statements in SQLite: the lead's view, assignments and room affinity.

Each function runs inside a writer (or reader) job on the connection it is given, so a sweep's
read, plan and assignments share one transaction (``SqliteStore.plan_and_assign``).
"""

from __future__ import annotations

import heapq
import json
import sqlite3
from collections.abc import Sequence
from typing import Any, Final

from ...custody._store import Assignment, PoolView, Queued, WorkerInfo
from .._common import RANK_PRIORITY
from .._rooms_sql import room_busy, room_gate

ROOM_GATE: Final = room_gate("t", "tasks", "rowid", "o.no_send = 0")
"""May candidate ``t`` run now, by its room's policy: the lead plans only with those."""


def pool_view(conn: sqlite3.Connection, at: float, pending_limit: int, skip: str) -> PoolView:
    """The pool as one transaction sees it (``skip``: a JSON list of rooms to read past)."""
    pending: list[Queued] = []
    rooms: dict[str, str] = {}
    ready = json.dumps(ready_pending(conn, at, pending_limit, skip))
    for id, room, rank, keeper in conn.execute(
        "SELECT t.id, t.room, t.priority, r.worker FROM tasks t "
        "LEFT JOIN rooms r ON r.room = t.room "
        "WHERE t.rowid IN (SELECT value FROM json_each(?)) ORDER BY t.priority, t.rowid",
        (ready,),
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


READY_WALK_STEPS: Final = 5_000
"""SQLite virtual machine steps a ready read may spend walking the ordered rooms' queue (about
130 tasks; what reading 40 rooms one by one costs) before it reads room by room instead."""
_TICK: Final = 1_000

_FREE: Final = "state = 'pending' AND (room IS NULL OR room_policy = 'concurrent')"
"""A pending task no room's order holds back (``tasks_pending_free``'s predicate, word for
word, so the planner walks that index)."""
_ORDERED: Final = "state = 'pending' AND room IS NOT NULL AND room_policy <> 'concurrent'"
"""A pending task of an ordered room (``tasks_pending_ordered``'s predicate, word for word)."""
_QUEUE: Final = "room IS NOT NULL AND state IN ('assigned', 'pending')"
"""A task in its room's queue (``tasks_room_queue``'s predicate, word for word)."""
_NOT_HELD: Final = (
    "(not_before IS NULL OR not_before <= :now) AND suspect = 0 "
    "AND (room IS NULL OR room NOT IN (SELECT value FROM json_each(:skip)))"
)
"""Due, not a suspect (suspects are claimed alone, never planned: ``custody._crashes``), not
in a room the read skips."""
_READY: Final = f"state = 'pending' AND {_NOT_HELD} AND {ROOM_GATE}"
"""May pending task ``t`` (the query's ``tasks t``) run now: ``_NOT_HELD``, and let through by
its room's policy."""


def _merged(first: str, second: str, limit: str) -> str:
    """The first ``limit`` rows of two queries of ``(priority, rowid)``, each in that order,
    merged in that order (each query walks its own index and stops at its own limit)."""
    return f"SELECT * FROM ({first}) UNION ALL SELECT * FROM ({second}) ORDER BY 1, 2 LIMIT {limit}"


def pending_in_order(limit: str, where: str = "") -> str:
    """A query of the rowids of the first ``limit`` (an SQL expression) pending tasks that
    also meet ``where`` (``AND ...`` on the task's columns), by priority then age: the two
    pending queues, each walked in its own index, merged."""
    free, ordered = (
        f"SELECT priority, rowid FROM tasks WHERE {queue} {where} "
        f"ORDER BY priority, rowid LIMIT {limit}"
        for queue in (_FREE, _ORDERED)
    )
    return f"SELECT rowid FROM ({_merged(free, ordered, limit)})"


_ANY_PENDING: Final = (
    f"SELECT EXISTS (SELECT 1 FROM tasks WHERE {_FREE}), "
    f"EXISTS (SELECT 1 FROM tasks WHERE {_ORDERED})"
)
"""Is any free task pending, any of an ordered room (a probe of each queue's index)."""
_READY_FREE: Final = (
    f"SELECT priority, rowid FROM tasks WHERE {_FREE} AND {_NOT_HELD} "
    "ORDER BY priority, rowid LIMIT :limit"
)
"""The first free tasks ready: no room's order holds them, so the walk stops at ``limit``."""
_READY_ORDERED: Final = (
    f"SELECT priority, rowid FROM tasks t WHERE {_ORDERED} AND {_READY} "
    "ORDER BY priority, rowid LIMIT :limit"
)
"""The ordered rooms' queue walked in order (``tasks_pending_ordered``) until ``limit`` pass."""
_READY_BOTH: Final = _merged(_READY_FREE, _READY_ORDERED, ":limit")
"""Both queues walked in order, each until ``limit`` pass, merged."""
_READY_ORDERED_BY_ROOM: Final = (
    # each room of the queue, by a seek from the one before (not a walk of its messages) ...
    "WITH RECURSIVE queued(room) AS ("
    f"SELECT min(room) FROM tasks WHERE {_QUEUE} "
    "UNION ALL "
    f"SELECT (SELECT min(room) FROM tasks WHERE room > queued.room AND {_QUEUE}) "
    "FROM queued WHERE queued.room IS NOT NULL) "
    "SELECT priority, rowid FROM tasks t WHERE rowid IN ("
    # ... and its head: the only one of its messages an ordered room may let run
    f"SELECT (SELECT min(rowid) FROM tasks WHERE room = queued.room AND {_QUEUE}) "
    "FROM queued WHERE queued.room IS NOT NULL) "
    f"AND room_policy <> 'concurrent' AND {_READY} ORDER BY priority, rowid LIMIT :limit"
)


def ready_pending(conn: sqlite3.Connection, now: float, limit: int, skip: str = "[]") -> list[int]:
    """The rowids of the first ``limit`` pending tasks that may run now (``_READY``), in queue
    order (priority, then age); ``skip``: a JSON list of rooms to leave out.

    The pending queue is two (two partial indexes, migration 10): the free tasks, which no
    room's order holds back, and those of ordered rooms (``serial``, ``replace``). A free task
    is ready unless it is due later, a suspect or skipped, so the first ones are read in order
    and the walk stops at ``limit``. An ordered room lets only its head run, so a deep backlog
    holds a few ready tasks among thousands, and walking that queue until ``limit`` pass would
    read all of it (1.4 ms per sweep at 2,000 queued in 40 busy rooms, 14 ms at 20,000). So
    both queues are walked in one read that stops past ``READY_WALK_STEPS`` (shallow rooms:
    it ends long before), and then the ordered queue is read room by room instead: each
    room's head, a seek per room (every ordered task the gate lets through is its room's
    head), merged with the first free tasks.
    """
    p = {"now": now, "limit": limit, "skip": skip}
    any_free, any_ordered = conn.execute(_ANY_PENDING).fetchone()
    if not any_ordered:
        return [rowid for _, rowid in conn.execute(_READY_FREE, p)]
    walked = _walk(conn, _READY_BOTH if any_free else _READY_ORDERED, p)
    if walked is not None:
        return [rowid for _, rowid in walked]
    free = conn.execute(_READY_FREE, p).fetchall() if any_free else []
    ordered = conn.execute(_READY_ORDERED_BY_ROOM, p).fetchall()
    return [rowid for _, rowid in heapq.merge(free, ordered)][:limit]


def _walk(conn: sqlite3.Connection, sql: str, p: dict[str, Any]) -> list[Any] | None:
    """The rows of ``sql`` (a read), or None if it took more than ``READY_WALK_STEPS`` steps.

    SQLite's progress handler stops the statement; a read that stops leaves the transaction as
    it was. The handler runs every ``_TICK`` steps of the statement's lifetime count, which a
    cached statement carries over from its earlier runs, so the first tick may come early: the
    walk is cut by counting ticks, not at the first one.
    """
    ticks = 0

    def tick() -> bool:
        nonlocal ticks
        ticks += 1
        return ticks * _TICK > READY_WALK_STEPS

    conn.set_progress_handler(tick, _TICK)
    try:
        return conn.execute(sql, p).fetchall()
    except sqlite3.OperationalError:
        if ticks * _TICK <= READY_WALK_STEPS:
            raise
        return None
    finally:
        conn.set_progress_handler(None, 0)


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
