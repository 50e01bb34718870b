from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from support.clock import StoreAwareClock
from tether.bridge import SqliteStore

from .clock import FakeClock

__all__ = ["LEASE_S", "MAX_ATTEMPTS", "StoreAwareClock"]

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
