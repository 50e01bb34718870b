"""The conversations migration (issue #34) upgrades a store of the previous version in place,
both backends: tasks in rooms taken before it have no turns, and go on to run and deliver;
messages after it start their room's conversation."""

from __future__ import annotations

from pathlib import Path

from support.migrations import postgres_from, postgres_step, sqlite_from, sqlite_step
from tether.bridge import Task
from tether.bridge.custody import Store

SQLITE_STEP = sqlite_step("CREATE TABLE conversations")
PG_STEP = postgres_step("CREATE TABLE {s}.conversations")
"""The conversations migration's place in each list (found by its content: later issues
append theirs after it)."""


async def _runs_on(store: Store) -> None:
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    assert claim.task.id == "old"
    await store.complete(claim, "reply to old")
    await store.mark_delivered("old")
    await store.ingest(Task("new", "after the upgrade", room="r"))
    history = (await store.conversation("new")).history
    assert history == ()  # the old message was taken before turns were kept
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    assert await store.complete_with_state(claim, "ok", {"seen": 1}, 0) == 1
    view = await store.room("r")
    assert view is not None
    assert [t.text for t in view.turns] == ["after the upgrade", "ok"]


OLD_TASK = (
    "INSERT INTO {s}tasks (id, body, room, priority, headers, state, attempt, created_at, "
    "updated_at, room_policy) VALUES ('old', 'b', 'r', 1, '{{}}', 'pending', 1, 1, 1, 'serial')"
)


async def test_a_sqlite_file_of_the_previous_version_is_migrated(tmp_path: Path) -> None:
    async with sqlite_from(tmp_path / "custody.db", SQLITE_STEP, OLD_TASK) as store:
        await _runs_on(store)


async def test_a_postgres_schema_of_the_previous_version_is_migrated(postgres_dsn: str) -> None:
    async with postgres_from(postgres_dsn, PG_STEP, OLD_TASK) as store:
        await _runs_on(store)
