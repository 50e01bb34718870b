"""SQLite's own temporary files (sorts, temp indexes of big queries) stay in memory.

By default SQLite writes them to ``/var/tmp`` (or ``$TMPDIR``): outside the store's private
folder, on another disk, one file per sort (a bridge under load left 1,302 there). Every
connection tether opens calls :func:`keep_temp_in_memory`; the largest such structure is
bounded by the queries' own ``LIMIT``\\s.
"""

from __future__ import annotations

import sqlite3


def keep_temp_in_memory(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA temp_store = MEMORY")
