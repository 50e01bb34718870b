"""Opening the SQLite file: private permissions, WAL, the durability setting, the migration.

The writer's connection creates, tightens and migrates the file; the reader's only reads
(``query_only``) what the writer committed. Each runs in its own thread
(``tether._plumbing._sqlite_writer``).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Final, Literal

from ...._plumbing._fs import create_private_file, ensure_private_dir, restrict_file
from ...._plumbing._sqlite_erase import zero_deleted_content
from ...._plumbing._sqlite_temp import keep_temp_in_memory
from ._schema import migrate
from ._space import make_space_settings, vacuums_incrementally

log = logging.getLogger("tether.bridge.sqlite")

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]

MIN_SQLITE: Final = (3, 35, 0)
"""``RETURNING`` (3.35) and ``UPDATE ... FROM`` (3.33) carry the custody transitions."""


def connect_writer(
    path: Path, synchronous: Synchronous, busy_timeout_s: float
) -> sqlite3.Connection:
    if sqlite3.sqlite_version_info < MIN_SQLITE:
        raise RuntimeError(
            f"the custody store needs SQLite {'.'.join(map(str, MIN_SQLITE))} or newer; this "
            f"Python links SQLite {sqlite3.sqlite_version}"
        )
    ensure_private_dir(path.parent)
    # 0600 before SQLite opens it: SQLite gives the -wal and -shm files the database's mode
    if not create_private_file(path):
        for suffix in ("", "-wal", "-shm"):
            existing = path.with_name(path.name + suffix)
            if existing.exists():
                restrict_file(existing)
    conn = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout_s)
    try:
        keep_temp_in_memory(conn)
        zero_deleted_content(conn)  # a deleted turn or body leaves no copy in the file
        make_space_settings(conn)  # before the WAL and the tables: a new file's auto_vacuum
        (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("PRAGMA cache_size = -32768")  # KiB: keeps a 100k-task working set hot
        migrate(conn)
        if not vacuums_incrementally(conn):
            log.info(
                "%s was made without incremental vacuum: pruned space is reused but the file "
                "never shrinks (see 'Disk' in the bridge guide to switch it once)",
                path,
            )
    except BaseException:
        conn.close()
        raise
    if mode != "wal":
        conn.close()
        raise RuntimeError(f"{path}: could not switch SQLite to WAL mode (got {mode!r})")
    return conn


def connect_reader(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    """A connection that only reads (``query_only``) the database the writer opened."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout_s)
    try:
        keep_temp_in_memory(conn)
        conn.execute("PRAGMA query_only = ON")
        conn.execute("PRAGMA cache_size = -32768")
    except BaseException:
        conn.close()
        raise
    return conn
