"""Timings: how long tasks wait, run and take to deliver, as this process saw them, and how
long its lead's sweeps take.

Three histograms, each from two moments of one task kept in a bounded map, and the lead's sweep
time (issue #56: where the lead spends its time). See docs/guide/design.md, "Timings".
"""

from __future__ import annotations

import bisect
import math
from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import Final

import attrs

BUCKETS: Final = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
)
"""Upper bounds in seconds (plus ``+Inf``): from a quick echo to an agent working an hour."""

SWEEP_BUCKETS: Final = (0.0005, 0.001, 0.0025, *BUCKETS[:11])
"""A sweep takes milliseconds; one of seconds is the store holding the lead up."""

RECENT: Final = 1024
"""Observations kept per histogram for the quantiles ``tether status`` prints."""

MAX_TRACKED: Final = 100_000
"""Ids waiting for their second moment, per kind, before the oldest are forgotten."""


@attrs.define(eq=False)
class TimingHistogram:
    """Cumulative bucket counts (Prometheus style) and the recent observations."""

    name: str
    documentation: str
    buckets: tuple[float, ...] = BUCKETS
    counts: list[int] = attrs.field(init=False)
    """Observations per bucket (not cumulative; ``counts[-1]`` is above the last bound)."""
    total: int = attrs.field(init=False, default=0)
    sum: float = attrs.field(init=False, default=0.0)
    recent: deque[float] = attrs.field(init=False, factory=lambda: deque(maxlen=RECENT))

    def __attrs_post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, seconds: float) -> None:
        if not math.isfinite(seconds):
            return
        seconds = max(0.0, seconds)  # two clocks a hair apart never make a negative wait
        self.counts[bisect.bisect_left(self.buckets, seconds)] += 1
        self.total += 1
        self.sum += seconds
        self.recent.append(seconds)

    def cumulative(self) -> list[tuple[str, int]]:
        """``(upper bound, observations at or below it)`` pairs ending with ``+Inf``."""
        pairs, running = [], 0
        for bound, count in zip([*map(str, self.buckets), "+Inf"], self.counts, strict=True):
            running += count
            pairs.append((bound, running))
        return pairs

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile of the recent observations (nearest rank); None before any."""
        if not self.recent:
            return None
        ordered = sorted(self.recent)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@attrs.define(eq=False)
class Timings:
    """One bridge's timing histograms; the parts call the method of each moment they see."""

    queue_wait: TimingHistogram = attrs.field(
        factory=lambda: TimingHistogram(
            "queue_wait", "Seconds from intake (commit, then ack) to a worker's claim"
        )
    )
    run_time: TimingHistogram = attrs.field(
        factory=lambda: TimingHistogram("run_time", "Seconds from a claim to the agent's answer")
    )
    delivery: TimingHistogram = attrs.field(
        factory=lambda: TimingHistogram(
            "delivery", "Seconds from a reply being stored to the gateway confirming it"
        )
    )
    lead_sweep: TimingHistogram = attrs.field(
        factory=lambda: TimingHistogram(
            "lead_sweep",
            "Seconds one sweep of this process's pool lead took (read, plan, assign)",
            SWEEP_BUCKETS,
        )
    )
    _taken: OrderedDict[str, float] = attrs.field(init=False, factory=OrderedDict)
    _stored: OrderedDict[str, float] = attrs.field(init=False, factory=OrderedDict)

    @property
    def histograms(self) -> tuple[TimingHistogram, ...]:
        return (self.queue_wait, self.run_time, self.delivery, self.lead_sweep)

    def taken_in(self, ids: Iterable[str], at: float) -> None:
        """Ingest committed these new tasks at ``at`` (the store's clock)."""
        for id in ids:
            _remember(self._taken, id, at)

    def taking_in(self, ids: Iterable[str], at: float) -> list[str]:
        """Ingest is about to commit these tasks at ``at``: note those not noted yet (a run
        may be claimed before the ingest returns); the ids it noted. The caller forgets the
        ones that were not new (``not_taken``)."""
        noted = [id for id in ids if id not in self._taken]
        self.taken_in(noted, at)
        return noted

    def not_taken(self, ids: Iterable[str]) -> None:
        """Forget the intake noted for ``ids`` (a replay, or an ingest that failed)."""
        for id in ids:
            self._taken.pop(id, None)

    def claimed(self, id: str, at: float) -> None:
        taken = self._taken.pop(id, None)
        if taken is not None:
            self.queue_wait.observe(at - taken)

    def ran(self, seconds: float) -> None:
        self.run_time.observe(seconds)

    def result_stored(self, id: str, at: float) -> None:
        _remember(self._stored, id, at)

    def delivered(self, ids: Iterable[str], at: float) -> None:
        for id in ids:
            stored = self._stored.pop(id, None)
            if stored is not None:
                self.delivery.observe(at - stored)


def _remember(moments: OrderedDict[str, float], id: str, at: float) -> None:
    moments[id] = at
    if len(moments) > MAX_TRACKED:
        moments.popitem(last=False)
