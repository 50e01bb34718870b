"""Conformance: an operator's re-drive and cancel (issue #16, item 4), on every backend.

Re-drive is the one move out of a terminal state (dead -> pending, fresh attempts, due now); a
delivered or in-custody task is refused with nothing changed. Cancel takes a task not yet run
to a reply (pending, assigned, claimed) to dead with the operator's reason; a claimed task's
worker is fenced out. Both are journalled with actor ``operator``.
"""

from __future__ import annotations

import pytest

from support.clock import FakeClock
from support.custody import MAX_ATTEMPTS, drive_to, worker_for
from tether.bridge import CustodyState, Task
from tether.bridge.custody import (
    OPERATOR_MOVES,
    TRANSITIONS,
    InvalidTaskId,
    OperatorOutcome,
    StaleLease,
    Store,
    may_move,
    operator_may,
)

S = CustodyState


def test_every_operator_move_is_an_allowed_transition_and_only_redrive_leaves_a_terminal() -> None:
    for src, dsts in OPERATOR_MOVES.items():
        for dst in dsts:
            assert may_move(src, dst)
            assert operator_may(src, dst)
    assert TRANSITIONS[S.DEAD] == {S.PENDING}
    assert TRANSITIONS[S.DELIVERED] == frozenset()
    assert not operator_may(S.RESULT, S.DEAD)
    assert not operator_may(S.DELIVERED, S.PENDING)


async def _dead_after_failures(store: Store, id: str) -> None:
    """``id`` dead the ordinary way: ``MAX_ATTEMPTS`` failed attempts (one with a backoff)."""
    assert await store.ingest(Task(id, "hello"))
    for attempt in range(1, MAX_ATTEMPTS + 1):
        claim = await store.claim(worker_for(id), leaderless=True)
        assert claim is not None
        assert claim.attempt == attempt
        await store.fail(claim, "ConnectionError: 503")
    record = await store.get(id)
    assert record is not None
    assert record.state is S.DEAD


async def test_redrive_gives_a_dead_task_fresh_attempts_due_now(
    store: Store, fake_clock: FakeClock
) -> None:
    await _dead_after_failures(store, "d1")
    await store.mark_dead_reported(["d1"])
    assert await store.unreported_dead_count() == 0
    fake_clock.advance(10)

    [outcome] = await store.redrive(["d1"], reason="provider is back")
    assert outcome == OperatorOutcome("d1", True, S.PENDING, "task 'd1' re-driven: dead -> pending")
    record = await store.get("d1")
    assert record is not None
    assert (record.state, record.attempt, record.owner, record.not_before) == (
        S.PENDING,
        1,
        None,
        None,
    )
    assert record.reason == "operator: re-driven: provider is back"
    [last] = list(await store.journal("d1"))[-1:]
    assert (last.src, last.dst, last.actor, last.reason, last.at) == (
        S.DEAD,
        S.PENDING,
        "operator",
        "operator: re-driven: provider is back",
        fake_clock.now,
    )
    # due at once: the lead sees it, a leaderless worker claims it as attempt 1
    assert [t.id for t in await store.pending()] == ["d1"]
    claim = await store.claim("w9", leaderless=True)
    assert claim is not None
    assert (claim.task.id, claim.attempt) == ("d1", 1)
    # if it dies again, the gateway hears again (the dead-notice marker was cleared)
    await store.fail(claim, "boom", permanent=True)
    assert [r.task.id for r in await store.unreported_dead()] == ["d1"]


async def test_redrive_refuses_every_state_but_dead_and_changes_nothing(store: Store) -> None:
    for state in S:
        if state is not S.DEAD:
            await drive_to(store, f"t-{state.value}", state)
    await drive_to(store, "t-dead", S.DEAD)
    before = {id: await store.get(id) for id in await _ids(store)}
    outcomes = await store.redrive([f"t-{s.value}" for s in S] + ["nope"])
    by_id = {o.id: o for o in outcomes}
    assert [o.id for o in outcomes] == [f"t-{s.value}" for s in S] + ["nope"]
    assert by_id["t-dead"].done
    for state in S:
        if state is S.DEAD:
            continue
        o = by_id[f"t-{state.value}"]
        assert (o.done, o.state) == (False, state)
        assert "not re-driven" in o.detail
        assert await store.get(o.id) == before[o.id]
    assert "delivered" in by_id["t-delivered"].detail
    assert by_id["nope"] == OperatorOutcome(
        "nope", False, None, "task 'nope': no such task in the store"
    )
    # a second re-drive of the now pending task is refused too
    [again] = await store.redrive(["t-dead"])
    assert (again.done, again.state) == (False, S.PENDING)


