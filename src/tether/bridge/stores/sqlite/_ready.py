"""SQLite's ready read: the first pending tasks that may run now, in queue order.

The lead's view and a leaderless claim read the ready tasks of a queue whose ordered rooms may
hold thousands behind their heads: a walk in order while it is cheap, else a seek per room.
"""

from __future__ import annotations

import heapq
import sqlite3
from typing import Any, Final

import attrs

from ._sql import FREE, IN_QUEUES, ORDERED, QUEUE_ORDER, ROOM_GATE, merged

READY_WALK_STEPS: Final = 5_000
"""SQLite virtual machine steps a ready read may spend walking the ordered rooms' queue (about
130 tasks; what reading 40 rooms one by one costs) before it reads room by room instead."""
_TICK: Final = 1_000
ROOM_BY_ROOM_READS: Final = 16
"""Ready reads of a connection that go room by room at once after a walk was cut: a deep
backlog stays deep for many sweeps, and each cut walk cost as much as the read after it
(issue 39: 45% of a ready read, the largest part of the lead's sweep, in 40 busy rooms). Then
a walk is tried again, as the backlog may have drained. Either read gives the same tasks."""


@attrs.define
class WalkHint:
    """A store's memory of its backlog's depth across ready reads (a hint: it decides only
    how a read is made, never what it finds; its readers and writer share it unlocked)."""

    by_room_left: int = 0
    """How many more ready reads go room by room at once."""


_QUEUE: Final = "room IS NOT NULL AND state IN ('assigned', 'pending')"
"""A task in its room's queue (``tasks_room_queue``'s predicate, word for word)."""
_NOT_HELD: Final = (
    "(not_before IS NULL OR not_before <= :now) AND suspect = 0 "
    f"AND (room IS NULL OR room NOT IN (SELECT value FROM json_each(:skip))) AND {IN_QUEUES}"
)
"""Due, not a suspect (suspects are claimed alone, never planned: ``custody._crashes``), not
in a room the read skips, in one of the queues read (issue #51)."""
_READY: Final = f"state = 'pending' AND {_NOT_HELD} AND {ROOM_GATE}"
"""May pending task ``t`` (the query's ``tasks t``) run now: ``_NOT_HELD``, and let through by
its room's policy."""
_ANY_PENDING: Final = (
    f"SELECT EXISTS (SELECT 1 FROM tasks WHERE {FREE}), "
    f"EXISTS (SELECT 1 FROM tasks WHERE {ORDERED})"
)
"""Is any free task pending, any of an ordered room (a probe of each queue's index)."""
_READY_FREE: Final = (
    f"SELECT {QUEUE_ORDER} FROM tasks WHERE {FREE} AND {_NOT_HELD} "
    f"ORDER BY {QUEUE_ORDER} LIMIT :limit"
)
"""The first free tasks ready: no room's order holds them, so the walk stops at ``limit``."""
_READY_ORDERED: Final = (
    f"SELECT {QUEUE_ORDER} FROM tasks t WHERE {ORDERED} AND {_READY} "
    f"ORDER BY {QUEUE_ORDER} LIMIT :limit"
)
"""The ordered rooms' queue walked in order (``tasks_pending_ordered``) until ``limit`` pass."""
_READY_BOTH: Final = merged(_READY_FREE, _READY_ORDERED, ":limit")
"""Both queues walked in order, each until ``limit`` pass, merged."""
_READY_ORDERED_BY_ROOM: Final = (
    # each room of the queue, by a seek from the one before (not a walk of its messages) ...
    "WITH RECURSIVE queued(room) AS ("
    f"SELECT min(room) FROM tasks WHERE {_QUEUE} "
    "UNION ALL "
    f"SELECT (SELECT min(room) FROM tasks WHERE room > queued.room AND {_QUEUE}) "
    "FROM queued WHERE queued.room IS NOT NULL) "
    f"SELECT {QUEUE_ORDER} FROM tasks t WHERE rowid IN ("
    # ... and its head: the only one of its messages an ordered room may let run
    f"SELECT (SELECT min(rowid) FROM tasks WHERE room = queued.room AND {_QUEUE}) "
    "FROM queued WHERE queued.room IS NOT NULL) "
    f"AND room_policy <> 'concurrent' AND {_READY} ORDER BY {QUEUE_ORDER} LIMIT :limit"
)


def ready_pending(
    conn: sqlite3.Connection,
    now: float,
    limit: int,
    skip: str = "[]",
    hint: WalkHint | None = None,
    queues: str | None = None,
) -> list[int]:
    """The rowids of the first ``limit`` pending tasks that may run now (``_READY``), in queue
    order (priority, turn, age: ``_sql.QUEUE_ORDER``); ``skip``: a JSON list of rooms to leave
    out; ``queues``: a JSON list of the queues read (None: every queue).

    The pending queue is two (two partial indexes, migration 10): the free tasks, which no
    room's order holds back, and those of ordered rooms (``serial``, ``replace``). A free task
    is ready unless it is due later, a suspect or skipped, so the first ones are read in order
    and the walk stops at ``limit``. An ordered room lets only its head run, so a deep backlog
    holds a few ready tasks among thousands, and walking that queue until ``limit`` pass would
    read all of it (1.4 ms per sweep at 2,000 queued in 40 busy rooms, 14 ms at 20,000). So
    both queues are walked in one read that stops past ``READY_WALK_STEPS`` (shallow rooms:
    it ends long before), and then the ordered queue is read room by room instead: each
    room's head, a seek per room (every ordered task the gate lets through is its room's
    head), merged with the first free tasks. Given the store's ``hint``, the next
    ``ROOM_BY_ROOM_READS`` reads after a cut walk go room by room at once.
    """
    p = {"now": now, "limit": limit, "skip": skip, "queues": queues}
    any_free, any_ordered = conn.execute(_ANY_PENDING).fetchone()
    if not any_ordered:
        return [rowid for *_, rowid in conn.execute(_READY_FREE, p)]
    if hint is not None and hint.by_room_left > 0:
        hint.by_room_left -= 1
    else:
        walked = _walk(conn, _READY_BOTH if any_free else _READY_ORDERED, p)
        if walked is not None:
            return [rowid for *_, rowid in walked]
        if hint is not None:
            hint.by_room_left = ROOM_BY_ROOM_READS
    free = conn.execute(_READY_FREE, p).fetchall() if any_free else []
    ordered = conn.execute(_READY_ORDERED_BY_ROOM, p).fetchall()
    return [rowid for *_, rowid in heapq.merge(free, ordered)][:limit]


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
