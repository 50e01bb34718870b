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
from pathlib import Path


def zero_deleted_content(conn: sqlite3.Connection) -> None:
    """Have ``conn`` overwrite with zeros what it deletes or moves (``secure_delete = ON``:
    ``FAST`` would leave whole freed pages as they were). Its cost, a page freed is written
    once more, zeroed, is in every figure measured here: Debian's SQLite has it on already."""
    conn.execute("PRAGMA secure_delete = ON")


def truncate_wal(path: Path, busy_timeout_s: float) -> bool:
    """Checkpoint the WAL of the database at ``path`` into the file and cut it to zero bytes,
    on a connection of its own (a checkpoint runs outside any transaction, and the store's
    connections are always in one); False when another connection kept it from finishing
    within ``busy_timeout_s`` (a reader still on an older snapshot): the WAL then keeps the
    older pages until a later checkpoint starts it over."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout_s)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.close()
    return int(busy) == 0
