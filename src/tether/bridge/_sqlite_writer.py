"""One writer thread with group commit: many callers' transitions share one durable commit.

A durable commit costs an fsync (~0.4 ms here) and a ``trio.to_thread`` hop ~190 µs, so one
commit per transition caps a store at a few thousand transitions per second. Instead every
caller queues a job for the one thread that owns the connection; the thread takes everything
queued (up to ``max_batch``), runs each job in its own savepoint inside one transaction, commits
once, and only then wakes the callers. No caller is answered before its change is durable; a
job that raises is rolled back alone; a failed commit fails every job of its batch.

Jobs carry the Trio token of their caller, so one store can serve callers from consecutive
``trio.run`` calls (the hypothesis state machine does this).
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import attrs
import trio

log = logging.getLogger("tether.bridge.sqlite")

T = TypeVar("T")


@attrs.define(eq=False)
class _Job(Generic[T]):
    fn: Callable[[sqlite3.Connection], T] | None  # None: the stop job
    readonly: bool
    token: trio.lowlevel.TrioToken
    done: trio.Event = attrs.field(factory=trio.Event)
    value: Any = None
    error: BaseException | None = None


@attrs.define(eq=False)
class SqliteWriter:
    """The thread that owns the SQLite connection. Start with ``await start()``."""

    connect: Callable[[], sqlite3.Connection]
    max_batch: int = 512
    name: str = "tether-sqlite-writer"
    commits: int = attrs.field(init=False, default=0)
    """Committed batches so far (a benchmark reads it to show jobs per commit)."""
    _queue: queue.SimpleQueue[_Job[Any]] = attrs.field(init=False, factory=queue.SimpleQueue)
    _thread: threading.Thread | None = attrs.field(init=False, default=None)
    _closed: bool = attrs.field(init=False, default=False)
    _broken: BaseException | None = attrs.field(init=False, default=None)

    async def start(self) -> None:
        """Start the thread, connect, and return once the connection is ready (or raise)."""
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()
        try:
            await self.run(lambda _conn: None, readonly=True)
        except BaseException:
            await self.close()
            raise

    async def run(self, fn: Callable[[sqlite3.Connection], T], *, readonly: bool = False) -> T:
        """Run ``fn(conn)`` in the writer's next transaction; return after it is committed."""
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")
        job: _Job[T] = _Job(fn, readonly, trio.lowlevel.current_trio_token())
        self._queue.put(job)
        # Shielded: the job runs whether or not we wait, so the caller should learn its outcome
        # (a claim abandoned by a cancelled caller would sit out a whole lease).
        with trio.CancelScope(shield=True):
            await job.done.wait()
        if job.error is not None:
            raise job.error
        return job.value  # type: ignore[no-any-return]

    async def close(self) -> None:
        """Finish every queued job, close the connection, stop the thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._thread is None:
            return
        stop: _Job[None] = _Job(None, True, trio.lowlevel.current_trio_token())
        self._queue.put(stop)
        with trio.CancelScope(shield=True):
            await stop.done.wait()
            await trio.to_thread.run_sync(self._thread.join)

    # -- the thread -----------------------------------------------------------------------

    def _main(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            conn = self.connect()
        except BaseException as exc:
            self._broken = exc
        try:
            self._loop(conn)
        finally:
            if conn is not None:
                conn.close()

    def _loop(self, conn: sqlite3.Connection | None) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < self.max_batch and batch[-1].fn is not None:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = batch[-1] if batch[-1].fn is None else None
            work = batch[:-1] if stop is not None else batch
            if work:
                if conn is None or self._broken is not None:
                    for job in work:
                        job.error = _broken_error(self._broken)
                else:
                    self._run_batch(conn, work)
            self._wake(batch)
            if stop is not None:
                return

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Job[Any]]) -> None:
        readonly = all(job.readonly for job in batch)
        try:
            conn.execute("BEGIN" if readonly else "BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            for job in batch:
                job.error = exc
            return
        for job in batch:
            conn.execute("SAVEPOINT job")
            if _capture(job, conn):
                conn.execute("RELEASE job")
            else:
                conn.execute("ROLLBACK TO job")
                conn.execute("RELEASE job")
        try:
            conn.execute("COMMIT")
            self.commits += 1
        except sqlite3.Error as exc:
            log.exception("commit of %d jobs failed", len(batch))
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            for job in batch:
                job.value, job.error = None, exc

    @staticmethod
    def _wake(batch: list[_Job[Any]]) -> None:
        by_token: dict[trio.lowlevel.TrioToken, list[_Job[Any]]] = {}
        for job in batch:
            by_token.setdefault(job.token, []).append(job)
        for token, jobs in by_token.items():
            try:
                token.run_sync_soon(_set_all, jobs)
            except trio.RunFinishedError:
                pass  # the caller's run is over; nobody is waiting


def _capture(job: _Job[Any], conn: sqlite3.Connection) -> bool:
    assert job.fn is not None
    try:
        job.value = job.fn(conn)
    except Exception as exc:
        job.error = exc
        return False
    return True


def _set_all(jobs: list[_Job[Any]]) -> None:
    for job in jobs:
        job.done.set()


def _broken_error(cause: BaseException | None) -> BaseException:
    err = RuntimeError(f"the store's database could not be opened: {cause}")
    err.__cause__ = cause
    return err
