"""Flow control in a handler (issue #38): ``async with run.limit("openai:gpt-4o"):`` waits for
a permit of the key, shared by every process on the custody store, and holds it for the block.

Waiting spends no attempt. A wait that would pass the run's ``park_after`` parks the task
(``waiting``, the worker slot freed) and the handler runs again from the top once the wait is
over. ``.pause(after)`` (or ``Retry(after=, key=)``) stops the key for everyone: what a
provider's 429 with ``Retry-After`` asks for. The bucket arithmetic is ``custody._limits``.
"""

from __future__ import annotations

import logging
import math
from contextlib import ExitStack
from types import TracebackType
from typing import Final

import attrs
import trio

from ..._plumbing._when import iso_time
from ..custody._limits import Granted, check_key, check_pause, check_weight
from ..custody._roles import PermitStore
from ._journal import Journal
from ._spans import WaitTrace
from ._timings import TimingHistogram

log = logging.getLogger("tether.bridge.limits")

POLL_FIRST: Final = 0.01
"""Seconds before asking again for a permit held by others (no time is known): doubling..."""
POLL_CAP: Final = 0.2
"""...up to this: how late a freed permit may be seen by a waiter, at worst."""
PARK_AGAIN: Final = 60.0
"""A parked waiter for a concurrency permit (no known wait) is woken when a holder gives a
permit of its key back (``release_permit``); at the latest it is due again this much later
(a holder whose run ended without giving it back frees it as its task leaves ``claimed``)."""


@attrs.define(eq=False)
class LimitMetrics:
    """This process's flow control, for the admin endpoint's ``/metrics``."""

    in_flight: int = 0
    granted: int = 0
    waits: int = 0
    """Acquires that had to wait (at least once)."""
    parks: int = 0
    pauses: int = 0
    wait: TimingHistogram = attrs.field(
        factory=lambda: TimingHistogram(
            "permit_wait", "Seconds a run waited for a permit of a limit"
        )
    )


METRICS: Final = LimitMetrics()
"""The process's one set (every worker of the process adds to it)."""


@attrs.define(eq=False)
class Permit:
    """A permit held by a run; ``release()`` gives it back (else its task leaving ``claimed``
    does). ``id`` is None for a key without a declared limit and outside a worker."""

    key: str
    id: int | None
    _store: PermitStore | None = None
    released: bool = attrs.field(init=False, default=False)

    async def release(self) -> None:
        if self.released:
            return
        self.released = True
        METRICS.in_flight -= 1
        if self._store is not None and self.id is not None:
            with trio.CancelScope(shield=True):  # a cancelled block still gives its permit back
                try:
                    await self._store.release_permit(self.id)
                except Exception:  # the block's own outcome wins: its task's end frees it
                    log.warning("permit %d of %s not given back now", self.id, self.key)


@attrs.define(eq=False)
class Limited:
    """What ``run.limit(key, weight)`` returns: an ``async with`` block holding a permit, and
    ``pause(after)`` for the key."""

    _journal: Journal
    key: str
    weight: float
    permit: Permit | None = attrs.field(init=False, default=None)

    async def __aenter__(self) -> Permit:
        self.permit = await acquire(self._journal, self.key, self.weight)
        return self.permit

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.permit is not None:
            await self.permit.release()

    async def pause(self, after: float) -> None:
        """Stop the key for everyone on the store for ``after`` seconds."""
        await pause(self._journal, self.key, after)


def limit(journal: Journal, key: str, weight: float = 1) -> Limited:
    return Limited(journal, check_key(key), check_weight(weight))


async def acquire(journal: Journal, key: str, weight: float = 1) -> Permit:
    """Wait for a permit of ``key`` spending ``weight`` tokens (see the module)."""
    key, weight = check_key(key), check_weight(weight)
    store = journal.store
    if store is None or not journal.durable:  # detached: nothing to share, no limit
        METRICS.in_flight += 1
        return Permit(key, None)
    started = trio.current_time()
    poll = POLL_FIRST
    with ExitStack() as waiting:  # a wait span from the first refusal to the grant or park
        traced: WaitTrace | None = None
        while True:
            outcome = await journal.fenced(
                lambda store, claim: store.acquire_permit(claim, key, weight)
            )
            if isinstance(outcome, Granted):
                METRICS.granted += 1
                METRICS.in_flight += 1
                if traced is not None:
                    METRICS.wait.observe(trio.current_time() - started)
                return Permit(key, outcome.permit, store)
            if traced is None:
                METRICS.waits += 1
                traced = waiting.enter_context(journal.waiting("permit", {"tether.wait.key": key}))
            if outcome.seconds is None:
                delay, poll = poll, min(poll * 2, POLL_CAP)
            else:
                delay = max(outcome.seconds, 0.001)
                traced.until(store.clock() + delay)
            if trio.current_time() - started + delay > journal.park_after:
                METRICS.parks += 1
                METRICS.wait.observe(trio.current_time() - started)  # a wait, counted once
                until = store.clock() + (delay if outcome.seconds is not None else PARK_AGAIN)
                why = f"waiting for a permit of {key} ({outcome.why}) until {iso_time(until)}"
                raise journal.park(until, why)
            await trio.sleep(delay)


async def pause(journal: Journal, key: str, after: float) -> None:
    """Stop ``key`` for everyone on the store for ``after`` seconds (a detached run: nothing)."""
    key, after = check_key(key), check_pause(after)
    METRICS.pauses += 1
    store = journal.store
    if store is not None and journal.durable and math.isfinite(after):
        await store.pause_limit(key, store.clock() + after)
