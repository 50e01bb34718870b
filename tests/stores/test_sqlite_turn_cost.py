"""A tenant's task costs its ingest the same whatever the lead has handed out (issue #56,
item 6).

A tenant's turn is read at ingest from the tasks still waiting for theirs: pending, and
assigned ahead of a worker's free slots. The assigned ones were read through the index of a
worker's assignments, which is not ordered by turn, so each ingested task of a tenant walked
every assigned row twice (the queue's clock, the tenant's last turn): with a lead prefetching
4 x concurrency per worker, about 17 SQLite steps per assigned row per message. Now both reads
are one seek each in an index of the waiting turns, however many tasks are assigned.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from support.vm_steps import vm_steps
from tether.bridge import SqliteStore, Task

ASSIGNED = 200


def _task(n: int, tenant: str) -> Task:
    return Task(f"t{n}", "hi", room=f"room-{n % 10}", headers={"tenant": tenant})


async def _steps_to_ingest(store: SqliteStore, task: Task) -> int:
    """SQLite virtual machine steps of ``ingest_many([task])`` (its writer job)."""
    async with vm_steps(store.db.writer) as steps:
        assert await store.ingest_many([task]) == [True]
    return steps[0]


async def test_a_tenants_ingest_costs_the_same_however_many_tasks_are_assigned(
    tmp_path: Path,
) -> None:
    store = await SqliteStore.open(tmp_path / "custody.db")
    try:
        await store.beat("w1", "worker", 4)
        await store.ingest_many([_task(n, f"tenant-{n % 50}") for n in range(2 * ASSIGNED)])
        alone = await _steps_to_ingest(store, _task(10_000, "tenant-7"))
        pairs = [(f"t{n}", "w1") for n in range(ASSIGNED)]
        assert all(await store.assign_many(pairs))
        beside = await _steps_to_ingest(store, _task(10_001, "tenant-7"))
    finally:
        await store.aclose()
    # the same read either way: a few steps of difference (the B-trees' shapes), never one
    # step per assigned task
    assert beside < alone + ASSIGNED / 4, (alone, beside)


async def test_a_tenants_turn_is_read_past_its_assigned_tasks(tmp_path: Path) -> None:
    """What the indexes must keep: the queue's clock and a tenant's last turn include the
    tasks assigned ahead of a worker's free slots (issue #47, item 2)."""
    store = await SqliteStore.open(tmp_path / "custody.db")
    try:
        await store.beat("w1", "worker", 4)
        await store.ingest_many([_task(n, "a") for n in range(3)] + [_task(3, "b")])
        assert all(await store.assign_many([(f"t{n}", "w1") for n in range(4)]))
        await store.ingest_many([_task(4, "a"), _task(5, "c")])

        def turns(conn: sqlite3.Connection) -> dict[str, float]:
            return dict(conn.execute("SELECT id, fair FROM tasks WHERE id IN ('t4', 't5')"))

        got = await store.db.read(turns)
    finally:
        await store.aclose()
    # a's last turn waiting is 3 (assigned); the clock is 1 (a's and b's first, assigned)
    assert got == {"t4": 4.0, "t5": 2.0}
