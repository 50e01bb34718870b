"""Results stored by another process wake the bridge's delivery at once (PostgreSQL).

Delivery looks when a worker of this process rings it, else on its idle schedule, which backs
off to ``pool._idle.IDLE_MAXIMUM`` while it finds nothing; a worker on another host stores its
results unheard. A PostgreSQL store ``NOTIFY``s each stored result (``wait_for_results``), so a
reply from elsewhere after a quiet spell is posted at once, not up to that long later. A hint
only: delivery's own look stays the source of truth.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import trio

from ..pool._idle import IDLE_MAXIMUM


@runtime_checkable
class ResultsHint(Protocol):
    async def wait_for_results(self, seconds: float) -> bool: ...


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
