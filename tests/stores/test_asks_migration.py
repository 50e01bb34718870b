"""The asks migration (issue #36) upgrades a store of the previous version in place, both
backends: a room's message taken before it (its turn written by the old trigger) runs, asks,
takes the room's next message as its answer, and its reply sits after the answer."""

from __future__ import annotations

from pathlib import Path

from support.migrations import postgres_from, postgres_step, sqlite_from, sqlite_step
from tether.bridge import Task
from tether.bridge.custody import Store

SQLITE_STEP = sqlite_step("CREATE TABLE asks")
PG_STEP = postgres_step("CREATE TABLE {s}.asks")
"""The asks migration's place in each list (found by its content: other issues append
theirs beside it)."""
OLD_TASK = (
    "INSERT INTO {s}tasks (id, body, room, priority, headers, state, attempt, created_at, "
    "updated_at, room_policy) VALUES ('old', 'book it', 'r', 1, '{{}}', 'pending', 1, 1, 1, "
    "'serial')"
)


async def _asks_on(store: Store) -> None:
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    assert claim.task.id == "old"
    await store.ask(claim, "~ask:1", "confirm?", store.clock() + 60, "asked")
    await store.ingest(Task("a1", "yes", room="r"), room_policy="serial")
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    assert claim.task.id == "old"
    await store.complete(claim, "booked: yes")
    view = await store.room("r")
    assert view is not None
    assert [(t.text, t.outcome) for t in view.turns] == [
        ("book it", "received"),
        ("confirm?", "asked"),
        ("yes", "received"),
        ("booked: yes", "result"),
    ]


async def test_a_sqlite_file_of_the_previous_version_is_migrated(tmp_path: Path) -> None:
    async with sqlite_from(tmp_path / "custody.db", SQLITE_STEP, OLD_TASK) as store:
        await _asks_on(store)


async def test_a_postgres_schema_of_the_previous_version_is_migrated(postgres_dsn: str) -> None:
    async with postgres_from(postgres_dsn, PG_STEP, OLD_TASK) as store:
        await _asks_on(store)
