"""Conformance: crash accounting (issue #16, item 3), on every backend.

A lease lost because its holder's process died (its beat row went silent, or its name came
back in a new process) is a crash expiry: the next attempt (the fence) but no failure spent,
a crash counted, the task a suspect. Suspects run alone: one in the whole pool at a time,
nothing else in its process, and the lead never plans them. Only a task whose process died
twice while it ran alone is dead-lettered for crashes, saying so. Time is the store's
``FakeClock``; nothing sleeps.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio

from support.clock import FakeClock
from support.custody import LEASE_S, MAX_ATTEMPTS
from tether.bridge import CustodyState, Task
from tether.bridge.custody import (
    Claim,
    CustodyConflict,
    Granted,
    LeaseExpiry,
    LimitSpec,
    NoPermit,
    Store,
)
from tether.bridge.custody._crashes import DEFAULT_MAX_CRASHES_ALONE, process_prefix

S = CustodyState


async def _claim(store: Store, worker: str, n: int = 1000) -> Sequence[Claim]:
    await store.beat(worker, "worker", 10)
    return await store.claim_many(worker, n, leaderless=True)


async def _crash(
    store: Store, clock: FakeClock, worker: str, *ids: str, ingest: bool = True
) -> list[LeaseExpiry]:
    """``worker`` (beating) claims ``ids``; its process dies; the reconciler finds the leases."""
    if ingest:
        await store.ingest_many([Task(id, f"body of {id}") for id in ids])
    claims = await _claim(store, worker)
    assert sorted(c.task.id for c in claims) == sorted(ids)
    clock.advance(LEASE_S + 1)  # no beat since: silent for more than half a lease
    expired = list(await store.expire_leases())
    assert sorted(e.id for e in expired) == sorted(ids)
    return expired


async def test_a_crash_expiry_burns_no_attempt_and_makes_the_task_a_suspect(
    store: Store, fake_clock: FakeClock
) -> None:
    [e] = await _crash(store, fake_clock, "old-w1", "t1")
    assert (e.outcome, e.crash, e.attempt) == (S.PENDING, True, 1)
    assert "its process died" in e.reason
    # issue 47.6: where a suspect runs, and no "attempt 2" for a run lost to a crash
    assert e.reason.endswith(
        "a suspect now, it runs next apart from other tasks (in a quarantine process, or alone "
        "in its process where none can start)"
    )
    assert "not a failed attempt" in e.reason
    record = await store.get("t1")
    assert record is not None
    assert (record.state, record.attempt, record.owner, record.lease_until) == (
        S.PENDING,
        2,
        None,
        None,
    )
    assert (record.crash_count, record.crashes_alone, record.suspect) == (1, 0, True)
    assert record.reason == e.reason
    last = (await store.journal("t1"))[-1]
    assert (last.src, last.dst, last.worker, last.attempt, last.actor) == (
        S.CLAIMED,
        S.PENDING,
        "old-w1",
        1,
        "reconciler",
    )
    assert last.reason == e.reason
    suspects = await store.suspects()
    assert suspects.count == 1
    assert [r.task.id for r in suspects.records] == ["t1"]


async def test_a_run_that_waited_for_a_permit_when_its_process_died_is_no_suspect(
    store: Store, fake_clock: FakeClock
) -> None:
    """Issue 47.7: the store knows a waiter for a permit ran none of its own code; only the
    holder of the permit becomes a suspect (each suspect costs a quarantine process)."""
    await store.set_limit(LimitSpec("k", concurrency=1))
    await store.ingest_many([Task(id, "x") for id in ("holder", "waiter", "stale")])
    claims = {c.task.id: c for c in await _claim(store, "old-w1")}
    assert isinstance(await store.acquire_permit(claims["holder"], "k"), Granted)
    assert isinstance(await store.acquire_permit(claims["stale"], "k"), NoPermit)
    fake_clock.advance(5)  # the stale one went on with other code; its waiter row is old
    await store.beat("old-w1", "worker", 10)  # the process is seen alive after that...
    assert isinstance(await store.acquire_permit(claims["waiter"], "k"), NoPermit)
    fake_clock.advance(LEASE_S + 1)  # ...and dies with "waiter" still waiting
    expired = {e.id: e for e in await store.expire_leases()}
    assert sorted(expired) == ["holder", "stale", "waiter"]
    waiter = expired["waiter"]
    assert (waiter.outcome, waiter.crash, waiter.attempt) == (S.PENDING, True, 1)
    assert "while it waited for a permit of k" in waiter.reason
    assert waiter.reason.endswith("(crash 1, not a failed attempt); not a suspect")
    records = {id: await store.get(id) for id in expired}
    suspect = {id: r.suspect for id, r in records.items() if r is not None}
    assert suspect == {"holder": True, "stale": True, "waiter": False}
    waited = records["waiter"]
    assert waited is not None
    assert (waited.state, waited.attempt, waited.crash_count) == (S.PENDING, 2, 1)
    assert [r.task.id for r in (await store.suspects()).records] == ["holder", "stale"]


async def test_lapsed_waiter_rows_are_pruned_but_a_parked_waiters(
    store: Store, fake_clock: FakeClock
) -> None:
    """Issue #56.4 (the rows nobody removed): a refused acquire's waiter row stays after its
    run ends or moves on; retention prunes it once lapsed, but a parked waiter's row, which
    orders the wake-ups of its key, is kept."""
    await store.set_limit(LimitSpec("k", concurrency=1))
    await store.ingest_many([Task(id, "x") for id in ("holder", "gone", "parked")])
    claims = {c.task.id: c for c in await _claim(store, "w1")}
    held = await store.acquire_permit(claims["holder"], "k")
    assert isinstance(held, Granted)
    assert held.permit is not None
    for id in ("gone", "parked"):
        assert isinstance(await store.acquire_permit(claims[id], "k"), NoPermit)
    await store.park(claims["parked"], fake_clock.now + 3600, "waiting for a permit of k")
    await store.fail(claims["gone"], "gave up", permanent=True)
    fake_clock.advance(100)
    before = fake_clock.now - 50
    assert await store.prune_waiters(before, limit=10) == 1  # "gone"'s; "parked" keeps its own
    assert await store.prune_waiters(before, limit=10) == 0
    await store.release_permit(held.permit)
    assert await store.state("parked") is S.PENDING  # its row still ordered the wake-up
    with pytest.raises(ValueError, match="limit"):
        await store.prune_waiters(before, limit=0)


async def test_crashes_spend_no_failure_budget_and_never_add_up_to_dead(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.ingest_many([Task("t1", "x"), Task("t2", "y")])
    for n in range(1, MAX_ATTEMPTS + 1):
        # t1 and t2 are in flight together in a process that dies: no proof against either
        await _crash(store, fake_clock, f"p{n}-w1", "t1", "t2", ingest=False)
        for id in ("t1", "t2"):
            record = await store.get(id)
            assert record is not None
            assert (record.state, record.crash_count, record.attempt) == (S.PENDING, n, 2 * n)
            assert (record.crashes_alone, record.suspect) == (0, True)
        if n == MAX_ATTEMPTS:
            break
        for _ in range(2):  # each runs alone and fails normally: no suspect any more
            [claim] = await _claim(store, f"q{n}-w1", 10)
            assert await store.fail(claim, "ValueError: flaky") is S.PENDING
    assert (await store.counts())[S.DEAD] == 0
    # the last failure of the budget (crashes left out) is what ends it
    [claim] = await _claim(store, "z-w1", 10)
    assert await store.fail(claim, "ValueError: flaky") is S.DEAD
    record = await store.get(claim.task.id)
    assert record is not None
    assert record.reason == (
        f"failed on attempt {claim.attempt} ({MAX_ATTEMPTS} failures of {MAX_ATTEMPTS}; "
        f"{record.crash_count} lost to crashes): ValueError: flaky"
    )


async def test_a_live_holder_that_let_its_lease_lapse_fails_the_attempt(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.ingest(Task("t1", "x"))
    [claim] = await _claim(store, "live-w1")
    fake_clock.advance(LEASE_S + 1)
    await store.beat("live-w1", "worker", 10)  # alive: it let go (a run past its timeout)
    [e] = await store.expire_leases()
    assert (e.outcome, e.crash, e.attempt) == (S.PENDING, False, 1)
    assert e.reason.endswith("repooled as attempt 2")
    record = await store.get("t1")
    assert record is not None
    assert (record.attempt, record.crash_count, record.suspect) == (2, 0, False)
    assert claim.attempt == 1


async def test_a_holder_without_a_beat_row_is_no_evidence_of_a_crash(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.ingest(Task("t1", "x"))
    assert await store.claim("w1", leaderless=True) is not None  # never beat
    fake_clock.advance(LEASE_S + 1)
    [e] = await store.expire_leases()
    assert (e.crash, (await store.get("t1")).attempt) == (False, 2)  # type: ignore[union-attr]


async def test_a_suspect_runs_alone_in_its_process_and_alone_in_the_pool(
    store: Store, fake_clock: FakeClock
) -> None:
    await _crash(store, fake_clock, "old-w1", "s1", "s2")
    await store.ingest_many([Task(f"n{i}", "x") for i in range(4)])
    # the lead never plans a suspect
    view = await store.pool_view()
    assert [q.id for q in view.pending] == ["n0", "n1", "n2", "n3"]
    assert await store.assign_many([("s1", "a-w1")]) == [False]
    with pytest.raises(CustodyConflict, match="suspect"):
        await store.assign("s1", "a-w1")
    assert [t.id for t in await store.pending()] == ["n0", "n1", "n2", "n3"]
    # an empty process takes one suspect, alone, even when it asked for more
    [alone] = await _claim(store, "a-w1", 10)
    assert alone.task.id in {"s1", "s2"}
    # nothing else runs in its process
    assert await _claim(store, "a-w2", 10) == []
    assert await _claim(store, "a-w1", 10) == []
    # other processes run their normal work meanwhile, but not the other suspect
    taken = await _claim(store, "b-w1", 10)
    assert sorted(c.task.id for c in taken) == ["n0", "n1", "n2", "n3"]
    assert await _claim(store, "c-w1", 10) == []
    # the suspect completes: it is no suspect any more, and the next one may run
    await store.complete(alone, "done")
    record = await store.get(alone.task.id)
    assert record is not None
    assert (record.suspect, record.crash_count) == (False, 1)
    assert await _claim(store, "b-w2", 10) == []  # its process is busy: it drains
    [second] = await _claim(store, "c-w1", 10)
    assert second.task.id in {"s1", "s2"} - {alone.task.id}
    assert (await store.suspects()).count == 1
    assert await store.fail(second, "ValueError: no") is S.PENDING  # a normal failure
    record = await store.get(second.task.id)
    assert record is not None
    assert (record.suspect, record.attempt) == (False, 3)
    assert (await store.suspects()).count == 0


async def test_a_waiting_suspect_drains_a_busy_process_then_runs_there(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.ingest_many([Task("n1", "x"), Task("n2", "y"), Task("s1", "z")])
    [busy] = await _claim(store, "a-w1", 1)
    assert busy.task.id == "n1"
    [doomed] = await _claim(store, "old-w1", 1)
    assert doomed.task.id == "n2"
    fake_clock.advance(LEASE_S - 1)
    await store.beat("a-w1", "worker", 10)
    busy = await store.renew(busy)  # a lives on; old-w1's process died
    fake_clock.advance(2)
    [e] = await store.expire_leases()
    assert (e.id, e.crash) == ("n2", True)
    # a suspect waits and none runs: no process takes new normal work, a busy one drains
    assert await _claim(store, "a-w2", 10) == []
    assert await _claim(store, "a-w1", 10) == []
    await store.complete(busy, "done")
    [alone] = await _claim(store, "a-w2", 10)
    assert alone.task.id == "n2"
    # while it runs (in another process), the rest flows again
    [other] = await _claim(store, "b-w1", 10)
    assert other.task.id == "s1"


async def test_a_suspect_whose_process_dies_twice_while_alone_is_dead_with_the_proof(
    store: Store, fake_clock: FakeClock
) -> None:
    await _crash(store, fake_clock, "old-w1", "p", "q")
    for n in range(1, DEFAULT_MAX_CRASHES_ALONE + 1):
        [claim] = await _claim(store, f"r{n}-w1", 10)
        assert claim.task.id == "p"  # first in line (arrival), then the most crashed
        fake_clock.advance(LEASE_S + 1)
        [e] = await store.expire_leases()
        assert e.crash
        record = await store.get("p")
        assert record is not None
        assert (record.crashes_alone, record.crash_count) == (n, n + 1)
        assert record.attempt == (n + 1 if record.state is S.DEAD else n + 2)
    assert e.outcome is S.DEAD
    assert e.reason.startswith("killed its worker process 2 times while running alone")
    record = await store.get("p")
    assert record is not None
    assert (record.state, record.reason, record.suspect) == (S.DEAD, e.reason, False)
    assert [r.task.id for r in await store.unreported_dead()] == ["p"]
    # q, in flight at the first crash too, was never convicted: it runs (alone) and completes
    [claim] = await _claim(store, "r9-w1", 10)
    assert claim.task.id == "q"
    await store.complete(claim, "fine")
    record = await store.get("q")
    assert record is not None
    assert (record.state, record.crash_count, record.crashes_alone) == (S.RESULT, 1, 0)


async def test_the_most_crashed_suspect_runs_first(store: Store, fake_clock: FakeClock) -> None:
    await _crash(store, fake_clock, "old-w1", "a", "b", "c")
    [claim] = await _claim(store, "x-w1", 10)
    first = claim.task.id
    fake_clock.advance(LEASE_S + 1)
    await store.expire_leases()  # it crashed alone once: it goes first next time
    [again] = await _claim(store, "y-w1", 10)
    assert again.task.id == first


async def test_a_restarted_worker_recovers_its_predecessors_claims_as_crashes(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.ingest_many([Task("t1", "x"), Task("t2", "y"), Task("t3", "z")])
    held = await _claim(store, "bridge-w1", 2)
    assert [c.task.id for c in held] == ["t1", "t2"]
    assert await store.claim("bridge-w2", leaderless=True) is not None  # another name: kept
    # the process dies and comes back at once under the same names (leases still live)
    recovered = await store.recover_claims("bridge-w1")
    assert [(e.id, e.outcome, e.crash, e.attempt) for e in recovered] == [
        ("t1", S.PENDING, True, 1),
        ("t2", S.PENDING, True, 1),
    ]
    assert "the worker restarted in a new process" in recovered[0].reason
    assert "restarted" in recovered[0].reason
    assert await store.recover_claims("bridge-w1") == []
    for id in ("t1", "t2"):
        record = await store.get(id)
        assert record is not None
        assert (record.state, record.suspect, record.crash_count) == (S.PENDING, True, 1)
    assert (await store.get("t3")).state is S.CLAIMED  # type: ignore[union-attr]
    # the stale claims of the dead process are fenced out
    with pytest.raises(Exception, match="cannot complete"):
        await store.complete(held[0], "late")


def test_the_process_of_a_worker_is_its_name_stem() -> None:
    assert process_prefix("bridge-host-ab12cd-w3") == "bridge-host-ab12cd-w"
    assert process_prefix("w1") is None
    assert process_prefix("alpha") is None
    assert process_prefix("a-w1x") is None


async def test_processes_racing_for_suspects_never_run_two(
    store: Store, fake_clock: FakeClock
) -> None:
    await _crash(store, fake_clock, "old-w1", *(f"s{i}" for i in range(10)))
    names = [f"p{i}-w1" for i in range(8)]
    for name in names:
        await store.beat(name, "worker", 10)
    for _ in range(10):  # each round: every process at once; one suspect runs, then ends
        got: list[Claim] = []

        async def take(name: str, got: list[Claim] = got) -> None:
            got.extend(await store.claim_many(name, 10, leaderless=True))

        async with trio.open_nursery() as nursery:
            for name in names:
                nursery.start_soon(take, name)
        assert len(got) == 1, [(c.worker, c.task.id) for c in got]
        assert (await store.counts())[S.CLAIMED] == 1
        await store.complete(got[0], "ok")
    assert (await store.suspects()).count == 0


async def test_an_operators_redrive_vouches_for_a_convicted_task_and_cancel_ends_a_suspect(
    store: Store, fake_clock: FakeClock
) -> None:
    await _crash(store, fake_clock, "old-w1", "p", "q")
    for n in range(1, DEFAULT_MAX_CRASHES_ALONE + 1):
        [claim] = await _claim(store, f"r{n}-w1", 10)
        assert claim.task.id == "p"
        fake_clock.advance(LEASE_S + 1)
        await store.expire_leases()
    assert await store.state("p") is S.DEAD
    # cancelling the other suspect takes it out of the suspects' line for good
    [cancelled] = await store.cancel(["q"], "not worth the risk")
    assert (cancelled.done, cancelled.state) == (True, S.DEAD)
    assert (await store.suspects()).count == 0
    # the operator re-drives the convicted task (say, the agent's bug is fixed): fresh attempts
    # and no crash record, so it is planned and claimed like any new task, not run alone
    [redriven] = await store.redrive(["p"], reason="agent fixed")
    assert redriven.done
    record = await store.get("p")
    assert record is not None
    assert (record.state, record.attempt, record.crash_count, record.crashes_alone) == (
        S.PENDING,
        1,
        0,
        0,
    )
    assert record.suspect is False
    await store.ingest(Task("n", "a new one"))
    claims = await _claim(store, "r9-w1", 10)
    assert sorted(c.task.id for c in claims) == ["n", "p"]  # together: p is no suspect
