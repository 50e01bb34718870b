"""Conformance: durable runs (issue #35), on every backend.

A step is recorded under the lease fence: a run whose lease is gone records nothing, and a
run that took over never sees a zombie's record appear after its own; a recorded step is what
a later run reads back. A run may park its task in ``waiting`` (no lease, no attempt spent),
woken when due; an operator may cancel it; a re-drive keeps the steps unless fresh; retention
prunes them with their task. Time is the store's ``FakeClock``; nothing sleeps.
"""

from __future__ import annotations

import pytest

from support.clock import FakeClock
from tether.bridge import CustodyState, Task
from tether.bridge.custody import (
    MAX_STEP_BYTES,
    MAX_TASK_STEP_BYTES,
    Claim,
    StaleLease,
    Store,
    WaitingRuns,
)
from tether.bridge.custody._steps import StepError

S = CustodyState


async def _claimed(store: Store, id: str, worker: str = "w1") -> Claim:
    await store.ingest(Task(id, "hi"))
    claim = await store.claim(worker, leaderless=True)
    assert claim is not None
    assert claim.task.id == id
    return claim


async def test_a_recorded_step_is_read_back_and_the_first_record_of_a_name_wins(
    store: Store, fake_clock: FakeClock
) -> None:
    claim = await _claimed(store, "t1")
    first = await store.record_step(claim, "search", '{"hits":3}')
    assert (first.name, first.value, first.attempt, first.size) == ("search", '{"hits":3}', 1, 10)
    assert first.at == fake_clock.now
    fake_clock.advance(1)
    await store.record_step(claim, "book", '"T-17"')
    again = await store.record_step(claim, "search", '{"hits":99}')
    assert again == first  # the first record of a name is kept
    assert [(s.name, s.value) for s in await store.steps("t1")] == [
        ("search", '{"hits":3}'),
        ("book", '"T-17"'),
    ]
    assert await store.steps("unknown") == []
    assert await store.get("t1") is not None
    assert (await store.get("t1")).state is S.CLAIMED  # type: ignore[union-attr]


async def test_a_run_whose_lease_was_taken_back_records_nothing(
    store: Store, fake_clock: FakeClock
) -> None:
    """A claim is held until the reconciler takes it back (``custody._outage``): a lapsed
    lease still records (its holder may have been cut off from the store); once the lease is
    taken back, nothing more."""
    claim = await _claimed(store, "t1")
    fake_clock.advance(store.lease_s + 1)
    await store.record_step(claim, "held", "1")
    fake_clock.advance(store.lease_s + 1)
    [expiry] = await store.expire_leases()
    assert expiry.outcome is S.PENDING
    with pytest.raises(StaleLease, match="record step 'late'"):
        await store.record_step(claim, "late", "1")
    assert [s.name for s in await store.steps("t1")] == ["held"]


async def test_a_zombies_late_record_is_refused_after_another_attempt_took_over(
    store: Store, fake_clock: FakeClock
) -> None:
    zombie = await _claimed(store, "t1", "w1")
    await store.record_step(zombie, "one", '"from attempt 1"')
    fake_clock.advance(store.lease_s + 1)
    [expiry] = await store.expire_leases()
    assert expiry.outcome is S.PENDING
    taker = await store.claim("w2", leaderless=True)
    assert taker is not None
    assert taker.attempt == 2
    seen = [s.name for s in await store.steps("t1")]  # what the new run reads at its start
    with pytest.raises(StaleLease):
        await store.record_step(zombie, "two", '"from the zombie"')
    await store.record_step(taker, "two", '"from attempt 2"')
    steps = await store.steps("t1")
    assert seen == ["one"]
    assert [(s.name, s.value, s.attempt) for s in steps] == [
        ("one", '"from attempt 1"', 1),
        ("two", '"from attempt 2"', 2),
    ]


async def test_step_names_and_sizes_are_checked(store: Store) -> None:
    claim = await _claimed(store, "t1")
    for bad in ("", "a b", "x" * 129, "ünïcode", "/etc"):
        with pytest.raises(StepError, match="step name"):
            await store.record_step(claim, bad, "1")
    with pytest.raises(StepError, match="'big'"):
        await store.record_step(claim, "big", '"' + "x" * MAX_STEP_BYTES + '"')
    assert await store.steps("t1") == []


