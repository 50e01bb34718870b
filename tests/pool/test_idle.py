"""An idle pool sleeps: polls that find nothing back off; news wakes them at once (virtual time).

``pool._idle``: a worker's claim, the lead's sweep and delivery's look each double their wait
while they find nothing, up to ``IDLE_MAXIMUM``; a ring (in-process news) ends the wait.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from support.pool_fixtures import StoreAwareClock
from support.waiting import wait_until
from tether.agents import echo
from tether.bridge import CustodyState, GatewayClient, SqliteStore, Task, write_token
from tether.bridge.pool import PoolLead, PoolWorker
from tether.bridge.pool._idle import IDLE_MAXIMUM
from tether.bridge.pool._wakeup import PoolWakeups
from tether.bridge.service._delivery import Delivery

BUSY = 0.05
"""The busy-time interval of every loop here (a look every 50 ms)."""
IDLE = 60.0
"""Virtual seconds of idleness: at the busy interval, 1,200 looks each."""
MOST = 8 + IDLE / (0.8 * IDLE_MAXIMUM)
"""Looks a backed-off loop may make in ``IDLE``: the doubling ramp, then one per (jittered)
``IDLE_MAXIMUM``."""


def _counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[float]:
    """Count (with the virtual time of each) the calls of ``SqliteStore.<name>``."""
    calls: list[float] = []
    real: Callable[..., Any] = getattr(SqliteStore, name)

    async def counted(self: SqliteStore, *args: Any, **kwargs: Any) -> Any:
        calls.append(trio.current_time())
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(SqliteStore, name, counted)
    return calls


async def test_an_idle_lead_and_worker_back_off_and_a_ring_wakes_them_at_once(
    timed_store: SqliteStore, mock_clock: StoreAwareClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims = _counting(monkeypatch, "claim_many")
    wakeups = PoolWakeups()
    lead = PoolLead(timed_store, sweep_interval=BUSY, wakeups=wakeups)
    worker = PoolWorker(
        timed_store, "w1", echo.factory, poll_interval=BUSY, heartbeat_interval=1.0, wakeups=wakeups
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(lead.run)
        await nursery.start(worker.run)
        start, sweeps, looked = trio.current_time(), lead.sweeps, len(claims)
        await trio.sleep(IDLE)
        assert 0 < lead.sweeps - sweeps <= MOST  # it still looks, ever more slowly
        assert 0 < len(claims) - looked <= MOST
        assert claims[-1] - claims[-2] > IDLE_MAXIMUM / 2  # backed off to about the maximum
        assert trio.current_time() - start == IDLE
        begun = trio.current_time()
        await timed_store.ingest(Task("t1", "hello", room="r"))
        wakeups.tasks_pending()  # what ingest does after its commit

        async def answered() -> bool:
            return (await timed_store.counts())[CustodyState.RESULT] == 1

        await wait_until(answered, within=BUSY, step=0.001)
        assert trio.current_time() - begun < BUSY  # at once: not after a backed-off wait
        looked = len(claims)
        await trio.sleep(1.0)  # news: back at the busy pace for a while
        assert len(claims) - looked >= 3
        nursery.cancel_scope.cancel()


async def test_idle_delivery_backs_off_and_a_nudge_wakes_it_at_once(
    timed_store: SqliteStore,
    mock_clock: StoreAwareClock,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    looks = _counting(monkeypatch, "ready_results")
    token = tmp_path / "token"
    write_token(token, "t")
    gateway = GatewayClient("http://127.0.0.1:9", token)  # never called: nothing to post
    delivery = Delivery(timed_store, gateway, idle_interval=BUSY)
    async with trio.open_nursery() as nursery:
        await nursery.start(delivery.run)
        await trio.sleep(IDLE)
        assert 0 < len(looks) <= MOST
        assert looks[-1] - looks[-2] > IDLE_MAXIMUM / 2
        looked, begun = len(looks), trio.current_time()
        delivery.nudge()  # a result was stored
        await wait_until(lambda: _more(looks, looked), within=BUSY, step=0.001)
        assert trio.current_time() - begun < BUSY
        nursery.cancel_scope.cancel()


async def _more(calls: list[float], than: int) -> bool:
    return len(calls) > than
