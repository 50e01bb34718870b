"""A reconcile pass: brings expired leases back, wakes parked runs that are due (``waiting`` ->
``pending``), fires the schedules that are due, and never drops an id.

It decides from the state column and the store's clock only, so no number of passes loses a task.
The loop that repeats it (every ``interval``, and when a parked run falls due) is
``tether.bridge.pool.Reconciler``: custody holds the rules, not the runtime that schedules them.
See docs/guide/design.md, "The reconciler".
"""

from __future__ import annotations

import logging
import math
from typing import Any

import attrs

from ..._plumbing._converter import structure_versioned, unstructure
from ._records import LeaseExpiry
from ._roles import ReconcilerStore
from ._rules import CustodyState

log = logging.getLogger("tether.bridge.reconcile")

REPORT_SCHEMA_VERSION = 1
JUST_AFTER = 0.005
"""Seconds past a wake-up time the pass comes, so the store's clock has passed it too."""
MIN_GAP = 0.05
"""Seconds between a pass and one a wake-up brings at the soonest: a wake-up the store does
not honour (a clock step) costs twenty passes a second, not a busy loop."""


@attrs.frozen
class ReconcileReport:
    """What one pass did, with evidence (who held which attempt until when)."""

    at: float
    expired: tuple[LeaseExpiry, ...] = ()
    woken: tuple[str, ...] = ()
    """Parked runs made pending again (their wake-up time had come; issue #35)."""
    fired: tuple[str, ...] = ()
    """Tasks that schedules due by the pass fired (issue #52)."""
    schema_version: int = REPORT_SCHEMA_VERSION

    @property
    def repooled(self) -> tuple[LeaseExpiry, ...]:
        return tuple(e for e in self.expired if e.outcome is CustodyState.PENDING)

    @property
    def dead_lettered(self) -> tuple[LeaseExpiry, ...]:
        return tuple(e for e in self.expired if e.outcome is CustodyState.DEAD)

    def to_document(self) -> dict[str, Any]:
        return unstructure(self)  # type: ignore[no-any-return]

    @classmethod
    def from_document(cls, doc: Any) -> ReconcileReport:
        return structure_versioned(doc, cls, version=REPORT_SCHEMA_VERSION, what="reconcile report")


async def reconcile_pass(store: ReconcilerStore, batch: int) -> tuple[ReconcileReport, float]:
    """One pass over ``store``, ``batch`` leases or wake-ups per transaction (so other writers
    interleave on a big backlog): its report, and the earliest wake-up of a parked run the store
    still holds (store clock; ``inf`` if none)."""
    at = store.clock()
    expired: list[LeaseExpiry] = []
    while True:
        chunk = await store.expire_leases(limit=batch)
        expired.extend(chunk)
        if len(chunk) < batch:
            break
    woken: list[str] = []
    while True:
        ids = await store.wake_due(limit=batch)
        woken.extend(ids)
        if len(ids) < batch:
            break
    joined, cancelled = await store.settle_children(limit=batch)
    woken.extend(joined)
    if woken:
        log.info("woke %d parked run(s): %s", len(woken), ", ".join(woken[:5]))
    if cancelled:
        log.info(
            "cancelled %d child run(s) whose parent ended: %s",
            len(cancelled),
            ", ".join(cancelled[:5]),
        )
    fired = tuple(await store.fire_schedules(limit=batch))
    await store.prune_events(limit=batch)
    wake, due = (await store.waiting_runs()).next_wake, await store.next_schedule_due()
    soonest = min((t for t in (wake, due) if t is not None), default=None)
    for e in expired:
        level = logging.WARNING if e.outcome is CustodyState.DEAD else logging.INFO
        log.log(level, "task %s: %s", e.id, e.reason)
    report = ReconcileReport(at=at, expired=tuple(expired), woken=tuple(woken), fired=fired)
    return report, math.inf if soonest is None else soonest


def wait_before_pass(*, until_interval: float, soonest: float, store_now: float) -> float:
    """Seconds to wait before the next pass: the rest of the interval (``until_interval``,
    already on the process's grid), or less when a parked run falls due at ``soonest`` (store
    clock), never under ``MIN_GAP``."""
    return min(until_interval, max(MIN_GAP, soonest - store_now + JUST_AFTER))
