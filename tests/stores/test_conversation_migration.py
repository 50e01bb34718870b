"""The conversations migration (issue #34) upgrades a store of the previous version in place,
both backends: tasks in rooms taken before it have no turns, and go on to run and deliver;
messages after it start their room's conversation."""

from __future__ import annotations

import secrets
import sqlite3
from pathlib import Path

import psycopg

from tether.bridge import PostgresStore, SqliteStore, Task
from tether.bridge.custody import Store
from tether.bridge.stores.postgres import _schema as pg_schema
from tether.bridge.stores.sqlite._schema import MIGRATIONS, _statements

SQLITE_STEP = next(i for i, m in enumerate(MIGRATIONS) if "CREATE TABLE conversations" in m)
PG_STEP = next(
    i for i, m in enumerate(pg_schema.MIGRATIONS) if "CREATE TABLE {s}.conversations" in m
)
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


async def test_a_sqlite_file_of_the_previous_version_is_migrated(tmp_path: Path) -> None:
    db = tmp_path / "custody.db"
    conn = sqlite3.connect(db, isolation_level=None)
    for version in range(SQLITE_STEP):
        for statement in _statements(MIGRATIONS[version]):
            conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {SQLITE_STEP}")
    conn.execute(
        "INSERT INTO tasks (id, body, room, priority, headers, state, attempt, created_at, "
        "updated_at, room_policy) VALUES ('old', 'b', 'r', 1, '{}', 'pending', 1, 1, 1, 'serial')"
    )
    conn.close()
    store = await SqliteStore.open(db)
    try:
        await _runs_on(store)
    finally:
        await store.aclose()


async def test_a_postgres_schema_of_the_previous_version_is_migrated(postgres_dsn: str) -> None:
    schema = f"s_{secrets.token_hex(5)}"
    s = f'"{schema}"'
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {s}")
        conn.execute(
            f"CREATE TABLE {s}.schema_version (version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        last = PG_STEP
        for version in range(last):
            conn.execute(pg_schema.MIGRATIONS[version].format(s=s).encode())
            conn.execute(f"INSERT INTO {s}.schema_version (version) VALUES (%s)", (version + 1,))
        conn.execute(
            f"INSERT INTO {s}.tasks (id, body, room, priority, headers, state, attempt, "
            "created_at, updated_at, room_policy) "
            "VALUES ('old', 'b', 'r', 1, '{}', 'pending', 1, 1, 1, 'serial')"
        )
    store = await PostgresStore.open(postgres_dsn, schema=schema)
    try:
        await _runs_on(store)
    finally:
        await store.aclose()
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {s} CASCADE")
