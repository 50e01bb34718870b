"""A test-only shim: what a machine crash would leave of a SQLite store running NORMAL.

Under ``synchronous=NORMAL`` only what the writer's barrier synced survives a power loss. The
shim wraps the barrier to record the WAL's length after each sync, turns the automatic
checkpoint off (so the WAL only grows and the database file stays as it was opened), and
``cut`` copies the file and the WAL up to that length: the store as the disk would hold it if
the machine died now and none of the unsynced writes had reached it (the worst case).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import attrs

from tether.bridge import SqliteStore


@attrs.define(eq=False)
class WalCut:
    db: Path
    synced: int = 0
    """The WAL's length at the last barrier: everything before it is on disk."""
    written: int = 0
    """The WAL's length at the last cut (what a process crash would have kept)."""

    @property
    def wal(self) -> Path:
        return self.db.with_name(self.db.name + "-wal")

    async def install(self, store: SqliteStore) -> None:
        writer = store.db.writer
        real = writer.barrier
        assert real is not None, "the store syncs every commit: nothing to cut"

        def barrier() -> None:
            # the syncer's thread, while the writer may append: what was written before the
            # sync began is on disk after it; what is written meanwhile may not be (worst case)
            written = os.path.getsize(self.wal)
            real()
            self.synced = written

        await writer.run(lambda conn: conn.execute("PRAGMA wal_autocheckpoint = 0"))
        writer.barrier = barrier
        await writer.sync()  # the migration's commits: synced before the run begins

    def cut(self, into: Path) -> Path:
        """Copy the store as a crash now would leave it into ``into``; its path. Synchronous:
        call it where no Trio task runs in between (the run's promises cannot move)."""
        synced = self.synced
        into.mkdir(parents=True)
        shutil.copyfile(self.db, into / self.db.name)
        with self.wal.open("rb") as wal:
            kept = wal.read(synced)
            self.written = wal.seek(0, os.SEEK_END)
        (into / self.wal.name).write_bytes(kept)
        return into / self.db.name
