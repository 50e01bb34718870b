"""What the admin endpoint reports on: one runtime, and what a service hands it (custody counts,
a gateway connection, counters, pool membership, timing histograms)."""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs

from .._core._directory import Directory
from .._core._registry import TaskRegistry
from .._protocol._connection import ConnectionStatus
from .._runtime import Runtime
from ._custody_cache import CustodyCache
from ._routes import AdminRoutes
from ._sections import CustodySource, Histograms, PoolSource

DEFAULT_GATEWAY_WINDOW = 120.0


@attrs.frozen
class CounterSource:
    """A monotonic count some service keeps (e.g. replies delivered), read at scrape time.

    ``name`` becomes the Prometheus counter ``tether_<name>_total``.
    """

    name: str
    documentation: str
    read: Callable[[], float]


@attrs.frozen
class GaugeSource:
    """A value some service keeps that goes up and down (e.g. permits in flight), read at
    scrape time. ``name`` becomes the Prometheus gauge ``tether_<name>``."""

    name: str
    documentation: str
    read: Callable[[], float]


@attrs.define(eq=False)
class Observed:
    """The live objects behind ``/healthz``, ``/metrics``, ``/tasks`` and ``/status``.

    ``custody`` (optional) reads the service's custody store into a :class:`CustodyReading`.
    ``gateway`` (optional) returns the gateway client's current
    :class:`~tether.bridge.client.ConnectionStatus`; when it is set, health also requires that
    the gateway answered within ``gateway_window`` seconds. ``counters`` are extra counters
    (the bridge adds deliveries and dead letters). ``wall_clock`` is compared with the
    status's wall-clock ``last_ok``. The bridge builds all of them from its parts
    (``tether.bridge.service``); the endpoint imports nothing of the bridge.
    """

    registry: TaskRegistry
    directory: Directory
    runtime: Runtime | None = None
    custody: CustodySource | None = None
    gateway: Callable[[], ConnectionStatus] | None = None
    gateway_window: float = DEFAULT_GATEWAY_WINDOW
    counters: list[CounterSource] = attrs.field(factory=list)
    gauges: list[GaugeSource] = attrs.field(factory=list)
    """Extra gauges (the bridge adds its permits in flight)."""
    wall_clock: Callable[[], float] = time.time
    pool: PoolSource | None = None
    """This process's pool membership and the leader it sees (bridges, ``tether worker run``)."""
    timings: Histograms | None = None
    """Queue wait, run and delivery times (the bridge's), exported as histograms."""
    routes: AdminRoutes | None = None
    """Routes the service adds (the bridge's operator page under ``/ops``)."""
    custody_cache: CustodyCache | None = attrs.field(init=False, default=None)
    """What the routes answer from: ``custody`` read in the background (``serve_admin``)."""

    def __attrs_post_init__(self) -> None:
        if not self.gateway_window > 0:
            raise ValueError(f"gateway_window must be > 0 seconds, got {self.gateway_window!r}")
        if self.custody is not None:
            self.custody_cache = CustodyCache(self.custody)

    @classmethod
    def of_runtime(
        cls,
        runtime: Runtime,
        *,
        custody: CustodySource | None = None,
        gateway: Callable[[], ConnectionStatus] | None = None,
        gateway_window: float = DEFAULT_GATEWAY_WINDOW,
        counters: list[CounterSource] | None = None,
        gauges: list[GaugeSource] | None = None,
        pool: PoolSource | None = None,
        timings: Histograms | None = None,
        routes: AdminRoutes | None = None,
    ) -> Observed:
        return cls(
            registry=runtime.registry,
            directory=runtime.directory,
            runtime=runtime,
            custody=custody,
            gateway=gateway,
            gateway_window=gateway_window,
            counters=list(counters or ()),
            gauges=list(gauges or ()),
            pool=pool,
            timings=timings,
            routes=routes,
        )