async def test_a_task_records_at_most_its_total_of_step_bytes(store: Store) -> None:
    claim = await _claimed(store, "t1")
    chunk = '"' + "x" * (MAX_STEP_BYTES - 2) + '"'  # exactly the per-step limit
    for n in range(MAX_TASK_STEP_BYTES // MAX_STEP_BYTES):
        await store.record_step(claim, f"part:{n}", chunk)
    with pytest.raises(StepError, match=r"'one-more'.*over the"):
        await store.record_step(claim, "one-more", "1")
    assert len(await store.steps("t1")) == MAX_TASK_STEP_BYTES // MAX_STEP_BYTES


async def test_a_parked_run_waits_without_a_lease_and_wakes_when_due(
    store: Store, fake_clock: FakeClock
) -> None:
    claim = await _claimed(store, "t1")
    await store.record_step(claim, "~sleep:1", str(fake_clock.now + 60))
    until = fake_clock.now + 60
    await store.park(claim, until, "sleeping until later")
    rec = await store.get("t1")
    assert rec is not None
    assert (rec.state, rec.owner, rec.lease_until, rec.not_before) == (S.WAITING, None, None, until)
    assert rec.attempt == 1
    assert rec.reason == "sleeping until later"
    assert await store.waiting_runs() == WaitingRuns(1, until)
    assert "t1" in await store.in_flight()
    assert (await store.counts())[S.WAITING] == 1
    assert await store.claim("w2", leaderless=True) is None  # nobody runs a waiting task
    with pytest.raises(StaleLease):
        await store.renew(claim)  # the lease was released
    assert await store.wake_due() == []  # not due yet
    fake_clock.advance(60)
    assert await store.wake_due() == ["t1"]
    assert await store.waiting_runs() == WaitingRuns(0, None)
    again = await store.claim("w2", leaderless=True)
    assert again is not None
    assert again.attempt == 1  # no attempt spent
    assert [s.name for s in await store.steps("t1")] == ["~sleep:1"]
    moves = [(e.src, e.dst) for e in await store.journal("t1")]
    assert moves[-3:] == [(S.CLAIMED, S.WAITING), (S.WAITING, S.PENDING), (S.PENDING, S.CLAIMED)]


async def test_wake_due_takes_the_earliest_first_up_to_its_limit(
    store: Store, fake_clock: FakeClock
) -> None:
    for id, later in (("late", 30.0), ("early", 10.0), ("mid", 20.0)):
        claim = await _claimed(store, id, f"w-{id}")
        await store.park(claim, fake_clock.now + later, "sleeping")
    assert (await store.waiting_runs()).next_wake == fake_clock.now + 10
    fake_clock.advance(30)
    assert await store.wake_due(limit=2) == ["early", "mid"]
    assert await store.wake_due() == ["late"]


async def test_a_stale_run_cannot_park(store: Store, fake_clock: FakeClock) -> None:
    claim = await _claimed(store, "t1")
    fake_clock.advance(store.lease_s + 1)
    [expiry] = await store.expire_leases()
    assert expiry.outcome is S.PENDING
    with pytest.raises(StaleLease, match="park"):
        await store.park(claim, fake_clock.now + 60, "sleeping")
    assert (await store.get("t1")).state is S.PENDING  # type: ignore[union-attr]


async def test_an_operator_cancels_a_waiting_task(store: Store, fake_clock: FakeClock) -> None:
    claim = await _claimed(store, "t1")
    await store.park(claim, fake_clock.now + 600, "sleeping")
    [outcome] = await store.cancel(["t1"], "not needed")
    assert outcome.done
    assert outcome.state is S.DEAD
    fake_clock.advance(601)
    assert await store.wake_due() == []  # a cancelled sleeper stays dead
    assert await store.waiting_runs() == WaitingRuns(0, None)


async def test_a_redrive_keeps_the_steps_unless_fresh(store: Store) -> None:
    claim = await _claimed(store, "t1")
    await store.record_step(claim, "paid", '"receipt-1"')
    await store.fail(claim, "boom", permanent=True)
    await store.redrive(["t1"])
    assert [s.name for s in await store.steps("t1")] == ["paid"]  # the run resumes past it
    second = await store.claim("w1", leaderless=True)
    assert second is not None
    await store.fail(second, "boom again", permanent=True)
    [outcome] = await store.redrive(["t1"], fresh=True)
    assert outcome.done
    assert await store.steps("t1") == []
    third = await store.claim("w1", leaderless=True)
    assert third is not None
    await store.record_step(third, "other", "2")
    await store.fail(third, "and again", permanent=True)
    await store.redrive_dead(reason_contains="and again", fresh=True)
    assert await store.steps("t1") == []
    assert (await store.get("t1")).state is S.PENDING  # type: ignore[union-attr]


async def test_a_fresh_redrive_never_forgets_the_steps_of_a_task_not_dead(store: Store) -> None:
    claim = await _claimed(store, "t1")
    await store.record_step(claim, "kept", "1")
    [outcome] = await store.redrive(["t1"], fresh=True)
    assert not outcome.done
    assert [s.name for s in await store.steps("t1")] == ["kept"]


async def test_steps_are_pruned_with_their_task(store: Store, fake_clock: FakeClock) -> None:
    claim = await _claimed(store, "t1")
    await store.record_step(claim, "a", "1")
    await store.complete(claim, "done")
    await store.mark_delivered("t1")
    fake_clock.advance(10)
    assert await store.prune_delivered(fake_clock.now) == 1
    assert await store.steps("t1") == []


@pytest.mark.parametrize("many", [False, True], ids=["complete", "complete_many"])
async def test_a_completed_run_keeps_no_stale_reason_and_its_journal_keeps_the_history(
    store: Store, fake_clock: FakeClock, many: bool
) -> None:
    """Issue 47.5: a task that asked the person and then replied still read "asked the person
    (~ask:1)" in ``store list/show`` after delivery. The reason says why a task is where it is;
    a result says nothing more, and the journal keeps the parked reason."""
    claim = await _claimed(store, "t1")
    await store.park(claim, fake_clock.now + 60, "asked the person (~ask:1): which date?")
    fake_clock.advance(60)
    assert await store.wake_due() == ["t1"]
    again = await store.claim("w2", leaderless=True)
    assert again is not None
    if many:
        assert await store.complete_many([(again, "booked")]) == [True]
    else:
        await store.complete(again, "booked")
    done = await store.get("t1")
    assert done is not None
    assert (done.state, done.reason) == (S.RESULT, None)
    await store.mark_delivered("t1")
    delivered = await store.get("t1")
    assert delivered is not None
    assert (delivered.state, delivered.reason) == (S.DELIVERED, None)
    reasons = [e.reason for e in await store.journal("t1")]
    assert "asked the person (~ask:1): which date?" in reasons
