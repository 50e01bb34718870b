"""SQLite's ready read (``_ready.ready_pending``) against its specification, and its cost.

The lead's view and a leaderless claim ask which pending tasks may run now, in queue order.
The specification is one walk of the pending queue, in order, through every rule (the query
the store ran before migration 10); the store reads the free tasks in order, walks the ordered
rooms' queue and, past a few steps, reads it room by room instead. Random tables of tasks in
every state, room policy, priority, backoff and suspicion must get the same answer from both,
wherever the walk stops.
And the room-by-room read must not grow with the depth of a room's backlog, and be taken only
when the walk would.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.bridge.stores.sqlite import _ready
from tether.bridge.stores.sqlite._ready import ready_pending
from tether.bridge.stores.sqlite._schema import migrate
from tether.bridge.stores.sqlite._sql import ROOM_GATE

NOW = 1_000.0


SPECIFIED = (
    "SELECT t.rowid FROM tasks t WHERE t.state = 'pending' "
    "AND (t.not_before IS NULL OR t.not_before <= :now) AND t.suspect = 0 "
    "AND (t.room IS NULL OR t.room NOT IN (SELECT value FROM json_each(:skip))) "
    f"AND {ROOM_GATE} ORDER BY t.priority, t.rowid LIMIT :limit"
)
"""Pending, due, not a suspect, not in a skipped room, let through by its room's policy: the
first ``limit`` by priority, then age."""


def specified_ready(db: sqlite3.Connection, limit: int, skip: list[str]) -> list[int]:
    params = {"now": NOW, "skip": json.dumps(skip), "limit": limit, "queues": None}
    return [rowid for (rowid,) in db.execute(SPECIFIED, params)]


@contextmanager
def store_db() -> Iterator[sqlite3.Connection]:
    """The store's schema, at its latest version, in memory."""
    db = sqlite3.connect(":memory:", isolation_level=None)
    try:
        migrate(db)
        yield db
    finally:
        db.close()


def insert(db: sqlite3.Connection, rows: list[tuple[str | None, str, str, int, int, int]]) -> None:
    """One task per row: (room, policy, state, priority, backoff, suspect)."""
    db.execute("DELETE FROM tasks")
    for n, (room, policy, state, priority, backoff, suspect) in enumerate(rows):
        held = state in ("assigned", "claimed", "result")
        db.execute(
            "INSERT INTO tasks (id, body, room, priority, headers, state, owner, attempt, "
            "lease_until, result, reason, created_at, updated_at, no_send, room_policy, "
            "not_before, suspect) VALUES (?, 'x', ?, ?, '{}', ?, ?, 1, ?, ?, ?, 1.0, 1.0, ?, ?, "
            "?, ?)",
            (
                f"t{n}",
                room,
                priority,
                state,
                "w1" if held or state == "delivered" else None,
                NOW + 60 if state == "claimed" else None,
                "reply" if state in ("result", "delivered") else None,
                "boom" if state == "dead" else None,
                n % 2,  # every other reply is a no-send one: it never holds its room
                policy,
                # a backoff on a pending task: over already, or still running
                NOW + (backoff - 1) * 5 if state == "pending" and backoff else None,
                suspect if state == "pending" else 0,
            ),
        )


@contextmanager
def walk_steps(steps: int) -> Iterator[None]:
    """A ready read whose walk stops past ``steps`` SQLite steps (1: at once, room by room)."""
    with (
        mock.patch.object(_ready, "READY_WALK_STEPS", steps),
        mock.patch.object(_ready, "_TICK", 1),
    ):
        yield


ROOMS = ["r1", "r2", "r3"]

