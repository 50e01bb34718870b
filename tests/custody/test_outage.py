"""The one rule of custody._outage as a function: the cutoff and the reach it is fed from."""

from __future__ import annotations

from tether.bridge.custody._outage import StoreReach, expiry_cutoff, lease_lapsed


def test_without_an_outage_every_lease_that_ran_out_lapsed() -> None:
    assert expiry_cutoff(100.0, 10.0, None) == 100.0
    assert lease_lapsed(100.0, 100.0, 10.0, None)
    assert not lease_lapsed(100.1, 100.0, 10.0, None)


def test_within_a_lease_of_the_stores_return_nothing_lapsed() -> None:
    assert expiry_cutoff(109.9, 10.0, 100.0) is None
    assert not lease_lapsed(50.0, 109.9, 10.0, 100.0)  # ran out during the outage
    assert expiry_cutoff(110.0, 10.0, 100.0) == 110.0  # the effective deadline: back + lease
    assert lease_lapsed(50.0, 110.0, 10.0, 100.0)


def test_the_reach_says_once_when_an_outage_begins_and_ends() -> None:
    reach = StoreReach()
    assert reach.up
    assert reach.reached(1.0) is None
    assert reach.back_at is None
    assert reach.lost(2.0)
    assert not reach.lost(3.0)
    assert not reach.up
    assert reach.down_since == 2.0
    assert reach.reached(7.5) == 5.5
    assert reach.up
    assert reach.back_at == 7.5
    assert reach.checked_at == 7.5
    assert reach.reached(8.0) is None
    assert reach.back_at == 7.5
