"""A run waiting for a permit of a capped key (issue #47, item 3): past ``park_after`` it
parks once (``waiting``, its worker slot free) and wakes when a holder gives a permit back,
not on a timer that brings it back to wait, park and be journaled again every few seconds; the
run-time histogram counts runs that answered, ``permit_wait`` the waits."""

from __future__ import annotations

import trio

from support.agents.handler import agent
from support.pool_fixtures import StoreAwareClock
from support.waiting import wait_until
from tether.bridge import CustodyState, SqliteStore, Task, run_of
from tether.bridge.custody._limits import LimitSpec
from tether.bridge.pool import PoolWorker, Reconciler
from tether.bridge.runs._permits import METRICS
from tether.bridge.runs._timings import Timings

S = CustodyState


async def _all(store: SqliteStore, ids: list[str], state: S) -> bool:
    return all([await store.state(id) is state for id in ids])


async def test_a_permit_wait_parks_once_and_wakes_when_the_permit_is_given_back(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    await timed_store.set_limit(LimitSpec("k", concurrency=1))
    released: list[float] = []
    granted: dict[str, float] = {}
    runs: list[str] = []

    async def handle(task: Task) -> str:
        runs.append(task.id)
        async with run_of(task).limit("k"):
            granted[task.id] = trio.current_time()
            if task.id == "holder":
                await trio.sleep(20)
                released.append(trio.current_time())
        return "ok"

    timings = Timings()
    waits, parks = METRICS.wait.total, METRICS.parks
    worker = PoolWorker(
        timed_store,
        "w1",
        agent(handle),
        concurrency=2,
        poll_interval=0.5,
        park_after=2,
        timings=timings,
    )
    reconciler = Reconciler(timed_store)
    await timed_store.ingest(Task("holder", "x"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: reconciler.run(interval=5.0))
        await nursery.start(worker.run)
        await wait_until(lambda: _all(timed_store, ["holder"], S.CLAIMED))
        await timed_store.ingest(Task("waiter", "x"))
        await wait_until(lambda: _all(timed_store, ["holder", "waiter"], S.RESULT), within=120)
        worker.request_stop()
        nursery.cancel_scope.cancel()
    assert granted["waiter"] - released[0] < 1.0  # woken by the release, not by a timer
    journal = [(e.src, e.dst) for e in await timed_store.journal("waiter")]
    assert journal.count((S.CLAIMED, S.WAITING)) == 1
    assert runs.count("waiter") == 2  # the run that parked, the run that got the permit
    assert timings.run_time.total == 2  # the two answers; the park is no run time
    assert METRICS.parks - parks == 1
    assert METRICS.wait.total - waits == 1  # the one wait, counted once
