"""Conformance: child runs (issue #51), on every backend.

A spawn ingests its child and records it as a step of the parent in one fenced transaction:
recorded once (a second spawn of the name returns the first record and makes nothing), refused
to a zombie parent. A join parks its parent until every awaited child is done, and the
transaction that makes the last one done wakes it; a join whose children are done as it parks
leaves the parent pending. The reconciler's pass cancels the live children of an ended parent.
Time is the store's ``FakeClock``; nothing sleeps.
"""

from __future__ import annotations

import json

import pytest

from support.clock import FakeClock
from tether.bridge import CustodyState, Task
from tether.bridge.custody import Claim, InvalidTask, StaleLease, Store
from tether.bridge.custody._children import (
    PARENT_HEADER,
    SpawnError,
    child_done,
    child_id,
    child_task,
)

S = CustodyState


async def _claimed(store: Store, id: str, worker: str = "w1", **headers: str) -> Claim:
    await store.ingest(Task(id, "plan", headers=dict(headers)))
    claim = await store.claim(worker, leaderless=True)
    assert claim is not None
    assert claim.task.id == id
    return claim


async def _run_child(store: Store, id: str, reply: str) -> None:
    claim = await store.claim("w2", leaderless=True)
    assert claim is not None
    assert claim.task.id == id
    await store.complete(claim, reply)


async def test_a_spawn_ingests_its_child_and_records_it_once(
    store: Store, fake_clock: FakeClock
) -> None:
    parent = await _claimed(
        store, "p", tenant="acme", traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    )
    child = child_task(parent.task, "research", "look it up", queue=None, room=None)
    record = await store.spawn(parent, "research", child)
    assert (record.name, json.loads(record.value)) == ("~spawn:research", child.id)
    assert child.id == child_id("p", "research")
    stored = await store.get(child.id)
    assert stored is not None
    assert stored.state is S.PENDING
    assert stored.task.headers[PARENT_HEADER] == "p"
    assert stored.task.tenant == "acme"  # inherited, with the trace and the priority
    assert stored.task.headers["traceparent"] == parent.task.headers["traceparent"]
    assert stored.task.queue == "default"
    again = await store.spawn(parent, "research", child)
    assert again == record  # the first record wins; no second child
    assert [s.name for s in await store.steps("p")] == ["~spawn:research"]
    assert (await store.counts())[S.PENDING] == 1
    [view] = await store.children("p", [child.id])
    assert view is not None
    assert (view.id, view.state) == (child.id, S.PENDING)
    assert await store.children("p", ["c-unknown"]) == [None]


async def test_a_zombie_parent_spawns_nothing(store: Store, fake_clock: FakeClock) -> None:
    zombie = await _claimed(store, "p")
    fake_clock.advance(store.lease_s + 1)
    fake_clock.advance(store.lease_s + 1)
    [expiry] = await store.expire_leases()
    assert expiry.outcome is S.PENDING
    child = child_task(zombie.task, "late", "x", queue=None, room=None)
    with pytest.raises(StaleLease, match="spawn '~spawn:late'"):
        await store.spawn(zombie, "late", child)
    assert await store.get(child.id) is None
    assert await store.steps("p") == []


async def test_a_gateway_task_cannot_claim_to_be_a_child(store: Store) -> None:
    with pytest.raises(InvalidTask, match=r"only a parent's run\.spawn makes a child"):
        await store.ingest(Task("x", "hi", headers={PARENT_HEADER: "p"}))
    assert await store.get("x") is None


async def test_a_join_parks_its_parent_until_the_last_awaited_child_is_done(
    store: Store, fake_clock: FakeClock
) -> None:
    parent = await _claimed(store, "p")
    kids = [child_task(parent.task, n, n, queue=None, room=None) for n in ("a", "b")]
    for kid in kids:
        await store.spawn(parent, kid.id[-4:], kid)
    ids = [kid.id for kid in kids]
    deadline = fake_clock.now + 3600
    moved = await store.park_join(parent, ids, deadline, "2 children")
    assert moved is S.WAITING
    waiting = await store.get("p")
    assert waiting is not None
    assert waiting.reason == "joining 2 children"
    assert (waiting.owner, waiting.not_before) == (None, deadline)
    with pytest.raises(StaleLease):  # the lease is released
        await store.record_step(parent, "late", "1")
    await _run_child(store, ids[0], "found A")
    assert (await store.state("p")) is S.WAITING  # one child still runs
    await _run_child(store, ids[1], "found B")
    woken = await store.get("p")
    assert woken is not None
    assert (woken.state, woken.not_before, woken.attempt) == (S.PENDING, None, 1)
    views = await store.children("p", ids)
    assert [(v.state, v.result) for v in views if v] == [
        (S.RESULT, "found A"),
        (S.RESULT, "found B"),
    ]
    again = await store.claim("w1", leaderless=True)
    assert again is not None
    assert again.task.id == "p"
    assert again.attempt == 1  # a park spends no attempt


async def test_a_join_whose_children_finished_as_it_parked_leaves_the_parent_pending(
    store: Store, fake_clock: FakeClock
) -> None:
    parent = await _claimed(store, "p")
    kid = child_task(parent.task, "a", "a", queue=None, room=None)
    await store.spawn(parent, "a", kid)
    await _run_child(store, kid.id, "done")
    moved = await store.park_join(parent, [kid.id], fake_clock.now + 60, "1 child")
    assert moved is S.PENDING
    assert (await store.state("p")) is S.PENDING


