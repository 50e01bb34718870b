"""SQLite durable at promises: which calls sync the WAL, and that a promise waits for it.

The end-to-end proof (a machine crash cut at random moments) is
``tests/service/test_durable_at_promises.py``; these pin where the barrier runs.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import trio

from support.waiting import wait_until
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.stores.sqlite._durable import wal_barrier


async def _counting(store: SqliteStore) -> list[int]:
    calls: list[int] = []
    real = store.db.writer.barrier
    assert real is not None

    def barrier() -> None:
        real()
        calls.append(1)

    store.db.writer.barrier = barrier
    return calls


async def test_only_promises_sync_the_wal(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path / "c.db") as store:
        synced = await _counting(store)
        await store.ingest_many([Task("t1", "a"), Task("t2", "b")])  # its ack follows
        assert len(synced) == 1
        assert await store.ready_results() == []  # nothing found: nothing promised
        claim = await store.claim("w0", leaderless=True)
        assert claim is not None
        claim = await store.renew(claim)
        await store.complete(claim, "done")
        assert len(synced) == 1  # claim, renew, complete promise nothing outside
        [result] = await store.ready_results()  # its post follows
        assert len(synced) == 2
        await store.mark_delivered(result.task.id)
        assert len(synced) == 2
        await store.cancel(["t2"], "an operator's move")  # the operator is answered
        assert len(synced) == 3


async def test_a_step_record_is_synced_before_the_step_returns(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path / "c.db") as store:
        await store.ingest(Task("t1", "a"))
        synced = await _counting(store)
        claim = await store.claim("w0", leaderless=True)
        assert claim is not None
        assert len(synced) == 0
        await store.record_step(claim, "book", '"ref-1"')  # its effect has left already
        assert len(synced) == 1


async def test_a_promise_is_not_made_when_the_sync_fails(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path / "c.db") as store:

        def broken() -> None:
            raise OSError(5, "Input/output error")

        store.db.writer.barrier = broken
        with pytest.raises(OSError, match="Input/output"):
            await store.ingest(Task("t1", "a"))  # so no ack is sent
        claim = await store.claim("w0", leaderless=True)  # the commit itself stands
        assert claim is not None
        await store.complete(claim, "done")  # promises nothing: no sync, no error
        with pytest.raises(OSError, match="Input/output"):
            await store.ready_results()  # found a result: its post would be a promise


async def test_the_writer_commits_on_while_a_barrier_runs(tmp_path: Path) -> None:
    """Issue 49: the barrier runs in a thread of its own. While it syncs, the writer commits
    the next batch and answers the jobs that promise nothing; a promise committed meanwhile
    waits for the next barrier (one begun after its commit), never for the one in flight."""
    async with await SqliteStore.open(tmp_path / "c.db") as store:
        real = store.db.writer.barrier
        assert real is not None
        entered, release = threading.Event(), threading.Event()
        syncs: list[int] = []

        def slow_barrier() -> None:
            syncs.append(1)
            if len(syncs) == 1:
                entered.set()
                release.wait()
            real()

        store.db.writer.barrier = slow_barrier
        acked: list[tuple[str, int]] = []  # (id, barriers begun by its ack)
        async with trio.open_nursery() as nursery:

            async def ingest(id: str) -> None:
                await store.ingest(Task(id, "x"))
                acked.append((id, len(syncs)))

            nursery.start_soon(ingest, "t1")
            await trio.to_thread.run_sync(entered.wait)  # t1 committed, its barrier runs
            claim = await store.claim("w0", leaderless=True)  # answered at its commit
            assert claim is not None
            assert claim.task.id == "t1"
            nursery.start_soon(ingest, "t2")
            await wait_until(lambda: _state_is(store, "t2", CustodyState.PENDING), within=5)
            assert acked == []  # t1 waits for its barrier; t2 for one begun after its commit
            release.set()
        # Both wake in one batch when the second barrier is quick: Trio may run either first.
        assert sorted(acked) == [("t1", 2), ("t2", 2)] or sorted(acked) == [("t1", 1), ("t2", 2)]
        assert len(syncs) == 2


async def test_an_ingest_rings_the_pool_at_its_commit_not_after_its_sync(tmp_path: Path) -> None:
    """Issue 49: the process's pool hears of a new task as its commit is done, so the lead's
    sweep runs while the ack's sync does (nothing leaves the process on it: every outside
    effect of the run is a promise, synced after the ingest's frames). A replayed ingest
    rings nothing."""
    async with await SqliteStore.open(tmp_path / "c.db") as store:
        real = store.db.writer.barrier
        assert real is not None
        entered, release = threading.Event(), threading.Event()

        def held_barrier() -> None:
            entered.set()
            release.wait()
            real()

        rang: list[bool] = []
        acked = trio.Event()
        store.db.writer.barrier = held_barrier
        with store.work_bell.listening(lambda: rang.append(acked.is_set())):
            async with trio.open_nursery() as nursery:

                async def ingest() -> None:
                    await store.ingest(Task("t1", "x"))
                    acked.set()

                nursery.start_soon(ingest)
                await trio.to_thread.run_sync(entered.wait)
                await wait_until(lambda: _rang(rang), within=5)
                assert rang == [False]  # rung while the ack still waits for its sync
                release.set()
            store.db.writer.barrier = real
            assert await store.ingest(Task("t1", "x")) is False
            assert rang == [False]


async def _rang(rang: list[bool]) -> bool:
    return bool(rang)


async def test_a_lone_promise_is_synced_by_the_writer_and_an_ingest_by_the_syncer(
    tmp_path: Path,
) -> None:
    """The syncer thread is for overlap: an ingest (whose commit the pool acts on at once) is
    synced there while the writer goes on; a lone step record, with nothing to commit
    meanwhile, is synced by the writer itself (no thread's wake-up added to its wait)."""
    async with await SqliteStore.open(tmp_path / "c.db") as store:
        writer = store.db.writer
        real = writer.barrier
        assert real is not None
        threads: list[str] = []

        def barrier() -> None:
            threads.append(threading.current_thread().name)
            real()

        writer.barrier = barrier
        await store.ingest(Task("t1", "a"))
        claim = await store.claim("w0", leaderless=True)
        assert claim is not None
        await store.record_step(claim, "book", '"ref-1"')
        assert threads == [f"{writer.name}-sync", writer.name]


async def _state_is(store: SqliteStore, id: str, state: CustodyState) -> bool:
    return await store.state(id) is state


async def test_full_syncs_every_commit_and_needs_no_barrier(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path / "c.db", synchronous="FULL") as store:
        assert store.db.writer.barrier is None
        await store.ingest(Task("t1", "a"))
        assert store.db.writer.barriers == 0


def test_the_barrier_syncs_the_wal_file_and_nothing_while_there_is_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []  # the inode of each file the barrier syncs
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    db = tmp_path / "c.db"
    wal = db.with_name("c.db-wal")
    wal_barrier(db)()  # no -wal file: the last connection checkpointed it
    assert synced == []
    assert not wal.exists()  # and the barrier made none
    wal.write_bytes(b"x")
    wal_barrier(db)()
    assert synced == [wal.stat().st_ino]  # the WAL, once, and not the store file
    assert wal.read_bytes() == b"x"  # synced, never written
