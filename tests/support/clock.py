"""The test clocks: a store's wall clock that a test moves (``FakeClock``), and a Trio clock
that jumps ahead only while nothing waits on a store's database thread (``StoreAwareClock``)."""

from __future__ import annotations

import math

import attrs
import trio

from tether._plumbing._sqlite_writer import jobs_in_flight


@attrs.define
class FakeClock:
    """A store's clock (its ``clock=``) in tests: time moves only when a test says so."""

    now: float = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class StoreAwareClock(trio.abc.Clock):
    """Virtual time that jumps to the next deadline whenever the run is idle (like
    ``MockClock(autojump_threshold=0)``), except while a store job is in the writer thread.

    Trio counts a task waiting on a thread as idle, so a plain autojump clock skips to the
    next timer during a single commit (a handler's long sleep, past every lease). Here time
    stands still until the database answers (its wake-up ends the wait). Pass ``mock_clock``
    to the test function itself: pytest-trio only installs a clock fixture the test requests
    directly, not one requested by another fixture.
    """

    def __init__(self) -> None:
        self._now = 0.0

    def start_clock(self) -> None:
        pass

    def current_time(self) -> float:
        return self._now

    def deadline_to_sleep_time(self, deadline: float) -> float:
        if deadline <= self._now:
            return 0.0
        if jobs_in_flight() or deadline == math.inf:
            return 86_400.0  # a real wait; the writer's wake-up (or any I/O) ends it
        self._now = deadline
        return 0.0
