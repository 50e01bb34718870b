"""Progress out of a worker's runs: every ``progress_interval``, one coalesced update per run
whose reporter changed, sent best effort (never custody); the partial reply the receiver took
is recorded as shown (a barge-in keeps it as the interrupted reply).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import attrs
import trio

from ..runs._claimed import ClaimedRun
from ..runs._progress import ProgressUpdate
from ._wakeup import Wakeup

log = logging.getLogger("tether.bridge.pool.worker")

PROGRESS_SEND_TIMEOUT: Final = 5.0
"""Seconds one progress update may take to send before it is dropped."""

OnProgress = Callable[[ProgressUpdate], Awaitable[bool]]
"""Sends one progress update; False when the receiver cannot take any (stop sending)."""


@attrs.define(eq=False)
class ProgressPublisher:
    """The progress of worker ``worker``'s ``runs()``, sent through ``send``."""

    worker: str
    send: OnProgress
    interval: float
    runs: Callable[[], Sequence[ClaimedRun]]
    begun: Wakeup
    """Rung as a run begins: the publisher sleeps on it while no run is going."""
    _refused: bool = attrs.field(init=False, default=False)
    _warned: bool = attrs.field(init=False, default=False)

    async def run(self) -> None:
        """Every ``interval``: one update for each run going at least that long whose
        reporter changed since its last update (the first says it is working), unless that
        run's previous update is still on its way. While no run is going it waits for one
        to begin instead (an idle worker does not tick)."""
        async with trio.open_nursery() as sends:
            while True:
                if not self.runs():
                    await self.begun.wait(math.inf)
                await trio.sleep(self.interval)
                if self._refused:
                    log.info("worker %s: the receiver takes no progress; not sending", self.worker)
                    sends.cancel_scope.cancel()
                    return
                now = trio.current_time()
                for run in self.runs():
                    update = self._update(run, now)
                    if update is not None:
                        run.sent, run.sending = update.seq, True
                        sends.start_soon(self._send, run, update)

    def _update(self, run: ClaimedRun, now: float) -> ProgressUpdate | None:
        """``run``'s next update, if it is due."""
        progress = run.progress
        if (
            run.sending
            or run.lost
            or run.finishing
            or progress.version == run.sent
            or now - run.started < self.interval
        ):
            return None
        version, status, partial = progress.snapshot()
        return ProgressUpdate(
            id=run.claim.task.id,
            attempt=run.claim.attempt,
            seq=version,
            running_s=round(now - run.started, 3),
            worker=self.worker,
            status=status,
            partial=partial,
        )

    async def _send(self, run: ClaimedRun, update: ProgressUpdate) -> None:
        try:
            with trio.move_on_after(PROGRESS_SEND_TIMEOUT) as timer:
                if not await self.send(update):
                    self._refused = True
                elif update.partial and run.claim.task.room is not None:
                    await run.record_shown(update.partial)
            if timer.cancelled_caught:
                self._trouble(update, "timed out")
        except Exception as exc:
            self._trouble(update, repr(exc))
        finally:
            run.sending = False

    def _trouble(self, update: ProgressUpdate, problem: str) -> None:
        level = logging.DEBUG if self._warned else logging.WARNING
        self._warned = True
        log.log(level, "worker %s: %s", self.worker, update.dropped(problem))
