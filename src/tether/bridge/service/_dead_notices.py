"""Dead notices: tell the gateway about every dead-lettered task, so its user is not left waiting.

At least once and durably: a task is marked reported only after the gateway confirmed; a refusal is
final. See docs/guide/design.md, "Dead notices".
"""

from __future__ import annotations

import logging
import math

import attrs
import trio

from ..._plumbing._grid import on_grid
from ..client._client import GatewayClient, GatewayRequestError
from ..custody._roles import DeadNoticeStore
from ..pool._wakeup import Wakeup
from ..stores._operator import CANCELLED_PREFIX

log = logging.getLogger("tether.bridge.dead_notices")


def notice_reason(task_id: str, reason: str | None = None) -> str:
    """What the gateway (and so the person) is told about a dead task: a plain sentence and a
    reference to quote, that an operator cancelled it if one did (``reason``: the store's).
    Why it died, and the operator's own words, are operator detail; they stay in the store
    (``tether store show``), this module's log line and the operator page."""
    if reason is not None and reason.startswith(CANCELLED_PREFIX):
        return f"an operator cancelled this message; it was not answered (reference {task_id})"
    return f"something went wrong and this message was not answered (reference {task_id})"


@attrs.define
class DeadNoticeStats:
    reported: int = 0
    """Dead tasks the gateway confirmed (closed with the reason, or already closed)."""
    refused: int = 0
    """Dead tasks the gateway refused to hear about (e.g. an id it does not know): final."""


@attrs.define(eq=False)
class DeadNotices:
    """Reports dead tasks to the gateway. ``run()`` is the supervised service."""

    store: DeadNoticeStore
    gateway: GatewayClient
    wakeup: Wakeup = attrs.field(factory=Wakeup)
    batch: int = 64
    interval: float = 5.0
    """How often the store is looked at without a wake-up (the source of truth)."""
    stats: DeadNoticeStats = attrs.field(factory=DeadNoticeStats, init=False)
    _said_unsupported: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        if not (isinstance(self.batch, int) and 1 <= self.batch <= 1000):
            raise ValueError(f"dead-notice batch must be an int from 1 to 1000, got {self.batch}")
        if not (self.interval > 0 and math.isfinite(self.interval)):
            raise ValueError(f"interval must be > 0 seconds, got {self.interval}")

    @property
    def supported(self) -> bool:
        """Can the gateway hear about dead tasks (it has the reject endpoint)?"""
        return self.gateway.reject_supported

    async def run_once(self) -> int:
        """Report one batch of unreported dead tasks; returns how many were settled (reported
        or refused, and marked). 0 when there are none or the gateway has no endpoint."""
        if not self.supported:
            return 0
        dead = await self.store.unreported_dead(limit=self.batch)
        children = [r.task.id for r in dead if r.task.parent is not None]
        if children:  # the gateway never saw a child run: its parent's join reads its death
            await self.store.mark_dead_reported(children)
            dead = [r for r in dead if r.task.parent is None]
        settled: list[str] = []
        refused: set[str] = set()
        try:
            for record in dead:
                task_id = record.task.id
                try:
                    told = await self.gateway.reject(task_id, notice_reason(task_id, record.reason))
                except GatewayRequestError as exc:
                    log.warning(
                        "the gateway refused the notice that task %s is dead (%s); "
                        "not reporting it again, its dead letter stays in the store",
                        task_id,
                        exc,
                    )
                    refused.add(task_id)
                    settled.append(task_id)
                    continue
                if not told:
                    self._unsupported()
                    break
                log.info("told the gateway that task %s is dead: %s", task_id, record.reason)
                settled.append(task_id)
        finally:
            # what the gateway confirmed is marked even if a later notice was cancelled
            if settled:
                with trio.CancelScope(shield=True):
                    await self._mark(settled, refused)
        return len(settled)

    async def _mark(self, ids: list[str], refused: set[str]) -> None:
        marked = await self.store.mark_dead_reported(ids)
        for task_id, ok in zip(ids, marked, strict=True):
            if not ok:
                log.warning("reported dead task %s, but the store no longer has it dead", task_id)
            elif task_id in refused:
                self.stats.refused += 1
            else:
                self.stats.reported += 1

    def _unsupported(self) -> None:
        if not self._said_unsupported:
            self._said_unsupported = True
            log.warning(
                "gateway %s has no reject endpoint: dead-lettered tasks are not reported to it "
                "(their users get no answer); they stay in the store ('tether store status')",
                self.gateway.shown_url,
            )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Report until cancelled: full batches back to back, else wait for a ring of
        ``wakeup`` or the next periodic look."""
        task_status.started()
        while True:
            self.wakeup.clear()
            settled = await self.run_once()
            if settled < self.batch or not self.supported:
                await self.wakeup.wait(on_grid(self.interval))
