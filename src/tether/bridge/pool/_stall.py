"""Stall notices: tell the user once that a claimed task is taking long.

The notice is recorded in the store before it is sent, so it goes out once across restarts and
watchers. See docs/guide/design.md, "Stall notices".
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final

import attrs
import trio

from ..._plumbing._grid import on_grid
from ..custody._roles import StallStore
from ..runs._outage import STORE_UNREACHABLE
from ._liveness import check_seconds
from ._stop import StopSignal

log = logging.getLogger("tether.bridge.pool.stall")

Notify = Callable[[str, float], Awaitable[None]]


@attrs.frozen
class StallPass:
    """What one pass of the ``StallWatcher`` did: the notices it sent, failed, pruned."""

    at: float
    sent: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    """Notices whose send raised; retried next pass."""
    pruned: int = 0


STALL_LATENESS: Final = 30
"""A stall notice comes at most a thirtieth of ``stall_after`` late (see ``watch_interval``)."""
MAX_WATCH_INTERVAL: Final = 10.0


def watch_interval(stall_after: float) -> float:
    """Seconds between a watcher's passes by default: a thirtieth of ``stall_after``, between
    1 and ``MAX_WATCH_INTERVAL`` (a notice of a 5-minute stall may come 10 s late; an idle
    bridge must not read and prune the store each second for it)."""
    return min(MAX_WATCH_INTERVAL, max(1.0, stall_after / STALL_LATENESS))


@attrs.define(eq=False)
class StallWatcher:
    """Sends stall notices: ``await nursery.start(watcher.run)``, or ``await run_once()``."""

    store: StallStore
    stall_after: float
    notify: Notify
    interval: float | None = None
    """Seconds between passes (default ``watch_interval(stall_after)``)."""
    batch: int = 100
    clock: Callable[[], float] | None = None
    worker: str | None = None
    """Only this worker's claims (a watcher inside a ``PoolWorker``); None: every claim."""
    passes: int = attrs.field(init=False, default=0)
    sent: int = attrs.field(init=False, default=0)
    _stop: StopSignal = attrs.field(init=False, factory=StopSignal)
    _every: float = attrs.field(init=False, default=1.0)

    def __attrs_post_init__(self) -> None:
        check_seconds("stall_after", self.stall_after)
        if self.interval is None:
            self._every = watch_interval(self.stall_after)
        else:
            self._every = check_seconds("interval", self.interval)
        if not callable(self.notify):
            raise TypeError(f"notify must be an async callable, got {self.notify!r}")
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1:
            raise ValueError(f"batch must be an int >= 1, got {self.batch!r}")

    def request_stop(self) -> None:
        self._stop.set()

    async def run_once(self) -> StallPass:
        now = (self.clock or self.store.clock)()
        sent: list[str] = []
        failed: list[str] = []
        candidates = await self.store.stall_candidates(
            now - self.stall_after, worker=self.worker, limit=self.batch
        )
        for c in candidates:
            if not await self.store.mark_stall_notified(c.id):
                continue  # another watcher got it first
            age = now - c.created_at
            try:
                await self.notify(c.id, age)
            except Exception:
                log.warning(
                    "stall notice for task %s not sent; retrying next pass", c.id, exc_info=True
                )
                await self.store.clear_stall_notice(c.id)
                failed.append(c.id)
            else:
                log.info(
                    "stall notice sent for task %s (%.1fs old, worker %s)", c.id, age, c.worker
                )
                sent.append(c.id)
        pruned = await self.store.prune_stall_notices()
        self.passes += 1
        self.sent += len(sent)
        return StallPass(now, tuple(sent), tuple(failed), pruned)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """A pass every ``interval`` seconds until stopped (ready after the first pass)."""
        self._stop = StopSignal()  # a new run (a supervisor restart) starts unstopped
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._stop.forward_supervisor_stop)
            await self.run_once()
            task_status.started()
            while not self._stop.is_set():
                with trio.move_on_after(on_grid(self._every)):
                    await self._stop.wait()
                if not self._stop.is_set():
                    try:
                        await self.run_once()
                    except STORE_UNREACHABLE as exc:  # a pass that met an outage: the next
                        log.debug("stall watch: a pass missed the store: %s", exc)
            nursery.cancel_scope.cancel()
