"""Shared pieces of the pool tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
import trio


@attrs.define
class FakeClock:
    """A store's clock that moves only when the test says so."""

    now: float = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def wait_for(
    predicate: Callable[[], Awaitable[bool]], *, timeout: float = 60.0, step: float = 0.05
) -> None:
    """Poll ``predicate`` until true; fail after ``timeout`` seconds (of the run's clock)."""
    with trio.fail_after(timeout):
        while not await predicate():
            await trio.sleep(step)
