"""What SQLite deletes is gone from its files, not only from its tables (issue #53).

A deleted row or an overwritten value leaves its bytes behind: in the page's free space (every
update that changes a row's size moves it and frees the old copy), in pages on the free list,
and in the WAL until a checkpoint copies the newer pages over and the WAL starts over.
``secure_delete`` makes SQLite zero what it frees as it frees it (the Debian build has it on
by default, python.org's and macOS's off: it is set, never assumed); :func:`truncate_wal` then
leaves no older page image in the ``-wal`` file. Both the custody store's writer and the
reference gateway's connection set it; an erasure (``forget-room``) truncates the WAL after
its commit.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Final


def zero_deleted_content(conn: sqlite3.Connection) -> None:
    """Have ``conn`` overwrite with zeros what it deletes or moves (``secure_delete = ON``:
    ``FAST`` would leave whole freed pages as they were). Its cost, a page freed is written
    once more, zeroed, is in every figure measured here: Debian's SQLite has it on already."""
    conn.execute("PRAGMA secure_delete = ON")


def truncate_wal(path: Path, busy_timeout_s: float) -> bool:
    """Checkpoint the WAL of the database at ``path`` into the file and cut it to zero bytes,
    on a connection of its own (a checkpoint runs outside any transaction, and the store's
    connections are always in one); False when other connections kept it from finishing
    within ``busy_timeout_s`` (a reader still on an older snapshot): the WAL then keeps the
    older pages until a later checkpoint starts it over.

    A ``TRUNCATE`` checkpoint holds the write lock while it waits for readers, so every
    writer waits with it: it is tried in short waits (``TRUNCATE_WAIT_S``), a ``PASSIVE``
    one first copying what it can without blocking anyone, and the writers go on between
    tries."""
    deadline = time.monotonic() + busy_timeout_s
    conn = sqlite3.connect(path, isolation_level=None, timeout=TRUNCATE_WAIT_S)
    try:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        while True:
            try:
                busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            except sqlite3.OperationalError:  # the lock itself was busy past the short wait
                busy = 1
            if int(busy) == 0:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(TRUNCATE_PAUSE_S)
    finally:
        conn.close()


TRUNCATE_WAIT_S: Final = 0.2
"""Seconds one ``TRUNCATE`` try waits for the lock and the readers (writers wait as long)."""
TRUNCATE_PAUSE_S: Final = 0.05
"""Seconds between two tries: the writers' turn."""
