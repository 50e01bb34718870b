"""Idle waits end on a shared grid, early by less than a step, never late (issue 39)."""

from __future__ import annotations

import math

import trio
import trio.testing

from tether._plumbing._grid import GRID, on_grid


def test_long_waits_end_on_the_grid_a_little_early_and_short_waits_are_left_alone() -> None:
    async def main() -> None:
        await trio.sleep(0.137)  # off the grid
        now = trio.current_time()
        for delay in (2 * GRID, 1.0, 2.0, 4.9):
            wait = on_grid(delay)
            assert delay - GRID < wait <= delay
            assert math.isclose(((now + wait) / GRID) % 1, 0, abs_tol=1e-9) or math.isclose(
                ((now + wait) / GRID) % 1, 1, abs_tol=1e-9
            )
        assert on_grid(GRID) == GRID  # the busy pace keeps its own time
        assert on_grid(0.05) == 0.05
        assert on_grid(math.inf) == math.inf

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
