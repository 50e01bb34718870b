"""One writer thread with group commit: many callers' transitions share one durable commit.

No caller is answered before its change is committed, and a job that raises is rolled back alone.
A job may be a *promise* (something outside will learn of it): if the writer has a ``barrier``
(the connection commits without waiting for the disk), the barrier runs after the batch's commit
and before any of its promise jobs is answered. When there is work to commit meanwhile, the
barrier runs in a syncer thread of its own, so the writer commits the next batch while it
syncs and a batch's other jobs are answered at its commit (issue 49): one barrier covers every
commit made before it began, so the promises queued while it runs wait for the next one. See
docs/guide/design.md, "Group commit" and "Durable at promises".
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
    promise: bool
    token: trio.lowlevel.TrioToken | None  # None: nobody waits (``close_now``'s stop job)
    task: trio.lowlevel.Task | None
    value: Any = None
    error: BaseException | None = None
    committed: Callable[[Any], None] | None = None
    """Called with the job's value in the caller's Trio thread as its commit is done, before
    a promise's barrier (``SqliteWriter.run``)."""


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
    barrier: Callable[[], None] | None = None
    """Makes every commit so far durable (syncs the WAL); run in the thread after a batch that
    holds a promise. None: each commit is durable already (``synchronous=FULL``)."""
    after_commit: Callable[[], None] | None = None
    """Run in the thread after each batch's transaction (the SQLite store tells other
    processes what the commit made: ``bridge.stores.sqlite._news``)."""
    commits: int = attrs.field(init=False, default=0)
    """Committed batches so far (a benchmark reads it to show jobs per commit)."""
    barriers: int = attrs.field(init=False, default=0)
    """Barriers run so far (a benchmark reads it to show syncs per message)."""
    _queue: queue.SimpleQueue[_Job[Any]] = attrs.field(init=False, factory=queue.SimpleQueue)
    _thread: threading.Thread | None = attrs.field(init=False, default=None)
    _to_sync: queue.SimpleQueue[list[_Job[Any]] | None] = attrs.field(
        init=False, factory=queue.SimpleQueue
    )
    """Committed promise jobs waiting for the barrier (None: the syncer stops)."""
    _syncer: threading.Thread | None = attrs.field(init=False, default=None)
    _closed: bool = attrs.field(init=False, default=False)
    _broken: BaseException | None = attrs.field(init=False, default=None)

    async def start(self) -> None:
        """Start the thread, connect, and return once the connection is ready (or raise)."""
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        if self.barrier is not None:
            self._syncer = threading.Thread(
                target=self._sync_loop, name=f"{self.name}-sync", daemon=True
            )
            self._syncer.start()
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
        promise: bool = False,
        committed: Callable[[T], None] | None = None,
    ) -> T:
        """Run ``fn(conn)`` in the writer's next transaction; return after it is committed, and
        for a ``promise`` after it (and every commit before it) is durable.

        ``committed(value)`` runs in this Trio thread as soon as the commit is done, before the
        promise's barrier (if ``fn`` raised or the commit failed, never): what may act on the
        commit inside the process without a promise (the pool's wake-up after an ingest) need
        not wait for the disk, and the caller, answered after the barrier, sees it done."""
        await trio.lowlevel.checkpoint_if_cancelled()  # cancelled before: nothing is queued
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")
        job: _Job[T] = _Job(
            fn,
            readonly,
            promise,
            trio.lowlevel.current_trio_token(),
            trio.lowlevel.current_task(),
            committed=committed,
        )
        global _in_flight
        _in_flight += 1
        self._queue.put(job)
        # Once queued the job will run, so the wait cannot be cancelled: the caller learns the
        # outcome (a claim abandoned by a cancelled caller would sit out a whole lease) and a
        # pending cancellation strikes at its next checkpoint. (Cheaper than a shielded scope.)
        try:
            await trio.lowlevel.wait_task_rescheduled(_uncancellable)
        finally:
            _in_flight -= 1
        if job.error is not None:
            raise job.error
        return job.value  # type: ignore[no-any-return]

    async def sync(self) -> None:
        """Return once every commit so far is durable (a promise that writes nothing: before
        one made on what a read found)."""
        await self.run(_nothing, readonly=True, promise=True)

    async def close(self) -> None:
        """Finish every queued job, close the connection, stop the thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._thread is None:
            return
        stop: _Job[None] = _Job(
            None, True, False, trio.lowlevel.current_trio_token(), trio.lowlevel.current_task()
        )
        self._queue.put(stop)
        await trio.lowlevel.wait_task_rescheduled(_uncancellable)
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._thread.join)

    def close_now(self) -> None:
        """``close`` for a caller that cannot await (a ``finally`` that may be cancelled): the
        jobs already queued still run and are answered; then the thread closes the connection
        and stops, and this returns (it blocks the caller for those jobs only)."""
        if self._closed:
            return
        self._closed = True
        if self._thread is None:
            return
        self._queue.put(_Job(None, True, False, None, None))
        self._thread.join()

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
            self._stop_syncer()
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
                    try:
                        self._run_batch(conn, work)
                    except Exception as exc:  # a bug or a broken connection: fail, never hang
                        log.exception("custody writer failed a batch of %d jobs", len(work))
                        try:
                            conn.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass
                        for job in work:
                            job.value, job.error = None, exc
            self._tell_committed(work)
            promised = [job for job in work if job.promise and job.error is None]
            if promised and self.barrier is not None:
                if self._syncer is not None and self._overlaps(promised):
                    self._to_sync.put(promised)  # answered once the syncer's barrier has run
                    batch = [job for job in batch if not (job.promise and job.error is None)]
                else:
                    self._run_barrier(promised)
            if stop is not None:
                self._stop_syncer()  # every promise is answered before the writer stops
            self._wake(batch)
            if stop is not None:
                return

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Job[Any]]) -> None:
        # Fast path: the whole batch in one transaction. If a job raises, roll everything back
        # and replay the batch with a savepoint per job so only that job's work is undone.
        # (Jobs are pure functions of the database, so a replay computes the same answers.)
        if not self._transaction(conn, batch, savepoints=False) and len(batch) > 1:
            self._transaction(conn, batch, savepoints=True)
        if self.after_commit is not None:
            self.after_commit()

    def _overlaps(self, promised: list[_Job[Any]]) -> bool:
        """Is there work to commit while these promises' barrier runs? Jobs already queued,
        or a commit the process acts on at once (``committed``: an ingest rings the pool,
        whose sweep follows). Otherwise the writer runs the barrier itself: handing it to the
        syncer would only add a thread's wake-up to a lone caller's wait (a run's steps)."""
        return not self._queue.empty() or any(job.committed is not None for job in promised)

    def _run_barrier(self, jobs: list[_Job[Any]]) -> None:
        """Make every commit so far durable for ``jobs``; a failed sync fails them."""
        assert self.barrier is not None
        try:
            self.barrier()
            self.barriers += 1
        except OSError as exc:  # not durable: no promise may be made on it
            log.exception("custody writer could not sync the WAL")
            for job in jobs:
                job.value, job.error = None, exc

    def _sync_loop(self) -> None:
        """The syncer thread: run the barrier for every promise committed before it begins,
        then answer them; promises committed meanwhile wait for the next barrier."""
        assert self.barrier is not None
        while True:
            waiting = [self._to_sync.get()]
            while True:
                try:
                    waiting.append(self._to_sync.get_nowait())
                except queue.Empty:
                    break
            jobs = [job for batch in waiting if batch is not None for job in batch]
            if jobs:
                self._run_barrier(jobs)
                self._wake(jobs)
            if None in waiting:
                return

    def _stop_syncer(self) -> None:
        """Answer every promise queued for the syncer, then stop it (the writer's thread)."""
        syncer, self._syncer = self._syncer, None
        if syncer is not None:
            self._to_sync.put(None)
            syncer.join()

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
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            for job in batch:
                job.value, job.error = None, exc
        return True

    @staticmethod
    def _tell_committed(work: list[_Job[Any]]) -> None:
        for job in work:
            if job.committed is not None and job.error is None and job.token is not None:
                try:
                    job.token.run_sync_soon(_call_committed, job.committed, job.value)
                except trio.RunFinishedError:
                    pass

    @staticmethod
    def _wake(batch: list[_Job[Any]]) -> None:
        by_token: dict[trio.lowlevel.TrioToken, list[_Job[Any]]] = {}
        for job in batch:
            if job.token is not None:
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


def _nothing(_conn: sqlite3.Connection) -> None:
    return None


def _call_committed(committed: Callable[[Any], None], value: Any) -> None:
    """A ``committed`` callback, in the Trio thread: an error is logged, never raised into the
    run (``run_sync_soon`` would crash it) nor into the job, whose commit stands."""
    try:
        committed(value)
    except Exception:
        log.exception("a commit's callback failed")


def _set_all(jobs: list[_Job[Any]]) -> None:
    for job in jobs:
        assert job.task is not None
        trio.lowlevel.reschedule(job.task)


def _broken_error(cause: BaseException | None) -> BaseException:
    err = RuntimeError(f"the store's database could not be opened: {cause}")
    err.__cause__ = cause
    return err
