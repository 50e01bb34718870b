"""Waits of idle loops that end together: on a grid of Trio's clock.

An idle process runs many loops that wake now and then (each worker's beat and claim, the
lead's beat and look, delivery's look, the reconciler), and each wake of Trio's run loop costs
about 0.3 ms of CPU on a busy 2-core machine, before any work. Ending their waits on a shared
grid lets one wake of the run loop serve them all, and their store calls land in one writer
batch (issue 39: an idle bridge under 0.5% of a core). A wait ends up to one ``GRID`` early,
never late, so every bound a wait keeps (a beat within a lease, news seen within
``IDLE_MAXIMUM``) still holds. Short waits (the busy pace) are left alone.
"""

from __future__ import annotations

import math
from typing import Final

import trio

GRID: Final = 0.5
"""Seconds between the grid's points: an idle process wakes at most twice a second (each
wake of the run loop costs CPU before any work; a finer grid of 0.25 s woke it four times)."""


def on_grid(delay: float) -> float:
    """``delay`` shortened to end on the grid (by less than ``GRID``); a delay under two grid
    steps (a busy-time interval), or not finite, is returned as it is."""
    if not math.isfinite(delay) or delay < 2 * GRID:
        return delay
    now = trio.current_time()
    return math.floor((now + delay) / GRID) * GRID - now


def to_next_point() -> float:
    """Seconds until the grid's next point (a poll that looks once per ``GRID`` then shares
    its wake with the other loops)."""
    now = trio.current_time()
    return (math.floor(now / GRID) + 1) * GRID - now
