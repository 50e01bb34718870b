"""Conformance for the pool's store methods (beats, assignments, view, release, stall notices).

Runs against every backend like the rest of the suite; time is the ``FakeClock``.
"""

from __future__ import annotations

from typing import Any

import pytest

from support.clock import FakeClock
from support.custody import LEASE_S, Backend, drive_to
from tether.bridge import CustodyState, Task
from tether.bridge.custody import (
    Hand,
    InvalidWorkerName,
    PoolView,
    RoomPolicy,
    StaleLease,
    Store,
)
from tether.bridge.pool import Reconciler

S = CustodyState


async def owners(store: Store, *ids: str) -> list[tuple[CustodyState, str | None]]:
    records = [await store.get(id) for id in ids]
    return [(r.state, r.owner) for r in records if r is not None]


async def test_beats_are_recorded_and_read_back_in_one_call(
    store: Store, fake_clock: FakeClock
) -> None:
    assert await store.workers() == []
    started = fake_clock.now
    members = await store.beat("w1", "worker", 4)
    assert [(m.name, m.role, m.capacity, m.last_beat) for m in members] == [
        ("w1", "worker", 4, started)
    ]
    fake_clock.advance(3)
    members = await store.beat("lead", "lead", 0)
    assert [m.name for m in members] == ["lead", "w1"]
    fake_clock.advance(2)
    await store.beat("w1", "worker", 2)
    (w1,) = [m for m in await store.workers() if m.name == "w1"]
    assert (w1.capacity, w1.last_beat, w1.started_at) == (2, started + 5, started)
    assert await store.remove_worker("w1") is True
    assert await store.remove_worker("w1") is False
    assert [m.name for m in await store.workers()] == ["lead"]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("bad name", "worker", 1), InvalidWorkerName),
        (("w1", "boss", 1), ValueError),
        (("w1", "worker", -1), ValueError),
        (("w1", "worker", True), ValueError),
    ],
)
async def test_bad_beats_are_refused(store: Store, args: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        await store.beat(*args)
    assert await store.workers() == []


async def test_assign_many_moves_only_pending_tasks_and_notes_the_room(store: Store) -> None:
    await store.ingest(Task("a", "x", room="r1"), room_policy="concurrent")
    await store.ingest(Task("b", "x", room="r2"), room_policy="concurrent")
    await drive_to(store, "c", S.CLAIMED)
    assert await store.assign_many([("a", "w1"), ("c", "w1"), ("b", "w2"), ("zz", "w1")]) == [
        True,
        False,
        True,
        False,
    ]
    assert await store.state("a") is S.ASSIGNED
    assert (await store.get("b")).owner == "w2"  # type: ignore[union-attr]
    rec = await store.get("c")
    assert rec is not None
    assert rec.state is S.CLAIMED
    assert rec.owner != "w1"
    assert await store.assign_many([]) == []
    # room affinity: pending tasks of those rooms show who last took the room
    await store.ingest(Task("a2", "x", room="r1"), room_policy="concurrent")
    await store.ingest(Task("n2", "x", room="new"), room_policy="concurrent")
    view = await store.pool_view()
    assert view.rooms == {"r1": "w1"}


async def test_a_claim_moves_room_affinity_to_the_claiming_worker(store: Store) -> None:
    await store.ingest(Task("a", "x", room="r1"), room_policy="concurrent")
    assert await store.claim("w9", leaderless=True) is not None
    await store.ingest(Task("b", "x", room="r1"), room_policy="concurrent")
    assert (await store.pool_view()).rooms == {"r1": "w9"}


async def test_claim_many_moves_room_affinity_to_the_claiming_worker(store: Store) -> None:
    await store.ingest_many(
        [Task("a", "x", room="r1"), Task("b", "x", room="r2")], room_policy="concurrent"
    )
    await store.assign_many([("a", "w1"), ("b", "w1")])
    assert len(await store.claim_many("w9", 2, leaderless=True)) == 0  # not w9's
    await store.ingest(Task("c", "x", room="r1"), room_policy="concurrent")
    assert [c.task.id for c in await store.claim_many("w9", 2, leaderless=True)] == ["c"]
    assert [c.task.id for c in await store.claim_many("w1", 2)] == ["a", "b"]
    await store.ingest_many(
        [Task("d", "x", room="r1"), Task("e", "x", room="r2")], room_policy="concurrent"
    )
    assert (await store.pool_view()).rooms == {"r1": "w1", "r2": "w1"}


async def test_return_assignments_takes_back_only_that_workers_assignments(
    store: Store,
) -> None:
    for id in ("a", "b", "c", "d"):
        await store.ingest(Task(id, "x"))
    await store.assign_many([("a", "w1"), ("b", "w1"), ("c", "w2"), ("d", "w1")])
    claim = await store.claim("w1")
    assert claim is not None
    assert claim.task.id == "a"
    assert sorted(await store.return_assignments("w1")) == ["b", "d"]
    assert await store.state("a") is S.CLAIMED  # a claim is a lease, never taken back here
    assert await store.state("c") is S.ASSIGNED
    assert [t.id for t in await store.pending()] == ["b", "d"]
    assert (await store.get("b")).attempt == 1  # type: ignore[union-attr]
    assert await store.return_assignments("w1") == []


async def test_pool_view_is_one_consistent_picture(store: Store, fake_clock: FakeClock) -> None:
    await store.beat("w1", "worker", 3)
    await store.ingest(Task("low", "x", priority="low"))
    await store.ingest(Task("urgent", "x", priority="urgent"))
    await store.ingest(Task("as", "x", room="r"), room_policy="concurrent")
    await store.ingest(Task("cl", "x"))
    t0 = fake_clock.now
    await store.assign_many([("as", "w1"), ("cl", "w2")])
    assert await store.claim("w2") is not None
    fake_clock.advance(7)
    view = await store.pool_view(pending_limit=10)
    assert view.at == t0 + 7
    assert [w.name for w in view.workers] == ["w1"]
    assert [(a.id, a.worker, a.room, a.since) for a in view.assigned] == [("as", "w1", "r", t0)]
    assert dict(view.claims) == {"w2": 1}
    assert [t.id for t in view.pending] == ["urgent", "low"]
    assert [t.id for t in (await store.pool_view(pending_limit=1)).pending] == ["urgent"]
    with pytest.raises(ValueError, match="pending_limit"):
        await store.pool_view(pending_limit=0)


async def test_release_repools_without_burning_an_attempt(
    store: Store, fake_clock: FakeClock
) -> None:
    claim = await drive_to(store, "t", S.CLAIMED)
    assert claim is not None
    await store.release(claim)
    rec = await store.get("t")
    assert rec is not None
    assert (rec.state, rec.owner, rec.attempt, rec.lease_until) == (S.PENDING, None, 1, None)
    with pytest.raises(StaleLease, match="release"):
        await store.release(claim)  # already given back
    again = await store.claim("w2", leaderless=True)
    assert again is not None
    assert again.attempt == 1
    fake_clock.advance(LEASE_S + 1)
    await Reconciler(store).run_once()  # the lapsed lease taken back: attempt 2 pending
    with pytest.raises(StaleLease, match="pending"):
        await store.release(again)


async def test_no_send_is_stored_with_the_result(store: Store) -> None:
    for id in ("quiet", "loud"):
        claim = await drive_to(store, id, S.CLAIMED)
        assert claim is not None
        await store.complete(claim, "" if id == "quiet" else "hello", no_send=id == "quiet")
    results = {r.task.id: (r.body, r.no_send) for r in await store.ready_results()}
    assert results == {"quiet": ("", True), "loud": ("hello", False)}


async def test_stall_candidates_are_old_claimed_tasks_without_a_notice(
    store: Store, fake_clock: FakeClock
) -> None:
    t0 = fake_clock.now
    await drive_to(store, "old", S.CLAIMED)
    await drive_to(store, "old-pending", S.PENDING)
    await drive_to(store, "old-assigned", S.ASSIGNED)
    fake_clock.advance(10)
    await drive_to(store, "young", S.CLAIMED)
    assert [c.id for c in await store.stall_candidates(t0 - 0.001)] == []
    cands = await store.stall_candidates(t0)
    assert [(c.id, c.created_at) for c in cands] == [("old", t0)]
    assert cands[0].worker.startswith("w-")
    assert [c.id for c in await store.stall_candidates(t0 + 10)] == ["old", "young"]
    assert await store.mark_stall_notified("old") is True
    assert await store.mark_stall_notified("old") is False
    assert [c.id for c in await store.stall_candidates(t0 + 10)] == ["young"]
    await store.clear_stall_notice("old")
    assert [c.id for c in await store.stall_candidates(t0 + 10)] == ["old", "young"]
    assert [c.id for c in await store.stall_candidates(t0 + 10, worker="w-young")] == ["young"]
    assert [c.id for c in await store.stall_candidates(t0 + 10, limit=1)] == ["old"]


async def test_stall_records_are_pruned_only_for_terminal_tasks(store: Store) -> None:
    live = await drive_to(store, "live", S.CLAIMED)
    done = await drive_to(store, "done", S.CLAIMED)
    assert live is not None
    assert done is not None
    for id in ("live", "done"):
        assert await store.mark_stall_notified(id)
    await store.complete(done, "ok")
    assert await store.prune_stall_notices() == 0  # a result is still in custody
    await store.mark_delivered("done")
    assert await store.prune_stall_notices() == 1
    assert await store.mark_stall_notified("live") is False  # kept
    assert await store.mark_stall_notified("done") is True  # pruned


async def test_pool_records_survive_a_reopen(
    backend: Backend, where: Any, fake_clock: FakeClock
) -> None:
    store = await backend.open(where, fake_clock)
    try:
        await drive_to(store, "t", S.CLAIMED)
        await store.beat("w1", "worker", 2)
        assert await store.mark_stall_notified("t")
    finally:
        await store.aclose()
    store = await backend.open(where, fake_clock)
    try:
        assert await store.mark_stall_notified("t") is False
        assert [w.name for w in await store.workers()] == ["w1"]
    finally:
        await store.aclose()


async def test_a_released_claim_is_fenced_out_once_another_worker_holds_the_same_attempt(
    store: Store,
) -> None:
    """After a release, B's claim has the same attempt as A's: only the owner tells them apart."""
    await store.ingest(Task("t", "x"))
    a = await store.claim("wa", leaderless=True)
    assert a is not None
    await store.release(a)
    b = await store.claim("wb", leaderless=True)
    assert b is not None
    assert (b.worker, b.attempt) == ("wb", a.attempt)
    for stale_call in (
        lambda: store.complete(a, "A's late reply"),
        lambda: store.renew(a),
        lambda: store.fail(a, "A's late failure"),
        lambda: store.release(a),
    ):
        with pytest.raises(StaleLease, match="worker 'wa'"):
            await stale_call()
    rec = await store.get("t")
    assert rec is not None
    assert (rec.state, rec.owner, rec.attempt, rec.lease_until) == (
        S.CLAIMED,
        "wb",
        1,
        b.lease_until,
    )
    await store.complete(b, "B's reply")
    [result] = await store.ready_results()
    assert (result.body, result.worker) == ("B's reply", "wb")


async def test_a_worker_that_reclaims_after_its_lease_expired_is_fenced_by_attempt(
    store: Store, fake_clock: FakeClock
) -> None:
    """Same worker, same task, a later attempt: only the attempt tells the copies apart."""
    await store.ingest(Task("t", "x"))
    first = await store.claim("w", leaderless=True)
    assert first is not None
    fake_clock.advance(LEASE_S + 1)
    assert len(await store.expire_leases()) == 1
    second = await store.claim("w", leaderless=True)
    assert second is not None
    assert (second.worker, second.attempt) == ("w", first.attempt + 1)
    assert first.lease_until < second.lease_until
    for stale_call in (
        lambda: store.complete(first, "attempt 1's reply"),
        lambda: store.renew(first),
        lambda: store.fail(first, "attempt 1's failure"),
        lambda: store.release(first),
    ):
        with pytest.raises(StaleLease, match="attempt 1"):
            await stale_call()
    rec = await store.get("t")
    assert rec is not None
    assert (rec.state, rec.owner, rec.attempt) == (S.CLAIMED, "w", 2)
    await store.complete(second, "attempt 2's reply")
    assert (await store.ready_results())[0].body == "attempt 2's reply"


async def test_pool_view_can_skip_the_pending_tasks_of_given_rooms(store: Store) -> None:
    await store.ingest(Task("a1", "x", room="a"), room_policy="concurrent")
    await store.ingest(Task("b1", "x", room="b"), room_policy="concurrent")
    await store.ingest(Task("n1", "x"))
    await store.ingest(Task("a2", "x", room="a"), room_policy="concurrent")
    await store.ingest(Task("c1", "x", room="c"), room_policy="concurrent")
    assert await store.claim("wa", leaderless=True) is not None  # a1: room "a" is wa's now
    view = await store.pool_view(skip_rooms=["a", "c"])
    assert [t.id for t in view.pending] == ["b1", "n1"]
    assert view.rooms == {}  # only the rooms of the pending tasks read
    view = await store.pool_view(pending_limit=2, skip_rooms=("b",))
    assert [t.id for t in view.pending] == ["n1", "a2"]
    assert view.rooms == {"a": "wa"}
    assert [t.id for t in (await store.pool_view(skip_rooms=())).pending] == [
        "b1",
        "n1",
        "a2",
        "c1",
    ]


async def test_plan_and_assign_assigns_what_the_decision_names_from_the_view_it_saw(
    store: Store,
) -> None:
    await store.ingest_many(
        [Task("a", "x", room="r1"), Task("b", "x"), Task("c", "x")], room_policy="concurrent"
    )
    await store.beat("w1", "worker", 4)
    seen: list[tuple[str, ...]] = []

    def decide(view: PoolView) -> list[tuple[str, str]]:
        seen.append(tuple(t.id for t in view.pending))
        return [("a", "w1"), ("a", "w2"), ("c", "w1"), ("gone", "w1")]

    view, done = await store.plan_and_assign(decide, pending_limit=2)
    assert seen[-1] == ("a", "b")  # the window asked for, in queue order
    assert [t.id for t in view.pending] == ["a", "b"]
    assert [w.name for w in view.workers] == ["w1"]
    assert done == [True, False, True, False]  # a repeated id: the first pair decides
    assert await owners(store, "a", "b", "c") == [
        (S.ASSIGNED, "w1"),
        (S.PENDING, None),
        (S.ASSIGNED, "w1"),
    ]
    assert (await store.pool_view()).rooms == {}  # r1 has no pending task left to show
    await store.ingest(Task("d", "x", room="r1"), room_policy="concurrent")
    assert (await store.pool_view()).rooms == {"r1": "w1"}


async def test_plan_and_assign_with_no_decision_changes_nothing(store: Store) -> None:
    await store.ingest(Task("a", "x"))
    view, done = await store.plan_and_assign(lambda view: None)
    assert done is None
    assert [t.id for t in view.pending] == ["a"]
    assert await store.state("a") is S.PENDING
    view, done = await store.plan_and_assign(lambda view: [])
    assert done == []


async def test_plan_and_assign_refuses_a_bad_worker_name_and_assigns_nothing(store: Store) -> None:
    await store.ingest_many([Task("a", "x"), Task("b", "x")])
    with pytest.raises(InvalidWorkerName):
        await store.plan_and_assign(lambda view: [("a", "w1"), ("b", "no spaces")])
    assert await owners(store, "a", "b") == [(S.PENDING, None), (S.PENDING, None)]


async def test_plan_assign_and_claim_claims_a_hands_assignments_up_to_its_slots(
    store: Store, fake_clock: FakeClock
) -> None:
    """Issue 49 (SQLite), 50 (PostgreSQL): the lead claims for its own process's workers in
    the sweep's transaction: fenced leases like the worker's own claim, the rest left
    assigned, nothing for a worker that is not a hand."""
    await store.ingest_many([Task(id, "x") for id in ("a", "b", "c", "d")])
    pairs = [("a", "w1"), ("b", "w1"), ("c", "w1"), ("d", "w2")]
    swept = await store.plan_assign_and_claim(
        lambda view: pairs, hands={"w1": Hand(2), "w3": Hand(4)}
    )
    assert swept.done == [True, True, True, True]
    [(worker, claims)] = swept.claims.items()
    assert (worker, [c.task.id for c in claims]) == ("w1", ["a", "b"])
    assert all(c.lease_until == fake_clock.now + LEASE_S and c.worker == "w1" for c in claims)
    assert await owners(store, "a", "b", "c", "d") == [
        (S.CLAIMED, "w1"),
        (S.CLAIMED, "w1"),
        (S.ASSIGNED, "w1"),
        (S.ASSIGNED, "w2"),
    ]
    await store.complete(claims[0], "done")  # a claim like the worker's own: fenced by it
    assert await store.state("a") is S.RESULT
    [c] = await store.claim_many("w1", 4)
    assert c.task.id == "c"  # the worker claims what was left assigned to it


async def test_plan_assign_and_claim_refuses_bad_hands_and_changes_nothing(store: Store) -> None:
    await store.ingest(Task("a", "x"))
    for hands, error in (
        ({"no spaces": Hand(1)}, InvalidWorkerName),
        ({"w1": Hand(0)}, ValueError),
    ):
        with pytest.raises(error):
            await store.plan_assign_and_claim(lambda view: [("a", "w1")], hands=hands)
    assert await owners(store, "a") == [(S.PENDING, None)]


async def test_room_affinities_past_retention_are_pruned_a_slice_at_a_time(
    store: Store, fake_clock: FakeClock
) -> None:
    # issue #56: an affinity row per room ever run, kept for ever before (concurrent rooms:
    # a serial room in flight shows as busy, not by its affinity)
    c: RoomPolicy = "concurrent"
    await store.ingest_many([Task(f"o{i}", "x", room=f"old{i}") for i in range(3)], room_policy=c)
    assert len(await store.claim_many("w1", 3, leaderless=True)) == 3
    fake_clock.now += 100
    await store.ingest(Task("n", "x", room="new"), room_policy=c)
    assert await store.claim("w2", leaderless=True) is not None
    await store.ingest_many([Task(f"p{i}", "x", room=f"old{i}") for i in range(3)], room_policy=c)
    await store.ingest(Task("m", "x", room="new"), room_policy=c)
    assert len((await store.pool_view()).rooms) == 4
    before = fake_clock.now - 50
    assert await store.prune_rooms(before, limit=2) == 2
    assert await store.prune_rooms(before, limit=2) == 1
    assert await store.prune_rooms(before, limit=2) == 0
    assert (await store.pool_view()).rooms == {"new": "w2"}
    with pytest.raises(ValueError, match="limit"):
        await store.prune_rooms(before, limit=0)


async def test_members_silent_past_retention_are_pruned(
    store: Store, fake_clock: FakeClock
) -> None:
    # issue #56: a crashed member's row stayed for ever (names are unique per process)
    for name in ("gone-1", "gone-2", "gone-3"):
        await store.beat(name, "worker", 4)
    fake_clock.now += 100
    await store.beat("alive", "worker", 4)
    before = fake_clock.now - 50
    assert await store.prune_workers(before, limit=2) == 2
    assert await store.prune_workers(before, limit=2) == 1
    assert await store.prune_workers(before, limit=2) == 0
    assert [w.name for w in await store.workers()] == ["alive"]
