"""The reconciler's loop: a reconcile pass (``custody._reconcile``) every ``interval``, and
also when a parked run falls due, until cancelled or soft-stopped.

The due time is the earliest wake-up the store held at the last pass, or one a worker of this
process parked since (``parked_until``), so a durable sleep ends on time, not up to an interval
late. See docs/guide/design.md, "The reconciler".
"""

from __future__ import annotations

import math
from collections.abc import Callable

import attrs
import trio
from trio_util import wait_any

from ..._core._stop import stop_requested, wait_stop_requested
from ..._plumbing._grid import on_grid
from ..custody._reconcile import ReconcileReport, reconcile_pass, wait_before_pass
from ..custody._roles import ReconcilerStore


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
        report, self._soonest = await reconcile_pass(self.store, self.batch)
        if self.on_dead is not None and report.dead_lettered:
            self.on_dead()
        if self.on_woken is not None and (report.woken or report.repooled or report.fired):
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
            # the interval ends with the process's other loops (the grid); a wake-up on time
            wait = wait_before_pass(
                until_interval=on_grid(next_pass - trio.current_time()),
                soonest=self._soonest,
                store_now=self.store.clock(),
            )
            with trio.move_on_after(wait):
                await wait_any(wait_stop_requested, self._rethink.wait)
            if stop_requested():
                return
            if self._rethink.is_set():
                continue  # an earlier wake-up: wait for that instead
            await self.run_once()
            next_pass = trio.current_time() + interval
