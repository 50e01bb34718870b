"""Durable at promises on PostgreSQL: what promises nothing commits without waiting for the
WAL flush; a promise waits for it, and for the synchronous standbys.

Under ``synchronous="NORMAL"`` (the default) each session runs ``synchronous_commit = off``:
a commit is visible at once and flushed within the WAL writer's delay (so a server crash or a
failover may lose the newest, which returns their tasks to an earlier custody state). After an
operation that is a promise (the ingest whose ack follows, a read whose findings are posted,
an operator's move, a step record) the same hop runs the barrier: a transaction that writes
one WAL record (a transactional ``pg_logical_emit_message``) and commits synchronously, so it
waits until the WAL is flushed, and confirmed by the synchronous standbys, past its own commit
record, and so past every commit before it, whichever session made it (one round trip).

The record matters: PostgreSQL commits a transaction that wrote no WAL asynchronously whatever
``synchronous_commit`` says (``RecordTransactionCommit``), so the third wave's barrier, an xid
and no record, waited for nothing, and a failover lost acknowledged messages. A logical
message was chosen over a one-row table by measurement: the same single round trip, no row
lock that serializes concurrent barriers, no dead tuples to vacuum, any role may emit one
(docs/guide/design.md, "Durable at promises").

A commit's wait for the standbys ends early if the statement is cancelled (the store's
``statement_timeout``): PostgreSQL then keeps the commit, locally only, and says so with a
WARNING, not an error. A barrier that meets such a warning raises ``PromiseUnconfirmed`` (no
promise may be made on it); under ``FULL`` a commit that met one makes the next promise run
the barrier. ``FULL`` and ``EXTRA`` otherwise make every commit of the store synchronous
(``on``, whatever the server's default, or ``remote_apply`` where that is the server's).
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Final, Literal

import attrs
from psycopg.errors import Diagnostic

from ._connection import Conn, StoreTimeout, T
from ._watchdog import Watchdog

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
"""The store's durability setting, SQLite's names: NORMAL (durable at promises), FULL or EXTRA
(every commit synchronous), OFF (nothing waits for the flush: for benchmarks only)."""

ASYNC_SESSION: Final = b"SET synchronous_commit = off"
SERVER_LEVEL: Final = b"SELECT reset_val FROM pg_settings WHERE name = 'synchronous_commit'"
LEVELS: Final = ("off", "local", "remote_write", "on", "remote_apply")
"""``synchronous_commit``'s levels, weakest first."""


@functools.cache
def barrier_sql(level: str) -> bytes:
    """One simple-protocol round trip: a WAL record, so the commit waits at ``level``."""
    return (
        f"BEGIN; SET LOCAL synchronous_commit = {level}; "
        "SELECT pg_logical_emit_message(true, 'tether', ''); COMMIT"
    ).encode()


def barrier_level(server: str | None) -> str:
    """The barrier waits at least as ``on`` does (the local flush and the synchronous
    standbys' flush), and as ``remote_apply`` where the server asks for that."""
    return "remote_apply" if server == "remote_apply" else "on"


SYNC_REP_SQLSTATES: Final = frozenset({"01000", "57P01"})
"""The WARNINGs PostgreSQL sends when it stops waiting for the synchronous standbys after the
commit (a cancel has no code of its own: ``01000``; a terminate, ``57P01``)."""


class PromiseUnconfirmed(StoreTimeout):
    """A promise's commit is kept on the primary, but the synchronous standbys did not confirm
    it before the statement timeout: no promise may be made on it (no ack, no post). Whatever
    waits for the promise tries again; a repeated ingest is a replay, a repeated step record
    returns the record."""


def _unconfirmed(diag: Diagnostic) -> bool:
    """Is this notice PostgreSQL giving up a commit's wait for the synchronous standbys?"""
    if diag.severity_nonlocalized != "WARNING":
        return False
    return diag.sqlstate in SYNC_REP_SQLSTATES or "synchronous replication" in (
        diag.message_primary or ""
    )