async def test_a_malformed_id_refuses_the_whole_call(store: Store) -> None:
    await drive_to(store, "d1", S.DEAD)
    await drive_to(store, "p1", S.PENDING)
    with pytest.raises(InvalidTaskId):
        await store.redrive(["d1", "bad id with spaces/"])
    with pytest.raises(InvalidTaskId):
        await store.cancel(["p1", ""], "x")
    assert await store.state("d1") is S.DEAD
    assert await store.state("p1") is S.PENDING
    with pytest.raises(ValueError, match="reason"):
        await store.cancel(["p1"], "  ")
    with pytest.raises(ValueError, match="reason_contains"):
        await store.redrive_dead(reason_contains="")


async def test_redrive_dead_selects_by_reason_oldest_death_first(
    store: Store, fake_clock: FakeClock
) -> None:
    for n, reason in enumerate(["provider 503", "bad input", "provider 503 again"]):
        assert await store.ingest(Task(f"d{n}", "x"))
        fake_clock.advance(1)
        await store.dead_letter(f"d{n}", reason)
    await drive_to(store, "p1", S.PENDING)
    outcomes = await store.redrive_dead(reason_contains="503")
    assert [(o.id, o.done) for o in outcomes] == [("d0", True), ("d2", True)]
    assert await store.state("d1") is S.DEAD
    assert [o.id for o in await store.redrive_dead(limit=5, reason="input fixed")] == ["d1"]
    assert await store.redrive_dead() == []
    [entry] = [e for e in await store.journal("d1") if e.src is S.DEAD]
    assert (entry.actor, entry.reason) == ("operator", "operator: re-driven: input fixed")
    [entry] = [e for e in await store.journal("d0") if e.src is S.DEAD]
    assert (entry.actor, entry.reason) == ("operator", "operator: re-driven")


async def test_redrive_dead_leaves_operator_cancelled_tasks_dead_unless_asked(
    store: Store, fake_clock: FakeClock
) -> None:
    """Issue 33: people told "cancelled" must not get a reply later from a bulk re-drive."""
    await drive_to(store, "c1", S.PENDING)
    [cancelled] = await store.cancel(["c1"], "spam")
    assert cancelled.done
    assert await store.ingest(Task("d1", "x"))
    await store.dead_letter("d1", "provider 503")
    assert [o.id for o in await store.redrive_dead()] == ["d1"]
    assert await store.redrive_dead(reason_contains="spam") == []
    assert await store.state("c1") is S.DEAD
    assert [o.id for o in await store.redrive_dead(include_cancelled=True)] == ["c1"]
    await store.cancel(["c1"], "spam again")
    [named] = await store.redrive(["c1"])  # named by id: re-driven
    assert (named.done, await store.state("c1")) == (True, S.PENDING)


async def test_a_redriven_task_queues_behind_fresh_work(
    store: Store, fake_clock: FakeClock
) -> None:
    """Issue 33: a loop of re-drives of tasks that fail again must not starve fresh work, so
    a re-driven task queues as low priority (by age among low tasks)."""
    for n in range(3):
        assert await store.ingest(Task(f"d{n}", "x"))
        await store.dead_letter(f"d{n}", "provider 503")
    fake_clock.advance(1)
    assert await store.ingest(Task("fresh-1", "x"))
    assert await store.ingest(Task("fresh-urgent", "x", priority="urgent"))
    await store.redrive_dead()
    assert await store.ingest(Task("fresh-2", "x"))
    assert await store.ingest(Task("fresh-low", "x", priority="low"))
    order = [t.id for t in await store.pending(limit=10)]
    assert order == ["fresh-urgent", "fresh-1", "fresh-2", "d0", "d1", "d2", "fresh-low"]


async def test_cancel_takes_waiting_and_running_tasks_to_dead_with_the_reason(
    store: Store, fake_clock: FakeClock
) -> None:
    await drive_to(store, "p", S.PENDING)
    await drive_to(store, "a", S.ASSIGNED)
    claim = await drive_to(store, "c", S.CLAIMED)
    assert claim is not None
    fake_clock.advance(2)
    outcomes = await store.cancel(["p", "a", "c"], "user withdrew it")
    assert [(o.id, o.done, o.state) for o in outcomes] == [
        ("p", True, S.DEAD),
        ("a", True, S.DEAD),
        ("c", True, S.DEAD),
    ]
    assert outcomes[2].detail == "task 'c' cancelled: claimed -> dead"
    for id, src in (("p", S.PENDING), ("a", S.ASSIGNED), ("c", S.CLAIMED)):
        record = await store.get(id)
        assert record is not None
        assert (record.state, record.reason, record.lease_until) == (
            S.DEAD,
            "operator: cancelled: user withdrew it",
            None,
        )
        last = list(await store.journal(id))[-1]
        assert (last.src, last.dst, last.actor) == (src, S.DEAD, "operator")
        assert last.at == fake_clock.now
    # the dead-notice loop tells the gateway about them
    assert {r.task.id for r in await store.unreported_dead()} == {"p", "a", "c"}
    # the running worker is fenced out: no renew, no late result, no failure
    with pytest.raises(StaleLease, match=r"dead \(owner .*\(operator: cancelled: user withdrew"):
        await store.renew(claim)
    with pytest.raises(StaleLease):
        await store.complete(claim, "late reply")
    with pytest.raises(StaleLease):
        await store.fail(claim, "late failure")
    assert await store.complete_many([(claim, "late")]) == [False]
    assert await store.state("c") is S.DEAD
    assert await store.ready_results() == []
    # the assigned task's worker claims nothing
    assert await store.claim(worker_for("a")) is None


