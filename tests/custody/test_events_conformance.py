"""Conformance: events (issue #52), on every backend.

An event is kept idempotently by id (a replay with another key or body changes nothing and is
refused) and wakes, in the transaction that keeps it, every run parked on its key. A run's
park on a key it has an untaken event of leaves it pending; one parked first is woken. A
run's waits take a key's events in arrival order, each once. Time is the store's clock.
"""

from __future__ import annotations

import pytest

from support.clock import FakeClock
from tether.bridge import CustodyState, Task
from tether.bridge.custody import Claim, StaleLease, Store
from tether.bridge.custody._events import EventConflict, InvalidEvent

S = CustodyState


async def _claimed(store: Store, id: str, worker: str = "w1") -> Claim:
    await store.ingest(Task(id, "wait for the payment"))
    claim = await store.claim(worker, leaderless=True)
    assert claim is not None
    assert claim.task.id == id
    return claim


async def test_an_event_wakes_every_run_parked_on_its_key_once(
    store: Store, fake_clock: FakeClock
) -> None:
    a, b = await _claimed(store, "a"), await _claimed(store, "b")
    other = await _claimed(store, "c")
    until = fake_clock.now + 3600
    assert await store.park_event(a, "pay.42", (), until, "the payment") is S.WAITING
    assert await store.park_event(b, "pay.42", (), until, "the payment") is S.WAITING
    assert await store.park_event(other, "pay.43", (), until, "another") is S.WAITING
    waiters = await store.event_waiters()
    assert [(w.task_id, w.key, w.until) for w in waiters] == [
        ("a", "pay.42", until),
        ("b", "pay.42", until),
        ("c", "pay.43", until),
    ]
    sent = await store.send_event("ev-1", "pay.42", {"amount": 12})
    assert sent.new
    assert sorted(sent.woken) == ["a", "b"]
    assert [await store.state(id) for id in "abc"] == [S.PENDING, S.PENDING, S.WAITING]
    again = await store.send_event("ev-1", "pay.42", {"amount": 12})  # a replay: a no-op
    assert (again.new, again.woken, again.event) == (False, (), sent.event)
    event = await store.take_event("pay.42", ())
    assert event is not None
    assert (event.id, event.value) == ("ev-1", {"amount": 12})
    assert await store.take_event("pay.42", ["ev-1"]) is None  # taken by this run already
    journal = await store.journal("a")
    assert (journal[-1].src, journal[-1].dst) == (S.WAITING, S.PENDING)


async def test_an_event_before_its_wait_is_kept_for_it(store: Store, fake_clock: FakeClock) -> None:
    await store.send_event("ev-1", "ci.pr-17", "green", ttl_s=600)
    claim = await _claimed(store, "t")
    found = await store.take_event("ci.pr-17", ())
    assert found is not None
    assert found.value == "green"
    # a park that races the event (it came after the run's read) leaves the task pending
    state = await store.park_event(claim, "ci.pr-17", (), fake_clock.now + 60, "ci")
    assert state is S.PENDING
    assert await store.event_waiters() == []
    again = await store.claim("w1", leaderless=True)
    assert again is not None
    assert again.attempt == claim.attempt  # no attempt spent
    # taken, it does not hold a later wait of the same run
    assert await store.park_event(again, "ci.pr-17", ["ev-1"], fake_clock.now + 60, "ci") is (
        S.WAITING
    )


async def test_a_keys_events_are_taken_in_arrival_order_and_expire(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.send_event("e1", "k", 1, ttl_s=100)
    fake_clock.advance(1)
    await store.send_event("e2", "k", 2, ttl_s=100)
    first = await store.take_event("k", ())
    second = await store.take_event("k", ["e1"])
    assert first is not None
    assert second is not None
    assert (first.id, second.id) == ("e1", "e2")
    assert [e.id for e in await store.events(key="k")] == ["e1", "e2"]
    fake_clock.advance(99.5)
    assert await store.take_event("k", ()) is not None  # e2 is kept still
    assert await store.prune_events() == ["e1"]
    fake_clock.advance(1)
    assert await store.take_event("k", ()) is None
    assert await store.prune_events() == ["e2"]
    assert await store.events() == []


async def test_bad_events_are_refused_and_change_nothing(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.send_event("e1", "k", {"a": 1})
    with pytest.raises(EventConflict, match="another key or body"):
        await store.send_event("e1", "k", {"a": 2})
    with pytest.raises(EventConflict):
        await store.send_event("e1", "other", {"a": 1})
    with pytest.raises(InvalidEvent, match="event key"):
        await store.send_event("e2", "no/slash", 1)
    with pytest.raises(InvalidEvent, match="event id"):
        await store.send_event("", "k", 1)
    with pytest.raises(InvalidEvent, match="bytes"):
        await store.send_event("e3", "k", "x" * 300_000)
    with pytest.raises(InvalidEvent, match="JSON"):
        await store.send_event("e4", "k", {1, 2})
    assert [(e.id, e.value) for e in await store.events()] == [("e1", {"a": 1})]
    assert await store.drop_event("e1")
    assert not await store.drop_event("e1")
    assert await store.events() == []


async def test_a_zombie_parks_nothing_and_a_timed_out_wait_is_not_woken_later(
    store: Store, fake_clock: FakeClock
) -> None:
    zombie = await _claimed(store, "t")
    fake_clock.advance(store.lease_s + 1)
    await store.expire_leases()
    with pytest.raises(StaleLease):
        await store.park_event(zombie, "k", (), fake_clock.now + 10, "x")
    claim = await store.claim("w2", leaderless=True)
    assert claim is not None
    assert await store.park_event(claim, "k", (), fake_clock.now + 10, "x") is S.WAITING
    fake_clock.advance(10)
    assert await store.wake_due() == ["t"]  # its deadline came first
    claim = await store.claim("w2", leaderless=True)
    assert claim is not None
    await store.park(claim, fake_clock.now + 1000, "sleeping after its timeout")
    sent = await store.send_event("late", "k", 1)
    assert sent.woken == ()  # parked for something else now
    assert await store.state("t") is S.WAITING
