from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tether.bridge import SqliteStore
from tether.bridge._sqlite_writer import jobs_in_flight

from .pool_support import FakeClock

LEASE_S = 6.0
MAX_ATTEMPTS = 3


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def store(tmp_path: Path, fake_clock: FakeClock) -> AsyncIterator[SqliteStore]:
    """A store on a clock that moves only when the test says so (for sweeps and passes)."""
    s = await SqliteStore.open(
        tmp_path / "custody.db", clock=fake_clock, lease_s=LEASE_S, max_attempts=MAX_ATTEMPTS
    )
    try:
        yield s
    finally:
        await s.aclose()


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


@pytest.fixture
def mock_clock() -> StoreAwareClock:
    return StoreAwareClock()


@pytest.fixture
async def timed_store(tmp_path: Path, mock_clock: StoreAwareClock) -> AsyncIterator[SqliteStore]:
    """A store on Trio's (mock) clock: services sleep and leases run on the same time."""
    s = await SqliteStore.open(
        tmp_path / "timed.db",
        clock=trio.current_time,
        lease_s=LEASE_S,
        max_attempts=MAX_ATTEMPTS,
        synchronous="NORMAL",
    )
    try:
        yield s
    finally:
        await s.aclose()
