"""The reconciler: brings expired leases back, wakes parked runs that are due (``waiting`` ->
``pending``), and never drops an id.

It decides from the state column and the store's clock only, so no number of passes loses a task.
Passes come every ``interval``, and also when a parked run falls due: the earliest wake-up the
store held at the last pass, or one a worker of this process parked since (``parked_until``),
so a durable sleep ends on time, not up to an interval late.
See docs/guide/design.md, "The reconciler".
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import attrs
import trio
from trio_util import wait_any

from ..._core._stop import stop_requested, wait_stop_requested
from ..._plumbing._converter import structure_versioned, unstructure
from ..._plumbing._grid import on_grid
from ._records import LeaseExpiry
from ._roles import ReconcilerStore
from ._rules import CustodyState

log = logging.getLogger("tether.bridge.reconcile")

REPORT_SCHEMA_VERSION = 1
_JUST_AFTER = 0.005
"""Seconds past a wake-up time the pass comes, so the store's clock has passed it too."""
_MIN_GAP = 0.05
"""Seconds between a pass and one a wake-up brings at the soonest: a wake-up the store does
not honour (a clock step) costs twenty passes a second, not a busy loop."""


@attrs.frozen
class ReconcileReport:
    """What one pass did, with evidence (who held which attempt until when)."""

    at: float
    expired: tuple[LeaseExpiry, ...] = ()
    woken: tuple[str, ...] = ()
    """Parked runs made pending again (their wake-up time had come; issue #35)."""
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


@attrs.define(eq=False)
class Reconciler:
    """Runs reconcile passes over a store: ``await run_once()``, or ``run()`` as a service."""

    store: ReconcilerStore
    batch: int = attrs.field(default=10_000, validator=attrs.validators.ge(1))
    """Leases handled per store transaction, so other writers interleave on a big backlog."""
    on_dead: Callable[[], None] | None = None
    """Called after a pass that dead-lettered tasks (the bridge rings its dead-notice loop)."""
    on_woken: Callable[[], None] | None = None
    """Called after a pass that put tasks back in the queue (parked runs that woke, leases that
    were taken back): the pool looks at the queue at once instead of after its idle wait."""
    passes: int = attrs.field(init=False, default=0)
    last_report: ReconcileReport | None = attrs.field(init=False, default=None)
    _soonest: float = attrs.field(init=False, default=math.inf)
    """The earliest wake-up of a parked run known here (store clock)."""
    _rethink: trio.Event = attrs.field(init=False, factory=trio.Event)

    def parked_until(self, at: float) -> None:
        """A run parked itself until ``at`` (store clock): pass then, if that is sooner than
        the next pass would come."""
        if at < self._soonest:
            self._soonest = at
            self._rethink.set()

    async def run_once(self) -> ReconcileReport:
        at = self.store.clock()
        expired: list[LeaseExpiry] = []
        while True:
            chunk = await self.store.expire_leases(limit=self.batch)
            expired.extend(chunk)
            if len(chunk) < self.batch:
                break
        woken: list[str] = []
        while True:
            ids = await self.store.wake_due(limit=self.batch)
            woken.extend(ids)
            if len(ids) < self.batch:
                break
        if woken:
            log.info("woke %d parked run(s): %s", len(woken), ", ".join(woken[:5]))
        soonest = (await self.store.waiting_runs()).next_wake
        self._soonest = math.inf if soonest is None else soonest
        for e in expired:
            level = logging.WARNING if e.outcome is CustodyState.DEAD else logging.INFO
            log.log(level, "task %s: %s", e.id, e.reason)
        report = ReconcileReport(at=at, expired=tuple(expired), woken=tuple(woken))
        if self.on_dead is not None and report.dead_lettered:
            self.on_dead()
        if self.on_woken is not None and (report.woken or report.repooled):
            self.on_woken()  # parked runs woke, or expired leases came back to the queue
        self.passes += 1
        self.last_report = report
        return report

    async def run(
        self,
        *,
        interval: float = 5.0,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Reconcile every ``interval`` seconds, and when a parked run falls due, until
        cancelled or soft-stopped (ready after the first pass).

        A supervisor's soft stop (``tether.wait_stop_requested()``) ends the wait between passes
        at once; a pass in hand finishes first (it is one short store transaction per batch),
        so a supervised reconciler stops well within its ``shutdown_grace``.
        """
        if not (interval > 0 and math.isfinite(interval)):
            raise ValueError(f"interval must be a positive number of seconds, got {interval!r}")
        await self.run_once()
        task_status.started()
        next_pass = trio.current_time() + interval
        while True:
            self._rethink = trio.Event()
            due = self._soonest - self.store.clock() + _JUST_AFTER
            # the interval ends with the process's other loops (the grid); a wake-up on time
            wait = min(on_grid(next_pass - trio.current_time()), max(_MIN_GAP, due))
            with trio.move_on_after(wait):
                await wait_any(wait_stop_requested, self._rethink.wait)
            if stop_requested():
                return
            if self._rethink.is_set():
                continue  # an earlier wake-up: wait for that instead
            await self.run_once()
            next_pass = trio.current_time() + interval
