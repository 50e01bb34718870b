"""What another process stored wakes the bridge's loops at once.

Delivery looks when a worker of this process rings it, else on its idle schedule, which backs
off to ``pool._idle.IDLE_MAXIMUM`` while it finds nothing; a worker in another process (a
``tether worker run``, another host) stores its results unheard. The store tells of each
result stored elsewhere (``wait_for_results``: PostgreSQL ``NOTIFY``, SQLite's news file), so
a reply from elsewhere after a quiet spell is posted at once, not up to that long later;
likewise work made elsewhere (``wait_for_work``: another bridge's ingest, a lead's assignment
in another process) rings this bridge's lead and workers. Hints only: each loop's own look
stays the source of truth.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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

    def tasks_assigned(self, workers: Iterable[str]) -> None: ...


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
    workers: Sequence[str],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Ring the lead and ``workers`` whenever ``store`` hears of work made elsewhere: new
    tasks for the lead (or leaderless workers), or a lead in another process assigning to
    this process's workers (the news does not say to whom: each looks)."""
    task_status.started()
    while True:
        if await store.wait_for_work(IDLE_MAXIMUM):
            wakeups.tasks_pending()
            wakeups.tasks_assigned(workers)
