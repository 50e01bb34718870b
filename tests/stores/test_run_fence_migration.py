"""The run-number migration (issue #37, the re-drive fence) on files and schemas written before it.

A store written before the fence had a run number migrates with every task's ``run_no`` at 0: a
lease held then is settled (and fenced) on that 0, and the next claim of any task is run 1.
Found by its content, not its index, so the lead may renumber it at merge.
"""

from __future__ import annotations

import secrets
import sqlite3
from pathlib import Path

import psycopg

from support.clock import FakeClock
from tether.bridge import CustodyState, PostgresStore, SqliteStore
from tether.bridge.stores.postgres import _schema as pg_schema
from tether.bridge.stores.sqlite._schema import MIGRATIONS, _statements

S = CustodyState
_ROWS = (
    "INSERT INTO {t} (id, body, priority, headers, state, attempt, created_at, updated_at) "
    "VALUES ('p', {b}, 1, '{{}}', 'pending', 1, 1.0, 1.0), "
    "('c', {b}, 1, '{{}}', 'pending', 1, 1.0, 1.0)"
)
_CLAIM = "UPDATE {t} SET state = 'claimed', owner = 'w-old', lease_until = 5.0 WHERE id = 'c'"


def _before(migrations: tuple[str, ...]) -> int:
    return next(i for i, m in enumerate(migrations) if "ADD COLUMN run_no" in m)


async def _check(store: SqliteStore | PostgresStore, clock: FakeClock) -> None:
    held = await store.get("c")
    assert held is not None
    assert (held.state, held.owner, held.run) == (S.CLAIMED, "w-old", 0)
    [expiry] = await store.expire_leases()  # fenced on run 0: it settles
    assert expiry.id == "c"
    assert (await store.state("c")) is S.PENDING
    claims = [await store.claim("w-new", leaderless=True) for _ in range(2)]
    assert sorted((c.task.id, c.run) for c in claims if c is not None) == [("c", 1), ("p", 1)]


async def test_a_sqlite_file_from_before_the_run_number_migrates(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    version = _before(MIGRATIONS)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        for step in MIGRATIONS[:version]:
            for statement in _statements(step):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {version}")
        conn.execute(_ROWS.format(t="tasks", b="'x'"))
        conn.execute(_CLAIM.format(t="tasks"))
    finally:
        conn.close()
    clock = FakeClock(now=100.0)
    async with await SqliteStore.open(db, clock=clock) as store:
        await _check(store, clock)


async def test_a_postgres_schema_from_before_the_run_number_migrates(postgres_dsn: str) -> None:
    schema = f"s_{secrets.token_hex(5)}"
    s = f'"{schema}"'
    version = _before(pg_schema.MIGRATIONS)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {s}".encode())
        conn.execute(
            f"CREATE TABLE {s}.schema_version (version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now())".encode()
        )
        for n, step in enumerate(pg_schema.MIGRATIONS[:version]):
            conn.execute(step.format(s=s).encode())
            conn.execute(f"INSERT INTO {s}.schema_version (version) VALUES ({n + 1})".encode())
        conn.execute(_ROWS.format(t=f"{s}.tasks", b="'x'::bytea").encode())
        conn.execute(_CLAIM.format(t=f"{s}.tasks").encode())
    clock = FakeClock(now=100.0)
    store = await PostgresStore.open(postgres_dsn, schema=schema, clock=clock)
    try:
        await _check(store, clock)
    finally:
        await store.aclose()
