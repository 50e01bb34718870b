"""How long a poll that keeps finding nothing waits before its next look.

An idle bridge must sleep: a worker's claim, the lead's sweep and delivery's look each find
nothing while no message comes, and at their busy-time intervals (tens of milliseconds) they
cost several percent of a core doing it. Each waits on its doorbell, which in-process news
rings at once (ingest, an assignment, a stored result), so the interval only bounds how late
news from elsewhere is seen (another process on the same store, a retry falling due). After
each look that found nothing the wait doubles (the one ``Backoff``), up to ``IDLE_MAXIMUM``;
a look that found something, or a ring, starts again from the busy interval.
"""

from __future__ import annotations

from typing import Final

from ..._backoff import Backoff

IDLE_MAXIMUM: Final = 2.0
"""Seconds an idle poll waits at most: how late news that rings no doorbell is seen (a suspect
free to run alone once its process drained rings none)."""


QUIET_WORKER_MAXIMUM: Final = 4 * IDLE_MAXIMUM
"""Seconds the idle claim of a process's every worker but its first waits at most. What wakes a
worker rings it (the lead's assignment in its process, another process's news: every worker of
the process), and what rings none (a suspect free to run alone, a lost hint) can be claimed by
any worker of the process: one of them keeping the ``IDLE_MAXIMUM`` pace is enough, and the
rest of an idle process's claims are not store calls it makes for nothing."""


def worker_idle_maximum(index: int) -> float:
    """The idle claim's longest wait for a process's ``index``-th worker (0: its first)."""
    return IDLE_MAXIMUM if index == 0 else QUIET_WORKER_MAXIMUM


def idle_backoff(interval: float, maximum: float = IDLE_MAXIMUM) -> Backoff:
    """Waits from ``interval`` doubling to ``maximum`` (or ``interval``, if longer)."""
    return Backoff(initial=interval, maximum=max(interval, maximum), multiplier=2.0)
