"""``open_store(read_only=True)``: a store opened to be inspected changes nothing (issue #32,
item 1). It refuses what is not a tether store of this tether's schema, rather than create or
migrate it, and every write through it fails; ``must_exist`` (the verbs that write) refuses
what is not a tether store but migrates an older one, as before. SQLite and PostgreSQL."""

from __future__ import annotations

import secrets
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio
from psycopg.conninfo import conninfo_to_dict

from tether._cli import main
from tether.bridge import CustodyState, PostgresStore, SqliteStore, Task
from tether.bridge.stores._open import StoreConfigError, open_store
from tether.bridge.stores.postgres._schema import MIGRATIONS, SCHEMA_VERSION


async def test_a_read_only_sqlite_store_refuses_every_write(tmp_path: Path) -> None:
    path = tmp_path / "custody.db"
    async with await SqliteStore.open(path) as writable:
        await writable.ingest(Task("t1", "hello"))
    before = await trio.Path(path).read_bytes()
    store = await open_store(path, read_only=True)
    assert isinstance(store, SqliteStore)
    try:
        assert (await store.counts())[CustodyState.PENDING] == 1
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            await store.ingest(Task("t2", "no"))
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            await store.dead_letter("t1", "no")
    finally:
        await store.aclose()
    assert await trio.Path(path).read_bytes() == before
    # no -wal or -shm from the reader; the -news of processes that wrote is left as it was
    names = sorted(p.name for p in await trio.Path(tmp_path).iterdir())
    assert names == ["custody.db", "custody.db-news"]


async def test_a_read_through_a_link_sees_what_a_live_writer_committed(tmp_path: Path) -> None:
    """SQLite keeps ``-wal`` beside the file a link leads to: a reader that looked for it beside
    the link would open the file as if no writer ran and miss every commit still in the WAL."""
    (tmp_path / "data").mkdir()
    path = tmp_path / "data" / "custody.db"
    link = tmp_path / "link.db"
    link.symlink_to(path)
    async with await SqliteStore.open(path) as writer:  # open: its commits stay in the WAL
        await writer.ingest(Task("t1", "hello"))
        assert (path.parent / "custody.db-wal").exists()
        store = await open_store(link, read_only=True)
        try:
            assert (await store.counts())[CustodyState.PENDING] == 1
        finally:
            await store.aclose()


def _sql(dsn: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def _url(dsn: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """``dsn`` as a user gives it: no password in the URL, PGPASSWORD in the environment."""
    parts = conninfo_to_dict(dsn)
    monkeypatch.setenv("PGPASSWORD", str(parts.get("password", "")))
    return f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"


def _older_schema(dsn: str, version: int) -> str:
    schema = f"old_{secrets.token_hex(4)}"
    s = f'"{schema}"'
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(f"CREATE SCHEMA {s}")
        conn.execute(
            f"CREATE TABLE {s}.schema_version ("
            "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for n in range(version):
            conn.execute(MIGRATIONS[n].format(s=s).encode())
            conn.execute(f"INSERT INTO {s}.schema_version (version) VALUES (%s)", (n + 1,))
    return schema


def _tables(dsn: str, schema: str) -> list[str]:
    rows = _sql(dsn, "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (schema,))
    return [name for (name,) in rows]


def _version(dsn: str, schema: str) -> int:
    return int(_sql(dsn, f'SELECT max(version) FROM "{schema}".schema_version')[0][0])


async def test_a_read_only_postgres_open_refuses_an_older_schema_and_a_foreign_one(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _url(postgres_dsn, monkeypatch)
    older = _older_schema(postgres_dsn, 3)
    tables = _tables(postgres_dsn, older)
    with pytest.raises(StoreConfigError) as caught:
        await open_store(url, schema=older, read_only=True)
    assert str(caught.value) == (
        f"schema '{older}' holds a tether custody store of schema version 3; this tether reads "
        f"version {SCHEMA_VERSION} and inspects without migrating: start a bridge on it once "
        "to upgrade it"
    )
    assert _version(postgres_dsn, older) == 3
    assert _tables(postgres_dsn, older) == tables

    foreign = f"app_{secrets.token_hex(4)}"
    _sql(postgres_dsn, f'CREATE SCHEMA "{foreign}"')
    _sql(postgres_dsn, f'CREATE TABLE "{foreign}".t (x int)')
    for read_only in (True, False):
        with pytest.raises(StoreConfigError, match=f"no tether store in schema '{foreign}'"):
            await open_store(url, schema=foreign, must_exist=True, read_only=read_only)
    assert _tables(postgres_dsn, foreign) == ["t"]

    # a verb that writes migrates a tether store of an older schema, as it always did
    store = await open_store(url, schema=older, must_exist=True)
    await store.aclose()
    assert _version(postgres_dsn, older) == SCHEMA_VERSION


async def test_a_read_only_postgres_store_reads_and_the_server_refuses_its_writes(
    postgres_dsn: str,
) -> None:
    schema = f"ro_{secrets.token_hex(4)}"
    async with await PostgresStore.open(postgres_dsn, schema=schema) as store:
        await store.ingest(Task("t1", "hello"))
    async with await PostgresStore.open(postgres_dsn, schema=schema, read_only=True) as store:
        assert (await store.counts())[CustodyState.PENDING] == 1
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            await store.ingest(Task("t2", "no"))
    assert _sql(postgres_dsn, f'SELECT id FROM "{schema}".tasks') == [("t1",)]


def test_store_status_on_an_older_postgres_schema_says_so_in_one_line(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _url(postgres_dsn, monkeypatch)
    older = _older_schema(postgres_dsn, 5)
    assert main(["store", "status", "--store", url, "--store-schema", older]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tether: error: schema '{older}' holds a tether custody store of ")
    assert err.count("\n") == 1
    assert _version(postgres_dsn, older) == 5


def test_read_only_verbs_work_on_a_dsn_that_must_find_the_primary(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``target_session_attrs=read-write`` (a multi-host DSN that must find the primary,
    issue #45) checks the session as it connects: a read-only verb's session is made
    read-only after that, not as a startup option the check would refuse."""
    schema = f"rw_{secrets.token_hex(4)}"

    async def fill() -> None:
        async with await PostgresStore.open(postgres_dsn, schema=schema) as store:
            await store.ingest(Task("t1", "hello"))

    trio.run(fill)
    url = _url(postgres_dsn, monkeypatch) + "?target_session_attrs=read-write"
    assert main(["store", "status", "--store", url, "--store-schema", schema]) == 0
    assert "pending" in capsys.readouterr().out
    assert (
        main(["store", "list", "--state", "pending", "--store", url, "--store-schema", schema]) == 0
    )
    assert "t1" in capsys.readouterr().out

    async def refused() -> None:
        async with await PostgresStore.open(url, schema=schema, read_only=True) as store:
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                await store.ingest(Task("t2", "no"))

    trio.run(refused)
