"""A lead and workers running together as services on the store-aware virtual clock."""

from __future__ import annotations

import collections

import trio

from tether.agents import echo
from tether.bridge import CustodyState, PoolLead, PoolWorker, SqliteStore, Task

from .conftest import StoreAwareClock
from .pool_support import wait_for

S = CustodyState


async def _all(store: SqliteStore, state: S, n: int) -> bool:
    return (await store.counts())[state] == n


async def test_a_lead_and_two_workers_answer_everything_keeping_rooms_together(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    lead = PoolLead(timed_store, sweep_interval=0.2, dead_after=5.0)
    workers = [PoolWorker(timed_store, f"w{i}", echo.factory, concurrency=2) for i in range(2)]
    tasks = [Task(f"t{i:02}", f"m{i}", room=f"room-{i % 5}") for i in range(30)]
    async with trio.open_nursery() as nursery:
        await nursery.start(lead.run)
        for w in workers:
            await nursery.start(w.run)
        for task in tasks:  # arriving over time, not all at once
            await timed_store.ingest(task)
            await trio.sleep(0.05)
        await wait_for(lambda: _all(timed_store, S.RESULT, len(tasks)))
        assert not any(w.leaderless for w in workers)
        for w in workers:
            w.request_stop()
        lead.request_stop()
    results = await timed_store.ready_results(limit=100)
    assert sorted(r.body for r in results) == sorted(f"echo: {t.body}" for t in tasks)
    per_room = collections.defaultdict(set)
    for r in results:
        per_room[r.task.room].add(r.worker)
    assert all(len(ws) == 1 for ws in per_room.values()), per_room
    assert {w for ws in per_room.values() for w in ws} == {"w0", "w1"}
    assert all(r.attempt == 1 for r in results)
    assert await timed_store.workers() == []  # every member left cleanly


async def test_workers_go_leaderless_when_the_lead_stops_and_back_when_it_returns(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    worker = PoolWorker(timed_store, "w1", echo.factory, heartbeat_interval=0.5)
    async with trio.open_nursery() as nursery:
        async with trio.open_nursery() as lead_scope:
            lead = PoolLead(timed_store, sweep_interval=0.2)
            await lead_scope.start(lead.run)
            await nursery.start(worker.run)
            await timed_store.ingest(Task("with-lead", "x"))
            await wait_for(lambda: _all(timed_store, S.RESULT, 1))
            assert not worker.leaderless
            lead.request_stop()
        # the lead removed its beat on the way out: no need to wait out dead_after
        await trio.sleep(0.6)
        assert worker.leaderless
        await timed_store.ingest(Task("without-lead", "x"))
        await wait_for(lambda: _all(timed_store, S.RESULT, 2))
        async with trio.open_nursery() as lead_scope:
            lead = PoolLead(timed_store, sweep_interval=0.2)
            await lead_scope.start(lead.run)
            await trio.sleep(0.6)
            assert not worker.leaderless
            lead.request_stop()
        worker.request_stop()
