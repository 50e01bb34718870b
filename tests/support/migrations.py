"""Stores an older tether wrote: a SQLite file or a PostgreSQL schema brought to one step of
the migrations and given some rows, for the tests that check the next step upgrades it in place
(each finds its migration's step by its content, so steps may be renumbered)."""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import psycopg

from tether.bridge import PostgresStore, SqliteStore
from tether.bridge.stores.postgres import _schema as pg_schema
from tether.bridge.stores.sqlite._schema import MIGRATIONS, _statements, _with_cookie


def old_pending_rows(count: int) -> list[str]:
    """Rows for ``sqlite_from``/``postgres_from``: ``count`` pending tasks ``old0``, ``old1``...
    of no room, written as a store of an older version held them."""
    return [
        "INSERT INTO {s}tasks (id, body, priority, headers, state, attempt, created_at, "
        f"updated_at) VALUES ('old{i}', 'hi', 1, '{{{{}}}}', 'pending', 1, 1, 1)"
        for i in range(count)
    ]


def sqlite_step(marker: str) -> int:
    """The step of the SQLite migration whose text holds ``marker``."""
    return next(i for i, m in enumerate(MIGRATIONS) if marker in m)


def postgres_step(marker: str) -> int:
    """The step of the PostgreSQL migration whose text holds ``marker``."""
    return next(i for i, m in enumerate(pg_schema.MIGRATIONS) if marker in m)


@asynccontextmanager
async def sqlite_from(db: Path, step: int, *rows: str) -> AsyncIterator[SqliteStore]:
    """The store opened (so migrated) on a file made at schema version ``step`` holding
    ``rows`` (statements; ``{s}`` before a table's name is the schema, empty here); the file
    must pass SQLite's integrity check after, at the latest version."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        for version in range(step):
            for statement in _statements(MIGRATIONS[version]):
                conn.execute(_with_cookie(conn, statement))
        conn.execute(f"PRAGMA user_version = {step}")
        for row in rows:
            conn.execute(row.format(s=""))
    finally:
        conn.close()
    store = await SqliteStore.open(db)
    try:
        yield store
    finally:
        await store.aclose()
    assert_sqlite_intact(db, version=len(MIGRATIONS))


def assert_sqlite_intact(db: Path, *, version: int | None = None) -> None:
    """The file at ``db`` passes SQLite's own integrity check (after a migration, a kill), at
    schema ``version`` if given."""
    check = sqlite3.connect(db)
    try:
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        if version is not None:
            assert check.execute("PRAGMA user_version").fetchone() == (version,)
    finally:
        check.close()


def postgres_schema_at(dsn: str, step: int, *rows: str) -> str:
    """A new schema made at version ``step`` holding ``rows`` (``{s}`` is the quoted schema
    and a dot), not yet opened by a store: its name (the caller drops it)."""
    schema = f"s_{secrets.token_hex(5)}"
    s = f'"{schema}"'
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {s}")
        conn.execute(
            f"CREATE TABLE {s}.schema_version (version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version in range(step):
            conn.execute(pg_schema.MIGRATIONS[version].format(s=s).encode())
            conn.execute(f"INSERT INTO {s}.schema_version (version) VALUES (%s)", (version + 1,))
        for row in rows:
            conn.execute(row.format(s=f"{s}.").encode())
    return schema


@asynccontextmanager
async def postgres_from(dsn: str, step: int, *rows: str) -> AsyncIterator[PostgresStore]:
    """The store opened (so migrated) on a new schema made at version ``step`` holding
    ``rows`` (``{s}`` is the quoted schema and a dot); the schema is dropped after."""
    schema = postgres_schema_at(dsn, step, *rows)
    s = f'"{schema}"'
    try:
        store = await PostgresStore.open(dsn, schema=schema)
        try:
            yield store
        finally:
            await store.aclose()
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {s} CASCADE")
