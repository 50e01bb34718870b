"""A store outage blames nobody: which leases lapsed against their holders, and when.

A holder keeps its claim until the reconciler takes it back (the fence compares id, state, owner
and attempt, never the time), so a lease that ran out is only a lease the reconciler *may* take
back. It may not while the silence could be the store's: a holder cannot renew through an
outage, and neither can its beats say it lives. So the reconciler judges silence only over time
in which the store was reachable: a lease counts as lapsed when it ran out and a whole lease has
passed since the store came back (to the reconciler's process, or, for PostgreSQL, since the
server last started). A live holder renews within that lease and keeps its run: no attempt
spent, no crash suspected, no second run. Only a holder silent after the store's return loses.
See docs/guide/bridge.md, "Leases and outages".
"""

from __future__ import annotations

import attrs


def expiry_cutoff(now: float, lease_s: float, back_at: float | None) -> float | None:
    """The one rule: leases that ran out at or before the returned time have lapsed against
    their holders; ``None``, none has yet (the store came back, at ``back_at``, less than a
    lease ago). Equivalently, a lease's effective deadline is
    ``max(lease_until, back_at + lease_s)``."""
    if back_at is not None and now < back_at + lease_s:
        return None
    return now


def lease_lapsed(lease_until: float, now: float, lease_s: float, back_at: float | None) -> bool:
    """Has this lease lapsed against its holder (``expiry_cutoff`` for one lease)?"""
    cutoff = expiry_cutoff(now, lease_s, back_at)
    return cutoff is not None and lease_until <= cutoff


@attrs.define(eq=False)
class StoreReach:
    """Whether this process reaches its store, and since when: a backend reports each call's
    fate (``lost`` when it could not reach the store, ``reached`` when a call went through)."""

    down_since: float | None = None
    """When calls began failing to reach the store (``None``: the last call reached it)."""
    back_at: float | None = None
    """When the store last came back after an outage this process saw (``None``: none seen)."""
    checked_at: float | None = None
    """When a call last reached the store, or failed to (``None``: no call yet)."""

    @property
    def up(self) -> bool:
        return self.down_since is None

    def lost(self, now: float) -> bool:
        """A call could not reach the store; ``True`` if this begins an outage."""
        self.checked_at = now
        if self.down_since is not None:
            return False
        self.down_since = now
        return True

    def reached(self, now: float) -> float | None:
        """A call reached the store; the outage's length if this ends one (else ``None``)."""
        self.checked_at = now
        if self.down_since is None:
            return None
        length = now - self.down_since
        self.down_since = None
        self.back_at = now
        return length
