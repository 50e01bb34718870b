"""LISTEN/NOTIFY, only to wake idle workers early: polling the store stays the source of truth.

Transitions that create work (ingest, assign, repool) and results send ``pg_notify`` in the
same statement, so the notification goes out when (and only if) the change commits. One
thread per store holds a dedicated connection that LISTENs and wakes the Trio tasks waiting in
``wait(...)`` through their Trio tokens. A notification can be missed (the listener is still
connecting, reconnecting after a server restart, or the notification landed between a
worker's empty poll and its wait): that only costs the waiter its timeout, never a task.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import attrs
import psycopg
import trio

from ...._backoff import Backoff

log = logging.getLogger("tether.bridge.postgres")

PENDING = "pending"
RESULT = "result"
ASSIGNED_PREFIX = "assigned "
_STOP = "stop"
_RECONNECT_MAX_S = 30.0


def assigned_payload(worker: str) -> str:
    return ASSIGNED_PREFIX + worker


def wants_work(worker: str | None) -> Callable[[str], bool]:
    """Does a payload announce pending work, or an assignment to ``worker`` (None: to any)?"""
    mine = None if worker is None else assigned_payload(worker)

    def wants(payload: str) -> bool:
        if payload == PENDING:
            return True
        return payload.startswith(ASSIGNED_PREFIX) and (mine is None or payload == mine)

    return wants


@attrs.define(eq=False)
class _Waiter:
    wants: Callable[[str], bool]
    token: trio.lowlevel.TrioToken
    event: trio.Event
    woken: bool = False


@attrs.define(eq=False)
class Listener:
    """The listening thread. ``start()`` is idempotent; ``stop()`` blocks (call it in a thread)."""

    connect: Callable[[], psycopg.Connection[tuple[object, ...]]]
    """Opens a new autocommit connection (the listener's own, outside the pool)."""
    channel: str
    notify: Callable[[str], None]
    """Sends ``payload`` on the channel through some other connection (used to stop)."""
    reconnect_s: float = 0.2
    _lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    _waiters: set[_Waiter] = attrs.field(init=False, factory=set)
    _thread: threading.Thread | None = attrs.field(init=False, default=None)
    _stopping: threading.Event = attrs.field(init=False, factory=threading.Event)
    listening: threading.Event = attrs.field(init=False, factory=threading.Event)
    """Set while the LISTEN is active (tests wait for it before relying on a wake-up)."""

    def start(self) -> None:
        with self._lock:
            if self._thread is None and not self._stopping.is_set():
                self._thread = threading.Thread(
                    target=self._main, name=f"tether-listen-{self.channel}", daemon=True
                )
                self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        thread = self._thread
        if thread is None:
            return
        try:
            self.notify(_STOP)
        except Exception:  # the pool may be gone; the thread's poll timeout still ends it
            pass
        thread.join()

    async def wait(self, wants: Callable[[str], bool], seconds: float) -> bool:
        """Wait up to ``seconds`` for a notification ``wants`` accepts; True if woken."""
        self.start()
        waiter = _Waiter(wants, trio.lowlevel.current_trio_token(), trio.Event())
        with self._lock:
            self._waiters.add(waiter)
        try:
            with trio.move_on_after(seconds):
                await waiter.event.wait()
        finally:
            with self._lock:
                self._waiters.discard(waiter)
        return waiter.woken

    # -- the thread -----------------------------------------------------------------------

    def _main(self) -> None:
        backoff = Backoff(self.reconnect_s, max(self.reconnect_s, _RECONNECT_MAX_S), jitter=0.0)
        while not self._stopping.is_set():
            try:
                with self.connect() as conn:
                    conn.execute(f'LISTEN "{self.channel}"')
                    self.listening.set()
                    backoff.reset()
                    self._dispatch(None)  # we may have missed some while (re)connecting
                    while not self._stopping.is_set():
                        for note in conn.notifies(timeout=1.0):
                            if self._stopping.is_set():
                                return
                            self._dispatch(note.payload)
            except Exception as exc:  # never let the thread die: wake-ups are worth retrying
                self.listening.clear()
                if self._stopping.is_set():
                    return
                delay = backoff.next_delay()
                log.warning(
                    "LISTEN connection lost (%s); waiters fall back to polling; retrying in %.1fs",
                    type(exc).__name__,
                    delay,
                    exc_info=not isinstance(exc, psycopg.Error),
                )
                self._stopping.wait(delay)
            finally:
                self.listening.clear()

    def _dispatch(self, payload: str | None) -> None:
        with self._lock:
            chosen = [w for w in self._waiters if payload is None or w.wants(payload)]
            for waiter in chosen:
                waiter.woken = True
                self._waiters.discard(waiter)
        for waiter in chosen:
            try:
                waiter.token.run_sync_soon(waiter.event.set)
            except trio.RunFinishedError:
                pass
