"""The waiting turns' indexes (issue #56, item 6) come to a store of the previous version in
place, both backends: tenants' tasks pending and assigned before the upgrade still set the
queue's clock and their tenants' last turns, and the pending ones are still counted."""

from __future__ import annotations

from pathlib import Path

from support.migrations import postgres_from, postgres_step, sqlite_from, sqlite_step
from tether.bridge import Task
from tether.bridge.custody import Store

SQLITE_STEP = sqlite_step("CREATE INDEX tasks_queued_turns")
PG_STEP = postgres_step("CREATE INDEX tasks_queued_turns")
"""The migration's place in each list (found by its content: other issues append theirs)."""
OLD_ROWS = (
    "INSERT INTO {s}tasks (id, body, priority, headers, state, attempt, owner, created_at, "
    "updated_at, room_policy, tenant, fair) VALUES "
    "('a1', 'x', 1, '{{\"tenant\": \"a\"}}', 'assigned', 1, 'w1', 1, 1, 'concurrent', 'a', 1), "
    "('a2', 'x', 1, '{{\"tenant\": \"a\"}}', 'assigned', 1, 'w1', 1, 1, 'concurrent', 'a', 2), "
    "('b1', 'x', 1, '{{\"tenant\": \"b\"}}', 'pending', 1, NULL, 1, 1, 'concurrent', 'b', 2)",
    "INSERT INTO {s}workers (name, role, capacity, last_beat, started_at) "
    "VALUES ('w1', 'worker', 4, 1, 1)",
)
"""Tenant a's turns 1 and 2 assigned to a worker ahead of its free slots, b's turn 2 pending:
the queue's clock is 1."""


async def _turns_follow_the_old_rows(store: Store) -> None:
    await store.ingest_many([Task("a3", "x", headers={"tenant": "a"})])
    await store.ingest_many([Task("c1", "x", headers={"tenant": "c"})])
    assert [(v.tenant, v.pending) for v in await store.tenant_views()] == [
        ("a", 1),
        ("b", 1),
        ("c", 1),
    ]
    assert sorted(await store.return_assignments("w1")) == ["a1", "a2"]
    claims = await store.claim_many("w2", 10, leaderless=True)
    # a3 after a's assigned turn 2 (3); c1 one step past the clock (2), after b1 by age
    assert [c.task.id for c in claims] == ["a1", "a2", "b1", "c1", "a3"]


async def test_a_sqlite_file_of_the_previous_version_is_migrated(tmp_path: Path) -> None:
    async with sqlite_from(tmp_path / "custody.db", SQLITE_STEP, *OLD_ROWS) as store:
        await _turns_follow_the_old_rows(store)


async def test_a_postgres_schema_of_the_previous_version_is_migrated(postgres_dsn: str) -> None:
    async with postgres_from(postgres_dsn, PG_STEP, *OLD_ROWS) as store:
        await _turns_follow_the_old_rows(store)
