"""The gateway's hand-out order (``GatewayStore._in_room_order``) against its specification.

The store finds a room's hold with one read of the live leases; the specification below asks,
for every available task, whether an earlier task of its room is out on a live lease (the
query the store used before, whose cost grew with the square of a room's backlog). Random
tables of tasks in every state, lease and priority must get the same hand-out from both.
"""

from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.gateway._store import _PRIORITY_ORDER, GatewayStore, _connect

NOW = 1_000.0


def specified_order(db: sqlite3.Connection, limit: int, now: float) -> list[str]:
    """By priority then age; never a task whose room has an earlier task on a live lease,
    nor one ahead of an earlier task of its room."""
    queues: dict[str, list[tuple[int, int, str]]] = {}
    for rowid, task_id, room, rank, blocked in db.execute(
        f"SELECT rowid, id, room, {_PRIORITY_ORDER}, EXISTS (SELECT 1 FROM tasks e"
        " WHERE e.room = t.room AND e.rowid < t.rowid AND e.state = 'leased'"
        " AND e.lease_until > ?)"
        " FROM tasks t WHERE state = 'queued' OR (state = 'leased' AND lease_until <= ?)"
        " ORDER BY rowid",
        (now, now),
    ):
        if blocked:
            continue
        queues.setdefault(room, []).append((rank, rowid, task_id))
    heads = [(queue[0], room, 0) for room, queue in queues.items()]
    heapq.heapify(heads)
    ids: list[str] = []
    while heads and len(ids) < limit:
        (_, _, task_id), room, n = heapq.heappop(heads)
        ids.append(task_id)
        if n + 1 < len(queues[room]):
            heapq.heappush(heads, (queues[room][n + 1], room, n + 1))
    return ids


task_rows = st.lists(
    st.tuples(
        st.sampled_from(["r1", "r2", "r3", "r4"]),
        st.sampled_from(["queued", "queued", "leased", "acked", "answered", "closed"]),
        st.sampled_from([NOW - 5.0, NOW, NOW + 5.0]),  # a lapsed, just-lapsed or live lease
        st.sampled_from(["urgent", "normal", "normal", "low"]),
    ),
    max_size=30,
)


@contextmanager
def _store_with(
    folder: Path, rows: list[tuple[str, str, str, float | None, str]]
) -> Iterator[GatewayStore]:
    """A gateway store (no writer thread: the hand-out is read directly) holding ``rows``:
    ``(id, room, state, lease_until, priority)`` in arrival order."""
    store = GatewayStore(folder / "gateway.db", _connect(folder / "gateway.db"))
    try:
        with store._db:
            store._db.executemany(
                "INSERT INTO tasks (id, room, sender, body, created_at, state, lease_until,"
                " priority) VALUES (?, ?, 'u', 'b', 0, ?, ?, ?)",
                rows,
            )
        yield store
    finally:
        store.close()


@settings(max_examples=300, deadline=None)
@given(rows=task_rows, limit=st.integers(min_value=1, max_value=32))
def test_the_hand_out_order_matches_its_specification(
    tmp_path_factory: object, rows: list[tuple[str, str, float, str]], limit: int
) -> None:
    folder = Path(tmp_path_factory.mktemp("order"))  # type: ignore[attr-defined]
    table = [
        (f"t{i}", room, state, lease if state == "leased" else None, priority)
        for i, (room, state, lease, priority) in enumerate(rows)
    ]
    with _store_with(folder, table) as store:
        assert store._in_room_order(limit, NOW) == specified_order(store._db, limit, NOW)


def test_a_room_is_held_from_its_earliest_live_lease_only(tmp_path: Path) -> None:
    """Tasks of a room before its leased one go out; those after it wait (a lapsed lease
    holds nothing and goes out again itself, first)."""
    table: list[tuple[str, str, str, float | None, str]] = [
        ("a1", "a", "queued", None, "normal"),  # released back before a2 was leased
        ("a2", "a", "leased", NOW + 5, "normal"),
        ("a3", "a", "queued", None, "normal"),
        ("b1", "b", "leased", NOW - 5, "normal"),  # lapsed: handed out again
        ("b2", "b", "queued", None, "normal"),
    ]
    with _store_with(tmp_path, table) as store:
        assert store._in_room_order(10, NOW) == ["a1", "b1", "b2"]
