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
from tether.bridge.pool._idle import IDLE_MAXIMUM, QUIET_WORKER_MAXIMUM, worker_idle_maximum
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

        looked = len(claims)
        await wait_until(answered, within=BUSY, step=0.001)
        assert trio.current_time() - begun < BUSY  # at once: not after a backed-off wait
        # the lead claimed it for its own process's worker in its sweep: no claim of its own
        assert (wakeups.hands.handed, len(claims) - looked) == (1, 0)
        nursery.cancel_scope.cancel()


def _claims_of(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[float]]:
    """The virtual times of each worker's calls of ``SqliteStore.claim_many``, by worker."""
    calls: dict[str, list[float]] = {}
    real = SqliteStore.claim_many

    async def counted(self: SqliteStore, worker: str, *args: Any, **kwargs: Any) -> Any:
        calls.setdefault(worker, []).append(trio.current_time())
        return await real(self, worker, *args, **kwargs)

    monkeypatch.setattr(SqliteStore, "claim_many", counted)
    return calls


async def test_one_worker_of_a_process_keeps_the_idle_pace_and_a_ring_wakes_the_others_at_once(
    timed_store: SqliteStore, mock_clock: StoreAwareClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process's first worker looks every ``IDLE_MAXIMUM``, so a suspect free to run alone
    (which rings nobody) is still claimed that soon; its other workers back off further, and
    what concerns them rings them."""
    claims = _claims_of(monkeypatch)
    wakeups = PoolWakeups()
    workers = [
        PoolWorker(
            timed_store,
            f"w{i}",
            echo.factory,
            poll_interval=BUSY,
            idle_maximum=worker_idle_maximum(i),
            heartbeat_interval=1.0,
            wakeups=wakeups,
        )
        for i in range(3)
    ]
    async with trio.open_nursery() as nursery:
        for worker in workers:
            await nursery.start(worker.run)
        await trio.sleep(IDLE)
        first, *others = (claims[w.name] for w in workers)
        assert IDLE_MAXIMUM / 2 < first[-1] - first[-2] <= IDLE_MAXIMUM
        assert len(first) > IDLE / IDLE_MAXIMUM  # it kept the pace
        for quiet in others:
            assert QUIET_WORKER_MAXIMUM / 2 < quiet[-1] - quiet[-2] <= QUIET_WORKER_MAXIMUM
            assert len(quiet) <= 8 + IDLE / (0.8 * QUIET_WORKER_MAXIMUM)
        looked, begun = len(claims["w2"]), trio.current_time()
        wakeups.tasks_assigned(["w2"])  # what the lead does after assigning to w2
        await wait_until(lambda: _more(claims["w2"], looked), within=BUSY, step=0.001)
        assert trio.current_time() - begun < BUSY
        nursery.cancel_scope.cancel()


def test_only_a_process_s_first_worker_keeps_the_idle_maximum() -> None:
    assert worker_idle_maximum(0) == IDLE_MAXIMUM
    assert worker_idle_maximum(1) == worker_idle_maximum(7) == QUIET_WORKER_MAXIMUM > IDLE_MAXIMUM


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
