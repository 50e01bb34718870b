"""A lead and workers running together as services on the store-aware virtual clock."""

from __future__ import annotations

import collections
import logging
from functools import partial

import pytest
import trio

import tether
from support.pool_fixtures import StoreAwareClock
from support.waiting import wait_until
from tether import Session
from tether.agents import echo
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.pool import PoolLead, PoolWorker, Reconciler

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
        for task in tasks:  # arriving over time, each after the last was answered: no keeper
            await timed_store.ingest(task, room_policy="concurrent")  # is ever busy, so no
            await trio.sleep(0.5)  # room has a reason to move (affinity is a preference: a
            # saturated keeper's room moves)
        await wait_until(lambda: _all(timed_store, S.RESULT, len(tasks)))
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
            await wait_until(lambda: _all(timed_store, S.RESULT, 1))
            assert not worker.leaderless
            lead.request_stop()
        # the lead removed its beat on the way out: no need to wait out dead_after
        await trio.sleep(0.6)
        assert worker.leaderless
        await timed_store.ingest(Task("without-lead", "x"))
        await wait_until(lambda: _all(timed_store, S.RESULT, 2))
        async with trio.open_nursery() as lead_scope:
            lead = PoolLead(timed_store, sweep_interval=0.2)
            await lead_scope.start(lead.run)
            await trio.sleep(0.6)
            assert not worker.leaderless
            lead.request_stop()
        worker.request_stop()


async def test_services_run_again_after_a_stop_as_a_supervisor_restarts_them(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    lead = PoolLead(timed_store, sweep_interval=0.2)
    worker = PoolWorker(timed_store, "w1", echo.factory)
    for n in (1, 2):
        async with trio.open_nursery() as nursery:
            await nursery.start(lead.run)
            await nursery.start(worker.run)
            await timed_store.ingest(Task(f"t{n}", "x"))
            await wait_until(partial(_all, timed_store, S.RESULT, n))
            worker.request_stop()
            lead.request_stop()
    assert lead.sweeps > 2
    assert worker.counts.completed == 2


async def test_the_supervisors_soft_stop_lets_a_worker_finish_then_release(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    async def slow(task: Task) -> str:
        await trio.sleep(1.0 if task.id == "quick" else 3600)
        return "done"

    def factory(session: Session) -> None:
        session.add_handler("task", slow)

    lead = PoolLead(timed_store, sweep_interval=0.2)
    worker = PoolWorker(timed_store, "w1", factory, stop_grace=2.0)
    await timed_store.ingest(Task("quick", "x"))
    await timed_store.ingest(Task("endless", "x"))
    async with tether.open_supervisor(name="pool") as sup:
        await sup.start_child(tether.ChildSpec("lead", lead.run, shutdown_grace=5.0))
        await sup.start_child(tether.ChildSpec("w1", worker.run, shutdown_grace=5.0))
        await wait_until(partial(_all, timed_store, S.CLAIMED, 2))
        started = trio.current_time()
        await sup.terminate_child("w1")
        stopped_after = trio.current_time() - started
        await sup.terminate_child("lead")
    assert 1.9 <= stopped_after <= 2.5  # the worker's own grace, not the supervisor's cancel
    assert await timed_store.state("quick") is S.RESULT  # finished within the grace
    rec = await timed_store.get("endless")
    assert rec is not None
    assert (rec.state, rec.attempt) == (S.PENDING, 1)  # released, no attempt burned
    assert (worker.counts.completed, worker.counts.released) == (1, 1)
    assert await timed_store.workers() == []  # the lead removed its beat too


async def test_a_supervised_reconciler_honours_the_soft_stop_at_once(
    timed_store: SqliteStore, mock_clock: StoreAwareClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 21.1: ``ChildSpec("reconciler", Reconciler(store).run)`` stops when asked, not after
    the supervisor's grace and its "did not stop" warning."""
    reconciler = Reconciler(timed_store)
    with caplog.at_level(logging.INFO, logger="tether.supervisor"):
        async with tether.open_supervisor(name="bridge") as sup:
            await sup.start_child(tether.ChildSpec("reconciler", reconciler.run))
            await trio.sleep(12)  # a few passes (interval 5 s)
            started = trio.current_time()
            await sup.terminate_child("reconciler")
            stopped_after = trio.current_time() - started
    assert stopped_after < 0.5  # the default shutdown_grace is 5 s
    assert not [r for r in caplog.records if "did not stop" in r.getMessage()]
    assert reconciler.passes == 3  # at 0, 5 and 10: none after the stop
    # the supervisor can run the same object again (each run starts unstopped)
    async with tether.open_supervisor(name="bridge") as sup:
        await sup.start_child(tether.ChildSpec("reconciler", reconciler.run))
        await trio.sleep(6)
        await sup.terminate_child("reconciler")
    assert reconciler.passes == 5
