"""``open_store`` and the ``--store`` options without a PostgreSQL server: selection by the
setting's form, and the refusals that must happen before any connection is tried."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tether.bridge import (
    ConfigError,
    SqliteStore,
    StoreConfigError,
    Task,
    load_config,
    open_store,
    redact_dsn,
)


async def test_the_bridge_settings_name_the_store_and_its_password_file(
    tmp_path: Path,
) -> None:
    config = load_config(
        flags={"store": str(tmp_path / "c.db")},
        environ={"TETHER_STORE_PASSWORD_FILE": "/etc/pw", "TETHER_STORE_SCHEMA": "chat_1"},
    )
    assert (config.store_password_file, config.store_schema) == (Path("/etc/pw"), "chat_1")
    assert load_config(environ={}).store_schema == "tether"
    with pytest.raises(ConfigError, match="store_schema"):
        load_config(flags={"store_schema": "Bad-Name"}, environ={})
    assert load_config(flags={"store": "host=db dbname=chat"}, environ={}).store_is_url
    store = await open_store(config.store, lease_s=5.0)
    try:
        assert isinstance(store, SqliteStore)
        assert store.lease_s == 5.0
        assert await store.ingest(Task("t1", "hi"))
    finally:
        await store.aclose()


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:hunter2-secret@db.example:5432/chat",
        "postgres://u:hunter2-secret@db.example/chat",
        "postgresql://u@db.example/chat?password=hunter2-secret",
        "host=db.example dbname=chat password=hunter2-secret",
    ],
)
async def test_a_password_in_the_url_is_refused_without_showing_it(url: str) -> None:
    with pytest.raises(StoreConfigError, match="carries a password") as info:
        await open_store(url)
    assert "hunter2" not in str(info.value)
    assert "db.example" in str(info.value)


@pytest.mark.parametrize(
    "url",
    [
        "Postgresql://u:hunter2-secret@db.example/chat",
        "POSTGRES://u:hunter2-secret@db.example/chat",
        "postgresql://u:hunter2%zz-secret@db.example/chat",
        "postgresql://u:hunter2-secret@[::1/chat",
        "host=db.example dbname=chat password='hunter2-secret",
    ],
)
async def test_a_postgres_dsn_that_cannot_be_parsed_is_refused_without_showing_it(
    url: str,
) -> None:
    """Issue #48: such a DSN slipped past the password check (which parses it) and libpq's
    error printed it whole, password and all."""
    with pytest.raises(StoreConfigError, match="cannot be parsed") as info:
        await open_store(url)
    assert "hunter2" not in str(info.value)


async def test_an_error_from_the_postgres_driver_never_shows_the_dsn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever the driver raises while opening, its text passes through ``redact_dsn``."""
    from tether.bridge.stores._open import StoreOpenError
    from tether.bridge.stores.postgres._store import PostgresStore

    async def fails(dsn: str, **options: object) -> None:
        raise RuntimeError(f'connection to "{dsn}" failed: no such host')

    monkeypatch.setattr(PostgresStore, "open", fails)
    with pytest.raises(StoreOpenError, match="no such host") as info:
        await open_store("postgresql://u@db.example/chat?sslpassword=hunter2-secret")
    assert "hunter2" not in str(info.value)
    assert "postgresql://u@db.example/chat" in str(info.value)


async def test_settings_for_the_other_backend_are_refused(tmp_path: Path) -> None:
    pwfile = tmp_path / "pw"
    pwfile.write_text("x\n")
    pwfile.chmod(0o600)
    with pytest.raises(StoreConfigError, match="password-file is for a postgresql"):
        await open_store(tmp_path / "c.db", password_file=pwfile)
    with pytest.raises(StoreConfigError, match="store-schema is for a postgresql"):
        await open_store(str(tmp_path / "c.db"), schema="other")
    with pytest.raises(StoreConfigError, match="empty"):
        await open_store("")


