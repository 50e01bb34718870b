"""Durable at promises on PostgreSQL: what promises nothing commits without waiting for the
WAL flush; a promise waits for it.

Under ``synchronous="NORMAL"`` (the default) each session runs ``synchronous_commit = off``:
a commit is visible at once and flushed within the WAL writer's delay (so a server crash may
lose the newest, which returns their tasks to an earlier custody state). After an operation
that is a promise (the ingest whose ack follows, a read whose findings are posted, an
operator's move) the same hop runs the barrier: a transaction with an xid that commits with
``synchronous_commit = on``, which waits until the WAL is flushed past its own commit record,
and so past every commit before it, whichever session made it (one round trip). ``FULL`` and
``EXTRA`` leave every commit synchronous (the server's own setting). See docs/guide/design.md,
"Durable at promises".
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Final, Literal

import attrs

from ._connection import Conn, T

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
"""The store's durability setting, SQLite's names: NORMAL (durable at promises), FULL or EXTRA
(every commit synchronous), OFF (nothing waits for the flush: for benchmarks only)."""

ASYNC_SESSION: Final = b"SET synchronous_commit = off"
BARRIER: Final = b"BEGIN; SET LOCAL synchronous_commit = on; SELECT pg_current_xact_id(); COMMIT"
"""One simple-protocol round trip: an xid, so the commit writes a record and waits for the
flush of the WAL up to it."""

Promise = bool | Callable[[object], bool]
"""Is an operation's outcome a promise: always, never, or when the outcome says so (a read:
when it found something)."""


@attrs.define(eq=False)
class Durability:
    synchronous: Synchronous = "NORMAL"
    barriers: int = 0
    """Barriers run so far (a benchmark reads it)."""
    _sessions: weakref.WeakSet[Conn] = attrs.field(init=False, factory=weakref.WeakSet)
    """Sessions already switched to ``synchronous_commit = off``."""

    def wrap(self, fn: Callable[[Conn], T], promise: Promise) -> Callable[[Conn], T]:
        """``fn`` as it runs under this setting, with the barrier after it if it is a promise."""
        if self.synchronous in ("FULL", "EXTRA"):
            return fn

        def run(conn: Conn) -> T:
            if conn not in self._sessions:
                conn.execute(ASYNC_SESSION)
                self._sessions.add(conn)
            value = fn(conn)
            if self.synchronous == "NORMAL" and (promise(value) if callable(promise) else promise):
                conn.execute(BARRIER)
                self.barriers += 1
            return value

        return run
