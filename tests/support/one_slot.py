"""A pool of one worker with one slot and its reconciler, on a real store, until a check
holds: the pool tests of runs that park (children, events, schedules) serve their handler so."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from support.agents.handler import agent
from support.waiting import wait_until
from tether.bridge import SqliteStore, Task
from tether.bridge.pool import PoolWakeups, PoolWorker, Reconciler


async def serve_one_slot(
    store: SqliteStore,
    handle: Callable[[Task], Awaitable[str]],
    done: Callable[[], Awaitable[bool]],
    *,
    within: float,
    meanwhile: Callable[[], Awaitable[None]] | None = None,
    step: float = 0.05,
) -> PoolWorker:
    """Run ``handle`` on one slot (a parked run frees it) beside a reconciler passing every
    5 s, do ``meanwhile`` once the worker is up, and stop once ``done()`` holds (checked
    every ``step`` seconds, failing after ``within``); the worker, for its counts."""
    wakeups = PoolWakeups()
    worker = PoolWorker(
        store, "w1", agent(handle), concurrency=1, poll_interval=1.0, wakeups=wakeups
    )
    reconciler = Reconciler(store, on_woken=wakeups.tasks_pending)
    wakeups.on_parked = reconciler.parked_until
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        nursery.start_soon(lambda: reconciler.run(interval=5.0))
        if meanwhile is not None:
            await meanwhile()
        await wait_until(done, within=within, step=step)
        worker.request_stop()
        nursery.cancel_scope.cancel()
    return worker
