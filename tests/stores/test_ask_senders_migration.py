"""The ask senders migration (issue #48) upgrades a store of the previous version in place,
both backends: a question asked before it (no senders recorded) still takes the room's next
message as its answer, whoever sent it, as it would have before the upgrade."""

from __future__ import annotations

from pathlib import Path

from support.migrations import postgres_from, postgres_step, sqlite_from, sqlite_step
from tether.bridge import CustodyState, Task
from tether.bridge.custody import Store

SQLITE_STEP = sqlite_step("ALTER TABLE asks ADD COLUMN answer_from")
PG_STEP = postgres_step("ALTER TABLE {s}.asks ADD COLUMN answer_from")
"""The migration's place in each list (found by its content: other issues append theirs)."""
OLD_ROWS = (
    "INSERT INTO {s}tasks (id, body, room, priority, headers, state, attempt, created_at, "
    "updated_at, room_policy, not_before) VALUES ('old', 'book it', 'r', 1, "
    """'{{"sender": "user"}}', 'waiting', 1, 1, 1, 'serial', 4e9)""",
    "INSERT INTO {s}asks (task_id, name, seq, room, question, status, deadline, at) "
    "VALUES ('old', '~ask:1', 1, 'r', 'confirm?', 'open', 4e9, 1)",
)


async def _answered_by_anyone(store: Store) -> None:
    [before] = await store.asks("old")
    assert (before.status, before.answer_from) == ("open", None)
    await store.ingest(
        Task("a1", "yes", room="r", headers={"sender": "mallory"}), room_policy="serial"
    )
    [after] = await store.asks("old")
    assert (after.status, after.answer, after.answer_id) == ("answered", "yes", "a1")
    assert await store.state("old") is CustodyState.PENDING


async def test_a_sqlite_file_of_the_previous_version_is_migrated(tmp_path: Path) -> None:
    async with sqlite_from(tmp_path / "custody.db", SQLITE_STEP, *OLD_ROWS) as store:
        await _answered_by_anyone(store)


async def test_a_postgres_schema_of_the_previous_version_is_migrated(postgres_dsn: str) -> None:
    async with postgres_from(postgres_dsn, PG_STEP, *OLD_ROWS) as store:
        await _answered_by_anyone(store)
