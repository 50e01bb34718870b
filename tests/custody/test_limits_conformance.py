"""Conformance: flow control (issue #38), on every backend.

A key's token bucket refills at its rate up to its burst (``custody._limits``, one formula on
both stores); its concurrency cap counts permits in flight, each a lease of its holder's claim,
freed by a release or when the task leaves ``claimed`` (a result, a cancel, a lapsed lease
taken back); a pause stops the key for everyone. Time is the store's ``FakeClock``.
"""

from __future__ import annotations

import math

import pytest

from support.clock import FakeClock
from tether.bridge import CustodyState, Task
from tether.bridge.custody import Claim, StaleLease, Store
from tether.bridge.custody._limits import Granted, LimitSpec, NoPermit

S = CustodyState


async def _claims(store: Store, n: int, worker: str = "w1") -> list[Claim]:
    for i in range(n):
        await store.ingest(Task(f"t{i}", "hi"))
    claims = list(await store.claim_many(worker, n, leaderless=True))
    assert len(claims) == n
    return claims


def _waits(outcome: Granted | NoPermit) -> tuple[object, str]:
    assert isinstance(outcome, NoPermit)
    return outcome.seconds, outcome.why


async def test_the_bucket_spends_tokens_and_refills_at_its_rate_up_to_its_burst(
    store: Store, fake_clock: FakeClock
) -> None:
    [claim] = await _claims(store, 1)
    await store.set_limit(LimitSpec("openai", rate=2.0, burst=4))
    for left in (3.0, 1.0):
        got = await store.acquire_permit(claim, "openai", 1 if left == 3.0 else 2)
        assert isinstance(got, Granted)
        assert got.permit is not None
        assert got.tokens == pytest.approx(left)
    refused = await store.acquire_permit(claim, "openai", 3)
    assert _waits(refused) == (pytest.approx(1.0), "rate")  # 2 tokens short at 2 a second
    [view] = await store.limit_views()
    assert view.tokens == pytest.approx(1.0)
    assert (view.in_flight, view.waiters) == (2, 1)
    fake_clock.advance(1.0)
    got = await store.acquire_permit(claim, "openai", 3)
    assert isinstance(got, Granted)
    assert got.tokens == pytest.approx(0.0)
    fake_clock.advance(100)  # never past the burst
    [view] = await store.limit_views()
    assert view.tokens == pytest.approx(4.0)
    assert view.waiters == 0  # served
    with pytest.raises(ValueError, match="can never be served"):
        await store.acquire_permit(claim, "openai", 5)


async def test_the_concurrency_cap_counts_permits_until_released(
    store: Store, fake_clock: FakeClock
) -> None:
    a, b, c = await _claims(store, 3)
    await store.set_limit(LimitSpec("gpu", concurrency=2))
    first = await store.acquire_permit(a, "gpu")
    second = await store.acquire_permit(b, "gpu")
    assert isinstance(first, Granted)
    assert isinstance(second, Granted)
    assert first.tokens == math.inf
    assert await store.acquire_permit(c, "gpu") == NoPermit(None, "concurrency")
    assert first.permit is not None
    await store.release_permit(first.permit)
    await store.release_permit(first.permit)  # twice: nothing more
    assert isinstance(await store.acquire_permit(c, "gpu"), Granted)
    [view] = await store.limit_views()
    assert view.in_flight == 2


async def test_permits_are_freed_when_their_task_leaves_claimed(
    store: Store, fake_clock: FakeClock
) -> None:
    """A result, a cancel and a lapsed lease taken back each free the task's permits at once;
    a permit never outlives its holder's claim."""
    a, b, c, d = await _claims(store, 4)
    await store.set_limit(LimitSpec("k", concurrency=3))
    for claim in (a, b, c):
        assert isinstance(await store.acquire_permit(claim, "k"), Granted)
    assert await store.acquire_permit(d, "k") == NoPermit(None, "concurrency")
    await store.complete(a, "done")
    [view] = await store.limit_views()
    assert view.in_flight == 2
    await store.cancel(["t1"], reason="operator")
    [view] = await store.limit_views()
    assert view.in_flight == 1
    await store.renew(d)
    fake_clock.advance(store.lease_s + 1)
    await store.renew(d)
    await store.expire_leases()  # c's holder died: its lease lapsed and is taken back
    [view] = await store.limit_views()
    assert view.in_flight == 0
    with pytest.raises(StaleLease, match="acquire a permit of 'k'"):
        await store.acquire_permit(c, "k")
    got = await store.acquire_permit(d, "k")
    assert isinstance(got, Granted)


