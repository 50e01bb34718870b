"""The fair-shares migration (issue #38) upgrades a store of the previous version in place, both
backends: the tasks queued before it keep their order (no tenant, turn 0, ahead of tenants'
turns), and tenants' new tasks take turns behind them."""

from __future__ import annotations

import secrets
import sqlite3
from pathlib import Path

import psycopg

from tether.bridge import PostgresStore, SqliteStore, Task
from tether.bridge.custody import Store
from tether.bridge.stores.postgres import _schema as pg_schema
from tether.bridge.stores.sqlite._schema import MIGRATIONS, _statements, _with_cookie

SQLITE_STEP = next(i for i, m in enumerate(MIGRATIONS) if "CREATE TABLE tenants" in m)
PG_STEP = next(i for i, m in enumerate(pg_schema.MIGRATIONS) if "CREATE TABLE {s}.tenants" in m)
"""The migration's place in each list (found by its content)."""
OLD_TASKS = [
    "INSERT INTO {s}tasks (id, body, priority, headers, state, attempt, created_at, "
    f"updated_at) VALUES ('old{i}', 'hi', 1, '{{{{}}}}', 'pending', 1, 1, 1)"
    for i in range(3)
]


async def _queues_on(store: Store) -> None:
    for i in range(3):
        await store.ingest(Task(f"a{i}", "hi", headers={"tenant": "a"}))
    await store.ingest(Task("b0", "hi", headers={"tenant": "b"}))
    claims = await store.claim_many("w1", 10, leaderless=True)
    assert [c.task.id for c in claims] == ["old0", "old1", "old2", "a0", "a1", "b0", "a2"]
    assert [(v.tenant, v.pending) for v in await store.tenant_views()] == []


async def test_a_sqlite_file_of_the_previous_version_is_migrated(tmp_path: Path) -> None:
    db = tmp_path / "custody.db"
    conn = sqlite3.connect(db, isolation_level=None)
    for version in range(SQLITE_STEP):
        for statement in _statements(MIGRATIONS[version]):
            conn.execute(_with_cookie(conn, statement))
    conn.execute(f"PRAGMA user_version = {SQLITE_STEP}")
    for insert in OLD_TASKS:
        conn.execute(insert.format(s=""))
    conn.close()
    store = await SqliteStore.open(db)
    try:
        await _queues_on(store)
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
        for insert in OLD_TASKS:
            conn.execute(insert.format(s=f"{s}.").encode())
    store = await PostgresStore.open(postgres_dsn, schema=schema)
    try:
        await _queues_on(store)
    finally:
        await store.aclose()
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {s} CASCADE")