async def test_a_dead_child_wakes_its_joining_parent_too(
    store: Store, fake_clock: FakeClock
) -> None:
    parent = await _claimed(store, "p")
    kid = child_task(parent.task, "a", "a", queue=None, room=None)
    await store.spawn(parent, "a", kid)
    await store.park_join(parent, [kid.id], fake_clock.now + 60, "1 child")
    claim = await store.claim("w2", leaderless=True)
    assert claim is not None
    await store.fail(claim, "no such thing", permanent=True)
    assert (await store.state("p")) is S.PENDING
    [view] = await store.children("p", [kid.id])
    assert view is not None
    assert child_done(view.state)
    assert view.reason is not None
    assert "no such thing" in view.reason


async def test_an_ended_parents_live_children_are_cancelled_by_the_reconciler(
    store: Store, fake_clock: FakeClock
) -> None:
    parent = await _claimed(store, "p")
    kid = child_task(parent.task, "a", "a", queue=None, room=None)
    await store.spawn(parent, "a", kid)
    assert await store.settle_children() == ([], [])  # a live parent's child runs on
    await store.complete(parent, "answered without joining")
    woken, cancelled = await store.settle_children()
    assert (woken, cancelled) == ([], [kid.id])
    gone = await store.get(kid.id)
    assert gone is not None
    assert gone.state is S.DEAD
    assert gone.reason == "cancelled: its parent p ended (result) before joining it"
    assert await store.settle_children() == ([], [])


async def test_fan_out_per_parent_is_bounded(
    store: Store, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tether.bridge.stores.postgres._steps as pg
    import tether.bridge.stores.sqlite._steps as lite

    monkeypatch.setattr(lite, "MAX_CHILDREN", 2)
    monkeypatch.setattr(pg, "MAX_CHILDREN", 2)
    parent = await _claimed(store, "p")
    for n in ("a", "b"):
        await store.spawn(parent, n, child_task(parent.task, n, n, queue=None, room=None))
    third = child_task(parent.task, "c", "c", queue=None, room=None)
    with pytest.raises(SpawnError, match="at most 2"):
        await store.spawn(parent, "c", third)
    assert await store.get(third.id) is None
    assert len(await store.steps("p")) == 2


def test_a_child_waits_in_the_queue_named_else_its_parents() -> None:
    parent = Task("p", "x", headers={"queue": "plans"})
    assert child_task(parent, "r", "x", queue="research", room=None).queue == "research"
    assert child_task(parent, "r", "x", queue=None, room=None).queue == "plans"
    assert "queue" not in child_task(Task("p", "x"), "r", "x", queue=None, room=None).headers
    with pytest.raises(SpawnError, match="queue 'no way' is not valid"):
        child_task(parent, "r", "x", queue="no way", room=None)


def test_depth_is_bounded() -> None:
    task = Task("p", "x")
    for depth in range(8):
        task = child_task(task, f"d{depth}", "x", queue=None, room=None)
    assert task.headers["depth"] == "8"
    with pytest.raises(SpawnError, match="at most 8 deep"):
        child_task(task, "too-deep", "x", queue=None, room=None)


async def test_a_zombie_parents_join_marks_nothing_and_a_later_join_is_its_own(
    store: Store, fake_clock: FakeClock
) -> None:
    """Only the current join's children hold the parent's wake: one an earlier join gave up
    on (its timeout) does not, and a fenced-out join marks nothing."""
    parent = await _claimed(store, "p")
    slow = child_task(parent.task, "slow", "slow", queue=None, room=None)
    quick = child_task(parent.task, "quick", "quick", queue=None, room=None)
    await store.spawn(parent, "slow", slow)
    assert await store.park_join(parent, [slow.id], fake_clock.now + 10, "1 child") is S.WAITING
    fake_clock.advance(11)
    assert await store.wake_due() == ["p"]  # the join timed out; its handler goes on
    again = await store.claim("w1", leaderless=True)
    assert again is not None
    assert again.task.id == "p"
    await store.spawn(again, "quick", quick)
    with pytest.raises(StaleLease):  # the first run's claim: a zombie now
        await store.park_join(parent, [quick.id], fake_clock.now + 60, "zombie")
    assert await store.park_join(again, [quick.id], fake_clock.now + 60, "1 child") is S.WAITING
    await store.assign(quick.id, "w2")  # quick runs; slow waits, still live
    claim = await store.claim("w2")
    assert claim is not None
    assert claim.task.id == quick.id
    await store.complete(claim, "done")
    # quick, the only child of the current join, woke it though slow is still live
    assert await store.state(slow.id) is S.PENDING
    assert await store.state("p") is S.PENDING


async def test_retention_keeps_a_delivered_child_while_its_parent_runs(
    store: Store, fake_clock: FakeClock
) -> None:
    """A parent may join long after its child was delivered (it asked the person first):
    the child stays until its parent ends, then goes like any delivered task."""
    parent = await _claimed(store, "p")
    kid = child_task(parent.task, "a", "a", queue=None, room=None)
    await store.spawn(parent, "a", kid)
    await _run_child(store, kid.id, "notes")
    await store.mark_delivered(kid.id)
    fake_clock.advance(3600)
    assert await store.prune_delivered(fake_clock.now) == 0
    [view] = await store.children("p", [kid.id])
    assert view is not None
    assert view.result == "notes"
    await store.complete(parent, "done")
    await store.mark_delivered("p")
    fake_clock.advance(1)
    assert await store.prune_delivered(fake_clock.now) == 2
