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
    predicate: Callable[[], Awaitable[bool]], *, within: float = 60.0, step: float = 0.05
) -> None:
    """Poll ``predicate`` until true; fail after ``within`` seconds (of the run's clock)."""
    with trio.fail_after(within):
        while not await predicate():  # noqa: ASYNC110 (polling the store is the point)
            await trio.sleep(step)
