"""The lead claims for its own process's workers in its sweep (issue 49, ``pool._hands``).

A pending task reaches its run through the sweep's one transaction: the worker makes no
claim of its own and needs no wake-up; the slots it lends are never overfilled, and a slot
lent for a sweep that claimed nothing comes back (virtual time)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
import trio

from support.pool_fixtures import StoreAwareClock
from support.waiting import wait_until
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.custody import Hand, SweepPlanner, Swept
from tether.bridge.pool import PoolLead, PoolWorker
from tether.bridge.pool._wakeup import PoolWakeups

S = CustodyState
PROMPT = 5.0


def _claim_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The workers' own ``claim_many`` calls, by worker name."""
    calls: list[str] = []
    real = SqliteStore.claim_many

    async def counted(self: SqliteStore, worker: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(worker)
        return await real(self, worker, *args, **kwargs)

    monkeypatch.setattr(SqliteStore, "claim_many", counted)
    return calls


def _gated(running: list[str], gates: list[trio.Event], most: list[int]) -> Callable[[Any], None]:
    """An agent whose runs wait for the newest of ``gates``, noting the most at once."""

    async def handle(task: Task) -> str:
        running.append(task.id)
        most[0] = max(most[0], len(running))
        await gates[-1].wait()
        running.remove(task.id)
        return f"done {task.id}"

    def factory(session: Any) -> None:
        session.add_handler("task", handle)

    return factory


async def _results(store: SqliteStore, n: int) -> bool:
    return (await store.counts())[S.RESULT] == n


async def test_a_lone_task_runs_from_the_sweeps_own_claim(
    timed_store: SqliteStore, mock_clock: StoreAwareClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _claim_calls(monkeypatch)
    wakeups = PoolWakeups()
    lead = PoolLead(timed_store, sweep_interval=1.0, wakeups=wakeups)
    worker = PoolWorker(
        timed_store, "w1", _gated([], _open(), [0]), poll_interval=1.0, wakeups=wakeups
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(lead.run)
        await nursery.start(worker.run)
        await trio.sleep(30)  # idle: the worker's own claims back off
        looked, rings = len(calls), wakeups.worker("w1").rings
        begun = trio.current_time()
        await timed_store.ingest(Task("t1", "x"))
        wakeups.tasks_pending()  # what an ingest in a service's process rings
        await wait_until(lambda: _results(timed_store, 1), within=PROMPT, step=0.001)
        assert trio.current_time() - begun < 0.01  # no poll, no sweep gap
        assert wakeups.hands.handed == 1
        assert len(calls) == looked  # the worker made no claim for it
        assert wakeups.worker("w1").rings == rings  # nor was it rung to claim
        nursery.cancel_scope.cancel()


def _open() -> list[trio.Event]:
    gate = trio.Event()
    gate.set()
    return [gate]


async def test_handed_claims_never_overfill_a_workers_slots(
    timed_store: SqliteStore, mock_clock: StoreAwareClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten tasks, two workers of two slots each asking for four: the sweep claims two for
    each and leaves the rest assigned; the workers claim those as slots free. At most two
    runs at a time per worker, all ten answered, and the slots are whole afterwards (two
    more tasks run at once on each worker, handed again)."""
    calls = _claim_calls(monkeypatch)
    wakeups = PoolWakeups()
    lead = PoolLead(timed_store, sweep_interval=1.0, wakeups=wakeups)
    gates = [trio.Event()]
    running: dict[str, list[str]] = {"w1": [], "w2": []}
    most = {"w1": [0], "w2": [0]}
    workers = [
        PoolWorker(
            timed_store,
            name,
            _gated(running[name], gates, most[name]),
            concurrency=2,
            capacity=4,
            poll_interval=1.0,
            wakeups=wakeups,
        )
        for name in ("w1", "w2")
    ]
    async with trio.open_nursery() as nursery:
        await nursery.start(lead.run)
        for w in workers:
            await nursery.start(w.run)
        await trio.sleep(5)
        await timed_store.ingest_many([Task(f"t{i}", "x") for i in range(10)])
        wakeups.tasks_pending()

        async def four_running() -> bool:
            return len(running["w1"]) + len(running["w2"]) == 4

        await wait_until(four_running, within=PROMPT)
        assert wakeups.hands.handed == 4
        assert (await timed_store.counts())[S.ASSIGNED] == 4  # capacity 4 each: 2 waiting
        gates[-1].set()
        await wait_until(lambda: _results(timed_store, 10), within=PROMPT, step=0.001)
        assert (most["w1"][0], most["w2"][0]) == (2, 2)
        assert calls  # what was left assigned, the workers claimed themselves
        gates.append(trio.Event())
        await timed_store.ingest_many([Task(f"u{i}", "x") for i in range(4)])
        wakeups.tasks_pending()
        await wait_until(four_running, within=PROMPT)  # every slot came back to its worker
        gates[-1].set()
        await wait_until(lambda: _results(timed_store, 14), within=PROMPT, step=0.001)
        nursery.cancel_scope.cancel()


@attrs.define(eq=False)
class _HeldSweeps:
    """A store whose ``plan_assign_and_claim`` waits for ``release`` once ``hold`` is set."""

    store: SqliteStore
    hold: bool = False
    entered: trio.Event = attrs.field(factory=trio.Event)
    release: trio.Event = attrs.field(factory=trio.Event)

    async def plan_assign_and_claim(
        self, decide: SweepPlanner, *, pending_limit: int = 1000, hands: dict[str, Hand]
    ) -> Swept:
        if self.hold and hands:
            self.entered.set()
            await self.release.wait()
        return await self.store.plan_assign_and_claim(
            decide, pending_limit=pending_limit, hands=hands
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def test_a_worker_stopping_mid_sweep_still_runs_what_the_sweep_claimed_for_it(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    """The worker leaves its claim loop while a sweep holding its slots is in the store: it
    waits for that sweep, so the claim made for it is run (within its stop grace), never left
    claimed by nobody until its lease lapses."""
    held = _HeldSweeps(timed_store)
    wakeups = PoolWakeups()
    lead = PoolLead(held, sweep_interval=1.0, wakeups=wakeups)  # type: ignore[arg-type]
    worker = PoolWorker(timed_store, "w1", _gated([], _open(), [0]), wakeups=wakeups)
    async with trio.open_nursery() as nursery:
        await nursery.start(lead.run)
        await nursery.start(worker.run)
        held.hold = True
        await timed_store.ingest(Task("t1", "x"))
        wakeups.tasks_pending()
        await held.entered.wait()
        stopped = trio.Event()

        async def stop_worker() -> None:
            worker.request_stop()
            stopped.set()

        nursery.start_soon(stop_worker)
        await stopped.wait()
        await trio.sleep(0.01)  # the worker is leaving; the sweep is still in the store
        held.release.set()
        await wait_until(lambda: _results(timed_store, 1), within=PROMPT, step=0.001)
        assert wakeups.hands.handed == 1
        nursery.cancel_scope.cancel()
