"""Liveness: a member is alive while its last beat is at most ``dead_after`` seconds old.

A beat from the future counts as dead beyond ``max_skew`` (ordinary clock drift), so a skewed clock
cannot keep a member alive.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from typing import Final

from ..custody._records import WorkerInfo
from ..custody._roles import PoolMemberStore

log = logging.getLogger("tether.bridge.pool.worker")
"""The workers' logger: a leaderless worker does this duty."""

DEFAULT_DEAD_AFTER: Final = 10.0
"""Seconds without a beat after which a member counts as dead (the lead's ``dead_after``)."""
DEFAULT_MAX_SKEW: Final = 1.0


def check_seconds(name: str, value: float, *, allow_zero: bool = False) -> float:
    """Refuse a duration that is not a finite positive number (or zero, if allowed)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of seconds, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return float(value)


def is_alive(
    info: WorkerInfo, now: float, dead_after: float, max_skew: float = DEFAULT_MAX_SKEW
) -> bool:
    """Is the member that last beat at ``info.last_beat`` alive at ``now``?"""
    age = now - info.last_beat
    return -max_skew <= age <= dead_after


def live_lead(
    members: Iterable[WorkerInfo],
    now: float,
    dead_after: float,
    max_skew: float = DEFAULT_MAX_SKEW,
) -> WorkerInfo | None:
    """The live lead among ``members`` (the most recent beat), or None: workers go leaderless."""
    leads = [m for m in members if m.role == "lead" and is_alive(m, now, dead_after, max_skew)]
    return max(leads, key=lambda m: m.last_beat, default=None)


async def return_dead_assignments(
    store: PoolMemberStore,
    worker: str,
    members: Sequence[WorkerInfo],
    now: float,
    dead_after: float,
    max_skew: float,
) -> None:
    """A leaderless worker's duty: the assignments of every other worker that is not alive go
    back to pending (never to ``worker`` itself), or they would wait for a lead forever."""
    alive = {m.name for m in members if is_alive(m, now, dead_after, max_skew)}
    view = await store.pool_view(pending_limit=1)
    for owner in sorted({a.worker for a in view.assigned} - alive - {worker}):
        returned = await store.return_assignments(owner)
        if returned:
            log.warning(
                "worker %s (no live lead): returned %d assignment(s) of dead worker %s to pending",
                worker,
                len(returned),
                owner,
            )
