"""SQLite's file shrinks after pruning (issue #56): a new file vacuums incrementally, and
``reclaim_space`` gives its free pages back a bounded step per writer job; the WAL is cut back
to its size limit when a checkpoint resets it. A file made before keeps ``auto_vacuum`` off
(switching needs a full VACUUM): it still works, gives nothing back and says so once."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from support.clock import FakeClock
from support.migrations import sqlite_from
from tether.bridge import SqliteStore, Task
from tether.bridge.stores.sqlite import _space
from tether.bridge.stores.sqlite._schema import MIGRATIONS


def _checkpoint(db: Path, mode: str) -> None:
    """A checkpoint from another connection (the writer's jobs run in transactions)."""
    conn = sqlite3.connect(db)
    try:
        conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
    finally:
        conn.close()


def _pages(db: Path) -> tuple[int, int]:
    """(pages in the file, free pages), read from outside."""
    conn = sqlite3.connect(db)
    try:
        return (
            conn.execute("PRAGMA page_count").fetchone()[0],
            conn.execute("PRAGMA freelist_count").fetchone()[0],
        )
    finally:
        conn.close()


async def _delivered(store: SqliteStore, count: int, body: str) -> None:
    for start in range(0, count, 200):
        await store.ingest_many([Task(f"t{i}", body) for i in range(start, start + 200)])
        claims = await store.claim_many("w1", 200, leaderless=True)
        for claim in claims:
            await store.complete(claim, body)
        await store.mark_delivered_many([c.task.id for c in claims])


async def test_pruned_space_goes_back_to_the_file_system_a_bounded_step_at_a_time(
    tmp_path: Path,
) -> None:
    db = tmp_path / "c.db"
    clock = FakeClock(1000.0)
    async with await SqliteStore.open(db, clock=clock) as store:
        await _delivered(store, 1000, "x" * 1000)
        clock.now += 100
        while await store.prune_delivered(clock.now, limit=500):
            pass
        _checkpoint(db, "TRUNCATE")
        full, free = _pages(db)
        assert free > 300  # the bodies' pages, now free
        steps = []
        while step := await store.reclaim_space(pages=100):
            steps.append(step)
        assert max(steps) == 100
        assert sum(steps) >= free - 1
        _checkpoint(db, "TRUNCATE")
    after, left = _pages(db)
    assert left == 0
    assert after <= full - free + 1
    assert db.stat().st_size == after * 4096


async def test_the_wal_is_cut_back_to_its_limit_after_a_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_space, "WAL_SIZE_LIMIT", 256 * 1024)
    db = tmp_path / "c.db"
    wal = tmp_path / "c.db-wal"
    async with await SqliteStore.open(db) as store:
        await store.db.writer.run(lambda c: c.execute("PRAGMA wal_autocheckpoint = 0"))
        await _delivered(store, 600, "y" * 2000)
        assert wal.stat().st_size > 4 * 1024 * 1024  # a burst: megabytes of WAL
        _checkpoint(db, "RESTART")
        await store.ingest(Task("next", "after the burst"))  # starts the WAL over
        assert wal.stat().st_size <= 256 * 1024


async def test_a_file_made_without_incremental_vacuum_works_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tether.bridge.sqlite")
    async with sqlite_from(tmp_path / "old.db", len(MIGRATIONS)) as store:
        assert await store.reclaim_space(pages=10) == 0
        await store.ingest(Task("a", "hi"))
    said = [r.getMessage() for r in caplog.records if "incremental vacuum" in r.getMessage()]
    assert len(said) == 1
    assert "never shrinks" in said[0]
