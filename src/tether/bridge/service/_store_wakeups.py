"""What another process stored wakes the bridge's loops at once (PostgreSQL).

Delivery looks when a worker of this process rings it, else on its idle schedule, which backs
off to ``pool._idle.IDLE_MAXIMUM`` while it finds nothing; a worker on another host stores its
results unheard. A PostgreSQL store ``NOTIFY``s each stored result (``wait_for_results``), so a
reply from elsewhere after a quiet spell is posted at once, not up to that long later; likewise
tasks another bridge ingested (``wait_for_work``) ring this bridge's lead and workers. Hints
only: each loop's own look stays the source of truth.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import trio

from ..pool._idle import IDLE_MAXIMUM


@runtime_checkable
class ResultsHint(Protocol):
    async def wait_for_results(self, seconds: float) -> bool: ...


@runtime_checkable
class WorkHint(Protocol):
    async def wait_for_work(self, seconds: float) -> bool: ...


class Rung(Protocol):
    def tasks_pending(self) -> None: ...


class Nudged(Protocol):
    def nudge(self) -> None: ...


async def relay_results(
    store: ResultsHint,
    delivery: Nudged,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Nudge ``delivery`` whenever ``store`` hears of a stored result, until cancelled."""
    task_status.started()
    while True:
        if await store.wait_for_results(IDLE_MAXIMUM):
            delivery.nudge()


async def relay_work(
    store: WorkHint,
    wakeups: Rung,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Ring the lead (or, leaderless, the workers) whenever ``store`` hears of new work; this
    bridge's own lead rings its workers for what it assigns."""
    task_status.started()
    while True:
        if await store.wait_for_work(IDLE_MAXIMUM):
            wakeups.tasks_pending()
