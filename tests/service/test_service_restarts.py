"""Graceful stops at random points of a load: every reply posted before a stop is marked
delivered before ``run`` returns (the marks in flight are awaited), so the next run posts
nothing twice, burns no attempt, and reports every dead letter."""

from __future__ import annotations

import random
from pathlib import Path

import trio

from support.gateway import RunningGateway
from support.service import submit_many
from support.waiting import wait_until
from tether import Session, open_runtime
from tether.bridge import BridgeConfig, BridgeService, CustodyState, SqliteStore, Task
from tether.bridge.pool import RetryBackoff

MESSAGES = 600
STOPS = 15


def jittery_agent(session: Session) -> None:
    @session.on("task")
    async def reply(task: Task) -> str:
        await trio.sleep(random.random() * 0.02)
        if task.body.endswith("7"):
            raise ValueError("sevens fail")
        return f"echo: {task.body}"


async def test_graceful_stops_mid_load_post_nothing_twice_and_lose_nothing(
    gateway: RunningGateway, token_file: Path, tmp_path: Path
) -> None:
    path = tmp_path / "store" / "custody.db"
    rng = random.Random(7)
    ids = await submit_many(gateway, [f"m {i}" for i in range(MESSAGES)], "m")
    sevens = sum(1 for i in range(MESSAGES) if str(i).endswith("7"))
    config = BridgeConfig(
        gateway=gateway.url,
        token_file=token_file,
        store=str(path),
        workers=3,
        concurrency=4,
        poll_wait=0.5,
        lease_s=3.0,
        grace=2.0,
        reconcile_interval=0.2,
        room_policy="concurrent",  # one room of independent messages; rooms: test_rooms
        retry_backoff=RetryBackoff(0, 0),  # the sevens die at once, not over backoff
    )

    async def settled() -> bool:
        tasks = (await gateway.stats())["tasks"]
        return bool(tasks["answered"] + tasks["closed"] == len(ids))

    async with open_runtime(handle_signals=False):
        for _ in range(STOPS):
            with trio.CancelScope() as graceful:  # a cancel is the graceful stop
                async with trio.open_nursery() as nursery:
                    await nursery.start(BridgeService(config, factory=jittery_agent).run)
                    await trio.sleep(rng.random() * 0.15)
                    graceful.cancel()
        async with trio.open_nursery() as nursery:
            await nursery.start(BridgeService(config, factory=jittery_agent).run)
            await wait_until(settled, within=60)
            nursery.cancel_scope.cancel()
    stats = await gateway.stats()
    assert stats["duplicate_results"] == 0
    assert stats["tasks"]["closed"] == sevens
    async with await SqliteStore.open(path) as store:
        counts = await store.counts()
        assert counts[CustodyState.DELIVERED] == len(ids) - sevens
        assert counts[CustodyState.DEAD] == sevens
        assert await store.unreported_dead_count() == 0
        delivered = await store.records(CustodyState.DELIVERED, limit=MESSAGES)
        assert {r.attempt for r in delivered} == {1}  # a stop hands a run back, unburnt
