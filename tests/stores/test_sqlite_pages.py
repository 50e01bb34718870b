"""SQLite migration 9 (issue #19): a transition writes fewer pages, and no journal entry is lost.

A durable commit's cost grows with the pages it appends to the WAL. Migration 9 keeps the
journal in one b-tree keyed by (task, sequence) and drops the index that only the stall scan
sorted by; these tests hold the page count of a lone ingest -> claim -> complete to it, and
check that a file written by version 8 keeps every journal entry, in order, and goes on
appending after them.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tether.bridge import SqliteStore, Task
from tether.bridge.stores.sqlite._schema import MIGRATIONS, SCHEMA_VERSION, _statements

_FRAME_HEADER = 24
_WAL_HEADER = 32


def _v8_file(db: Path) -> None:
    """A database at schema version 8 with two tasks' journals interleaved."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        for version in range(8):
            for statement in _statements(MIGRATIONS[version]):
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 8")
        for id in ("a", "b"):
            conn.execute(
                "INSERT INTO tasks (id, body, priority, headers, state, attempt, created_at, "
                "updated_at) VALUES (?, 'x', 1, '{}', 'pending', 1, 1.0, 1.0)",
                (id,),
            )
        conn.execute(
            "UPDATE tasks SET state = 'claimed', owner = 'w1', lease_until = 99.0, "
            "updated_at = 2.0 WHERE id = 'b'"
        )
        conn.execute(
            "UPDATE tasks SET state = 'claimed', owner = 'w1', lease_until = 99.0, "
            "updated_at = 3.0 WHERE id = 'a'"
        )
        conn.execute(
            "UPDATE tasks SET state = 'pending', owner = NULL, lease_until = NULL, "
            "attempt = 2, reason = 'boom', updated_at = 4.0 WHERE id = 'b'"
        )
    finally:
        conn.close()


async def test_migration_9_keeps_every_journal_entry_in_order(tmp_path: Path) -> None:
    db = tmp_path / "v8.db"
    _v8_file(db)
    async with await SqliteStore.open(db, clock=lambda: 10.0) as store:
        a = [(e.at, e.src, e.dst) for e in await store.journal("a")]
        b = [(e.at, e.src, e.dst, e.attempt, e.reason) for e in await store.journal("b")]
        assert a == [(1.0, None, "pending"), (3.0, "pending", "claimed")]
        assert b == [
            (1.0, None, "pending", 1, None),
            (2.0, "pending", "claimed", 1, None),
            (4.0, "claimed", "pending", 1, "boom"),
        ]
        claim = await store.claim("w2", leaderless=True)  # b: the only pending task
        assert claim is not None
        assert claim.task.id == "b"
        await store.complete(claim, "done")
        moves = [(e.src, e.dst, e.worker) for e in await store.journal("b")][3:]
        assert moves == [("pending", "claimed", "w2"), ("claimed", "result", "w2")]
        indexes = await store.db.writer.run(
            lambda c: {r[0] for r in c.execute("SELECT name FROM sqlite_master")}
        )
        assert "tasks_claimed_age" not in indexes
        assert "journal_task" not in indexes
        version = await store.db.writer.run(lambda c: c.execute("PRAGMA user_version").fetchone())
        assert version == (SCHEMA_VERSION,)


async def test_a_lone_job_writes_at_most_16_pages_in_its_three_commits(tmp_path: Path) -> None:
    # before migration 9: 5 + 6 + 6 = 17 (tasks, its id index, the queue indexes it leaves and
    # enters, the stall scan's index, the journal and its index); then one page per tree
    # touched, 13; since migration 19 (issue #56) each commit also writes the one page of
    # ``task_counts``, the counts that cost the same at any table size: 15 measured
    db = tmp_path / "c.db"
    wal = tmp_path / "c.db-wal"
    async with await SqliteStore.open(db) as store:
        page = int(await store.db.writer.run(lambda c: c.execute("PRAGMA page_size").fetchone()[0]))
        await store.db.writer.run(lambda c: c.execute("PRAGMA wal_autocheckpoint = 0"))

        def frames() -> int:
            return (wal.stat().st_size - _WAL_HEADER) // (page + _FRAME_HEADER)

        await store.ingest(Task("warm-up", "x"))  # the first commit also writes the schema page
        jobs = 40
        start = frames()
        for n in range(jobs):
            await store.ingest(Task(f"t{n}", f"job {n}"))
            claim = await store.claim("w1", leaderless=True)
            assert claim is not None
            await store.complete(claim, "ok")
        assert (frames() - start) / jobs <= 16.5  # a page split now and then
