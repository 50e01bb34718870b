"""Wake-ups: work moves at once when rung, not at the next sweep or poll (virtual time)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import trio

from support.pool_fixtures import StoreAwareClock
from support.waiting import wait_until
from tether import Session
from tether.agents import echo
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.custody import Claim
from tether.bridge.pool import PoolLead, PoolWorker, SweepReport
from tether.bridge.pool._wakeup import PoolWakeups, Wakeup
from tether.bridge.runs._retry import RetryBackoff

S = CustodyState
SLOW = 60.0
"""The sweep and poll intervals here: anything that waits for them takes a virtual minute."""
PROMPT = 0.5
"""What "at once" means in virtual seconds (the store's commits take no virtual time)."""


async def _answered(store: SqliteStore, n: int) -> bool:
    return (await store.counts())[S.RESULT] == n


async def test_a_wakeup_coalesces_rings_and_times_out_when_silent(
    mock_clock: StoreAwareClock,
) -> None:
    bell = Wakeup()
    start = trio.current_time()
    assert await bell.wait(2.0) is False
    assert trio.current_time() - start == 2.0
    bell.set()
    bell.set()
    start = trio.current_time()
    assert await bell.wait(2.0) is True  # a ring before the wait is kept, not missed
    assert trio.current_time() == start
    assert await bell.wait(2.0) is False  # both rings were one
    bell.set()
    bell.clear()
    assert await bell.wait(1.0) is False
    assert bell.rings == 3

    async def ring_later() -> None:
        await trio.sleep(0.25)
        bell.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ring_later)
        start = trio.current_time()
        assert await bell.wait(5.0) is True
        assert trio.current_time() - start == 0.25


