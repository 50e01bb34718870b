"""BridgeService in process: supervised end to end, soft stop, retention pruning."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import trio

from support.clock import FakeClock
from support.gateway import RunningGateway
from support.service import answered_count, submit_many
from support.waiting import wait_until
from tether import ChildSpec, open_supervisor
from tether.bridge import BridgeConfig, BridgeService, CustodyState, SqliteStore, Task


@pytest.mark.parametrize("lead", [True, False], ids=["with-lead", "leaderless"])
async def test_a_supervised_bridge_answers_everything_prunes_old_tasks_and_stops_softly(
    gateway: RunningGateway, token_file: Path, tmp_path: Path, lead: bool
) -> None:
    clock = FakeClock(now=2_000_000.0)
    path = tmp_path / "custody.db"
    async with await SqliteStore.open(path, clock=clock) as store:
        await store.ingest(Task(id="old-1", body="long ago", room="r"))
        claim = await store.claim("w0", leaderless=True)
        assert claim is not None
        await store.complete(claim, "done long ago")
        await store.mark_delivered("old-1")
        clock.now += 3600 + 1  # past the retention below

        ids = await submit_many(gateway, [f"hi {i}" for i in range(40)], "svc")
        config = BridgeConfig(
            gateway=gateway.url,
            token_file=token_file,
            store=str(path),
            workers=2,
            poll_wait=1.0,
            retention=3600.0,
            grace=2.0,
            lead=lead,
        )
        service = BridgeService(config, store=store)
        async with open_supervisor(name="test") as supervisor:
            await supervisor.start_child(
                ChildSpec("bridge", service.run, shutdown_grace=service.stop_grace)
            )
            assert service.running

            async def all_answered() -> bool:
                return await answered_count(gateway) == len(ids)

            await wait_until(all_answered)
            assert await store.state("old-1") is None  # pruned by the retention child
            # ... and its tombstone keeps a late replay a no-op
            assert await store.ingest(Task(id="old-1", body="long ago", room="r")) is False
            names = {w.name for w in await store.workers()}
            assert names == set(service.pool_names)
            assert len(names) == (3 if lead else 2)
            assert all(name.startswith("tether-bridge-") for name in names)
        # leaving the block stopped the bridge softly: its workers said goodbye
        assert {w.name for w in await store.workers()} == set()
        counts = await store.counts()
        assert counts[CustodyState.DELIVERED] == len(ids)
        assert sum(counts.values()) == len(ids)
    assert service.delivery is not None
    assert service.delivery.stats.delivered == len(ids)
    assert service.ingest is not None
    assert service.ingest.stats.ingested == len(ids)
    for task_id in ids[:3]:
        assert (await gateway.message(task_id))["reply"].startswith("echo: hi ")


async def test_a_running_bridge_freezes_its_start_up_heap_once_unless_told_not_to(
    gateway: RunningGateway, token_file: Path, store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    freezes: list[int] = []
    real_freeze = gc.freeze

    def counted_freeze() -> None:
        freezes.append(1)
        real_freeze()

    monkeypatch.setattr(gc, "freeze", counted_freeze)
    config = BridgeConfig(gateway=gateway.url, token_file=token_file, workers=1, grace=0.5)

    async def start(service: BridgeService) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(service.run)
            nursery.cancel_scope.cancel()

    gc.unfreeze()
    await start(BridgeService(config, store=store, freeze_gc=False))
    assert (freezes, gc.get_freeze_count()) == ([], 0)
    await start(BridgeService(config, store=store))
    assert freezes == [1]
    assert gc.get_freeze_count() > 0
    await start(BridgeService(config, store=store))  # a restart: already frozen, left be
    assert freezes == [1]
