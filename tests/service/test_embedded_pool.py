"""A pool embedded in a program (issue #47, item 12): an ingest made in the same process, on
the store object the pool runs on, rings that pool at once. Nobody rings
``WorkerService.wakeups`` by hand, and no task waits out a sweep or an idle poll."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest
import trio

from support.agents.handler import agent
from support.clock import StoreAwareClock
from support.waiting import state_is as _is
from support.waiting import wait_until
from tether import ChildSpec, open_supervisor
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.service._worker_config import WorkerConfig
from tether.bridge.service._worker_service import WorkerService

S = CustodyState


@pytest.fixture
def mock_clock() -> StoreAwareClock:
    return StoreAwareClock()


@pytest.fixture
async def timed_store(tmp_path: Path, mock_clock: StoreAwareClock) -> AsyncIterator[SqliteStore]:
    async with await SqliteStore.open(tmp_path / "c.db", clock=trio.current_time) as store:
        yield store


async def test_an_ingest_in_the_process_rings_the_pool_it_runs(
    tmp_path: Path, timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    """On virtual time that stands still while anything can run: a task ingested into an
    idle pool starts with no time passed; unrung, it would wait for the lead's next sweep or
    the worker's next poll (0.25 s at least, idle seconds at most)."""
    started: dict[str, float] = {}

    async def handle(task: Task) -> str:
        started[task.id] = trio.current_time()
        return "ok"

    config = WorkerConfig(store=str(tmp_path / "c.db"), workers=2)
    service = WorkerService(config, store=timed_store, factory=agent(handle))
    async with open_supervisor(name="test") as supervisor:
        await supervisor.start_child(
            ChildSpec("pool", service.run, shutdown_grace=service.stop_grace)
        )
        for id in ("t0", "t1", "t2"):
            await trio.sleep(30)  # idle: every loop backs off to its longest wait
            ingested = trio.current_time()
            await timed_store.ingest(Task(id, "x", room="r"))
            await wait_until(partial(_is, timed_store, id, S.RESULT), within=60)
            assert started[id] - ingested < 0.05, id
            await timed_store.mark_delivered(id)
