"""What a service hands the admin endpoint, in the endpoint's own terms.

The endpoint knows no custody state, pool or timing by name: the service that owns them (the
bridge, ``tether worker run``) reads its store into a :class:`CustodyReading`, hands its timing
histograms as :class:`Histograms`, and its pool membership as any record with a JSON form.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import attrs


@attrs.frozen
class CustodyReading:
    """A custody store's counts at one instant, or why they could not be read (``counts``
    None, ``error`` set).

    A store that cannot answer (closed during a shutdown, a database outage) must not turn
    every scrape into a 500: the rest of the picture is still worth having."""

    counts: dict[str, int] | None
    """Tasks per state, every state in the service's order (zero included)."""
    in_custody: tuple[str, ...] = ()
    """The states still in custody, in the same order: their sum is the tasks in flight."""
    error: str | None = None
    dead_letters: int = 0
    dead_unreported: int = 0
    """Dead letters the gateway has not yet confirmed hearing about."""
    oldest_s: dict[str, float] = attrs.field(factory=dict)
    """Age (since intake, by the store's clock) of the oldest task in each in-custody state
    that holds any."""
    conversations: tuple[int, int, int] | None = None
    """Rooms with a conversation, turns kept, bytes of state (None: not kept by this store)."""
    next_wake_in_s: float | None = None
    """Seconds until the first parked run (``waiting``, a durable sleep) is due; None when no
    run waits."""

    @property
    def in_flight(self) -> int | None:
        if self.counts is None:
            return None
        return sum(self.counts.get(state, 0) for state in self.in_custody)


CustodySource = Callable[[], Awaitable[CustodyReading]]
"""Reads the store now (``/metrics`` and ``/status`` await it once per request)."""

PoolSource = Callable[[], Any]
"""This process's pool membership: an attrs record, shown in ``/status`` in its JSON form."""


class Histogram(Protocol):
    """A histogram of seconds: Prometheus buckets and the quantiles of recent observations."""

    @property
    def name(self) -> str: ...
    @property
    def documentation(self) -> str: ...
    @property
    def total(self) -> int: ...
    @property
    def sum(self) -> float: ...
    def cumulative(self) -> list[tuple[str, int]]:
        """``(upper bound, observations at or below it)`` pairs ending with ``+Inf``."""
        ...

    def quantile(self, q: float) -> float | None: ...


class Histograms(Protocol):
    """A service's timing histograms, exported as ``tether_<name>_seconds``."""

    @property
    def histograms(self) -> Sequence[Histogram]: ...
