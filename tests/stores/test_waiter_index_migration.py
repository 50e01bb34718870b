"""The waiter index migration (issue #47, item 7) upgrades a store of the previous version in
place, both backends: a run that was waiting for a permit when its process died, in a store
written before the upgrade, is found by task and becomes no suspect."""

from __future__ import annotations

from pathlib import Path

from support.migrations import postgres_from, postgres_step, sqlite_from, sqlite_step
from tether.bridge import CustodyState
from tether.bridge.custody import Store

SQLITE_STEP = sqlite_step("CREATE INDEX limit_waiters_task")
PG_STEP = postgres_step("CREATE INDEX limit_waiters_task")
"""The migration's place in each list (found by its content: other issues append theirs)."""
OLD_ROWS = (
    "INSERT INTO {s}tasks (id, body, priority, headers, state, attempt, owner, lease_until, "
    "created_at, updated_at, room_policy) VALUES "
    "('held', 'x', 1, '{{}}', 'claimed', 1, 'old-w1', 100, 1, 1, 'concurrent'), "
    "('waits', 'x', 1, '{{}}', 'claimed', 1, 'old-w1', 100, 1, 1, 'concurrent')",
    "INSERT INTO {s}workers (name, role, capacity, last_beat, started_at) "
    "VALUES ('old-w1', 'worker', 4, 40, 1)",
    "INSERT INTO {s}limit_waiters (key, task_id, until) VALUES ('k', 'waits', 41)",
)
"""Two claims of a process last seen at 40 whose leases ran out at 100: one waiting for a
permit of ``k`` then (its waiter row until 41), one running."""


async def _only_the_runner_is_a_suspect(store: Store) -> None:
    expired = {e.id: e for e in await store.expire_leases()}
    assert sorted(expired) == ["held", "waits"]
    assert all(e.outcome is CustodyState.PENDING and e.crash for e in expired.values())
    assert [r.task.id for r in (await store.suspects()).records] == ["held"]


async def test_a_sqlite_file_of_the_previous_version_is_migrated(tmp_path: Path) -> None:
    async with sqlite_from(tmp_path / "custody.db", SQLITE_STEP, *OLD_ROWS) as store:
        await _only_the_runner_is_a_suspect(store)


async def test_a_postgres_schema_of_the_previous_version_is_migrated(postgres_dsn: str) -> None:
    async with postgres_from(postgres_dsn, PG_STEP, *OLD_ROWS) as store:
        await _only_the_runner_is_a_suspect(store)
