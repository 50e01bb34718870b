"""What the bridge hands its admin endpoint: its custody counts, gateway connection, counters,
pool membership and timings, in ``tether.observe``'s terms (the endpoint knows no bridge part).

Imported only when an admin endpoint is served: ``tether.observe`` brings hypercorn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Protocol

import attrs

from ..._protocol._connection import ConnectionStatus
from ..._runtime import Runtime
from ...observe._observed import DEFAULT_GATEWAY_WINDOW, CounterSource, GaugeSource, Observed
from ...observe._routes import AdminRoutes
from ...observe._sections import CustodyReading
from ..custody._roles import InspectStore, RoomStore
from ..custody._rules import IN_CUSTODY, CustodyState
from ..pool._status import PoolStatus
from ..runs._permits import METRICS
from ..runs._timings import TimingHistogram, Timings

log = logging.getLogger("tether.admin")

IN_CUSTODY_ORDER = tuple(state.value for state in CustodyState if state in IN_CUSTODY)


class AdminStore(InspectStore, RoomStore, Protocol):
    """What the admin endpoint reads: custody, and the conversations' counts."""


async def read_custody(store: AdminStore) -> CustodyReading:
    """The store's counts, the dead letters not yet reported, and the age of the oldest task in
    each in-custody state that holds any (one indexed read per such state); a store that cannot
    answer gives a reading that says why (logged)."""
    try:
        counts = await store.counts()
        unreported = 0
        if counts.get(CustodyState.DEAD, 0):
            unreported = await store.unreported_dead_count()
        wake_in = None
        if counts.get(CustodyState.WAITING, 0):
            first = (await store.waiting_runs()).next_wake
            if first is not None:
                wake_in = round(max(0.0, first - store.clock()), 3)
        oldest: dict[str, float] = {}
        for state in CustodyState:  # in the states' order, not the set's
            if state in IN_CUSTODY and counts.get(state, 0):
                records = await store.records(state, limit=1)
                if records:
                    age = store.clock() - records[0].created_at
                    oldest[state.value] = round(max(0.0, age), 3)
        talk = await store.conversation_counts()
    except Exception as exc:  # the endpoint's cache says it once per incident
        log.debug("cannot read the custody store's counts: %r", exc)
        return CustodyReading(None, IN_CUSTODY_ORDER, repr(exc))
    return CustodyReading(
        {state.value: int(counts.get(state, 0)) for state in CustodyState},
        IN_CUSTODY_ORDER,
        dead_letters=int(counts.get(CustodyState.DEAD, 0)),
        dead_unreported=unreported,
        oldest_s=oldest,
        conversations=(talk.rooms, talk.turns, talk.state_bytes),
        next_wake_in_s=wake_in,
    )


def bridge_observed(
    runtime: Runtime,
    *,
    store: AdminStore | None = None,
    gateway: Callable[[], ConnectionStatus] | None = None,
    gateway_window: float = DEFAULT_GATEWAY_WINDOW,
    counters: list[CounterSource] | None = None,
    pool: Callable[[], PoolStatus] | None = None,
    timings: Timings | None = None,
    routes: AdminRoutes | None = None,
) -> Observed:
    """The admin endpoint's view of a bridge (or a ``tether worker run``) in ``runtime``; the
    process's flow control (``runs._permits.METRICS``) is always on it."""
    return Observed.of_runtime(
        runtime,
        custody=None if store is None else partial(read_custody, store),
        gateway=gateway,
        gateway_window=gateway_window,
        counters=[*(counters or ()), *limit_counters()],
        gauges=[
            GaugeSource(
                "permits_in_flight",
                "Permits of limits this process's runs hold now (flow control)",
                lambda: METRICS.in_flight,
            )
        ],
        pool=pool,
        timings=_Histograms((*(() if timings is None else timings.histograms), METRICS.wait)),
        routes=routes,
    )


@attrs.frozen
class _Histograms:
    """The bridge's timings and the process's permit waits, as ``/metrics`` reads them."""

    parts: tuple[TimingHistogram, ...]

    @property
    def histograms(self) -> tuple[TimingHistogram, ...]:
        return self.parts


def limit_counters() -> list[CounterSource]:
    """This process's flow control as counters (``runs._permits.METRICS``)."""
    return [
        CounterSource(
            "permits_granted", "Permits of limits granted to runs", lambda: METRICS.granted
        ),
        CounterSource(
            "permit_waits", "Permits a run had to wait for (at least once)", lambda: METRICS.waits
        ),
        CounterSource(
            "permit_parks",
            "Runs parked (state waiting) because a permit was too far off",
            lambda: METRICS.parks,
        ),
        CounterSource(
            "limit_pauses",
            "Pauses of a limit's key asked by this process's runs (a 429, .pause)",
            lambda: METRICS.pauses,
        ),
    ]