async def test_cancel_refuses_a_task_with_a_reply_or_already_dead(store: Store) -> None:
    await drive_to(store, "r", S.RESULT)
    await drive_to(store, "d", S.DELIVERED)
    await drive_to(store, "x", S.DEAD)
    before = {id: await store.get(id) for id in ("r", "d", "x")}
    outcomes = await store.cancel(["r", "d", "x", "nope", "r"], "no")
    assert [(o.id, o.done, o.state) for o in outcomes] == [
        ("r", False, S.RESULT),
        ("d", False, S.DELIVERED),
        ("x", False, S.DEAD),
        ("nope", False, None),
    ]
    assert "waits for delivery" in outcomes[0].detail
    assert "already dead" in outcomes[2].detail
    for id, record in before.items():
        assert await store.get(id) == record


async def test_a_cancelled_then_redriven_task_runs_again_and_its_old_claim_stays_fenced(
    store: Store,
) -> None:
    old = await drive_to(store, "c", S.CLAIMED)
    assert old is not None
    await store.cancel(["c"], "stuck")
    [done] = await store.redrive(["c"])
    assert done.done
    new = await store.claim("w2", leaderless=True)
    assert new is not None
    assert (new.task.id, new.attempt) == ("c", 1)
    # the old claim named the same attempt number: the run number fences it
    assert new.run > old.run
    with pytest.raises(StaleLease):
        await store.complete(old, "late")
    await store.complete(new, "fresh reply")
    [result] = await store.ready_results()
    assert (result.task.id, result.body) == ("c", "fresh reply")


async def test_a_run_cancelled_and_redriven_to_the_same_worker_within_its_lease_stays_fenced(
    store: Store, fake_clock: FakeClock
) -> None:
    # issue #37, item 3: a re-drive resets the attempt, so the old run and the new one carry
    # the same (owner, attempt); within one heartbeat the old lease has not even expired
    old = await drive_to(store, "c", S.CLAIMED)
    assert old is not None
    await store.cancel(["c"], "stuck")
    [done] = await store.redrive(["c"])
    assert done.done
    fake_clock.advance(0.1)
    new = await store.claim(old.worker, leaderless=True)
    assert new is not None
    assert (new.task.id, new.worker, new.attempt) == ("c", old.worker, old.attempt)
    assert old.lease_until > fake_clock.now  # the old lease is live
    assert new.run == old.run + 1
    with pytest.raises(StaleLease, match=r"claimed \(owner"):
        await store.renew(old)
    with pytest.raises(StaleLease):
        await store.complete(old, "late reply of the cancelled run")
    assert await store.complete_many([(old, "late")]) == [False]
    with pytest.raises(StaleLease):
        await store.fail(old, "late failure")
    with pytest.raises(StaleLease):
        await store.release(old)
    record = await store.get("c")
    assert record is not None
    assert (record.state, record.owner, record.run) == (S.CLAIMED, old.worker, new.run)
    await store.renew(new)
    await store.complete(new, "fresh reply")
    [result] = await store.ready_results()
    assert (result.task.id, result.body) == ("c", "fresh reply")


async def test_the_run_number_counts_every_claim_and_a_redrive_does_not_reset_it(
    store: Store,
) -> None:
    await _dead_after_failures(store, "c")  # MAX_ATTEMPTS claims, each failed
    record = await store.get("c")
    assert record is not None
    assert (record.attempt, record.run) == (MAX_ATTEMPTS, MAX_ATTEMPTS)
    await store.redrive(["c"])
    claim = await store.claim(worker_for("c"), leaderless=True)
    assert claim is not None
    await store.release(claim)  # a release spends no attempt; the next claim is a new run
    again = await store.claim(worker_for("c"), leaderless=True)
    assert again is not None
    assert [(c.attempt, c.run) for c in (claim, again)] == [
        (1, MAX_ATTEMPTS + 1),
        (1, MAX_ATTEMPTS + 2),
    ]


async def _ids(store: Store) -> list[str]:
    ids: list[str] = []
    for state in S:
        ids += [r.task.id for r in await store.records(state, limit=100)]
    return ids


async def test_a_redriven_task_may_raise_a_new_stall_notice(store: Store) -> None:
    await drive_to(store, "s", S.CLAIMED)
    assert await store.mark_stall_notified("s")
    await store.cancel(["s"], "stuck for an hour")
    [done] = await store.redrive(["s"])
    assert done.done
    assert await store.mark_stall_notified("s")  # the old run's notice was forgotten
