"""The SQLite writer runs a lone caller's transaction inline, and only then (issue #19).

Inline saves the two thread hops of a step when nobody else could share its commit; these
tests hold it to that: a lone caller goes inline, concurrent callers still share commits on
the thread, a database locked by another connection never stalls the event loop (the job waits
on the thread and completes once the lock is gone), and a failed inline job is rolled back
alone with its error raised to its caller.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import trio

from tether.bridge import SqliteStore, Task
from tether.bridge.custody._rules import CustodyConflict


async def test_a_lone_caller_runs_inline_and_its_steps_are_committed(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path / "c.db") as store:
        writer = store._writer
        before = writer.inline_jobs
        assert await store.ingest(Task("t1", "hello"))
        claim = await store.claim("w1", leaderless=True)
        assert claim is not None
        await store.complete(claim, "done")
        assert writer.inline_jobs == before + 3
        # committed: another connection (the reader's file view) sees the result
    check = sqlite3.connect(tmp_path / "c.db")
    try:
        assert check.execute("SELECT state, result FROM tasks").fetchall() == [("result", "done")]
        assert [r[0] for r in check.execute("SELECT dst FROM journal ORDER BY seq")] == [
            "pending",
            "claimed",
            "result",
        ]
    finally:
        check.close()


async def test_concurrent_callers_still_share_commits_on_the_thread(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path / "c.db") as store:
        commits = store.commits
        inline = store._writer.inline_jobs
        async with trio.open_nursery() as nursery:
            for k in range(16):
                nursery.start_soon(store.ingest, Task(f"t{k}", "x"))
        assert len(await store.in_flight()) == 16
        # at most the first caller (nothing else runnable yet) and the last go inline
        assert store._writer.inline_jobs - inline <= 2
        assert store.commits - commits < 8  # group commit: far fewer commits than callers


async def test_a_database_locked_elsewhere_never_stalls_the_event_loop(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path / "c.db", busy_timeout_s=30) as store:
        other = sqlite3.connect(tmp_path / "c.db", isolation_level=None, check_same_thread=False)
        try:
            other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            ticks = 0
            done = trio.Event()

            async def ingest() -> None:
                assert await store.ingest(Task("t1", "x"))
                done.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(ingest)
                while ticks < 5:  # the loop keeps running while the ingest waits for the lock
                    await trio.sleep(0.01)
                    ticks += 1
                assert not done.is_set()
                other.execute("COMMIT")
                await done.wait()
            assert [t.id for t in await store.pending()] == ["t1"]
        finally:
            other.close()


async def test_a_failed_inline_job_is_rolled_back_alone(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path / "c.db") as store:
        await store.ingest(Task("t1", "x"))
        inline = store._writer.inline_jobs
        await store.assign("t1", "w1")
        with pytest.raises(CustodyConflict):
            await store.assign("t1", "w2")  # already assigned: refused, nothing changed
        assert store._writer.inline_jobs == inline + 2
        [view] = [a for a in (await store.pool_view()).assigned]
        assert (view.id, view.worker) == ("t1", "w1")
        assert await store.ingest(Task("t2", "y"))  # the connection is usable after it
