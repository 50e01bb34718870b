"""A result's turn costs the same whatever its room holds after it (issue #56, item 5).

The trigger that writes a result's assistant turn under its message's user turn found that
turn by walking the room's turns back from the newest: every message queued after it in the
room, so a drain or a wake-up of many runs paid more per message the deeper the backlog. It is
found by task now, on both backends. Counted in SQLite's virtual machine steps (no busy
machine changes them); and a store of the version before gets the new trigger as it upgrades.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import psycopg

from support.migrations import postgres_from, postgres_step, sqlite_from, sqlite_step
from support.vm_steps import vm_steps
from tether.bridge import PostgresStore, SqliteStore, Task
from tether.bridge.custody import Claim, Store


async def _room_with_backlog(path: Path, behind: int) -> tuple[SqliteStore, Claim]:
    """A store whose room ``r`` holds the claimed message ``first`` and ``behind`` more
    queued after it."""
    store = await SqliteStore.open(path)
    await store.ingest_many([Task("first", "hello", room="r")], room_policy="concurrent")
    later = [Task(f"later{i}", "more", room="r") for i in range(behind)]
    await store.ingest_many(later, room_policy="concurrent")
    claims = await store.claim_many("w1", 1, leaderless=True)
    assert [c.task.id for c in claims] == ["first"]
    return store, claims[0]


async def _steps_to_complete(store: SqliteStore, claim: Claim) -> int:
    async with vm_steps(store.db.writer, every=10) as steps:
        await store.complete(claim, "hi there")
    return steps[0]


async def test_completing_a_message_walks_none_of_the_messages_queued_after_it(
    tmp_path: Path,
) -> None:
    shallow, shallow_claim = await _room_with_backlog(tmp_path / "shallow.db", 10)
    deep, deep_claim = await _room_with_backlog(tmp_path / "deep.db", 3000)
    try:
        few = await _steps_to_complete(shallow, shallow_claim)
        many = await _steps_to_complete(deep, deep_claim)
        # the same work (a few index seeks deeper in a bigger file), not 300 times the turns
        assert many <= few + 10, (few, many)
        for store in (shallow, deep):
            history = (await store.conversation("later0")).history
            assert [(t.role, t.text, t.task_id, t.outcome) for t in history] == [
                ("user", "hello", "first", "received"),
                ("assistant", "hi there", "first", "result"),
            ]
    finally:
        await shallow.aclose()
        await deep.aclose()


async def _turns_read_to_complete(dsn: str, behind: int) -> int:
    """The rows of ``turns`` PostgreSQL read (scanned or fetched by index) as ``first``, a
    message with ``behind`` more queued after it in its room (statistics taken), became a
    result: counted in the updating transaction itself (``pg_stat_xact_user_tables``), so
    nothing else is counted."""
    schema = f"s_{secrets.token_hex(5)}"
    store = await PostgresStore.open(dsn, schema=schema)
    try:
        await store.ingest_many([Task("first", "hello", room="r")], room_policy="concurrent")
        later = [Task(f"later{i}", "more", room="r") for i in range(behind)]
        await store.ingest_many(later, room_policy="concurrent")
    finally:
        await store.aclose()
    s = f'"{schema}"'
    read = (
        "SELECT coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0) "
        "FROM pg_stat_xact_user_tables WHERE schemaname = %(schema)s AND relname = 'turns'"
    )
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"ANALYZE {s}.turns")
            with conn.transaction():
                row = conn.execute(read, {"schema": schema}).fetchone()
                assert row is not None
                conn.execute(
                    f"UPDATE {s}.tasks SET state = 'result', owner = 'w1', "
                    "result = 'hi there', updated_at = 2 WHERE id = 'first'"
                )
                after = conn.execute(read, {"schema": schema}).fetchone()
                assert after is not None
                said = conn.execute(  # the reply is the task's own row (issue #49)
                    f"SELECT result FROM {s}.tasks WHERE id = 'first' AND turn_seq IS NOT NULL"
                ).fetchall()
                assert [bytes(text) for (text,) in said] == [b"hi there"]
                return int(after[0]) - int(row[0])
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {s} CASCADE")


async def test_postgres_completes_a_message_reading_none_of_the_turns_after_it(
    postgres_dsn: str,
) -> None:
    few = await _turns_read_to_complete(postgres_dsn, 10)
    many = await _turns_read_to_complete(postgres_dsn, 2000)
    assert many <= few + 5, (few, many)


SQLITE_STEP = sqlite_step("FROM turns INDEXED BY turns_task")
PG_STEP = postgres_step("WITH mine AS MATERIALIZED")
"""The migration's place in each list (found by its content: other issues append theirs)."""
OLD_ROWS = (
    "INSERT INTO {s}tasks (id, body, room, priority, headers, state, attempt, owner, run_no, "
    "lease_until, created_at, updated_at, room_policy) VALUES "
    "('old', 'hello', 'r', 1, '{{}}', 'claimed', 1, 'w1', 1, 1e12, 1, 1, 'concurrent')",
)
"""A message claimed under the version before (its insert wrote its user turn then)."""


async def _the_reply_turn_is_written(store: Store) -> None:
    record = await store.get("old")
    assert record is not None
    claim = Claim(record.task, "w1", attempt=1, lease_until=1e12, run=1)
    await store.complete(claim, "hi there")
    await store.ingest_many([Task("new", "more", room="r")], room_policy="concurrent")
    history = (await store.conversation("new")).history
    assert [(t.role, t.text, t.outcome) for t in history] == [
        ("user", "hello", "received"),
        ("assistant", "hi there", "result"),
    ]


async def test_a_sqlite_file_of_the_previous_version_is_migrated(tmp_path: Path) -> None:
    async with sqlite_from(tmp_path / "custody.db", SQLITE_STEP, *OLD_ROWS) as store:
        await _the_reply_turn_is_written(store)


async def test_a_postgres_schema_of_the_previous_version_is_migrated(postgres_dsn: str) -> None:
    async with postgres_from(postgres_dsn, PG_STEP, *OLD_ROWS) as store:
        await _the_reply_turn_is_written(store)
