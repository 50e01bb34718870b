"""A deadline for a commit's wait for the synchronous standbys.

PostgreSQL's ``statement_timeout`` does not cover a commit: the server stops the statement's
timer before it commits, and a commit waiting for a synchronous standby that is gone waits
for ever. A store call runs in a thread its caller cannot abandon, so the watchdog cancels
such a wait from the outside (libpq's cancel request) once it has run the store's statement
timeout: the server then keeps the commit on the primary and says so with a WARNING, which
``_durable`` turns into ``PromiseUnconfirmed``. One thread per store keeps every deadline.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Iterator

import attrs
import psycopg

from ._connection import Conn

log = logging.getLogger("tether.bridge.postgres")

CANCEL_WAIT_S = 5.0
"""How long the watchdog waits for the server to take a cancel request."""


@attrs.define(eq=False)
class _Watch:
    conn: Conn
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    active: bool = True


@attrs.define(eq=False)
class Watchdog:
    """Cancels what runs on a connection past its deadline (``limit``)."""

    seconds: float
    _due: list[tuple[float, int, _Watch]] = attrs.field(init=False, factory=list)
    _order: itertools.count[int] = attrs.field(init=False, factory=itertools.count)
    _cond: threading.Condition = attrs.field(init=False, factory=threading.Condition)
    _thread: threading.Thread | None = attrs.field(init=False, default=None)
    _closed: bool = attrs.field(init=False, default=False)

    def close(self) -> None:
        """Stop the thread (what it watches has ended: the store's pool is closed)."""
        with self._cond:
            self._closed = True
            self._cond.notify()

    @contextlib.contextmanager
    def limit(self, conn: Conn) -> Iterator[None]:
        """Cancel what ``conn`` runs inside the block once it has run ``seconds``."""
        watch = _Watch(conn)
        with self._cond:
            heapq.heappush(self._due, (time.monotonic() + self.seconds, next(self._order), watch))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="tether-postgres-watchdog", daemon=True
                )
                self._thread.start()
            elif len(self._due) == 1:  # it waits for no deadline: give it this one
                self._cond.notify()
        try:
            yield
        finally:
            with watch.lock:  # a cancel under way reaches the server before conn is reused
                watch.active = False

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                while self._due and not self._due[0][2].active:
                    heapq.heappop(self._due)
                if not self._due:
                    self._cond.wait()
                    continue
                wait = self._due[0][0] - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                _, _, watch = heapq.heappop(self._due)
            with watch.lock:
                if watch.active:
                    self._cancel(watch.conn)

    def _cancel(self, conn: Conn) -> None:
        try:
            conn.cancel_safe(timeout=CANCEL_WAIT_S)
        except (psycopg.Error, OSError) as exc:  # the call fails on its own connection then
            log.warning("could not cancel a PostgreSQL statement past its deadline: %s", exc)
