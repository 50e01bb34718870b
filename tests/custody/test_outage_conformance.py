"""A store outage blames nobody (custody._outage), on every backend, with an injected clock: a
lease that ran out while the store was unreachable is not held against its holder until a whole
lease has passed since the store came back; a live holder renews and keeps its run (no attempt
spent, no suspect); only a holder silent after the return loses its lease (then, with its beats
silent too, as a crash)."""

from __future__ import annotations

from support.clock import FakeClock
from support.custody import LEASE_S
from tether.bridge import CustodyState, Task
from tether.bridge.custody import Claim, Store
from tether.bridge.custody._outage import StoreReach
from tether.bridge.pool import Reconciler

S = CustodyState


def _reach(store: Store) -> StoreReach:
    reach = store.reach  # type: ignore[attr-defined]
    assert isinstance(reach, StoreReach)
    return reach


async def _hold(store: Store, worker: str, id: str) -> Claim:
    await store.ingest(Task(id, f"body {id}"))
    await store.beat(worker, "worker", 1)
    claim = await store.claim(worker, leaderless=True)
    assert claim is not None
    assert claim.task.id == id
    return claim


async def test_after_an_outage_a_live_holder_keeps_its_run_and_a_silent_one_loses_it(
    store: Store, fake_clock: FakeClock
) -> None:
    live = await _hold(store, "live-w1", "live")
    silent = await _hold(store, "silent-w1", "silent")
    reach = _reach(store)
    assert reach.lost(fake_clock.now + 1)  # the outage begins: nobody renews or beats
    fake_clock.advance(LEASE_S * 3)  # both leases ran out long ago
    assert reach.reached(fake_clock.now) == LEASE_S * 3 - 1
    reconciler = Reconciler(store)
    assert (await reconciler.run_once()).expired == ()  # the store is back: a lease to renew

    fake_clock.advance(LEASE_S / 3)
    await store.beat("live-w1", "worker", 1)
    live = await store.renew(live)
    assert live.lease_until == fake_clock.now + LEASE_S
    fake_clock.advance(LEASE_S * 2 / 3 - 0.001)
    assert (await reconciler.run_once()).expired == ()  # a lease since the return: not yet

    fake_clock.advance(0.001)
    [lost] = (await reconciler.run_once()).expired
    assert (lost.id, lost.outcome, lost.crash) == ("silent", S.PENDING, True)
    assert "its process died" in lost.reason  # silent a whole lease after the store was back

    await store.complete(live, "done")
    kept = await store.get("live")
    assert kept is not None
    assert (kept.state, kept.attempt, kept.crash_count, kept.suspect) == (S.RESULT, 1, 0, False)
    gone = await store.get("silent")
    assert gone is not None
    assert (gone.state, gone.attempt, gone.suspect) == (S.PENDING, 2, True)
    assert silent.attempt == 1


async def test_without_an_outage_a_lapsed_lease_expires_as_before(
    store: Store, fake_clock: FakeClock
) -> None:
    await _hold(store, "w1", "t")
    fake_clock.advance(LEASE_S)
    [e] = (await Reconciler(store).run_once()).expired
    assert (e.id, e.outcome, e.attempt) == ("t", S.PENDING, 1)


async def test_an_outage_long_past_changes_nothing(store: Store, fake_clock: FakeClock) -> None:
    reach = _reach(store)
    reach.lost(fake_clock.now)
    fake_clock.advance(5)
    reach.reached(fake_clock.now)
    fake_clock.advance(LEASE_S)  # a lease since the return: judged as usual
    await _hold(store, "w1", "t")
    fake_clock.advance(LEASE_S)
    assert [e.id for e in (await Reconciler(store).run_once()).repooled] == ["t"]
