"""SQLite's counts cost the same at any size (issue #56): the tasks per state and the
conversations' totals are kept by triggers in the moves' own transactions, so the admin
endpoint's read every second walks no task row (it walked them all: 0.53% of a core idle
became 3.3% at 50,000 rows). Counted in SQLite's virtual machine steps, which no busy machine
changes; and a file of the version before is counted from its rows once, as it upgrades."""

from __future__ import annotations

from pathlib import Path

from support.migrations import sqlite_from, sqlite_step
from support.vm_steps import vm_steps
from tether.bridge import SqliteStore, Task
from tether.bridge.custody import CustodyState


async def _steps_to_count(store: SqliteStore) -> int:
    async with vm_steps(store.db.reader, every=10, readonly=True) as steps:
        await store.counts()
        await store.conversation_counts()
    return steps[0]


async def _store_of(path: Path, delivered: int) -> SqliteStore:
    store = await SqliteStore.open(path)
    for start in range(0, delivered, 500):
        tasks = [Task(f"t{i}", "hi", room=f"r{i}") for i in range(start, start + 500)]
        await store.ingest_many(tasks)
        claims = await store.claim_many("w1", 500, leaderless=True)
        for claim in claims:
            await store.complete(claim, "ok")
        await store.mark_delivered_many([c.task.id for c in claims])
    return store


async def test_reading_the_counts_walks_no_row_whatever_the_store_holds(tmp_path: Path) -> None:
    small = await _store_of(tmp_path / "small.db", 0)
    large = await _store_of(tmp_path / "large.db", 2000)
    try:
        assert (await large.counts())[CustodyState.DELIVERED] == 2000
        assert (await large.conversation_counts()).rooms == 2000
        assert (await large.conversation_counts()).turns == 4000
        few, many = await _steps_to_count(small), await _steps_to_count(large)
        assert many <= few + 2, (few, many)
    finally:
        await small.aclose()
        await large.aclose()


async def test_a_file_of_the_version_before_is_counted_from_its_rows(tmp_path: Path) -> None:
    old = [("a", "pending", "NULL"), ("b", "delivered", "'w'"), ("c", "delivered", "'w'")]
    rows = [
        "INSERT INTO tasks (id, body, priority, headers, state, attempt, created_at, "
        "updated_at, owner, result) "
        f"VALUES ('{id}', 'hi', 1, '{{{{}}}}', '{state}', 1, 1, 1, {owner}, {owner})"
        for id, state, owner in old
    ]
    rows += [
        "INSERT INTO conversations (room, next_seq, turns, state_bytes) VALUES ('r', 3, 3, 10)",
        "INSERT INTO conversations (room, next_seq, turns, state_bytes) VALUES ('q', 1, 1, 0)",
    ]
    step = sqlite_step("task_counts")
    async with sqlite_from(tmp_path / "old.db", step, *rows) as store:
        counts = await store.counts()
        assert counts[CustodyState.PENDING] == 1
        assert counts[CustodyState.DELIVERED] == 2
        assert counts[CustodyState.DEAD] == 0
        totals = await store.conversation_counts()
        assert (totals.rooms, totals.turns, totals.state_bytes) == (2, 4, 10)
        await store.ingest(Task("d", "after", room="q"))
        assert (await store.counts())[CustodyState.PENDING] == 2
        assert (await store.conversation_counts()).turns == 5
