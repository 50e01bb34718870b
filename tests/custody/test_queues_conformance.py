"""Conformance: queues (issue #51), on every backend.

A task waits in its queue (its ``queue`` header, else ``default``). A worker's beat says which
queues it serves; the lead plans each task only onto a live worker serving its queue, and reads
only the queues some worker serves (a backlog nobody serves never fills its window); a
leaderless claim takes only the claimer's queues. A task whose queue nobody serves waits.
"""

from __future__ import annotations

from support.clock import FakeClock
from tether.bridge import CustodyState, Task
from tether.bridge.custody import Store
from tether.bridge.pool import PoolLead, plan_sweep

S = CustodyState


def _in(queue: str, id: str) -> Task:
    return Task(id, "x", headers={"queue": queue})


async def test_a_leaderless_claim_takes_only_the_claimers_queues(store: Store) -> None:
    await store.ingest(_in("research", "r1"))
    await store.ingest(Task("d1", "x"))
    await store.ingest(_in("summaries", "s1"))
    assert [c.task.id for c in await store.claim_many("w1", 10, leaderless=True)] == ["d1"]
    claimed = await store.claim_many("w2", 10, leaderless=True, queues=["research", "other"])
    assert [(c.task.id, c.task.queue) for c in claimed] == [("r1", "research")]
    assert await store.claim("w3", leaderless=True, queues=["nobody"]) is None
    assert await store.state("s1") is S.PENDING  # nobody serves it: it waits


async def test_a_beat_keeps_the_workers_queues(store: Store) -> None:
    members = await store.beat("w1", "worker", 4, queues=["research", "default", "research"])
    [w1] = members
    assert w1.queues == ("default", "research")
    assert w1.serves("research")
    await store.beat("w1", "worker", 4)  # a later beat says it again
    [w1] = await store.workers()
    assert w1.queues == ("default",)


async def test_the_lead_plans_each_task_onto_a_worker_of_its_queue(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.beat("wd", "worker", 4)
    await store.beat("wr", "worker", 4, queues=["research"])
    for i in range(3):
        await store.ingest(_in("research", f"r{i}"))
        await store.ingest(Task(f"d{i}", "x"))
    for i in range(200):  # a backlog nobody serves, ahead of everything else
        await store.ingest(Task(f"u{i:03}", "x", priority="urgent", headers={"queue": "lost"}))
    view = await store.pool_view(pending_limit=50)
    assert {t.queue for t in view.pending} == {"default", "research"}  # "lost" is not read
    plan = plan_sweep(view, now=fake_clock.now, dead_after=10, stuck_after=30, stuck_cap=60)
    placed = {a.id: a.worker for a in plan.assign}
    assert placed == {"r0": "wr", "r1": "wr", "r2": "wr", "d0": "wd", "d1": "wd", "d2": "wd"}
    await store.beat("wr", "worker", 0, queues=["research", "lost"])  # now it serves "lost" too
    view = await store.pool_view(pending_limit=50)
    assert [t.id for t in view.pending[:2]] == ["u000", "u001"]  # urgent, read first now


async def test_a_queue_whose_workers_are_full_does_not_hold_up_the_others(
    store: Store, fake_clock: FakeClock
) -> None:
    """A research backlog ahead of one default task, its only worker full: the lead pages
    past the research queue and the idle default worker gets the task (the window holds
    research tasks only)."""
    await store.beat("wd", "worker", 4)
    await store.beat("wr", "worker", 1, queues=["research"])
    for i in range(100):
        await store.ingest(_in("research", f"r{i:03}"))
    await store.ingest(Task("d1", "x"))
    lead = PoolLead(store, dead_after=10.0, stuck_after=30.0, pending_limit=64)
    report = await lead.sweep_once()
    assert {(a.id, a.worker) for a in report.assigned} == {("r000", "wr"), ("d1", "wd")}


async def test_a_dead_workers_queue_stops_being_read_after_the_lease(
    store: Store, fake_clock: FakeClock
) -> None:
    """A worker that served ``gpu`` died; its row stays until retention. Within the lease its
    queue is still read (it may be back); past it, a gpu backlog no longer fills the window."""
    await store.beat("gpu-1", "worker", 4, queues=["gpu"])
    for i in range(80):
        await store.ingest(_in("gpu", f"g{i:03}"))
    await store.ingest(Task("d1", "x"))
    fake_clock.advance(store.lease_s + 1)
    await store.beat("wd", "worker", 4)
    view = await store.pool_view(pending_limit=64)
    assert [t.id for t in view.pending] == ["d1"]
    lead = PoolLead(store, dead_after=10.0, stuck_after=30.0, pending_limit=64)
    report = await lead.sweep_once()
    assert [(a.id, a.worker) for a in report.assigned] == [("d1", "wd")]