async def test_a_released_permit_wakes_the_run_parked_longest_for_its_key(
    store: Store, fake_clock: FakeClock
) -> None:
    """Issue #47, item 3: a run parked for a permit is pending again, in the release's own
    transaction, when a holder gives one back: one waiter per permit, the longest parked
    first; a waiter of another key, or a run parked for something else, stays parked."""
    holder, first, second, other = await _claims(store, 4)
    await store.set_limit(LimitSpec("k", concurrency=1))
    await store.set_limit(LimitSpec("j", concurrency=1))
    got = await store.acquire_permit(holder, "k")
    assert isinstance(got, Granted)
    assert got.permit is not None
    assert await store.acquire_permit(first, "k") == NoPermit(None, "concurrency")
    fake_clock.advance(0.5)
    assert await store.acquire_permit(second, "k") == NoPermit(None, "concurrency")
    assert isinstance(await store.acquire_permit(other, "j"), Granted)
    far = fake_clock.now + 3600
    await store.park(first, far, "waiting for a permit of k (concurrency)")
    await store.park(second, far, "waiting for a permit of k (concurrency)")
    await store.release_permit(got.permit)
    assert await store.state("t1") is S.PENDING
    assert await store.state("t2") is S.WAITING
    record = await store.get("t1")
    assert record is not None
    assert record.attempt == 1
    [claim] = await store.claim_many("w1", 5, leaderless=True)  # due now, not at its park's end
    assert claim.task.id == "t1"
    journal = [(e.src, e.dst) for e in await store.journal("t1")]
    assert journal[-3:] == [(S.CLAIMED, S.WAITING), (S.WAITING, S.PENDING), (S.PENDING, S.CLAIMED)]


async def test_a_pause_stops_the_key_for_everyone_until_it_ends(
    store: Store, fake_clock: FakeClock
) -> None:
    a, b = await _claims(store, 2)
    await store.set_limit(LimitSpec("openai", rate=10.0, burst=10, concurrency=5))
    await store.pause_limit("openai", fake_clock.now + 30)
    await store.pause_limit("openai", fake_clock.now + 5)  # a shorter one keeps the longer
    assert _waits(await store.acquire_permit(a, "openai")) == (pytest.approx(30.0), "paused")
    [view] = await store.limit_views()
    assert view.paused_until == pytest.approx(fake_clock.now + 30)
    fake_clock.advance(30)
    assert isinstance(await store.acquire_permit(b, "openai"), Granted)
    [view] = await store.limit_views()
    assert view.paused_until is None
    # a key nobody declared is unlimited, and may be paused all the same
    assert await store.acquire_permit(a, "free") == Granted(None)
    await store.pause_limit("free", fake_clock.now + 2)
    assert _waits(await store.acquire_permit(a, "free")) == (pytest.approx(2.0), "paused")
    await store.set_limit(LimitSpec("free", rate=1.0, burst=3))  # declared later: starts full
    fake_clock.advance(2)
    got = await store.acquire_permit(a, "free")
    assert isinstance(got, Granted)
    assert got.tokens == pytest.approx(2.0)


async def test_changing_a_limit_keeps_its_tokens_cut_to_the_new_burst(
    store: Store, fake_clock: FakeClock
) -> None:
    [claim] = await _claims(store, 1)
    await store.set_limit(LimitSpec("k", rate=1.0, burst=10))
    await store.set_limit(LimitSpec("k", rate=5.0, burst=4, concurrency=1))
    [view] = await store.limit_views()
    assert (view.spec.rate, view.spec.burst, view.spec.concurrency) == (5.0, 4.0, 1)
    assert view.tokens == pytest.approx(4.0)
    with pytest.raises(ValueError, match="limit key"):
        await store.acquire_permit(claim, "no spaces")
