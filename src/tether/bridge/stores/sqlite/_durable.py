"""Durable at promises on SQLite: commits wait for no disk; a promise syncs the WAL first.

With ``synchronous=NORMAL`` in WAL mode a commit is written to the WAL but not synced: it
survives a process crash, and a machine crash may lose the newest commits (SQLite's own
guarantee for that pair), which returns their tasks to an earlier custody state. Before
anything that depends on a commit leaves the process (the ack of an ingest, the post of a
result or of a dead-letter notice, a stall notice, an operator's answer) the writer runs the
barrier: one ``fsync`` of the WAL file, which makes every frame written so far durable, in
WAL order, the promise's own and every earlier commit's (including another process's on the
same file, such as a ``tether worker run``). ``synchronous=FULL`` syncs at every commit
instead and needs no barrier. See docs/guide/design.md, "Durable at promises".
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ._connection import Synchronous


def wal_barrier(db: Path) -> Callable[[], None]:
    """The barrier for the store file ``db``: fsync its ``-wal`` file.

    Linux's ``fsync`` writes out the file's data whichever descriptor names it, so a
    descriptor of our own syncs what SQLite's connections wrote. A missing WAL holds
    nothing to sync (the last connection checkpointed it into the file, synced).
    """
    wal = db.with_name(db.name + "-wal")

    def barrier() -> None:
        try:
            fd = os.open(wal, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    return barrier


def barrier_for(db: Path, synchronous: Synchronous) -> Callable[[], None] | None:
    """The writer's barrier under ``synchronous``: NORMAL (the default) needs one; FULL and
    EXTRA sync each commit already; OFF never syncs (for measuring the store's code alone)."""
    return wal_barrier(db) if synchronous == "NORMAL" else None
