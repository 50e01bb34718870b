"""The asks migration (issue #36) upgrades a store of the previous version in place, both
backends: a room's message taken before it (its turn written by the old trigger) runs, asks,
takes the room's next message as its answer, and its reply sits after the answer."""

from __future__ import annotations

import secrets
import sqlite3
from pathlib import Path

import psycopg

from tether.bridge import PostgresStore, SqliteStore, Task
from tether.bridge.custody import Store
from tether.bridge.stores.postgres import _schema as pg_schema
from tether.bridge.stores.sqlite._schema import MIGRATIONS, _statements, _with_cookie

SQLITE_STEP = next(i for i, m in enumerate(MIGRATIONS) if "CREATE TABLE asks" in m)
PG_STEP = next(i for i, m in enumerate(pg_schema.MIGRATIONS) if "CREATE TABLE {s}.asks" in m)
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
    db = tmp_path / "custody.db"
    conn = sqlite3.connect(db, isolation_level=None)
    for version in range(SQLITE_STEP):
        for statement in _statements(MIGRATIONS[version]):
            conn.execute(_with_cookie(conn, statement))
    conn.execute(f"PRAGMA user_version = {SQLITE_STEP}")
    conn.execute(OLD_TASK.format(s=""))
    conn.close()
    store = await SqliteStore.open(db)
    try:
        await _asks_on(store)
    finally:
        await store.aclose()
    check = sqlite3.connect(db)
    try:
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        check.close()


async def test_a_postgres_schema_of_the_previous_version_is_migrated(postgres_dsn: str) -> None:
    schema = f"s_{secrets.token_hex(5)}"
    s = f'"{schema}"'
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {s}")
        conn.execute(
            f"CREATE TABLE {s}.schema_version (version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version in range(PG_STEP):
            conn.execute(pg_schema.MIGRATIONS[version].format(s=s).encode())
            conn.execute(f"INSERT INTO {s}.schema_version (version) VALUES (%s)", (version + 1,))
        conn.execute(OLD_TASK.format(s=f"{s}.").encode())
    store = await PostgresStore.open(postgres_dsn, schema=schema)
    try:
        await _asks_on(store)
    finally:
        await store.aclose()
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {s} CASCADE")
