"""SQLite's file gives pruned space back (issue #56): new files are made with ``auto_vacuum =
INCREMENTAL`` and retention returns their free pages a bounded step at a time; the WAL is cut
back to ``WAL_SIZE_LIMIT`` after each checkpoint instead of staying at its high-water mark.

A file made before keeps ``auto_vacuum`` off (SQLite switches it only by a full ``VACUUM``:
minutes of an exclusive lock and twice the disk on a large file, so never on its own at open);
docs/guide/bridge.md says how to switch it once, with the bridge stopped.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Final

log = logging.getLogger("tether.bridge.sqlite")

WAL_SIZE_LIMIT: Final = 64 * 1024 * 1024
"""Bytes the WAL file keeps after a checkpoint resets it (``journal_size_limit``)."""


PRUNE_WORKERS: Final = (
    "DELETE FROM workers WHERE name IN (SELECT name FROM workers WHERE last_beat < ? LIMIT ?)"
)
PRUNE_WAITERS: Final = (
    "DELETE FROM limit_waiters WHERE (key, task_id) IN (SELECT w.key, w.task_id "
    "FROM limit_waiters w WHERE w.until < ? AND NOT EXISTS (SELECT 1 FROM tasks t "
    "WHERE t.id = w.task_id AND t.state = 'waiting') LIMIT ?)"
)
"""Lapsed waiter rows, but a parked waiter's (``RetentionStore.prune_waiters``)."""


def make_space_settings(conn: sqlite3.Connection) -> None:
    """Before the migration makes the tables: a new file vacuums incrementally (a no-op on a
    file that has tables); and the WAL's size limit."""
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")


def vacuums_incrementally(conn: sqlite3.Connection) -> bool:
    (mode,) = conn.execute("PRAGMA auto_vacuum").fetchone()
    return int(mode) == 2
