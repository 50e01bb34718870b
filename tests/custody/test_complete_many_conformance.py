"""Conformance of ``complete_many`` on every backend: many completions in one transaction,
each fenced on its own exactly as ``complete`` is, nothing written when any input is bad."""

from __future__ import annotations

import pytest

from support.clock import FakeClock
from support.custody import LEASE_S
from tether.bridge import CustodyState, Task
from tether.bridge.custody import Claim, StaleLease, Store
from tether.bridge.custody._rules import MAX_BODY_BYTES
from tether.bridge.pool import Reconciler

S = CustodyState


async def _claims(store: Store, worker: str, *ids: str) -> list[Claim]:
    for id in ids:
        await store.ingest(Task(id, f"body {id}"))
    claims = await store.claim_many(worker, len(ids), leaderless=True)
    assert [c.task.id for c in claims] == list(ids)
    return list(claims)


async def test_completes_every_claim_in_the_batch(store: Store) -> None:
    claims = await _claims(store, "w1", "a", "b", "c")
    done = await store.complete_many([(c, f"reply {c.task.id}") for c in claims])
    assert done == [True, True, True]
    ready = {r.task.id: r for r in await store.ready_results()}
    assert {id: (r.body, r.worker, r.attempt, r.no_send) for id, r in ready.items()} == {
        id: (f"reply {id}", "w1", 1, False) for id in "abc"
    }
    # the same as one complete each: a repeat is fenced out, as complete would be
    with pytest.raises(StaleLease):
        await store.complete(claims[0], "again")
    assert await store.complete_many([(claims[1], "again")]) == [False]
    assert (await store.get("b")).result == "reply b"  # type: ignore[union-attr]


async def test_no_send_is_stored_for_every_task(store: Store) -> None:
    claims = await _claims(store, "w1", "a", "b")
    assert await store.complete_many([(c, "") for c in claims], no_send=True) == [True, True]
    assert [r.no_send for r in await store.ready_results()] == [True, True]


async def test_each_completion_is_fenced_on_its_own(store: Store, fake_clock: FakeClock) -> None:
    live, failed, lost = await _claims(store, "w1", "live", "failed", "lost")
    assert await store.fail(failed, "boom") is S.PENDING  # its own outcome fenced it
    fake_clock.advance(LEASE_S + 1)
    await Reconciler(store).run_once()  # every lease expired: all repooled with attempt 2
    again = {c.task.id: c for c in await store.claim_many("w2", 3, leaderless=True)}
    assert sorted(again) == ["failed", "live", "lost"]

    # w1's stale claims, the other worker's live ones, and w1's repeated id in one call
    done = await store.complete_many(
        [
            (lost, "late"),
            (again["lost"], "from w2"),
            (failed, "late too"),
            (again["failed"], "from w2 too"),
            (again["lost"], "a repeat in the same call"),
        ]
    )
    assert done == [False, True, False, True, False]
    ready = {r.task.id: (r.body, r.worker, r.attempt) for r in await store.ready_results()}
    assert ready == {"lost": ("from w2", "w2", 2), "failed": ("from w2 too", "w2", 2)}
    assert await store.state("live") is S.CLAIMED  # w2's, untouched
    assert await store.complete_many([(live, "late")]) == [False]  # w1's stale claim of it


async def test_a_lapsed_lease_completes_until_the_reconciler_takes_it_back(
    store: Store, fake_clock: FakeClock
) -> None:
    one, two = await _claims(store, "w1", "one", "two")
    fake_clock.advance(LEASE_S + 1)  # custody._outage: the fence never compares the time
    assert await store.complete_many([(one, "late"), (two, "late")]) == [True, True]
    assert [await store.state(i) for i in ("one", "two")] == [S.RESULT, S.RESULT]


async def test_a_bad_body_refuses_the_whole_call(store: Store) -> None:
    one, two = await _claims(store, "w1", "one", "two")
    with pytest.raises(TypeError, match="str"):
        await store.complete_many([(one, "fine"), (two, 42)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="two"):
        await store.complete_many([(one, "fine"), (two, "x" * (MAX_BODY_BYTES + 1))])
    with pytest.raises(TypeError, match="no_send"):
        await store.complete_many([(one, "fine")], no_send="yes")  # type: ignore[arg-type]
    assert [await store.state(i) for i in ("one", "two")] == [S.CLAIMED, S.CLAIMED]
    assert await store.complete_many([]) == []
    assert await store.complete_many([(one, "fine"), (two, "fine")]) == [True, True]