@pytest.mark.parametrize(
    ("content", "mode", "error"),
    [
        ("secret\n", 0o640, "chmod 600"),
        ("", 0o600, "one non-empty line"),
        ("two\nlines\n", 0o600, "one non-empty line"),
    ],
)
async def test_bad_password_files_are_refused_before_connecting(
    tmp_path: Path, content: str, mode: int, error: str
) -> None:
    pwfile = tmp_path / "pw"
    pwfile.write_text(content)
    pwfile.chmod(mode)
    # port 1 on loopback: nothing listens there, so reaching a connect would fail differently
    with pytest.raises(StoreConfigError, match=error):
        await open_store("postgresql://u@127.0.0.1:1/db", password_file=pwfile)
    with pytest.raises(StoreConfigError, match="does not exist"):
        await open_store("postgresql://u@127.0.0.1:1/db", password_file=tmp_path / "missing")


def test_libpq_strings_are_recognised_and_paths_are_not() -> None:
    from tether.bridge.stores.postgres._dsn import is_postgres_dsn

    for dsn in ("postgresql://h/db", "POSTGRES://h", "host=h dbname=d", " dbname=d", "user=u"):
        assert is_postgres_dsn(dsn), dsn
    for path in ("custody.db", "data/host=1.db", "./postgresql:/x", "postgresql.db", "a b=c"):
        assert not is_postgres_dsn(path), path


def test_redaction_keeps_where_and_drops_secrets() -> None:
    assert redact_dsn("postgresql://u:pw@h:5/db?sslmode=require") == "postgresql://u@h:5/db"
    assert redact_dsn("host=10.0.0.1 port=6 user=x password=pw dbname=d") == (
        "postgresql://x@10.0.0.1:6/d"
    )
    assert redact_dsn("postgresql://u:pw@[::1]:5/db") == "postgresql://u@[::1]:5/db"
    assert "pw" not in redact_dsn("not a dsn password=pw")


async def test_must_exist_refuses_to_create_a_sqlite_store(tmp_path: Path) -> None:
    with pytest.raises(StoreConfigError, match="no custody store at"):
        await open_store(tmp_path / "missing.db", must_exist=True)
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(StoreConfigError, match="is a directory"):
        await open_store(tmp_path)
    store = await open_store(tmp_path / "c.db", synchronous="NORMAL")
    await store.aclose()
    store = await open_store(tmp_path / "c.db", must_exist=True)
    await store.aclose()


async def _a_store(path: Path) -> None:
    store = await SqliteStore.open(path)
    try:
        await store.ingest(Task("t1", "hi"))
    finally:
        await store.aclose()


@contextlib.asynccontextmanager
async def _store_made_read_only(directory: Path) -> AsyncIterator[str]:
    """A store in ``directory``, which then turns read-only the way this machine allows: a
    tmpfs remounted read-only (root: chmod would not stop root), or the write bit taken away
    (anyone else). Yields what the error must say."""
    if os.geteuid() != 0:
        await _a_store(directory / "custody.db")
        await trio.Path(directory).chmod(0o500)
        try:
            yield "is not writable"
        finally:
            await trio.Path(directory).chmod(0o700)
        return
    mounted = await trio.run_process(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(directory)],
        capture_stderr=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"root without mount: cannot make a read-only directory ({mounted.stderr!r})")
    try:
        await _a_store(directory / "custody.db")
        await trio.run_process(["mount", "-o", "remount,ro", str(directory)])
        yield "read-only filesystem"
    finally:
        with trio.CancelScope(shield=True):
            await trio.run_process(["umount", "-l", str(directory)])


async def test_a_store_on_a_read_only_filesystem_says_so(tmp_path: Path) -> None:
    """Issue 21.4: an existing store on a read-only filesystem failed with "unable to open
    database file" and no hint why."""
    directory = tmp_path / "ro"
    directory.mkdir()
    async with _store_made_read_only(directory) as expected:
        with pytest.raises(Exception) as caught:  # noqa: PT011 - the message is the point
            await open_store(str(directory / "custody.db"), must_exist=True)
    message = str(caught.value)
    assert "unable to open database file" in message
    assert str(directory) in message
    assert expected in message
