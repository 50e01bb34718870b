"""The reconciler: brings expired leases back, wakes parked runs that are due (``waiting`` ->
``pending``), and never drops an id.

It decides from the state column and the store's clock only, so no number of passes loses a task.
See docs/guide/design.md, "The reconciler".
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import attrs
import trio

from ..._core._stop import stop_requested, wait_stop_requested
from ..._plumbing._converter import structure_versioned, unstructure
from ..._plumbing._grid import on_grid
from ._records import LeaseExpiry
from ._roles import ReconcilerStore
from ._rules import CustodyState

log = logging.getLogger("tether.bridge.reconcile")

REPORT_SCHEMA_VERSION = 1


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
        """Reconcile every ``interval`` seconds until cancelled or soft-stopped (ready after the
        first pass).

        A supervisor's soft stop (``tether.wait_stop_requested()``) ends the wait between passes
        at once; a pass in hand finishes first (it is one short store transaction per batch),
        so a supervised reconciler stops well within its ``shutdown_grace``.
        """
        if not (interval > 0 and math.isfinite(interval)):
            raise ValueError(f"interval must be a positive number of seconds, got {interval!r}")
        await self.run_once()
        task_status.started()
        while True:
            with trio.move_on_after(on_grid(interval)):  # with the process's other loops
                await wait_stop_requested()
            if stop_requested():
                return
            await self.run_once()
