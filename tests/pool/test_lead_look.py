"""After a sweep that drained the queue, the next sweep first looks (a read, no writer job) and
stops there when there is nothing to assign or return; anything ready makes it sweep in full."""

from __future__ import annotations

from pathlib import Path

from support.clock import FakeClock
from tether.bridge import CustodyState as S
from tether.bridge import SqliteStore, Task
from tether.bridge.custody import PoolView, SweepPlanner
from tether.bridge.pool import PoolLead


class CountingStore(SqliteStore):
    """Counts the sweeps that went to the writer (``plan_and_assign``)."""

    writer_sweeps: int

    async def plan_and_assign(
        self, decide: SweepPlanner, *, pending_limit: int = 1000
    ) -> tuple[PoolView, list[bool] | None]:
        self.writer_sweeps += 1
        return await super().plan_and_assign(decide, pending_limit=pending_limit)


async def _store(tmp_path: Path, clock: FakeClock) -> CountingStore:
    store = await CountingStore.open(tmp_path / "look.db", clock=clock)
    assert isinstance(store, CountingStore)
    store.writer_sweeps = 0
    return store


async def test_a_sweep_with_nothing_ready_after_a_drained_queue_is_a_read_only(
    tmp_path: Path, fake_clock: FakeClock
) -> None:
    store = await _store(tmp_path, fake_clock)
    try:
        await store.beat("w1", "worker", 4)
        await store.ingest_many([Task("a", "x"), Task("b", "x")])
        lead = PoolLead(store)
        first = await lead.sweep_once()
        assert [a.id for a in first.assigned] == ["a", "b"]  # the queue is drained
        writer_sweeps = store.writer_sweeps
        [claim, _] = await store.claim_many("w1", 2)
        await store.complete(claim, "done")  # a slot freed: under load this rings the lead
        commits = store.commits
        report = await lead.sweep_once()
        assert (report.assigned, report.live_workers) == ((), ("w1",))
        assert (lead.looks, lead.sweeps) == (1, 2)
        assert (store.commits, store.writer_sweeps) == (commits, writer_sweeps)  # no writer job
        await store.ingest(Task("c", "x"))  # a ready task: the look hands over to a full sweep
        report = await lead.sweep_once()
        assert [(a.id, a.worker) for a in report.assigned] == [("c", "w1")]
        assert (lead.looks, store.writer_sweeps) == (1, writer_sweeps + 1)
        assert await store.state("c") == S.ASSIGNED
    finally:
        await store.aclose()


async def test_after_a_drained_queue_a_dead_workers_assignments_still_go_back(
    tmp_path: Path, fake_clock: FakeClock
) -> None:
    store = await _store(tmp_path, fake_clock)
    try:
        await store.beat("w1", "worker", 4)
        await store.ingest(Task("a", "x"))
        lead = PoolLead(store, dead_after=10.0)
        lead._beats_in_loop = True  # as under ``run``: the beat loop beats, sweeps only sweep
        assert [a.id for a in (await lead.sweep_once()).assigned] == ["a"]
        fake_clock.advance(11.0)  # w1 stopped beating: dead, with "a" assigned to it
        report = await lead.sweep_once()
        assert [(r.id, r.why) for r in report.returned] == [("a", "dead_worker")]
        assert lead.looks == 0
        assert await store.state("a") == S.PENDING
    finally:
        await store.aclose()


async def test_a_lead_that_left_tasks_waiting_sweeps_in_full_without_a_look(
    tmp_path: Path, fake_clock: FakeClock
) -> None:
    store = await _store(tmp_path, fake_clock)
    try:
        await store.beat("w1", "worker", 1)
        await store.ingest_many([Task("a", "x"), Task("b", "x")])
        lead = PoolLead(store)
        assert (await lead.sweep_once()).waiting == 1  # the worker is full: "b" waits
        [claim] = await store.claim_many("w1", 1)
        await store.complete(claim, "done")
        report = await lead.sweep_once()
        assert [a.id for a in report.assigned] == ["b"]
        assert (lead.looks, store.writer_sweeps) == (0, 2)
    finally:
        await store.aclose()
