"""The store conformance suite: every backend must pass it unchanged (``store`` is parametrised).

It restates the custody cases of the public file-bridge fix for a transactional store, plus
fencing, idempotent ingest in every state, input validation with nothing stored, and the
reconciler. Time is a ``FakeClock`` the store reads; nothing here sleeps.
"""

from __future__ import annotations

import json
import re
from functools import partial
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from support.clock import FakeClock
from support.custody import LEASE_S, MAX_ATTEMPTS, Backend, drive_to
from tether.bridge import CustodyState, Task, in_custody
from tether.bridge.custody import (
    BodyTooLarge,
    Claim,
    CustodyConflict,
    InvalidTask,
    InvalidTaskId,
    InvalidWorkerName,
    ReconcileReport,
    StaleLease,
    Store,
    UnknownTask,
)
from tether.bridge.pool import Reconciler

S = CustodyState


async def _claim(store: Store, worker: str, *, leaderless: bool = False) -> Claim:
    claim = await store.claim(worker, leaderless=leaderless)
    assert claim is not None
    return claim


# -- the public fix's custody cases ------------------------------------------------------------


async def test_assigned_task_survives_any_number_of_reconciler_passes(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.ingest(Task("task-1", "hi"))
    await store.assign("task-1", "w1")
    reconciler = Reconciler(store)
    for _ in range(25):
        fake_clock.advance(LEASE_S * 10)
        report = await reconciler.run_once()
        assert report.expired == ()
        assert await store.state("task-1") is S.ASSIGNED
    assert await store.in_flight() == ["task-1"]
    claim = await _claim(store, "w1")
    assert (claim.task.id, claim.attempt) == ("task-1", 1)


async def test_live_lease_is_never_taken_while_the_worker_renews(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.ingest(Task("long", "think hard"))
    first = await _claim(store, "w1", leaderless=True)
    reconciler = Reconciler(store)
    current = first
    for _ in range(40):  # 40 * 0.9 leases: far longer than one lease
        fake_clock.advance(LEASE_S * 0.9)
        current = await store.renew(current)
        assert current.lease_until == fake_clock.now + LEASE_S
        assert (await reconciler.run_once()).expired == ()
        assert await store.claim("w2", leaderless=True) is None
    rec = await store.get("long")
    assert rec is not None
    assert (rec.state, rec.owner, rec.attempt) == (S.CLAIMED, "w1", 1)
    # an older copy of the live claim (earlier lease_until) is still the same claim
    assert first.lease_until < current.lease_until
    await store.complete(first, "done")
    assert await store.state("long") is S.RESULT


async def test_expired_lease_is_repooled_and_the_old_holder_is_fenced_out(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.ingest(Task("t1", "hi"))
    await store.assign("t1", "w1")
    old = await _claim(store, "w1")
    fake_clock.advance(LEASE_S + 1)
    rung: list[str] = []
    reconciler = Reconciler(store, on_woken=lambda: rung.append("queue"))
    report = await reconciler.run_once()
    assert rung == ["queue"]  # the pool looks at once, not after its idle wait (issue #39)
    assert (await reconciler.run_once()).repooled == ()
    assert rung == ["queue"]  # a pass that brings nothing back rings nothing
    [expiry] = report.repooled
    assert (expiry.id, expiry.worker, expiry.attempt) == ("t1", "w1", 1)
    assert expiry.lease_until == old.lease_until
    assert "w1" in expiry.reason
    rec = await store.get("t1")
    assert rec is not None
    assert (rec.state, rec.owner, rec.attempt) == (S.PENDING, None, 2)

    new = await _claim(store, "w2", leaderless=True)
    assert new.attempt == 2
    for stale_call in (
        lambda: store.complete(old, "late reply"),
        lambda: store.renew(old),
        lambda: store.fail(old, "late failure"),
    ):
        with pytest.raises(StaleLease, match="t1"):
            await stale_call()
    await store.complete(new, "fresh reply")
    [result] = await store.ready_results()
    assert (result.body, result.worker, result.attempt) == ("fresh reply", "w2", 2)


async def test_a_lapsed_lease_is_held_until_the_reconciler_takes_it_back(
    store: Store, fake_clock: FakeClock
) -> None:
    # custody._outage: the fence never compares the time, so a holder that could not renew
    # (say through a store outage) keeps its run if it comes back before the reconciler
    await store.ingest(Task("t1", "hi"))
    claim = await _claim(store, "w1", leaderless=True)
    fake_clock.advance(LEASE_S * 3)
    renewed = await store.renew(claim)
    assert renewed.lease_until == fake_clock.now + LEASE_S
    assert (await Reconciler(store).run_once()).expired == ()
    await store.complete(claim, "late but first")
    rec = await store.get("t1")
    assert rec is not None
    assert (rec.state, rec.attempt, rec.crash_count, rec.suspect) == (S.RESULT, 1, 0, False)


async def test_the_same_worker_reclaiming_fences_its_own_old_attempt(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.ingest(Task("t1", "hi"))
    old = await _claim(store, "w1", leaderless=True)
    fake_clock.advance(LEASE_S + 1)
    await Reconciler(store).run_once()
    new = await _claim(store, "w1", leaderless=True)
    assert (new.worker, new.attempt) == ("w1", 2)
    with pytest.raises(StaleLease, match="attempt 1"):
        await store.complete(old, "from the first attempt")
    await store.complete(new, "from the second attempt")
    [result] = await store.ready_results()
    assert result.body == "from the second attempt"


@pytest.mark.parametrize("state", list(CustodyState))
async def test_replay_in_every_state_changes_nothing(store: Store, state: CustodyState) -> None:
    await drive_to(store, "t-7", state)
    before = await store.get("t-7")
    assert before is not None
    assert before.state is state
    replay = Task("t-7", "a different body", room="r", priority="urgent", headers={"x": "y"})
    assert await store.ingest(replay) is False
    assert await store.get("t-7") == before
    assert sum((await store.counts()).values()) == 1


@pytest.mark.parametrize("state", list(CustodyState))
async def test_a_replay_with_a_different_body_is_told_apart_and_the_first_body_kept(
    store: Store, state: CustodyState
) -> None:
    """Issue 21.10: ingest keeps the first body; ``body_conflicts`` says which replays came
    with another body (so ingest can warn, count and reject them), in any state."""
    await drive_to(store, "t-7", state, body="the first body")
    before = await store.get("t-7")
    same = Task("t-7", "the first body", room="r", headers={"delivery": "2"})
    other = Task("t-7", "a different body")
    fresh = Task("fresh", "new")
    assert await store.ingest_many([other, same, fresh]) == [False, False, True]
    assert await store.get("t-7") == before  # the first body is kept
    unknown = Task("never-seen", "x")
    assert await store.body_conflicts([same, other, fresh, unknown]) == [
        False,
        True,
        False,
        False,
    ]
    assert await store.body_conflicts([]) == []


async def test_a_pruned_id_has_no_body_to_conflict_with(
    store: Store, fake_clock: FakeClock
) -> None:
    await drive_to(store, "done", S.DELIVERED, body="the first body")
    assert await store.prune_delivered(fake_clock.now + 1) == 1
    assert await store.ingest(Task("done", "another body")) is False  # a tombstoned replay
    assert await store.body_conflicts([Task("done", "another body")]) == [False]


async def test_prefix_ids_never_interfere(store: Store) -> None:
    for id in ("task-1", "task-12", "task-1.2", "task-1_"):
        await store.ingest(Task(id, f"body of {id}"))
    claim = await drive_to(store, "task-123", S.CLAIMED)
    assert claim is not None
    await store.assign("task-1", "w9")
    await store.dead_letter("task-12", "test")
    assert await store.ingest(Task("task-1", "replay")) is False
    assert [await store.state(i) for i in ("task-1", "task-12", "task-1.2", "task-1_")] == [
        S.ASSIGNED,
        S.DEAD,
        S.PENDING,
        S.PENDING,
    ]
    assert await store.state("task-123") is S.CLAIMED
    assert await store.state("task-") is None
    assert sorted(await store.in_flight()) == ["task-1", "task-1.2", "task-123", "task-1_"]
    got = await _claim(store, "w9")
    assert got.task == Task("task-1", "body of task-1")


# -- claims --------------------------------------------------------------------------------


async def test_claim_takes_own_assignments_by_priority_then_age(store: Store) -> None:
    for id, prio in [("a", "low"), ("b", "normal"), ("c", "urgent"), ("d", "normal")]:
        await store.ingest(Task(id, id, priority=prio))
        await store.assign(id, "w1")
    await store.ingest(Task("e", "e", priority="urgent"))  # pending, unassigned
    await store.ingest(Task("f", "f", priority="urgent"))
    await store.assign("f", "w2")  # another worker's
    got = [(await _claim(store, "w1")).task.id for _ in range(4)]
    assert got == ["c", "b", "d", "a"]
    assert await store.claim("w1") is None  # pending tasks only in leaderless mode
    assert (await _claim(store, "w1", leaderless=True)).task.id == "e"
    assert await store.claim("w1", leaderless=True) is None  # never another's assignment
    assert await store.state("f") is S.ASSIGNED


async def test_leaderless_claims_take_pending_by_priority_then_age(store: Store) -> None:
    for id, prio in [("x1", "low"), ("x2", "normal"), ("x3", "urgent"), ("x4", "urgent")]:
        await store.ingest(Task(id, id, priority=prio))
    assert [t.id for t in await store.pending()] == ["x3", "x4", "x2", "x1"]
    assert [t.id for t in await store.pending(limit=1)] == ["x3"]
    got = [(await _claim(store, "w1", leaderless=True)).task.id for _ in range(4)]
    assert got == ["x3", "x4", "x2", "x1"]


async def test_claim_many_hands_out_what_repeated_claims_would_in_the_same_order(
    store: Store,
) -> None:
    for id, prio in [("a", "low"), ("b", "normal"), ("c", "urgent"), ("d", "normal")]:
        await store.ingest(Task(id, id, priority=prio))
        await store.assign(id, "w1")
    for id, prio in [("e", "normal"), ("g", "urgent")]:
        await store.ingest(Task(id, id, priority=prio))  # pending, unassigned
    await store.ingest(Task("f", "f", priority="urgent"))
    await store.assign("f", "w2")  # another worker's
    first = await store.claim_many("w1", 3)
    assert [c.task.id for c in first] == ["c", "b", "d"]
    assert all((c.worker, c.attempt) == ("w1", 1) for c in first)
    # fewer than asked: only its own assignments without leaderless
    assert [c.task.id for c in await store.claim_many("w1", 10)] == ["a"]
    assert await store.claim_many("w1", 10) == []
    # leaderless: pending by priority then age, never another worker's assignment
    assert [c.task.id for c in await store.claim_many("w1", 10, leaderless=True)] == ["g", "e"]
    assert await store.state("f") is S.ASSIGNED
    assert [await store.state(i) for i in "abcdeg"] == [S.CLAIMED] * 6


async def test_claim_many_takes_own_assignments_before_pending_tasks(store: Store) -> None:
    await store.ingest(Task("p1", "x", priority="urgent"))  # pending, more urgent, older
    await store.ingest(Task("mine", "x", priority="low"))
    await store.assign("mine", "w1")
    await store.ingest(Task("p2", "x"))
    got = await store.claim_many("w1", 2, leaderless=True)
    assert [c.task.id for c in got] == ["mine", "p1"]
    assert await store.state("p2") is S.PENDING


async def test_each_claim_of_a_batch_is_fenced_on_its_own(
    store: Store, fake_clock: FakeClock
) -> None:
    for id in ("t1", "t2", "t3"):
        await store.ingest(Task(id, f"body {id}"))
    one, two, three = await store.claim_many("w1", 3, leaderless=True)
    assert len({c.lease_until for c in (one, two, three)}) == 1
    await store.complete(one, "reply 1")
    assert await store.fail(two, "boom") is S.PENDING
    with pytest.raises(StaleLease):
        await store.complete(two, "after failing")  # its own outcome fenced it
    fake_clock.advance(LEASE_S + 1)
    await Reconciler(store).run_once()  # three's lease expired: repooled with attempt 2
    again = await store.claim_many("w2", 5, leaderless=True)
    assert sorted((c.task.id, c.attempt) for c in again) == [("t2", 2), ("t3", 2)]
    with pytest.raises(StaleLease, match="t3"):
        await store.complete(three, "late")
    for claim in again:
        await store.complete(claim, f"reply {claim.task.id}")
    assert sorted(r.body for r in await store.ready_results()) == [
        "reply 1",
        "reply t2",
        "reply t3",
    ]


async def test_concurrent_claim_many_calls_never_hand_out_a_task_twice(store: Store) -> None:
    await store.ingest_many([Task(f"t{i:02}", "x") for i in range(30)])
    got: dict[str, list[str]] = {}

    async def claimer(worker: str) -> None:
        got[worker] = [c.task.id for c in await store.claim_many(worker, 7, leaderless=True)]

    async with trio.open_nursery() as nursery:
        for k in range(5):
            nursery.start_soon(claimer, f"w{k}")
    ids = [id for batch in got.values() for id in batch]
    assert len(ids) == len(set(ids)) == 30
    assert sorted(len(batch) for batch in got.values()) == [2, 7, 7, 7, 7]


@pytest.mark.parametrize("bad", [0, -1, 1001, True, 2.0, "3"])
async def test_claim_many_refuses_a_bad_limit_and_claims_nothing(store: Store, bad: Any) -> None:
    await store.ingest(Task("t1", "x"))
    with pytest.raises(ValueError, match="claim limit"):
        await store.claim_many("w1", bad, leaderless=True)
    assert await store.state("t1") is S.PENDING


async def test_fail_repools_with_the_next_attempt_then_dead_letters(
    store: Store,
) -> None:
    await store.ingest(Task("t1", "hi"))
    for attempt in range(1, MAX_ATTEMPTS):
        claim = await _claim(store, "w1", leaderless=True)
        assert claim.attempt == attempt
        assert await store.fail(claim, f"boom {attempt}") is S.PENDING
        with pytest.raises(StaleLease):
            await store.fail(claim, "twice")
    last = await _claim(store, "w1", leaderless=True)
    assert await store.fail(last, "boom last") is S.DEAD
    rec = await store.get("t1")
    assert rec is not None
    assert rec.state is S.DEAD
    assert rec.reason is not None
    assert "boom last" in rec.reason
    assert f"attempt {MAX_ATTEMPTS} of {MAX_ATTEMPTS}" in rec.reason
    assert await store.in_flight() == []
    assert await store.claim("w1", leaderless=True) is None


async def test_lease_expiry_past_max_attempts_dead_letters_with_its_reason(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.ingest(Task("t1", "hi"))
    reconciler = Reconciler(store)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        claim = await _claim(store, f"w{attempt}", leaderless=True)
        assert claim.attempt == attempt
        fake_clock.advance(LEASE_S + 1)
        report = await reconciler.run_once()
        assert len(report.expired) == 1
    [dead] = report.dead_lettered
    assert (dead.id, dead.worker, dead.attempt) == ("t1", f"w{MAX_ATTEMPTS}", MAX_ATTEMPTS)
    rec = await store.get("t1")
    assert rec is not None
    assert rec.state is S.DEAD
    assert rec.reason == dead.reason
    assert "max_attempts" in dead.reason


async def test_renew_never_shortens_a_lease(store: Store, fake_clock: FakeClock) -> None:
    await store.ingest(Task("t1", "hi"))
    claim = await _claim(store, "w1", leaderless=True)
    fake_clock.advance(5)
    renewed = await store.renew(claim)
    assert renewed.lease_until == claim.lease_until + 5
    fake_clock.now -= 3  # a clock step backwards must not cut the lease
    again = await store.renew(renewed)
    assert again.lease_until == renewed.lease_until
    assert (again.task, again.worker, again.attempt) == (claim.task, "w1", 1)


# -- lead, delivery and dead letters --------------------------------------------------------


async def test_assign_and_unassign_are_compare_and_set(store: Store) -> None:
    await store.ingest(Task("t1", "hi"))
    await store.assign("t1", "w1")
    with pytest.raises(CustodyConflict, match="assigned"):
        await store.assign("t1", "w2")
    with pytest.raises(UnknownTask):
        await store.assign("nope", "w1")
    assert await store.unassign("t1", "w2") is False
    assert await store.state("t1") is S.ASSIGNED
    assert await store.unassign("t1", "w1") is True
    rec = await store.get("t1")
    assert rec is not None
    assert (rec.state, rec.owner) == (S.PENDING, None)
    await store.assign("t1", "w2")
    await _claim(store, "w2")
    assert await store.unassign("t1", "w2") is False  # a live claim is not an assignment
    assert await store.state("t1") is S.CLAIMED


async def test_mark_delivered_many_marks_results_and_leaves_everything_else(
    store: Store,
) -> None:
    for id in ("r1", "r2", "r3"):
        await drive_to(store, id, S.RESULT)
    await drive_to(store, "d1", S.DELIVERED)
    await drive_to(store, "c1", S.CLAIMED)
    await store.ingest(Task("p1", "hi"))
    marked = await store.mark_delivered_many(["r1", "p1", "d1", "ghost", "c1", "r3"])
    assert marked == [True, False, True, False, False, True]
    assert [await store.state(i) for i in ("r1", "r2", "r3", "d1", "c1", "p1", "ghost")] == [
        S.DELIVERED,
        S.RESULT,
        S.DELIVERED,
        S.DELIVERED,
        S.CLAIMED,
        S.PENDING,
        None,
    ]
    assert [r.task.id for r in await store.ready_results()] == ["r2"]
    assert await store.mark_delivered_many([]) == []
    with pytest.raises(InvalidTaskId):
        await store.mark_delivered_many(["r2", "bad id"])  # validated first: nothing moves
    assert await store.state("r2") is S.RESULT


async def test_delivery_and_dead_letter_rules(store: Store) -> None:
    await drive_to(store, "r1", S.RESULT)
    await store.ingest(Task("p1", "hi"))
    with pytest.raises(CustodyConflict, match="pending"):
        await store.mark_delivered("p1")
    [ready] = await store.ready_results()
    assert (ready.task.id, ready.body, ready.worker) == ("r1", "reply to r1", "w-r1")
    await store.mark_delivered("r1")
    await store.mark_delivered("r1")  # a repeated confirmation is a no-op
    assert await store.ready_results() == []
    with pytest.raises(CustodyConflict, match="delivered"):
        await store.dead_letter("r1", "too late")
    with pytest.raises(UnknownTask):
        await store.mark_delivered("ghost")

    claim = await drive_to(store, "c1", S.CLAIMED)
    assert claim is not None
    await store.dead_letter("c1", "operator gave up")
    await store.dead_letter("c1", "again")  # already dead: no-op, first reason kept
    rec = await store.get("c1")
    assert rec is not None
    assert (rec.state, rec.reason) == (S.DEAD, "operator gave up")
    with pytest.raises(StaleLease):
        await store.complete(claim, "after death")
    with pytest.raises(ValueError, match="reason"):
        await store.dead_letter("p1", "  ")


async def test_counts_and_in_flight_follow_the_custody_predicate(store: Store) -> None:
    assert isinstance(store, Store)
    for state in CustodyState:
        await drive_to(store, f"id-{state.value}", state)
    counts = await store.counts()
    assert counts == dict.fromkeys(CustodyState, 1)
    expected = [f"id-{s.value}" for s in CustodyState if in_custody(s)]
    assert sorted(await store.in_flight()) == sorted(expected)


# -- input validation: refused before the store is touched ---------------------------------


@pytest.mark.parametrize(
    ("bad", "rule"),
    [
        ("", "empty"),
        ("a" * 129, "limit is 128"),
        ("../etc", "'..'"),
        ("a..b", "'..'"),
        ("-lead", "start with a letter or digit"),
        (".hidden", "start with a letter or digit"),
        ("é", "start with a letter or digit"),
        ("a/b", "'/'"),
        ("a\0b", "'\\x00'"),
        ("a b", "' '"),
        ("ab\n", "'\\n'"),
        ("aé", "'é'"),
        (7, "must be a str"),
    ],
)
async def test_bad_task_ids_are_refused_naming_the_rule(store: Store, bad: Any, rule: str) -> None:
    with pytest.raises(InvalidTaskId, match="task id") as info:
        Task(bad, "hi")
    assert rule in str(info.value)
    for call in (
        lambda: store.state(bad),
        lambda: store.assign(bad, "w1"),
        lambda: store.mark_delivered(bad),
        lambda: store.dead_letter(bad, "x"),
        lambda: store.get(bad),
    ):
        with pytest.raises(InvalidTaskId):
            await call()
    assert sum((await store.counts()).values()) == 0


@pytest.mark.parametrize("good", ["a", "A" * 128, "task-1", "x_y~z.w-1", "0", "a.b.c"])
async def test_good_task_ids_are_stored(store: Store, good: str) -> None:
    assert await store.ingest(Task(good, "hi"))
    assert await store.state(good) is S.PENDING


@pytest.mark.parametrize("bad", ["", "-w", "w/1", "w.1", "w" * 65, "w 1", "w~1"])
async def test_bad_worker_names_are_refused(store: Store, bad: str) -> None:
    await store.ingest(Task("t1", "hi"))
    with pytest.raises(InvalidWorkerName, match="worker name"):
        await store.assign("t1", bad)
    with pytest.raises(InvalidWorkerName):
        await store.claim(bad, leaderless=True)
    rec = await store.get("t1")
    assert rec is not None
    assert (rec.state, rec.owner) == (S.PENDING, None)


async def test_oversized_bodies_are_refused_with_nothing_stored(
    backend: Backend, where: Any, fake_clock: FakeClock
) -> None:
    store = await backend.open(where, fake_clock, max_body_bytes=100)
    try:
        with pytest.raises(BodyTooLarge, match="body of task 'big' is 101 bytes; the limit is 100"):
            await store.ingest(Task("big", "x" * 101))
        with pytest.raises(BodyTooLarge, match="102 bytes"):
            await store.ingest(Task("big", "é" * 51))  # bytes, not characters
        assert sum((await store.counts()).values()) == 0
        assert await store.ingest(Task("fits", "x" * 100))
        claim = await _claim(store, "w1", leaderless=True)
        with pytest.raises(BodyTooLarge, match="result of task 'fits'"):
            await store.complete(claim, "y" * 101)
        assert await store.state("fits") is S.CLAIMED
        await store.complete(claim, "y" * 100)
    finally:
        await store.aclose()


async def test_bodies_rooms_and_headers_are_stored_as_given(store: Store) -> None:
    task = Task(
        "t1",
        "  línea 1\r\n\tline 2 🚀\n",
        room="room/with spaces",
        priority="low",
        headers={"from": "ann", "x-trace": "a=b; c"},
    )
    await store.ingest(task)
    claim = await _claim(store, "w1", leaderless=True)
    assert claim.task == task
    await store.complete(claim, "\n reply \u2028 kept\n")
    [result] = await store.ready_results()
    assert result.body == "\n reply \u2028 kept\n"
    assert result.task == task


async def test_nul_in_bodies_and_headers_round_trips(store: Store) -> None:
    # a chat message may hold NUL; PostgreSQL text cannot, so backends must store bytes
    body = "a\0b \U0001f600"
    await store.ingest(Task("nul", body, headers={"h": "x\0y"}))
    claim = await _claim(store, "w1", leaderless=True)
    assert claim.task.body == body
    assert claim.task.headers == {"h": "x\0y"}
    await store.complete(claim, "reply\0with nul")
    [result] = await store.ready_results()
    assert result.body == "reply\0with nul"
    rec = await store.get("nul")
    assert rec is not None
    assert (rec.task.body, rec.result) == (body, "reply\0with nul")


async def test_bad_task_fields_are_refused() -> None:
    with pytest.raises(ValueError, match="priority"):
        Task("t1", "hi", priority="asap")
    with pytest.raises(ValueError, match="headers"):
        Task("t1", "hi", headers={"n": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="room"):
        Task("t1", "hi", room="")
    with pytest.raises(ValueError, match="body"):
        Task("t1", b"bytes")  # type: ignore[arg-type]


# -- durability and the reconciler ---------------------------------------------------------


async def test_everything_survives_a_reopen(
    backend: Backend, where: Any, fake_clock: FakeClock
) -> None:
    store = await backend.open(where, fake_clock)
    try:
        for state in CustodyState:
            await drive_to(store, f"id-{state.value}", state)
        before = {s: await store.get(f"id-{s.value}") for s in CustodyState}
    finally:
        await store.aclose()
    with pytest.raises(Exception, match="closed"):
        await store.state("id-pending")
    again = await backend.open(where, fake_clock)
    try:
        assert {s: await again.get(f"id-{s.value}") for s in CustodyState} == before
        assert await again.ingest(Task("id-pending", "replay")) is False
    finally:
        await again.aclose()


async def test_the_reconciler_never_drops_an_id(store: Store, fake_clock: FakeClock) -> None:
    ids = []
    for n, state in enumerate(list(CustodyState) * 3):
        ids.append(f"t{n}")
        await drive_to(store, f"t{n}", state)
    reconciler = Reconciler(store)
    for _ in range(MAX_ATTEMPTS + 2):
        fake_clock.advance(LEASE_S * 3)
        await reconciler.run_once()
        for worker in ("w1", "w2"):
            await store.claim(worker, leaderless=True)  # keep leases expiring
        assert all([await store.state(i) is not None for i in ids])
        assert sum((await store.counts()).values()) == len(ids)
    assert reconciler.passes == MAX_ATTEMPTS + 2


async def test_reconcile_report_is_a_versioned_document(
    store: Store, fake_clock: FakeClock
) -> None:
    await drive_to(store, "t1", S.CLAIMED)
    fake_clock.advance(LEASE_S * 2)
    report = await Reconciler(store).run_once()
    doc = report.to_document()
    assert doc["schema_version"] == 1
    assert doc["expired"][0]["outcome"] == "pending"
    assert ReconcileReport.from_document(doc) == report
    with pytest.raises(ValueError, match="schema_version 2"):
        ReconcileReport.from_document({**doc, "schema_version": 2})
    with pytest.raises(ValueError, match="invalid ReconcileReport"):
        ReconcileReport.from_document({**doc, "at": "now"})


async def test_reconciler_handles_a_backlog_larger_than_its_batch(
    store: Store, fake_clock: FakeClock
) -> None:
    for n in range(25):
        await store.ingest(Task(f"t{n}", "hi"))
        await _claim(store, "w1", leaderless=True)
    fake_clock.advance(LEASE_S + 1)
    report = await Reconciler(store, batch=10).run_once()
    assert sorted(e.id for e in report.repooled) == sorted(f"t{n}" for n in range(25))
    assert (await store.counts())[S.PENDING] == 25


@pytest.fixture
def mock_clock() -> MockClock:
    # a threshold above zero: the store's thread round trips must not count as idle
    return MockClock(autojump_threshold=0.05)


async def test_the_reconciler_service_passes_on_its_interval(
    store: Store, fake_clock: FakeClock, mock_clock: MockClock
) -> None:
    await drive_to(store, "t1", S.CLAIMED)
    reconciler = Reconciler(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(reconciler.run, interval=5.0))
        assert reconciler.passes == 1  # ready means the first pass is done
        fake_clock.advance(LEASE_S + 1)
        assert await store.state("t1") is S.CLAIMED
        await trio.sleep(5.5)
        assert reconciler.passes == 2
        assert await store.state("t1") is S.PENDING
        assert reconciler.last_report is not None
        assert [e.id for e in reconciler.last_report.repooled] == ["t1"]
        nursery.cancel_scope.cancel()
    with pytest.raises(ValueError, match="interval"):
        await reconciler.run(interval=0)


async def test_ingest_many_is_all_or_nothing_and_idempotent(store: Store) -> None:
    await store.ingest(Task("old", "hi"))
    got = await store.ingest_many(
        [Task("n1", "a"), Task("old", "b"), Task("n2", "c"), Task("n1", "d")]
    )
    assert got == [True, False, True, False]
    assert await store.ingest_many([]) == []
    big = Task("n3", "x", headers={"h": "y" * 2_000_000})
    with pytest.raises(BodyTooLarge, match="headers of task 'n3'"):
        await store.ingest_many([Task("n4", "fine"), big])
    assert await store.state("n4") is None
    assert sorted(await store.in_flight()) == ["n1", "n2", "old"]
    rec = await store.get("n1")
    assert rec is not None
    assert rec.task.body == "a"


async def test_prune_delivered_keeps_everything_else(store: Store, fake_clock: FakeClock) -> None:
    for state in CustodyState:
        await drive_to(store, f"early-{state.value}", state)
    fake_clock.advance(100)
    await drive_to(store, "late-delivered", S.DELIVERED)
    assert await store.prune_delivered(fake_clock.now - 50) == 1
    assert await store.state("early-delivered") is None
    assert await store.state("late-delivered") is S.DELIVERED
    for state in CustodyState:
        if state is not S.DELIVERED:
            assert await store.state(f"early-{state.value}") is state
    fake_clock.advance(100)
    assert await store.prune_delivered(fake_clock.now) == 1
    assert (await store.counts())[S.DEAD] == 1  # dead letters are never pruned


async def test_two_stores_racing_on_the_same_tasks_see_no_false_conflicts(
    backend: Backend, where: Any, fake_clock: FakeClock
) -> None:
    # two bridges (two store handles, two connections) confirm and dead-letter the same tasks
    # at once: the loser of each race must see a no-op, never a conflict with a stale state
    stores = [await backend.open(where, fake_clock) for _ in range(2)]
    try:
        for n in range(30):
            await drive_to(stores[0], f"r{n}", S.RESULT)
            await drive_to(stores[0], f"p{n}", S.PENDING)

        async def race(store: Store) -> None:
            for n in range(30):
                await store.mark_delivered(f"r{n}")
                await store.dead_letter(f"p{n}", "both gave up")

        async with trio.open_nursery() as nursery:
            for store in stores:
                for _ in range(3):
                    nursery.start_soon(race, store)
        counts = await stores[1].counts()
        assert (counts[S.DELIVERED], counts[S.DEAD]) == (30, 30)
    finally:
        for store in stores:
            await store.aclose()


async def test_records_lists_one_state_in_ingest_order(store: Store) -> None:
    for n in range(5):
        await drive_to(store, f"d{n}", S.DEAD)
        await drive_to(store, f"p{n}", S.PENDING)
    dead = await store.records(S.DEAD)
    assert [r.task.id for r in dead] == [f"d{n}" for n in range(5)]
    assert all(r.state is S.DEAD and r.reason == "test: sent to dead" for r in dead)
    newest = await store.records(S.DEAD, limit=2, newest_first=True)
    assert [r.task.id for r in newest] == ["d4", "d3"]
    assert [r.task.id for r in await store.records(S.PENDING, limit=1)] == ["p0"]
    assert await store.records(S.CLAIMED) == []
    assert dead[0] == await store.get("d0")


async def test_newest_first_means_the_latest_to_reach_the_state(
    store: Store, fake_clock: FakeClock
) -> None:
    """Issue 32.9: ``tether store status`` listed dead letters "newest first" by ingest time
    while its age column showed how long ago each died."""
    await store.ingest(Task("old", "x"))
    await store.ingest(Task("young", "x"))
    await store.dead_letter("young", "test: sent to dead")
    fake_clock.advance(60)
    await store.dead_letter("old", "test: sent to dead")  # ingested first, dead last
    newest = await store.records(S.DEAD, newest_first=True)
    assert [r.task.id for r in newest] == ["old", "young"]


async def test_text_that_is_not_valid_unicode_is_refused_with_nothing_stored(
    store: Store,
) -> None:
    lone = json.loads('"hi \\ud800 there"')  # valid JSON, but half a surrogate pair
    with pytest.raises(InvalidTask, match=re.escape("body of task 't1' contains a lone surrogate")):
        await store.ingest(Task("t1", lone))
    with pytest.raises(InvalidTask, match="room"):
        Task("t1", "hi", room=lone)
    assert await store.state("t1") is None
    claim = await drive_to(store, "t2", S.CLAIMED)
    assert claim is not None
    with pytest.raises(InvalidTask, match="result of task 't2' contains a lone surrogate"):
        await store.complete(claim, lone)
    assert await store.state("t2") is S.CLAIMED
    pair = "rocket \U0001f680"  # a real astral character (a pair in JSON) is fine
    await store.complete(claim, pair)
    assert (await store.ready_results())[0].body == pair


async def test_a_pruned_delivered_id_stays_a_replay_until_its_tombstone_is_pruned(
    backend: Backend, where: Any, fake_clock: FakeClock
) -> None:
    """DESIGN: an id already delivered is acknowledged again as a no-op, also after the
    retention prune deleted its row: an id-only tombstone outlives the task."""
    store = await backend.open(where, fake_clock)
    try:
        await drive_to(store, "done", S.DELIVERED)
        delivered_at = fake_clock.now
        fake_clock.advance(3600)
        await drive_to(store, "later", S.DELIVERED)
        assert await store.prune_delivered(delivered_at + 1) == 1
        assert await store.state("done") is None  # the row is gone ...
        assert await store.ingest(Task("done", "replayed")) is False  # ... its id is not
        assert await store.ingest_many([Task("new", "x"), Task("done", "again")]) == [True, False]
        assert await store.state("done") is None
    finally:
        await store.aclose()
    store = await backend.open(where, fake_clock)  # tombstones are durable
    try:
        assert await store.ingest(Task("done", "after a restart")) is False
        with pytest.raises(ValueError, match="limit"):
            await store.prune_tombstones(fake_clock.now, limit=0)
        assert await store.prune_tombstones(delivered_at) == 0  # older than that only
        assert await store.prune_tombstones(delivered_at + 1) == 1
        assert await store.ingest(Task("done", "a new task by now")) is True
        assert await store.state("done") is S.PENDING
        assert await store.prune_delivered(fake_clock.now + 1) == 1  # "later"
        assert await store.ingest(Task("later", "replayed")) is False
        assert await store.counts() == {**dict.fromkeys(CustodyState, 0), S.PENDING: 2}
    finally:
        await store.aclose()