Promise = bool | Callable[[object], bool]
"""Is an operation's outcome a promise: always, never, or when the outcome says so (a read:
when it found something)."""


@attrs.define(eq=False)
class Durability:
    synchronous: Synchronous = "NORMAL"
    watchdog: Watchdog = attrs.field(factory=lambda: Watchdog(60.0))
    """Gives up a commit's wait for the standbys after the store's statement timeout."""
    barriers: int = 0
    """Barriers run so far (a benchmark reads it)."""
    _sessions: weakref.WeakSet[Conn] = attrs.field(init=False, factory=weakref.WeakSet)
    """Sessions set up already (``synchronous_commit = off`` under NORMAL, the notice hook)."""
    _server_level: str | None = attrs.field(init=False, default=None)
    """How a promise's commit waits on this server, once read (``_level``)."""
    _lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    _warned: int = attrs.field(init=False, default=0)
    """Commits whose wait for the standbys was given up, counted over every session."""
    _confirmed: int = attrs.field(init=False, default=0)
    """How many of ``_warned`` a later barrier has confirmed."""
    _here: threading.local = attrs.field(init=False, factory=threading.local)
    """This thread's count of such warnings: a notice reaches its handler in the thread that
    runs the statement, so a barrier tells its own warning from another session's."""

    def wrap(self, fn: Callable[[Conn], T], promise: Promise) -> Callable[[Conn], T]:
        """``fn`` as it runs under this setting, with the barrier after it if it is a promise."""

        def run(conn: Conn) -> T:
            if conn not in self._sessions:
                self._set_up(conn)
            value = fn(conn)
            if (promise(value) if callable(promise) else promise) and self._owes_barrier():
                self.barrier(conn)
            return value

        if self.synchronous in ("FULL", "EXTRA"):  # every commit waits for the standbys

            def watched(conn: Conn) -> T:
                with self.watchdog.limit(conn):
                    return run(conn)

            return watched
        return run

    def _owes_barrier(self) -> bool:
        """Does a promise need the barrier: always under NORMAL; under FULL or EXTRA only
        after a commit whose wait for the standbys was given up; never under OFF."""
        if self.synchronous == "NORMAL":
            return True
        return self.synchronous != "OFF" and self._warned > self._confirmed

    def barrier(self, conn: Conn) -> None:
        """Wait until every commit so far is flushed and confirmed by the synchronous standbys;
        raise ``PromiseUnconfirmed`` if the wait was given up."""
        statement = barrier_sql(self._level(conn))
        covers = self._warned  # the commits warned about so far all precede this barrier's
        mine = getattr(self._here, "warned", 0)
        with self.watchdog.limit(conn):
            conn.execute(statement)
        self.barriers += 1
        if getattr(self._here, "warned", 0) != mine:
            raise PromiseUnconfirmed(
                "PostgreSQL kept a promise's commit on the primary, but its synchronous "
                "standbys did not confirm it within the statement timeout: nothing is promised "
                "on it yet"
            )
        with self._lock:
            self._confirmed = max(self._confirmed, covers)

    def _set_up(self, conn: Conn) -> None:
        if self.synchronous in ("NORMAL", "OFF"):
            conn.execute(ASYNC_SESSION)
        else:  # every commit waits as a promise does, whatever the server's own default
            conn.execute(f"SET synchronous_commit = {self._level(conn)}".encode())
        conn.add_notice_handler(self._noticed)
        self._sessions.add(conn)

    def _level(self, conn: Conn) -> str:
        """How a promise's commit waits on this server (``barrier_level``), read once."""
        if self._server_level is None:
            row = conn.execute(SERVER_LEVEL).fetchone()
            self._server_level = barrier_level(None if row is None else str(row[0]))
        return self._server_level

    def _noticed(self, diag: Diagnostic) -> None:
        if _unconfirmed(diag):
            self._here.warned = getattr(self._here, "warned", 0) + 1
            with self._lock:
                self._warned += 1
