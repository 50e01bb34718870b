"""The custody reading the admin endpoint answers from: refreshed in the background, never
awaited by a request, so every route answers at once whatever the store does (a store that is
unreachable waits, or fails, in the refresher, not in a scrape). A reading older than
``stale_after`` or one that failed says the store is down (``store_up 0``, ``/healthz`` 503).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import attrs
import trio
import trio.lowlevel

from ._sections import CustodyReading, CustodySource

log = logging.getLogger("tether.admin")

REFRESH_S = 1.0
"""Seconds between the refresher's readings."""
STALE_AFTER_S = 3.0
"""A reading this old (the refresher waiting on the store) counts as the store being down."""
FIRST_READING_WAIT_S = 0.5
"""How long a request made before the first reading waits for it."""


@attrs.frozen
class CachedReading:
    """The last reading, how old it is, and whether it says the store is up."""

    reading: CustodyReading | None
    age_s: float | None
    up: bool

    @property
    def problem(self) -> str | None:
        """Why the store counts as down (None: it is up)."""
        if self.up:
            return None
        if self.reading is None or self.age_s is None:
            return "the custody store has not answered yet"
        if self.reading.error is not None:
            return f"the custody store did not answer: {self.reading.error}"
        return f"the custody store has not answered for {self.age_s:.1f} s"


@attrs.define(eq=False)
class CustodyCache:
    """``await nursery.start(cache.run)`` keeps ``latest()`` fresh; without a running refresher
    ``read()`` reads the store itself (a caller outside the endpoint, tests)."""

    source: CustodySource
    refresh_s: float = REFRESH_S
    stale_after: float = STALE_AFTER_S
    clock: Callable[[], float] = trio.current_time
    _reading: CustodyReading | None = attrs.field(init=False, default=None)
    _read_at: float | None = attrs.field(init=False, default=None)
    _running: bool = attrs.field(init=False, default=False)
    _first: trio.Event = attrs.field(init=False, factory=trio.Event)

    def __attrs_post_init__(self) -> None:
        for name in ("refresh_s", "stale_after"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")

    @property
    def watching(self) -> bool:
        """Is there a reading, or a refresher getting one (else health does not judge)?"""
        return self._running or self._reading is not None

    def latest(self) -> CachedReading:
        if self._reading is None or self._read_at is None:
            return CachedReading(None, None, False)
        age = max(0.0, self.clock() - self._read_at)
        up = self._reading.error is None and age <= self.stale_after
        return CachedReading(self._reading, round(age, 3), up)

    async def read(self) -> CachedReading:
        """The latest reading (a request's: at once once the refresher has read once)."""
        await trio.lowlevel.checkpoint()  # an async call is a checkpoint, even from the cache
        if not self._running:
            self._keep(await self.source())
        elif not self._first.is_set():
            with trio.move_on_after(FIRST_READING_WAIT_S):
                await self._first.wait()
        return self.latest()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._running = True
        try:
            task_status.started()
            while True:
                self._keep(await self.source())
                await trio.sleep(self.refresh_s)
        finally:
            self._running = False

    def _keep(self, reading: CustodyReading) -> None:
        was_up = self.latest().up if self._reading is not None else True
        self._reading, self._read_at = reading, self.clock()
        self._first.set()
        if reading.error is None and not was_up:
            log.info("the custody store answers again")
        elif reading.error is not None and was_up:
            log.warning("the custody store did not answer: %s", reading.error)
