"""One writer thread with group commit: many callers' transitions share one durable commit.

A durable commit costs an fsync (~0.4 ms here) and a ``trio.to_thread`` hop ~190 µs, so one
commit per transition caps a store at a few thousand transitions per second. Instead every
caller queues a job for the one thread that owns the connection; the thread takes everything
queued (up to ``max_batch``), runs the jobs in one transaction, commits once, and only then
wakes the callers. No caller is answered before its change is durable; a job that raises is
rolled back alone (the batch is replayed with a savepoint per job); a failed commit fails every
job of its batch. Transactions are ``BEGIN IMMEDIATE``, so several stores (processes) can
share one file: SQLite's lock serialises them and ``busy_timeout`` waits for it.

Jobs carry the Trio token of their caller, so one store can serve callers from consecutive
``trio.run`` calls (the hypothesis state machine does this).

When no job is with the thread (queued, or in the batch it runs) and no other task of the
caller's run is ready to run, a job runs *inline*, in the caller's thread, in the same kind of
transaction: two thread hops per transition (the caller waking the thread, the thread waking
Trio) cost as much as the transaction on a busy machine, and with nothing else runnable there
is nobody to share a commit with nor anybody kept waiting. The price: the event loop sits in
that one commit (its fsync included) instead of in its I/O wait, so a request arriving
meanwhile waits for one commit. Any job with the thread or anything else ready to run sends the
job to the thread as before, so concurrent callers still share commits (a job inline while
others wait for the thread would hold up their batch and the loop behind one lone commit).
Inline, ``BEGIN IMMEDIATE`` does not wait for another process's write lock (the connection's
busy timeout is 0 while inline): a locked database sends the job to the thread, which waits
for the lock with the configured timeout off the event loop. The connection is shared by the
two threads under one lock, taken by the thread for each batch and tried (never waited for) by
an inline job.
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
    task: trio.lowlevel.Task
    value: Any = None
    error: BaseException | None = None


_in_flight = 0


def jobs_in_flight() -> int:
    """Jobs queued to any writer in this process and not yet answered.

    A test clock reads it so that it does not jump virtual time while the database works: Trio
    sees a caller waiting on the writer thread as idle, and a ``MockClock`` with autojump would
    otherwise skip to the next timer (perhaps past a lease) during a single commit.
    """
    return _in_flight


def _uncancellable(_raise_cancel: Any) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED


@attrs.define(eq=False)
class SqliteWriter:
    """The thread that owns the SQLite connection. Start with ``await start()``."""

    connect: Callable[[], sqlite3.Connection]
    max_batch: int = 512
    name: str = "tether-sqlite-writer"
    inline: bool = True
    """Run a job in the caller's thread when the writer is idle and nothing else is runnable."""
    commits: int = attrs.field(init=False, default=0)
    """Committed batches so far (a benchmark reads it to show jobs per commit)."""
    inline_jobs: int = attrs.field(init=False, default=0)
    """Jobs run inline so far."""
    _queue: queue.SimpleQueue[_Job[Any]] = attrs.field(init=False, factory=queue.SimpleQueue)
    _waiting: int = attrs.field(init=False, default=0)
    """Jobs sent to the thread and not yet answered (queued or in its running batch)."""
    _lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    """Held by whoever uses the connection: the thread for a batch, or an inline job."""
    _conn: sqlite3.Connection | None = attrs.field(init=False, default=None)
    """The open connection (set by the thread once connected, None again once closing)."""
    _busy_ms: int = attrs.field(init=False, default=0)
    """The connection's configured busy timeout, restored for the thread's batches."""
    _busy_zero: bool = attrs.field(init=False, default=False)
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

    async def run(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        readonly: bool = False,
        inline: bool = True,
    ) -> T:
        """Run ``fn(conn)`` in the writer's next transaction; return after it is committed.

        ``inline=False`` always sends the job to the thread: for a job that may run long (a
        prune of thousands of rows), which must not hold up the event loop.
        """
        await trio.lowlevel.checkpoint_if_cancelled()  # cancelled before: nothing is queued
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")
        job: _Job[T] = _Job(
            fn, readonly, trio.lowlevel.current_trio_token(), trio.lowlevel.current_task()
        )
        if inline and self.inline and self._conn is not None and self._idle():
            ran = self._run_inline(job)
        else:
            ran = False
        if ran:
            await trio.lowlevel.cancel_shielded_checkpoint()  # a checkpoint, as a hop would be
            if job.error is not None:
                raise job.error
            return job.value  # type: ignore[no-any-return]
        global _in_flight
        _in_flight += 1
        self._waiting += 1
        self._queue.put(job)
        # Once queued the job will run, so the wait cannot be cancelled: the caller learns the
        # outcome (a claim abandoned by a cancelled caller would sit out a whole lease) and a
        # pending cancellation strikes at its next checkpoint. (Cheaper than a shielded scope.)
        try:
            await trio.lowlevel.wait_task_rescheduled(_uncancellable)
        finally:
            _in_flight -= 1
            self._waiting -= 1
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
        stop: _Job[None] = _Job(
            None, True, trio.lowlevel.current_trio_token(), trio.lowlevel.current_task()
        )
        self._queue.put(stop)
        await trio.lowlevel.wait_task_rescheduled(_uncancellable)
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._thread.join)

    # -- inline -----------------------------------------------------------------------------

    def _idle(self) -> bool:
        """No job with the thread (queued or in its batch: a caller there could share the next
        commit) and nothing else in this run ready to run."""
        if self._waiting:
            return False
        stats = trio.lowlevel.current_statistics()
        return stats.tasks_runnable == 0 and stats.run_sync_soon_queue_size == 0

    @trio.lowlevel.enable_ki_protection  # a KeyboardInterrupt waits for the next checkpoint
    def _run_inline(self, job: _Job[Any]) -> bool:
        """Run ``job`` now in this thread if the connection is free; False: send it to the
        thread (busy with a batch, closing, or the database locked by another process)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            conn = self._conn
            if conn is None:
                return False
            try:
                if not self._busy_zero:
                    conn.execute("PRAGMA busy_timeout = 0")
                    self._busy_zero = True
                conn.execute("BEGIN" if job.readonly else "BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                    return False  # locked elsewhere: the thread waits for it, not the loop
                job.error = exc
                return True
            try:
                self._body(conn, [job], savepoints=False)
            except Exception as exc:  # a bug or a broken connection: fail, never hang
                log.exception("custody writer failed an inline job")
                _rollback(conn)
                job.value, job.error = None, exc
            self.inline_jobs += 1
            return True
        finally:
            if self._conn is not None and self._conn.in_transaction:  # interrupted mid-way
                _rollback(self._conn)
            self._lock.release()

    # -- the thread -----------------------------------------------------------------------

    def _main(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            conn = self.connect()
            (self._busy_ms,) = conn.execute("PRAGMA busy_timeout").fetchone()
            self._conn = conn
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
            with self._lock:
                if work:
                    if conn is None or self._broken is not None:
                        for job in work:
                            job.error = _broken_error(self._broken)
                    else:
                        try:
                            self._run_batch(conn, work)
                        except Exception as exc:  # a bug or a broken connection: fail
                            log.exception("custody writer failed a batch of %d jobs", len(work))
                            _rollback(conn)
                            for job in work:
                                job.value, job.error = None, exc
                if stop is not None:
                    self._conn = None  # no inline job touches it from here on
            self._wake(batch)
            if stop is not None:
                return

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Job[Any]]) -> None:
        if self._busy_zero:  # inline jobs ran since: the thread waits for a locked database
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_ms)}")
            self._busy_zero = False
        # Fast path: the whole batch in one transaction. If a job raises, roll everything back
        # and replay the batch with a savepoint per job so only that job's work is undone.
        # (Jobs are pure functions of the database, so a replay computes the same answers.)
        if not self._transaction(conn, batch, savepoints=False) and len(batch) > 1:
            self._transaction(conn, batch, savepoints=True)

    def _transaction(
        self, conn: sqlite3.Connection, batch: list[_Job[Any]], *, savepoints: bool
    ) -> bool:
        """Run ``batch`` in one transaction; False if a job failed on the fast path."""
        readonly = all(job.readonly for job in batch)
        try:
            conn.execute("BEGIN" if readonly else "BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            for job in batch:
                job.error = exc
            return True
        return self._body(conn, batch, savepoints=savepoints)

    def _body(self, conn: sqlite3.Connection, batch: list[_Job[Any]], *, savepoints: bool) -> bool:
        """Run ``batch`` in the transaction just begun and commit (or roll back) it."""
        for job in batch:
            if savepoints:
                conn.execute("SAVEPOINT job")
            if _capture(job, conn):
                if savepoints:
                    conn.execute("RELEASE job")
            elif savepoints:
                conn.execute("ROLLBACK TO job")
                conn.execute("RELEASE job")
            else:
                conn.execute("ROLLBACK")
                if len(batch) == 1:
                    return True  # its error stands, its work is undone
                for other in batch:
                    other.value, other.error = None, None
                return False
        try:
            conn.execute("COMMIT")
            self.commits += 1
        except sqlite3.Error as exc:
            log.exception("commit of %d jobs failed", len(batch))
            _rollback(conn)
            for job in batch:
                job.value, job.error = None, exc
        return True

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
        trio.lowlevel.reschedule(job.task)


def _rollback(conn: sqlite3.Connection) -> None:
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass


def _broken_error(cause: BaseException | None) -> BaseException:
    err = RuntimeError(f"the store's database could not be opened: {cause}")
    err.__cause__ = cause
    return err
