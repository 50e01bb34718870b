"""SQLite's turns in time order (issue #34 perf): a commit of messages in many rooms appends
their turns to the same last pages instead of dirtying a page per room, and a file whose
turns were kept by room keeps every turn, in order, through the migration."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tether.bridge import SqliteStore, Task
from tether.bridge.stores.sqlite._schema import MIGRATIONS, _statements, _with_cookie

STEP = next(i for i, m in enumerate(MIGRATIONS) if "turns_copy" in m)
"""The migration's place in the list (found by its content: later issues append theirs)."""

_FRAME_HEADER = 24
_WAL_HEADER = 32
ROOMS = 16


async def test_a_commit_of_messages_in_16_rooms_writes_few_turn_pages(tmp_path: Path) -> None:
    # kept by room, the 16 messages dirtied a leaf of the turns each (and their parents): 34
    # pages for this commit; in time order they share the last leaves: 15
    db = tmp_path / "c.db"
    wal = tmp_path / "c.db-wal"
    async with await SqliteStore.open(db, synchronous="OFF") as store:
        page = int(await store.db.writer.run(lambda c: c.execute("PRAGMA page_size").fetchone()[0]))
        await store.db.writer.run(lambda c: c.execute("PRAGMA wal_autocheckpoint = 0"))

        def frames() -> int:
            return (wal.stat().st_size - _WAL_HEADER) // (page + _FRAME_HEADER)

        for n in range(12):  # 12 turns of ~330 bytes in each room: a leaf of its own
            await store.ingest_many(
                [
                    Task(f"p{r}-{n}", f"earlier message {n} " * 16, room=f"r{r}")
                    for r in range(ROOMS)
                ]
            )
        start = frames()
        await store.ingest_many(
            [Task(f"m{r}", f"new message in room {r} " * 4, room=f"r{r}") for r in range(ROOMS)]
        )
        written = frames() - start
    assert written <= 20, written


async def test_turns_kept_by_room_are_migrated_in_order(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db, isolation_level=None)
    for version in range(STEP):
        for statement in _statements(MIGRATIONS[version]):
            conn.execute(_with_cookie(conn, statement))
    conn.execute(f"PRAGMA user_version = {STEP}")
    for n, room in enumerate(["a", "b", "a"]):  # the triggers of the old schema write turns
        conn.execute(
            "INSERT INTO tasks (id, body, room, priority, headers, state, attempt, created_at, "
            "updated_at, room_policy) VALUES (?, ?, ?, 1, '{}', 'pending', 1, ?, ?, 'serial')",
            (f"t{n}", f"message {n}", room, float(n), float(n)),
        )
    conn.execute(
        "UPDATE tasks SET state = 'result', result = 'reply 0', owner = 'w', updated_at = 5 "
        "WHERE id = 't0'"
    )
    conn.execute("UPDATE tasks SET state = 'delivered', updated_at = 6 WHERE id = 't0'")
    conn.execute("UPDATE tasks SET state = 'dead', reason = 'x', updated_at = 7 WHERE id = 't2'")
    conn.close()
    async with await SqliteStore.open(db, clock=lambda: 10.0) as store:
        view = await store.room("a")
        assert view is not None
        assert [(t.text, t.outcome) for t in view.turns] == [
            ("message 0", "received"),
            ("reply 0", "delivered"),
            ("message 2", "received"),
        ]
        assert view.turn_count == 3
        await store.ingest(Task("t3", "after the upgrade", room="a"), room_policy="serial")
        talk = await store.conversation("t3")
        assert [t.text for t in talk.history] == ["message 0", "reply 0", "message 2"]
        counted = await store.room("a")
        assert counted is not None
        assert counted.turn_count == 4  # the count triggers came back with the table
