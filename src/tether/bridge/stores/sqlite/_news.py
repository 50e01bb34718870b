"""News between processes on one SQLite store: another process made work or a result, look now.

An idle loop backs off to ``pool._idle.IDLE_MAXIMUM`` between looks, and a process hears at
once only what happened in itself. PostgreSQL ``NOTIFY``s across processes; SQLite has no such
channel, so a ``tether worker run`` beside a bridge on one file saw a lead's assignment, and the
bridge saw that process's results, up to that long late (a reply seconds late after a quiet
spell). Here the writer's connection carries temporary triggers (never part of the file's
schema) that note what a transaction did: a task became pending or assigned (``WORK``), or got
its result (``RESULT``). After the commit the writer appends one record per kind noted to
``<store>-news``: the kind and this process's tag. ``wait(kind, seconds)`` looks at the file's
size (twice a second while idle, fifty times a second for a few seconds after news came)
and reads what others appended since its last look.

Hints only: a loop's own look stays the source of truth, so a lost or late record costs
latency, never a task. The file is the store's, like its ``-wal``: created 0600 beside it by
the writer, never by a verb that only reads; rewound to empty once it passes
``ROTATE_AT`` (a waiter that finds it shorter than its last look takes that as news).
"""

from __future__ import annotations

import math
import os
import secrets
import sqlite3
from pathlib import Path
from typing import Final

import attrs
import trio

from ...._plumbing._fs import PRIVATE_FILE_MODE
from ...._plumbing._grid import GRID, to_next_point

WORK: Final = b"w"
RESULT: Final = b"r"
_RECORD: Final = 4
"""Bytes per record: the kind, then the writing process's three-byte tag."""
POLL_S: Final = GRID
"""Seconds between a waiter's looks at the file, at most: how late news from another process
is seen. Each look is an ``fstat`` and at most a short ``pread``, on the points of the
process's idle grid (``_plumbing._grid``), so it shares its wake of the run loop with the other
idle loops (looks of their own, ten a second, measured 0.15% of a core each)."""
BUSY_POLL_S: Final = 0.02
"""Seconds between looks for ``BUSY_FOR`` seconds after news came: under load from another
process, each hop between the processes waits tens of milliseconds, not half a second."""
BUSY_FOR: Final = 5.0
ROTATE_AT: Final = 1 << 18
"""Bytes after which a writer rewinds the file (records are hints: old ones are worth nothing)."""

_TRIGGERS: Final = (
    "CREATE TEMP TRIGGER IF NOT EXISTS tether_news_new AFTER INSERT ON main.tasks "
    f"WHEN NEW.state IN ('pending', 'assigned') BEGIN SELECT tether_news('{WORK.decode()}'); END",
    "CREATE TEMP TRIGGER IF NOT EXISTS tether_news_moved AFTER UPDATE OF state ON main.tasks "
    "WHEN NEW.state IN ('pending', 'assigned') AND NEW.state IS NOT OLD.state "
    f"BEGIN SELECT tether_news('{WORK.decode()}'); END",
    "CREATE TEMP TRIGGER IF NOT EXISTS tether_news_result AFTER UPDATE OF state ON main.tasks "
    "WHEN NEW.state = 'result' AND OLD.state IS NOT 'result' "
    f"BEGIN SELECT tether_news('{RESULT.decode()}'); END",
)


def news_path(db: Path) -> Path:
    return db.with_name(db.name + "-news")


@attrs.define(eq=False)
class StoreNews:
    """The news file of one store, as one process's writer and waiters use it."""

    path: Path
    _fd: int = attrs.field(init=False, default=-1)
    _tag: bytes = attrs.field(init=False, factory=lambda: secrets.token_bytes(_RECORD - 1))
    _noted: set[bytes] = attrs.field(init=False, factory=set)
    """Kinds the writer's current transactions made (the writer thread's own)."""
    _seen: dict[bytes, int] = attrs.field(init=False, factory=dict)
    """Per kind waited for: the file's size at the last look."""
    _heard: dict[bytes, float] = attrs.field(init=False, factory=dict)
    """Per kind: when (Trio's clock) news of it last came."""

    def open(self) -> None:
        """Open (creating it 0600) the file; the writer's thread does it as it connects."""
        if self._fd < 0:
            flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
            self._fd = os.open(self.path, flags, PRIVATE_FILE_MODE)
            os.fchmod(self._fd, PRIVATE_FILE_MODE)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def install(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        """Give the writer's connection the triggers that note each transaction's news."""
        self.open()
        conn.create_function("tether_news", 1, self._note, deterministic=False)
        for sql in _TRIGGERS:
            conn.execute(sql)
        return conn

    def _note(self, kind: str) -> None:
        self._noted.add(kind.encode())

    def after_commit(self) -> None:
        """Append what the committed batch noted (the writer's thread, after its ``COMMIT``).
        A rolled-back batch's notes go out with the next commit: a spare hint, never a loss."""
        if not self._noted or self._fd < 0:
            return
        records = b"".join(kind + self._tag for kind in sorted(self._noted))
        self._noted.clear()
        try:
            os.write(self._fd, records)
            if os.fstat(self._fd).st_size > ROTATE_AT:
                os.ftruncate(self._fd, 0)
        except OSError:
            pass  # a hint that could not be written: the others' idle polls still see it

    async def wait(self, kind: bytes, seconds: float) -> bool:
        """Wait until another process appends ``kind`` news, at most ``seconds``; ``True`` if
        it did. The first wait for a kind starts from the file as it is."""
        if self._fd < 0:
            await trio.sleep(seconds)
            return False
        with trio.move_on_after(seconds):
            while not self._news_since_last_look(kind):
                if trio.current_time() - self._heard.get(kind, -math.inf) < BUSY_FOR:
                    await trio.sleep(BUSY_POLL_S)  # news came lately: more is likely soon
                else:
                    await trio.sleep(to_next_point())  # idle: on the grid's points
            self._heard[kind] = trio.current_time()
            return True
        return False

    def _news_since_last_look(self, kind: bytes) -> bool:
        size = os.fstat(self._fd).st_size
        last = self._seen.setdefault(kind, size)
        self._seen[kind] = size
        if size < last:
            return True  # rewound by a writer: whatever it held may have been news
        start = last - last % _RECORD
        new = os.pread(self._fd, size - start, start)
        return any(
            new[i : i + 1] == kind and new[i + 1 : i + _RECORD] != self._tag
            for i in range(0, len(new) - _RECORD + 1, _RECORD)
        )