task_rows = st.lists(
    st.tuples(
        st.sampled_from([None, *ROOMS]),
        st.sampled_from(["serial", "serial", "replace", "concurrent"]),
        st.sampled_from(["pending"] * 4 + ["assigned", "claimed", "result", "delivered", "dead"]),
        st.integers(0, 2),
        st.sampled_from([0, 0, 0, 1, 2]),  # no backoff, one that is over, one still running
        st.sampled_from([0, 0, 0, 1]),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(
    rows=task_rows,
    limit=st.integers(1, 6),
    steps=st.sampled_from([1, 20, 100, 400, 100_000]),
    skip=st.lists(st.sampled_from(ROOMS), max_size=2, unique=True),
)
def test_the_ready_read_matches_one_walk_of_the_queue(
    rows: list[tuple[str | None, str, str, int, int, int]],
    limit: int,
    steps: int,
    skip: list[str],
) -> None:
    with store_db() as db:
        insert(db, rows)
        expected = specified_ready(db, limit, skip)
        # a walk stopped anywhere, so most examples also take the room-by-room read
        with walk_steps(steps):
            assert ready_pending(db, NOW, limit, json.dumps(skip)) == expected


def test_a_worked_example() -> None:
    with store_db() as db:
        insert(
            db,
            [
                ("r1", "serial", "claimed", 1, 0, 0),  # 1: r1 runs: its queue waits
                ("r1", "serial", "pending", 0, 0, 0),  # 2: held, urgent or not
                ("r2", "serial", "pending", 1, 0, 0),  # 3: r2's head: ready
                ("r2", "serial", "pending", 1, 0, 0),  # 4: behind 3
                (None, "serial", "pending", 2, 0, 0),  # 5: no room, low priority: ready
                ("r3", "concurrent", "pending", 1, 0, 0),  # 6: concurrent: ready
                ("r3", "concurrent", "pending", 1, 2, 0),  # 7: backing off
                (None, "serial", "pending", 0, 0, 1),  # 8: a suspect: claimed alone
            ],
        )
        with walk_steps(1):
            assert ready_pending(db, NOW, 5) == [3, 6, 5]
            assert ready_pending(db, NOW, 1) == [3]
            assert ready_pending(db, NOW, 5, json.dumps(["r2"])) == [6, 5]


def test_a_room_whose_head_is_a_concurrent_task_gives_it_once() -> None:
    """The room-by-room read leaves a concurrent head to the free tasks' read."""
    with store_db() as db:
        insert(
            db,
            [
                ("r1", "serial", "claimed", 1, 0, 0),  # 1: r1 runs ...
                ("r1", "serial", "pending", 1, 0, 0),  # 2: ... so 2 and 3 wait
                ("r1", "serial", "pending", 1, 0, 0),  # 3
                ("r2", "concurrent", "pending", 1, 0, 0),  # 4: free, and r2's head
                ("r2", "serial", "pending", 1, 0, 0),  # 5: behind 4
            ],
        )
        with walk_steps(1):  # room by room
            assert ready_pending(db, NOW, 2) == specified_ready(db, 2, []) == [4]


class RecordingConnection(sqlite3.Connection):
    """A connection that keeps every statement it executes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.statements: list[str] = []

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self.statements.append(sql)
        return super().execute(sql, *args)


def _steps(db: sqlite3.Connection, sql: str, params: dict[str, object]) -> int:
    """How many SQLite virtual machine steps (in hundreds) one statement takes."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    db.set_progress_handler(count, 100)
    try:
        db.execute(sql, params).fetchall()
    finally:
        db.set_progress_handler(None, 0)
    return steps


def backlog(depth: int) -> list[tuple[str | None, str, str, int, int, int]]:
    """40 rooms, each running one task, ``depth`` messages queued behind each."""
    rooms: list[str | None] = [f"room-{k:02}" for k in range(40)]
    running = [(room, "serial", "claimed", 1, 0, 0) for room in rooms]
    return running + [(room, "serial", "pending", 1, 0, 0) for room in rooms] * depth


def test_a_deeper_backlog_does_not_make_the_room_by_room_read_longer() -> None:
    """Nothing is ready. The one walk reads every queued task; the room-by-room read seeks each
    room's head, so ten times the backlog costs it about the same."""
    params: dict[str, object] = {"now": NOW, "limit": 16, "skip": "[]", "queues": None}
    cost: dict[int, tuple[int, int]] = {}
    with store_db() as db:
        for depth in (20, 200):
            insert(db, backlog(depth))
            assert ready_pending(db, NOW, 16) == specified_ready(db, 16, []) == []
            cost[depth] = (
                _steps(db, _ready._READY_ORDERED_BY_ROOM, params),
                _steps(db, SPECIFIED, {**params, "skip": "[]"}),
            )
    (by_room_20, walk_20), (by_room_200, walk_200) = cost[20], cost[200]
    assert walk_200 > 8 * walk_20  # the walk grows with the backlog ...
    assert by_room_200 < 1.5 * by_room_20  # ... the room-by-room read does not
    assert by_room_200 * 10 < walk_200


def test_the_walk_gives_way_to_the_room_by_room_read_only_in_a_deep_backlog() -> None:
    db = sqlite3.connect(":memory:", isolation_level=None, factory=RecordingConnection)
    assert isinstance(db, RecordingConnection)
    try:
        migrate(db)
        for depth, by_room in ((1, False), (200, True)):
            insert(db, backlog(depth))
            db.statements.clear()
            assert ready_pending(db, NOW, 16) == specified_ready(db, 16, [])
            assert (_ready._READY_ORDERED_BY_ROOM in db.statements) is by_room
    finally:
        db.close()


def test_after_a_cut_walk_the_next_reads_go_room_by_room_at_once() -> None:
    """Issue 39: in a deep backlog every read paid for a walk that was cut, then read room by
    room. The next ``ROOM_BY_ROOM_READS`` reads skip the walk (same tasks); then it is tried
    again, and a drained backlog walks."""
    db = sqlite3.connect(":memory:", isolation_level=None, factory=RecordingConnection)
    assert isinstance(db, RecordingConnection)
    walks = {_ready._READY_BOTH, _ready._READY_ORDERED}
    try:
        migrate(db)
        insert(db, backlog(200))
        hint = _ready.WalkHint()
        reads = []
        for _ in range(_ready.ROOM_BY_ROOM_READS + 2):
            db.statements.clear()
            assert ready_pending(db, NOW, 16, hint=hint) == specified_ready(db, 16, [])
            reads.append(bool(walks & set(db.statements)))
        assert reads == [True] + [False] * _ready.ROOM_BY_ROOM_READS + [True]
        insert(db, backlog(1))  # drained: the next walk that is tried ends in time
        for _ in range(_ready.ROOM_BY_ROOM_READS + 1):
            ready_pending(db, NOW, 16, hint=hint)
        db.statements.clear()
        assert ready_pending(db, NOW, 16, hint=hint) == specified_ready(db, 16, [])
        assert walks & set(db.statements)
        assert _ready._READY_ORDERED_BY_ROOM not in db.statements
    finally:
        db.close()


def test_the_room_gate_reads_no_more_for_a_longer_history_of_delivered_replies() -> None:
    """Issue 39: the gate's test for an earlier reply not yet delivered stopped matching its
    partial index (``tasks_room_custody``) when durable runs added ``waiting`` to custody, and
    scanned every earlier task of the table instead: a ready read of 40 rooms cost 15 times
    more after 1,000 replies. Each room here has one pending task behind its history."""
    params: dict[str, object] = {"now": NOW, "limit": 40, "skip": "[]", "queues": None}
    cost: dict[int, int] = {}
    with store_db() as db:
        for history in (5, 100):
            rooms: list[str | None] = [f"room-{k:02}" for k in range(40)]
            done = [(room, "serial", "delivered", 1, 0, 0) for room in rooms] * history
            insert(db, done + [(room, "serial", "pending", 1, 0, 0) for room in rooms])
            assert len(ready_pending(db, NOW, 40)) == 40
            cost[history] = _steps(db, _ready._READY_ORDERED_BY_ROOM, params)
    assert cost[100] < 1.5 * cost[5], cost
