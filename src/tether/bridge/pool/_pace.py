"""How many tasks an adaptive worker asks the lead for: enough to cover a tenth of a second of
work at the pace its runs have taken, so quick runs keep a queue ahead and slow ones never
strand a task behind a busy worker."""

from __future__ import annotations

import math
from typing import Final

import attrs

PREFETCH_S: Final = 0.1
"""Seconds of work an adaptive worker keeps assigned and waiting."""

RUN_AVERAGE_WEIGHT: Final = 0.2
"""How much one run moves the average run time (an exponential moving average)."""


@attrs.define(eq=False)
class Pace:
    """The average time a worker's runs took from claim to answer."""

    run_seconds: float | None = None

    def ran(self, seconds: float) -> None:
        """Fold one run's duration into the average."""
        if self.run_seconds is None:
            self.run_seconds = seconds
        else:
            self.run_seconds += RUN_AVERAGE_WEIGHT * (seconds - self.run_seconds)

    def capacity(self, concurrency: int) -> int:
        """Enough waiting assignments to cover ``PREFETCH_S`` of work at this pace, between 1
        and ``3 * concurrency`` of them, beside the ``concurrency`` running.

        Quick runs (a thousand a second) keep ``4 * concurrency``: the next tasks are assigned
        before a run ends, and cover the lead's gap between sweeps. Slow runs (an LLM call of
        seconds) ask for ``concurrency + 1``: a task never waits long behind a busy worker
        while another worker idles, and never for so long that the lead takes it back as
        stuck. Before any run, the quick case is assumed."""
        c = concurrency
        if self.run_seconds is None:
            return 4 * c
        waiting = math.ceil(c * PREFETCH_S / max(self.run_seconds, 1e-6))
        return c + max(1, min(3 * c, waiting))
