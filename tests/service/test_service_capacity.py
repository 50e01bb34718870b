"""The bridge's ``capacity`` setting reaches every pool worker (what each asks the lead for)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from support.gateway import RunningGateway
from support.service import answered_count, submit_many
from support.waiting import wait_until
from tether.bridge import BridgeConfig, BridgeService, SqliteStore
from tether.bridge.pool._idle import IDLE_MAXIMUM, QUIET_WORKER_MAXIMUM


@pytest.mark.parametrize(
    ("capacity", "beaten"), [(None, 4 * 3), (3, 3), (5, 5)], ids=["default", "fair", "custom"]
)
async def test_every_worker_beats_the_configured_capacity(
    gateway: RunningGateway, token_file: Path, tmp_path: Path, capacity: int | None, beaten: int
) -> None:
    config = BridgeConfig(
        gateway=gateway.url,
        token_file=token_file,
        store=str(tmp_path / "custody.db"),
        workers=3,
        concurrency=3,
        capacity=capacity,
        poll_wait=0.5,
        grace=1.0,
    )
    async with await SqliteStore.open(tmp_path / "custody.db") as store:
        service = BridgeService(config, store=store)
        async with trio.open_nursery() as nursery:
            await nursery.start(service.run)
            ids = await submit_many(gateway, [f"hi {i}" for i in range(12)], "cap")

            async def answered() -> bool:
                return await answered_count(gateway) == len(ids)

            await wait_until(answered)  # the pool works with that capacity
            workers = [w for w in await store.workers() if w.role == "worker"]
            assert len(workers) == 3
            assert {w.capacity for w in workers} == {beaten}
            # one worker per process keeps the idle pace; the others are rung (pool._idle)
            maxima = [w.idle_maximum for w in service.workers]
            assert maxima == [IDLE_MAXIMUM, QUIET_WORKER_MAXIMUM, QUIET_WORKER_MAXIMUM]
            nursery.cancel_scope.cancel()
