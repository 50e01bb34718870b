"""A worker whose run was superseded (room policy ``replace``), on Trio's mock clock: it learns
it at its next lease renewal, gives the run its grace, then cancels it; nothing of the run is
stored, and the newer task runs meanwhile."""

from __future__ import annotations

import pytest
import trio

from support.pool_fixtures import LEASE_S, StoreAwareClock
from support.waiting import wait_until
from tether import Session
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.pool import PoolWorker

S = CustodyState


@pytest.mark.parametrize("grace", [0.0, 1.5])
async def test_a_superseded_run_gets_its_grace_then_is_cancelled(
    timed_store: SqliteStore, mock_clock: StoreAwareClock, grace: float
) -> None:
    ends: dict[str, tuple[str, float]] = {}
    started: dict[str, float] = {}

    def agent(session: Session) -> None:
        @session.on("task", policy="replace")
        async def reply(task: Task) -> str:
            started[task.id] = trio.current_time()
            try:
                await trio.sleep(1000 if task.id == "old" else 0.1)
            except trio.Cancelled:
                ends[task.id] = ("cancelled", trio.current_time())
                raise
            ends[task.id] = ("answered", trio.current_time())
            return f"answer to {task.id}"

    worker = PoolWorker(timed_store, "w1", agent, supersede_grace=grace, heartbeat_interval=1.0)
    await timed_store.ingest(Task("old", "first", room="r"), room_policy="replace")
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _started(started, "old"))
        await timed_store.ingest(Task("new", "second", room="r"), room_policy="replace")
        superseded_at = trio.current_time()
        await wait_until(lambda: _has(ends, "old"))
        await wait_until(lambda: _state_is(timed_store, "new", S.RESULT))
        worker.request_stop()
    how, when = ends["old"]
    assert how == "cancelled"
    # found out at the next renewal (every 1 s), then the grace
    assert superseded_at + grace <= when <= superseded_at + 1.0 + grace + 0.2
    assert ends["new"][0] == "answered"
    assert started["new"] < superseded_at + 1.0  # the newer task did not wait for the old run
    assert worker.counts.superseded == 1
    assert (worker.counts.completed, worker.counts.failed, worker.counts.lost) == (1, 0, 0)
    old = await timed_store.get("old")
    assert old is not None
    assert (old.state, old.result, old.reason) == (S.RESULT, "", "superseded by new")
    assert LEASE_S > 1.0


async def _started(started: dict[str, float], id: str) -> bool:
    return id in started


async def _has(ends: dict[str, tuple[str, float]], id: str) -> bool:
    return id in ends


async def _state_is(store: SqliteStore, id: str, state: CustodyState) -> bool:
    return await store.state(id) is state