async def test_a_rung_lead_and_worker_answer_a_task_without_waiting_for_sweep_or_poll(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    wakeups = PoolWakeups()
    lead = PoolLead(timed_store, sweep_interval=SLOW, wakeups=wakeups)
    worker = PoolWorker(
        timed_store, "w1", echo.factory, poll_interval=SLOW, heartbeat_interval=1.0, wakeups=wakeups
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(lead.run)
        await nursery.start(worker.run)
        await trio.sleep(3.0)  # both idle, mid-interval
        sweeps = lead.sweeps
        start = trio.current_time()
        await timed_store.ingest(Task("t1", "hello", room="r"))
        wakeups.tasks_pending()  # what ingest does after its commit
        await wait_until(lambda: _answered(timed_store, 1), within=PROMPT, step=0.01)
        assert trio.current_time() - start < PROMPT
        assert lead.sweeps > sweeps  # rung sweeps (the completion rings it once more)
        worker.request_stop()
        lead.request_stop()


async def test_without_a_ring_the_task_waits_for_the_sweep(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    """The control for the test above: the same pool without wake-ups waits out the sweep."""
    lead = PoolLead(timed_store, sweep_interval=SLOW)
    worker = PoolWorker(timed_store, "w1", echo.factory, poll_interval=SLOW, heartbeat_interval=1.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(lead.run)
        await nursery.start(worker.run)
        await trio.sleep(3.0)
        start = trio.current_time()
        await timed_store.ingest(Task("t1", "hello"))
        await wait_until(lambda: _answered(timed_store, 1), within=3 * SLOW, step=0.01)
        assert trio.current_time() - start > SLOW / 2
        worker.request_stop()
        lead.request_stop()


async def test_a_freed_slot_makes_the_lead_refill_the_worker_at_once(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    """More tasks than the worker's capacity: each completion rings the lead, which assigns
    the next ones, which rings the worker; nothing waits for an interval."""
    wakeups = PoolWakeups()
    lead = PoolLead(timed_store, sweep_interval=SLOW, wakeups=wakeups)
    worker = PoolWorker(
        timed_store,
        "w1",
        echo.factory,
        concurrency=2,
        poll_interval=SLOW,
        heartbeat_interval=1.0,
        wakeups=wakeups,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(lead.run)
        await nursery.start(worker.run)
        start = trio.current_time()
        await timed_store.ingest_many([Task(f"t{i:02}", f"m{i}") for i in range(20)])
        wakeups.tasks_pending()
        await wait_until(lambda: _answered(timed_store, 20), within=PROMPT, step=0.01)
        assert trio.current_time() - start < PROMPT
        worker.request_stop()
        lead.request_stop()


async def test_the_lead_rings_only_the_workers_it_assigned_to(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    wakeups = PoolWakeups()
    for name in ("w1", "w2"):
        await timed_store.beat(name, "worker", 4)
    await timed_store.ingest(Task("t1", "x"))
    lead = PoolLead(timed_store, wakeups=wakeups)
    report = await lead.sweep_once()
    [assigned] = report.assigned
    other = "w2" if assigned.worker == "w1" else "w1"
    assert wakeups.worker(assigned.worker).is_set()
    assert not wakeups.worker(other).is_set()
    assert not wakeups.lead.is_set()  # its own sweep consumed any ring before it read


async def test_a_leaderless_worker_is_rung_for_new_pending_tasks(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    wakeups = PoolWakeups()
    worker = PoolWorker(
        timed_store,
        "w1",
        echo.factory,
        poll_interval=SLOW,
        heartbeat_interval=1.0,
        lead_dead_after=2.0,
        wakeups=wakeups,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await trio.sleep(3.0)
        assert worker.leaderless
        start = trio.current_time()
        await timed_store.ingest(Task("t1", "hello"))
        wakeups.tasks_pending()
        await wait_until(lambda: _answered(timed_store, 1), within=PROMPT, step=0.01)
        assert trio.current_time() - start < PROMPT
        worker.request_stop()
    wakeups.tasks_pending()  # a worker that left is no longer rung for pending tasks
    assert not wakeups.worker("w1").is_set()


@attrs.define(eq=False)
class CountingStore:
    """A real store that records the size of every ``claim_many`` call."""

    inner: SqliteStore
    batches: list[int] = attrs.field(factory=list)

    async def claim_many(
        self,
        worker: str,
        limit: int,
        *,
        leaderless: bool = False,
        quarantine: int | None = None,
        queues: Sequence[str] = ("default",),
    ) -> Sequence[Claim]:
        self.batches.append(limit)
        return await self.inner.claim_many(
            worker, limit, leaderless=leaderless, quarantine=quarantine, queues=queues
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_worker_fills_all_its_free_slots_with_one_claim_many(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    gate = trio.Event()

    async def held(task: Task) -> str:
        await gate.wait()
        return f"done {task.id}"

    def factory(session: Any) -> None:
        session.add_handler("task", held)

    store = CountingStore(timed_store)
    await timed_store.ingest_many([Task(f"t{i}", "x") for i in range(6)])
    await timed_store.assign_many([(f"t{i}", "w1") for i in range(6)])
    worker = PoolWorker(
        store,
        "w1",
        factory,
        concurrency=4,
        poll_interval=SLOW,
        heartbeat_interval=1.0,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _claimed(timed_store, 4), within=PROMPT, step=0.01)
        assert store.batches == [4]  # four slots free: one call for all of them
        gate.set()
        await wait_until(lambda: _answered(timed_store, 6), within=PROMPT, step=0.01)
        assert sum(store.batches) >= 6
        worker.request_stop()


async def _claimed(store: SqliteStore, n: int) -> bool:
    return (await store.counts())[S.CLAIMED] == n


@attrs.define(eq=False)
class _TimedLead(PoolLead):
    starts: list[float] = attrs.field(factory=list, init=False)
    """When each sweep began (virtual time)."""

    async def sweep_once(self) -> SweepReport:
        self.starts.append(trio.current_time())
        return await super().sweep_once()


async def test_rings_under_load_gather_into_sweeps_min_sweep_gap_apart(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    wakeups = PoolWakeups()
    lead = _TimedLead(timed_store, sweep_interval=SLOW, wakeups=wakeups, min_sweep_gap=0.01)
    starts = lead.starts
    async with trio.open_nursery() as nursery:
        await nursery.start(lead.run)
        await trio.sleep(3.0)  # idle, mid-interval
        idle_ring = trio.current_time()
        wakeups.tasks_pending()
        await trio.sleep(0.001)
        assert starts[-1] == idle_ring  # after a quiet spell a ring sweeps at once
        for _ in range(100):  # a ring every millisecond for 0.1 s: a busy pool
            wakeups.tasks_pending()
            await trio.sleep(0.001)
        busy = [t for t in starts if t > idle_ring]
        gaps = [b - a for a, b in itertools.pairwise([idle_ring, *busy])]
        assert min(gaps) >= 0.01 - 1e-9
        assert 8 <= len(busy) <= 11  # every ring served, one sweep per gap
        lead.request_stop()


@pytest.mark.parametrize(("capacity", "held"), [(4, 0.0), (1, 0.2)])
async def test_a_ring_waits_out_min_sweep_gap_only_while_the_workers_are_full(
    timed_store: SqliteStore, mock_clock: StoreAwareClock, capacity: int, held: float
) -> None:
    """A message that lands just after the periodic sweep found the pool idle is assigned at
    once, not ``min_sweep_gap`` later; so is one just after a sweep that assigned work, while
    the workers have room for more (a lone message never waits). Only when the last sweep left
    the workers full do rings gather for the gap."""
    wakeups = PoolWakeups()
    await timed_store.beat("w1", "worker", capacity)
    lead = _TimedLead(timed_store, sweep_interval=1.0, wakeups=wakeups, min_sweep_gap=0.2)
    starts = lead.starts
    async with trio.open_nursery() as nursery:
        await nursery.start(lead.run)
        await wait_until(lambda: _n_sweeps(starts, 3), within=5.0, step=0.001)
        await trio.sleep(0.01)  # just after a sweep on the clock that found nothing
        await timed_store.ingest(Task("a", "x"))
        wakeups.tasks_pending()
        rung = trio.current_time()
        await wait_until(lambda: _assigned(timed_store, "a"), within=PROMPT, step=0.001)
        assert starts[-1] == rung  # not held to min_sweep_gap after the quiet sweep
        await trio.sleep(0.01)  # just after the sweep that assigned "a"
        await timed_store.ingest(Task("b", "x"))
        wakeups.tasks_pending()
        again, swept = trio.current_time(), len(starts)
        if held:  # w1 is full: "b" waits for the lead's next sweep after the gap
            await wait_until(lambda: _n_sweeps(starts, swept + 1), within=PROMPT)
            assert starts[-1] == rung + held
        else:
            await wait_until(lambda: _assigned(timed_store, "b"), within=PROMPT, step=0.001)
            assert starts[-1] == again
        lead.request_stop()


async def _n_sweeps(starts: list[float], n: int) -> bool:
    return len(starts) >= n


async def _assigned(store: SqliteStore, id: str) -> bool:
    return await store.state(id) == S.ASSIGNED


async def test_a_sweep_rung_by_new_pending_tasks_skips_the_look(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    """After a sweep that drained the queue, a sweep rung by ingest goes straight to the
    writer: the look (a read) would only find the new task it was rung for."""
    wakeups = PoolWakeups()
    store = _ReadCountingStore(timed_store)
    await timed_store.beat("w1", "worker", 4)
    lead = PoolLead(store, sweep_interval=SLOW, wakeups=wakeups)
    await timed_store.ingest(Task("a", "x"))
    wakeups.tasks_pending()
    assert [a.id for a in (await lead.sweep_once()).assigned] == ["a"]  # drained
    assert store.views == 0
    assert (await lead.sweep_once()).assigned == ()  # not rung: a look, read only
    assert (store.views, lead.looks) == (1, 1)
    await timed_store.ingest(Task("b", "x"))
    wakeups.tasks_pending()
    assert [a.id for a in (await lead.sweep_once()).assigned] == ["b"]
    assert (store.views, lead.looks) == (1, 1)  # no read before the sweep


@attrs.define(eq=False)
class _ReadCountingStore:
    """A store that counts the pool views read outside a sweep's transaction (looks)."""

    inner: SqliteStore
    views: int = 0

    async def pool_view(self, **kwargs: Any) -> Any:
        self.views += 1
        return await self.inner.pool_view(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_freed_slot_costs_a_sweep_only_while_tasks_wait_for_capacity(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    wakeups = PoolWakeups()
    await timed_store.beat("w1", "worker", 1)
    lead = PoolLead(timed_store, sweep_interval=SLOW, wakeups=wakeups)
    await timed_store.ingest_many([Task("t1", "a"), Task("t2", "b")])
    report = await lead.sweep_once()
    assert (len(report.assigned), report.waiting) == (1, 1)  # w1 is full: t2 waits
    assert wakeups.capacity_wanted
    wakeups.capacity_freed()
    assert wakeups.lead.is_set()  # the freed slot can take t2: sweep now
    claim = await timed_store.claim("w1")
    assert claim is not None
    await timed_store.complete(claim, "done")
    report = await lead.sweep_once()
    assert (len(report.assigned), report.waiting) == (1, 0)
    assert not wakeups.capacity_wanted  # nothing waits: a freed slot has nothing to take
    wakeups.capacity_freed()
    assert not wakeups.lead.is_set()
    wakeups.tasks_pending()  # new tasks still ring it
    assert wakeups.lead.is_set()


async def test_a_task_failed_back_to_pending_is_reassigned_without_waiting_for_the_sweep(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    """The pool has no other work, so the freed slot does not ring the lead: the failure's
    own ring (a task back to pending) does, and the retry runs at once."""
    wakeups = PoolWakeups()
    calls = 0

    def factory(session: Session) -> None:
        @session.on("task")
        async def flaky(task: Task) -> str:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise ValueError("first attempt fails")
            return "ok"

    lead = PoolLead(timed_store, sweep_interval=SLOW, wakeups=wakeups)
    worker = PoolWorker(
        timed_store,
        "w1",
        factory,
        poll_interval=SLOW,
        heartbeat_interval=1.0,
        wakeups=wakeups,
        retry_backoff=RetryBackoff(0, 0),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(lead.run)
        await nursery.start(worker.run)
        await trio.sleep(3.0)
        start = trio.current_time()
        await timed_store.ingest(Task("t1", "hello"))
        wakeups.tasks_pending()
        await wait_until(lambda: _answered(timed_store, 1), within=PROMPT, step=0.01)
        assert trio.current_time() - start < PROMPT
        assert calls == 2
        worker.request_stop()
        lead.request_stop()
