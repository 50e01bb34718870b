"""Every SQLite connection tether opens keeps SQLite's temporary files in memory (issue 33):
none goes to /var/tmp, outside the store's private folder."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tether.bridge import SqliteStore
from tether.bridge.stores.sqlite._readonly import connect_readonly
from tether.gateway._store import GatewayStore

MEMORY = 2  # PRAGMA temp_store: 0 default (a file), 1 file, 2 memory


def _temp_store(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA temp_store").fetchone()[0])


async def test_the_stores_and_the_gateways_connections_keep_temp_files_in_memory(
    tmp_path: Path,
) -> None:
    store = await SqliteStore.open(tmp_path / "store" / "custody.db")
    try:
        assert await store.db.writer.run(_temp_store) == MEMORY
        assert await store.db.read(_temp_store) == MEMORY
    finally:
        await store.aclose()
    readonly = connect_readonly(tmp_path / "store" / "custody.db", 1.0)
    try:
        assert _temp_store(readonly) == MEMORY
    finally:
        readonly.close()
    gateway = await GatewayStore.open(tmp_path / "gateway.db")
    try:
        assert await gateway._writer.run(_temp_store) == MEMORY
    finally:
        gateway.close()
