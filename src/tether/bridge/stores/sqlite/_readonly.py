"""A SQLite store opened only to be read (``tether store status|list|show``), and the check
that a file is a tether store before anything opens it to write.

A verb that inspects creates, migrates and chmods nothing: it connects with ``mode=ro``, and
with ``immutable=1`` too when no ``-wal`` lies beside a WAL file (no process has it open, the
file holds every commit), so not even the ``-wal``/``-shm`` pair appears and a read-only
directory works. A file that is not a tether store of this tether's schema is refused in one
line that names what it is.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from ...._plumbing._sqlite_temp import keep_temp_in_memory
from ...._plumbing._sqlite_writer import SqliteWriter
from ...custody._crashes import DEFAULT_MAX_CRASHES_ALONE
from ...custody._rules import MAX_BODY_BYTES
from ._db import SqliteDb
from ._news import StoreNews, news_path
from ._schema import SCHEMA_VERSION, SchemaTooNew
from ._store import SqliteStore

HEADER: Final = b"SQLite format 3\x00"
WAL_MODE: Final = 2
"""Byte 18 of the header: 2 for a database in WAL mode (1: rollback journal)."""
SHOWN_TABLES: Final = 8


class NotAStore(ValueError):
    """The file is not a tether custody store (or, for a reader, not of this schema)."""


def _uri(path: Path) -> str:
    with path.open("rb") as file:
        header = file.read(100)
    if not header:
        raise NotAStore(f"{path} is an empty file, not a tether custody store")
    if not header.startswith(HEADER):
        raise NotAStore(f"{path} is not a SQLite database")
    wal = len(header) > 18 and header[18] == WAL_MODE
    real = path.resolve()  # SQLite keeps -wal and -shm beside the file links lead to
    idle = wal and not any(real.with_name(real.name + end).exists() for end in ("-wal", "-shm"))
    return f"{real.as_uri()}?mode=ro" + ("&immutable=1" if idle else "")


def _version(conn: sqlite3.Connection, path: Path, *, older: bool) -> int:
    """The tether schema version of ``conn``'s database, or ``NotAStore`` saying what it is."""
    try:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite^_%' ESCAPE '^' ORDER BY name"
            )
        ]
    except sqlite3.DatabaseError as exc:
        raise NotAStore(f"{path} is not a readable SQLite database ({exc})") from None
    if not tables:
        raise NotAStore(f"{path} is not a tether custody store (found no tables)")
    if version < 1 or "tasks" not in tables:
        more = f", ... ({len(tables) - SHOWN_TABLES} more)" if len(tables) > SHOWN_TABLES else ""
        found = ", ".join(tables[:SHOWN_TABLES]) + more
        raise NotAStore(f"{path} is not a tether custody store (found tables: {found})")
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"{path} has schema version {version}, newer than this tether supports "
            f"({SCHEMA_VERSION}); upgrade tether"
        )
    if version < SCHEMA_VERSION and not older:
        raise NotAStore(
            f"{path} is a tether custody store of schema version {version}; this tether reads "
            f"version {SCHEMA_VERSION} and inspects without migrating: start a bridge on it "
            "once to upgrade it"
        )
    return int(version)


def connect_readonly(
    path: Path, busy_timeout_s: float, *, older: bool = False
) -> sqlite3.Connection:
    """A connection that can only read the tether store at ``path`` (``NotAStore`` if it is
    none; with ``older``, a store of an older schema is accepted)."""
    conn = sqlite3.connect(_uri(path), uri=True, isolation_level=None, timeout=busy_timeout_s)
    try:
        keep_temp_in_memory(conn)
        _version(conn, path, older=older)
    except BaseException:
        conn.close()
        raise
    return conn


def check_store(path: Path) -> None:
    """Refuse (``NotAStore``) a file that is not already a tether store, of any schema up to
    this tether's, before a verb that writes opens it (and would tighten and migrate it)."""
    connect_readonly(path, 10.0, older=True).close()


async def open_readonly(
    path: Path,
    *,
    clock: Callable[[], float] = time.time,
    lease_s: float = 60.0,
    max_attempts: int = 5,
    busy_timeout_s: float = 10.0,
) -> SqliteStore:
    """The store at ``path`` for reading only: every write it is asked for fails."""
    # one thread and one connection serve the store's reads (and refuse its writes)
    thread = SqliteWriter(
        connect=lambda: connect_readonly(path, busy_timeout_s), name="tether-sqlite-inspect"
    )
    try:
        await thread.start()
    except RuntimeError as exc:  # the thread's "could not be opened", around what we found
        if isinstance(exc.__cause__, NotAStore | SchemaTooNew):
            raise exc.__cause__ from None
        raise
    return SqliteStore(
        path,
        clock,
        float(lease_s),
        max_attempts,
        MAX_BODY_BYTES,
        SqliteDb(thread, thread),
        StoreNews(news_path(path)),  # never opened: a reader tells nobody anything
        DEFAULT_MAX_CRASHES_ALONE,
    )
