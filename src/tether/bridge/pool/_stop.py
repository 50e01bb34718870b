"""The soft-stop signal of a pool service, set by ``request_stop()`` or by its supervisor: one
object answers "was I asked to stop?" whichever way the request came."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Final

import attrs
import trio

from ..._core._stop import wait_stop_requested
from ..._plumbing._when import clock_time, duration
from ..custody._rules import Claim

log = logging.getLogger("tether.bridge.pool.worker")


@attrs.define(eq=False)
class StopSignal:
    _event: trio.Event = attrs.field(init=False, factory=trio.Event)

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()

    async def forward_supervisor_stop(self) -> None:
        """Run inside the service: set this signal when its supervisor asks the child to stop
        (outside a supervised child this just sleeps until cancelled)."""
        await wait_stop_requested()
        self.set()


SHOWN_IDS: Final = 5
"""Task ids a log line names; the rest are counted."""


def _runs(count: int) -> str:
    return "1 run" if count == 1 else f"{count} runs"


def _ids(claims: Sequence[Claim]) -> str:
    shown = ", ".join(c.task.id for c in claims[:SHOWN_IDS])
    more = len(claims) - SHOWN_IDS
    return shown + (f" and {more} more" if more > 0 else "")


async def cut_after_grace(
    worker: str,
    grace: float,
    now: Callable[[], float],
    in_hand: Callable[[], Sequence[Claim]],
    work: trio.Nursery,
) -> None:
    """A soft stop of ``worker``: say what it waits for and until when (``now()`` on the
    worker's clock); after ``grace`` seconds cancel ``work``, the runs still going."""
    runs = in_hand()
    if runs:
        log.info(
            "worker %s: stopping: waiting up to %s (until %s) for %s in hand (%s) to "
            "finish; then %s cancelled and %s back to the pool",
            worker,
            duration(grace),
            clock_time(now() + grace),
            _runs(len(runs)),
            _ids(runs),
            "it is" if len(runs) == 1 else "they are",
            "its task goes" if len(runs) == 1 else "their tasks go",
        )
    await trio.sleep(grace)
    left = in_hand()
    if left:
        log.warning(
            "worker %s: cancelled %s still going after the %s stop grace (%s)",
            worker,
            _runs(len(left)),
            duration(grace),
            _ids(left),
        )
    work.cancel_scope.cancel()
