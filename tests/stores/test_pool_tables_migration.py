"""SQLite only: migration 2 (the pool's tables) upgrades a version-1 database in place."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tether.bridge import CustodyState, SqliteStore
from tether.bridge.stores.sqlite._schema import MIGRATIONS, SCHEMA_VERSION, _statements


def _version_1_database(db: Path) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        for statement in _statements(MIGRATIONS[0]):
            conn.execute(statement)
        conn.execute("PRAGMA user_version = 1")
        for id, state, owner, lease, result in (
            ("p", "pending", None, None, None),
            ("c", "claimed", "w1", 2e9, None),
            ("r", "result", "w1", None, "reply"),
        ):
            conn.execute(
                "INSERT INTO tasks (id, body, room, priority, headers, state, owner, attempt, "
                "lease_until, result, created_at, updated_at) "
                "VALUES (?, 'b', NULL, 1, '{}', ?, ?, 1, ?, ?, 1.0, 1.0)",
                (id, state, owner, lease, result),
            )
    finally:
        conn.close()


async def test_a_version_1_database_is_migrated_with_its_tasks_intact(tmp_path: Path) -> None:
    db = tmp_path / "custody.db"
    _version_1_database(db)
    store = await SqliteStore.open(db)
    try:
        assert SCHEMA_VERSION >= 2
        version = await store.db.writer.run(
            lambda conn: conn.execute("PRAGMA user_version").fetchone()[0]
        )
        assert version == SCHEMA_VERSION
        assert await store.state("p") is CustodyState.PENDING
        (result,) = await store.ready_results()
        assert (result.task.id, result.body, result.no_send) == ("r", "reply", False)
        assert [c.id for c in await store.stall_candidates(2.0)] == ["c"]
        assert await store.workers() == []
    finally:
        await store.aclose()
