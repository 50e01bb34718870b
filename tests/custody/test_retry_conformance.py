"""Conformance: retry backoff (issue #16, item 1), on every backend.

A failed attempt may go back to pending with a not-before time; nothing claims or assigns it
earlier (a worker with or without a lead, ``assign``, ``assign_many``, the lead's view), the
lead's view says when the first waiting task is due, and an operator sees how many wait.
``permanent`` dead-letters at once. Time is the store's ``FakeClock``; nothing sleeps.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from support.clock import FakeClock
from support.custody import MAX_ATTEMPTS, Backend
from tether.bridge import CustodyState, Task
from tether.bridge.custody import Claim, CustodyConflict, Store, WaitingRetries

S = CustodyState


async def _claimed(store: Store, id: str, worker: str = "w1") -> Claim:
    await store.ingest(Task(id, "hi"))
    claim = await store.claim(worker, leaderless=True)
    assert claim is not None
    assert claim.task.id == id
    return claim


async def test_a_retry_waits_out_its_delay_for_every_way_of_taking_work(
    store: Store, fake_clock: FakeClock
) -> None:
    claim = await _claimed(store, "t1")
    assert await store.fail(claim, "ConnectionError: 503", retry_after=10.0) is S.PENDING
    due = fake_clock.now + 10.0
    record = await store.get("t1")
    assert record is not None
    assert (record.state, record.attempt, record.not_before) == (S.PENDING, 2, due)
    assert record.reason == "ConnectionError: 503"
    for step in (0.0, 5.0, 4.999):
        fake_clock.advance(step)
        assert await store.claim("w2", leaderless=True) is None
        assert await store.claim_many("w2", 10, leaderless=True) == []
        assert await store.pending() == []
        view = await store.pool_view()
        assert (view.pending, view.next_due) == ((), due)
        assert await store.assign_many([("t1", "w2")]) == [False]
        with pytest.raises(
            CustodyConflict, match=r"waits for a retry until \d{4}-\d\d-\d\dT[\d:.]+Z \(in "
        ):  # an instant and a wait, not epoch numbers (issue 32.9)
            await store.assign("t1", "w2")
        assert await store.waiting_retries() == WaitingRetries(1, due)
        assert await store.state("t1") is S.PENDING
    fake_clock.now = due  # due exactly at not_before
    view = await store.pool_view()
    assert ([q.id for q in view.pending], view.next_due) == (["t1"], None)
    assert await store.waiting_retries() == WaitingRetries(0, None)
    again = await store.claim("w2", leaderless=True)
    assert again is not None
    assert (again.task.id, again.attempt) == ("t1", 2)
    record = await store.get("t1")
    assert record is not None
    assert record.not_before is None


async def test_the_lead_assigns_a_retry_once_it_is_due(store: Store, fake_clock: FakeClock) -> None:
    claim = await _claimed(store, "t1")
    await store.fail(claim, "boom", retry_after=3.0)
    assert await store.assign_many([("t1", "w2")]) == [False]
    fake_clock.advance(3.0)
    assert [t.id for t in await store.pending()] == ["t1"]
    assert await store.assign_many([("t1", "w2")]) == [True]
    record = await store.get("t1")
    assert record is not None
    assert (record.state, record.not_before) == (S.ASSIGNED, None)


async def test_a_waiting_retry_never_holds_up_the_tasks_behind_it(
    store: Store, fake_clock: FakeClock
) -> None:
    first = await _claimed(store, "a-first")
    await store.fail(first, "boom", retry_after=60.0)
    for id in ("b", "c"):
        await store.ingest(Task(id, "hi"))
    claims = await store.claim_many("w2", 5, leaderless=True)
    assert [c.task.id for c in claims] == ["b", "c"]
    assert [q.id for q in (await store.pool_view()).pending] == []
    fake_clock.advance(60.0)
    [late] = await store.claim_many("w3", 5, leaderless=True)
    assert (late.task.id, late.attempt) == ("a-first", 2)


async def test_the_view_names_the_earliest_of_several_waiting_retries(
    store: Store, fake_clock: FakeClock
) -> None:
    start = fake_clock.now
    for id, delay in (("x", 30.0), ("y", 7.5), ("z", 12.0)):
        await store.fail(await _claimed(store, id), "boom", retry_after=delay)
    assert (await store.pool_view()).next_due == start + 7.5
    assert await store.waiting_retries() == WaitingRetries(3, start + 7.5)
    fake_clock.advance(8.0)
    assert (await store.pool_view()).next_due == start + 12.0
    assert await store.waiting_retries() == WaitingRetries(2, start + 12.0)


async def test_no_delay_is_due_at_once(store: Store) -> None:
    await store.fail(await _claimed(store, "t1"), "boom")
    record = await store.get("t1")
    assert record is not None
    assert record.not_before is None
    await store.fail(await _claimed_again(store, "t1"), "boom", retry_after=0)
    assert (await store.get("t1")).not_before is None  # type: ignore[union-attr]
    assert await store.claim("w9", leaderless=True) is not None


async def _claimed_again(store: Store, id: str) -> Claim:
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    assert claim.task.id == id
    return claim


async def test_permanent_dead_letters_at_once_saying_so(store: Store) -> None:
    claim = await _claimed(store, "hopeless")
    assert MAX_ATTEMPTS > 1
    assert await store.fail(claim, "ValueError: no such city", permanent=True) is S.DEAD
    record = await store.get("hopeless")
    assert record is not None
    assert (record.state, record.attempt, record.not_before) == (S.DEAD, 1, None)
    assert record.reason == "permanent failure on attempt 1: ValueError: no such city"


async def test_the_last_attempt_dead_letters_whatever_its_delay(store: Store) -> None:
    await store.ingest(Task("t1", "hi"))
    for attempt in range(1, MAX_ATTEMPTS + 1):
        claim = await store.claim("w1", leaderless=True)
        assert claim is not None
        assert claim.attempt == attempt
        state = await store.fail(claim, "boom", retry_after=0)
    assert state is S.DEAD
    record = await store.get("t1")
    assert record is not None
    assert record.not_before is None


@pytest.mark.parametrize("bad", [-1, -0.001, math.inf, math.nan, True, "5", None])
async def test_a_bad_delay_is_refused_and_the_claim_stays(store: Store, bad: Any) -> None:
    claim = await _claimed(store, "t1")
    with pytest.raises(ValueError, match="retry_after"):
        await store.fail(claim, "boom", retry_after=bad)
    assert await store.state("t1") is S.CLAIMED
    with pytest.raises(TypeError, match="permanent"):
        await store.fail(claim, "boom", permanent="yes")  # type: ignore[arg-type]
    assert await store.state("t1") is S.CLAIMED


async def test_a_waiting_retry_can_be_dead_lettered(store: Store) -> None:
    await store.fail(await _claimed(store, "t1"), "boom", retry_after=100.0)
    await store.dead_letter("t1", "operator gave up")
    record = await store.get("t1")
    assert record is not None
    assert (record.state, record.not_before) == (S.DEAD, None)


async def test_a_waiting_retry_survives_a_reopen(
    backend: Backend, where: Any, fake_clock: FakeClock
) -> None:
    store = await backend.open(where, fake_clock)
    try:
        await store.fail(await _claimed(store, "t1"), "boom", retry_after=20.0)
    finally:
        await store.aclose()
    store = await backend.open(where, fake_clock)
    try:
        assert await store.claim("w1", leaderless=True) is None
        assert await store.waiting_retries() == WaitingRetries(1, fake_clock.now + 20.0)
        fake_clock.advance(20.0)
        assert await store.claim("w1", leaderless=True) is not None
    finally:
        await store.aclose()
