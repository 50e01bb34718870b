"""The lead reads about as many pending tasks as the workers will take, not the backlog's head."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from support.clock import FakeClock
from tether.bridge import SqliteStore, Task
from tether.bridge.custody import PoolView, SweepPlanner
from tether.bridge.pool import PoolLead
from tether.bridge.pool._lead import MIN_WINDOW


class CountingStore(SqliteStore):
    """Records how many pending tasks each read of the pool asked for."""

    limits: list[int]

    async def pool_view(
        self,
        *,
        pending_limit: int = 1000,
        skip_rooms: Collection[str] = (),
        skip_queues: Collection[str] = (),
    ) -> PoolView:
        self.limits.append(pending_limit)
        return await super().pool_view(
            pending_limit=pending_limit, skip_rooms=skip_rooms, skip_queues=skip_queues
        )

    async def plan_and_assign(
        self, decide: SweepPlanner, *, pending_limit: int = 1000
    ) -> tuple[PoolView, list[bool] | None]:
        self.limits.append(pending_limit)
        return await super().plan_and_assign(decide, pending_limit=pending_limit)


async def _store(tmp_path: Path, clock: FakeClock) -> CountingStore:
    store = await CountingStore.open(tmp_path / "window.db", clock=clock)
    assert isinstance(store, CountingStore)
    store.limits = []
    return store


async def test_under_load_a_sweep_reads_what_the_workers_free_not_the_backlog(
    tmp_path: Path, fake_clock: FakeClock
) -> None:
    store = await _store(tmp_path, fake_clock)
    try:
        await store.beat("w1", "worker", 8)
        await store.ingest_many([Task(f"t{i:03}", "x") for i in range(300)])
        lead = PoolLead(store)
        first = await lead.sweep_once()
        assert len(first.assigned) == 8  # the worker is full now
        for _ in range(3):  # the worker finishes two tasks between sweeps
            claims = await store.claim_many("w1", 2)
            for claim in claims:
                await store.complete(claim, "ok")
            report = await lead.sweep_once()
            assert len(report.assigned) == 2  # its free slots are filled all the same
        # the first read knew nothing; then 2 x (8 assigned) = 16, then the floor
        assert store.limits == [1000, 2 * 8, MIN_WINDOW, MIN_WINDOW]
    finally:
        await store.aclose()


async def test_a_window_too_small_for_new_capacity_widens_and_rings_the_lead(
    tmp_path: Path, fake_clock: FakeClock
) -> None:
    store = await _store(tmp_path, fake_clock)
    try:
        await store.beat("w1", "worker", 2)
        await store.ingest_many([Task(f"t{i:03}", "x") for i in range(300)])
        lead = PoolLead(store)
        await lead.sweep_once()
        assert store.limits == [1000]
        await store.beat("w2", "worker", 40)  # a big worker joins: the small window is short
        report = await lead.sweep_once()
        assert store.limits[-1] == MIN_WINDOW
        assert len(report.assigned) == MIN_WINDOW  # a full page, and w2 has room left
        assert lead._doorbell.is_set()  # so the lead looks again at once, reading more
        report = await lead.sweep_once()
        assert store.limits[-1] > MIN_WINDOW
        assert len(report.assigned) == 40 - MIN_WINDOW  # w2 is full now
    finally:
        await store.aclose()
