"""The fair-shares migration (issue #38) upgrades a store of the previous version in place, both
backends: the tasks queued before it keep their order (no tenant, turn 0, ahead of tenants'
turns), and tenants' new tasks take turns behind them."""

from __future__ import annotations

from pathlib import Path

from support.migrations import (
    old_pending_rows,
    postgres_from,
    postgres_step,
    sqlite_from,
    sqlite_step,
)
from tether.bridge import Task
from tether.bridge.custody import Store

SQLITE_STEP = sqlite_step("CREATE TABLE tenants")
PG_STEP = postgres_step("CREATE TABLE {s}.tenants")
"""The migration's place in each list (found by its content)."""
OLD_TASKS = old_pending_rows(3)


async def _queues_on(store: Store) -> None:
    for i in range(3):
        await store.ingest(Task(f"a{i}", "hi", headers={"tenant": "a"}))
    await store.ingest(Task("b0", "hi", headers={"tenant": "b"}))
    claims = await store.claim_many("w1", 10, leaderless=True)
    assert [c.task.id for c in claims] == ["old0", "old1", "old2", "a0", "a1", "b0", "a2"]
    assert [(v.tenant, v.pending) for v in await store.tenant_views()] == []


async def test_a_sqlite_file_of_the_previous_version_is_migrated(tmp_path: Path) -> None:
    async with sqlite_from(tmp_path / "custody.db", SQLITE_STEP, *OLD_TASKS) as store:
        await _queues_on(store)


async def test_a_postgres_schema_of_the_previous_version_is_migrated(postgres_dsn: str) -> None:
    async with postgres_from(postgres_dsn, PG_STEP, *OLD_TASKS) as store:
        await _queues_on(store)
