"""``GET /metrics``: Prometheus text, read from the live objects at scrape time.

A custom collector on a private ``CollectorRegistry`` (never prometheus_client's global one:
two runtimes in one process, or a test suite, must not share or collide). Nothing is counted
twice in a separate metrics layer that could drift from the truth: each scrape reads the
supervisors, the registry and the sessions directly, and asks the service for its custody
counts just before rendering (the only awaited part).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

import attrs
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from .._child import CHILD_STATES
from .._core._registry import ALL_KINDS, TaskRegistry
from ._custody_cache import CachedReading
from ._health import gateway_check
from ._observed import Observed
from ._status import read_custody

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST


@attrs.define(eq=False)
class _LiveCollector(Collector):
    observed: Observed
    custody: CachedReading | None = None

    def collect(
        self,
    ) -> Iterator[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
        yield from self._registry_metrics(self.observed.registry)
        yield from self._supervisor_metrics()
        yield from self._session_metrics()
        yield from self._custody_metrics()
        yield from self._gateway_metrics()
        yield from self._timing_metrics()
        for source in self.observed.counters:
            yield CounterMetricFamily(
                f"tether_{source.name}", source.documentation, value=source.read()
            )
        for gauge in self.observed.gauges:
            yield GaugeMetricFamily(f"tether_{gauge.name}", gauge.documentation, value=gauge.read())

    def _registry_metrics(
        self, registry: TaskRegistry
    ) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        tasks = GaugeMetricFamily(
            "tether_registry_tasks", "Live Trio tasks in the task registry", labels=["kind"]
        )
        counts = dict.fromkeys(sorted(ALL_KINDS), 0)
        for _task, _owner, kind, _started in registry.entries(kinds=ALL_KINDS):
            counts[kind] += 1
        for kind, n in counts.items():
            tasks.add_metric([kind], n)
        yield tasks
        yield CounterMetricFamily(
            "tether_registry_hook_errors",
            "Task registry instrument hooks that raised (and were contained)",
            value=registry.hook_errors,
        )
        runtime = self.observed.runtime
        if runtime is not None:
            yield CounterMetricFamily(
                "tether_background_failures",
                "Background tasks (Runtime.spawn) that ended with an uncaught exception",
                value=runtime.failed_count,
            )

    def _supervisor_metrics(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        restarts = CounterMetricFamily(
            "tether_child_restarts",
            "Restarts of each supervised child",
            labels=["supervisor", "child"],
        )
        state = GaugeMetricFamily(
            "tether_child_state",
            "1 for the state each supervised child is in, 0 for the others",
            labels=["supervisor", "child", "state"],
        )
        up = GaugeMetricFamily(
            "tether_child_up",
            "1 when the supervised child is running (or ended for good on purpose)",
            labels=["supervisor", "child"],
        )
        for entry in self.observed.directory.supervisors():
            snap = entry.supervisor.snapshot()
            for child in snap.children:
                restarts.add_metric([snap.name, child.name], child.restarts)
                up.add_metric([snap.name, child.name], 1 if child.healthy else 0)
                for name in CHILD_STATES:
                    state.add_metric([snap.name, child.name, name], int(child.state == name))
        yield restarts
        yield state
        yield up

    def _session_metrics(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        directory = self.observed.directory
        yield GaugeMetricFamily("tether_sessions", "Open sessions", value=len(directory.sessions()))
        yield CounterMetricFamily(
            "tether_handler_failures",
            "Session handler runs that raised, in all sessions (open or closed)",
            value=directory.handler_failures(),
        )

    def _custody_metrics(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        cached = self.custody
        if cached is None:
            return
        yield GaugeMetricFamily(
            "tether_custody_store_up",
            "1 when the custody store's latest reading is recent and answered "
            "(the endpoint reads it in the background)",
            value=int(cached.up),
        )
        if cached.age_s is not None:
            yield GaugeMetricFamily(
                "tether_custody_reading_age_seconds",
                "How old the custody reading below is",
                value=cached.age_s,
            )
        reading = cached.reading
        if reading is None:
            return
        counts = reading.counts
        if counts is None:
            return
        tasks = GaugeMetricFamily(
            "tether_custody_tasks", "Tasks in the custody store, per state", labels=["state"]
        )
        for custody_state, n in counts.items():
            tasks.add_metric([custody_state], n)
        yield tasks
        yield GaugeMetricFamily(
            "tether_custody_in_flight",
            "Tasks still in custody (pending, assigned, claimed, waiting or result)",
            value=reading.in_flight,
        )
        yield GaugeMetricFamily(
            "tether_dead_letters",
            "Dead-lettered tasks held in the store (never deleted silently)",
            value=reading.dead_letters,
        )
        yield GaugeMetricFamily(
            "tether_dead_letters_unreported",
            "Dead-lettered tasks the gateway has not yet confirmed hearing about",
            value=reading.dead_unreported,
        )
        oldest = GaugeMetricFamily(
            "tether_custody_oldest_age_seconds",
            "Age since intake of the oldest task in each in-custody state (0 when none)",
            labels=["state"],
        )
        for custody_state in reading.in_custody:
            oldest.add_metric([custody_state], reading.oldest_s.get(custody_state, 0.0))
        yield oldest
        if reading.conversations is not None:
            rooms, turns, state_bytes = reading.conversations
            yield GaugeMetricFamily(
                "tether_conversation_rooms", "Rooms with a conversation kept", value=rooms
            )
            yield GaugeMetricFamily(
                "tether_conversation_turns", "Conversation turns kept, all rooms", value=turns
            )
            yield GaugeMetricFamily(
                "tether_conversation_state_bytes",
                "Bytes of the state agents keep per room (JSON), all rooms",
                value=state_bytes,
            )
        if reading.next_wake_in_s is not None:
            yield GaugeMetricFamily(
                "tether_custody_next_wake_seconds",
                "Seconds until the first parked run (state waiting) is due (absent: none waits)",
                value=reading.next_wake_in_s,
            )

    def _timing_metrics(self) -> Iterator[HistogramMetricFamily]:
        timings = self.observed.timings
        if timings is None:
            return
        for histogram in timings.histograms:
            yield HistogramMetricFamily(
                f"tether_{histogram.name}_seconds",
                histogram.documentation,
                buckets=histogram.cumulative(),
                sum_value=histogram.sum,
            )

    def _gateway_metrics(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        observed = self.observed
        if observed.gateway is None:
            return
        status = observed.gateway()
        check = gateway_check(status, observed.wall_clock(), observed.gateway_window)
        yield GaugeMetricFamily(
            "tether_gateway_connected",
            "1 when the last request to the gateway succeeded",
            value=int(status.connected),
        )
        yield GaugeMetricFamily(
            "tether_gateway_consecutive_failures",
            "Failed gateway requests since the last success",
            value=status.consecutive_failures,
        )
        if check.age_s is not None:
            yield GaugeMetricFamily(
                "tether_gateway_last_ok_age_seconds",
                "Seconds since the gateway last answered",
                value=check.age_s,
            )


@attrs.define(eq=False)
class Metrics:
    """The admin endpoint's metrics: ``await metrics.render()`` is one scrape."""

    observed: Observed
    registry: CollectorRegistry = attrs.field(init=False)
    _collector: _LiveCollector = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._collector = _LiveCollector(self.observed)
        self.registry.register(self._collector)

    async def render(self) -> bytes:
        reading = await read_custody(self.observed)
        # no checkpoint between here and the end: the scrape sees one instant
        self._collector.custody = reading
        try:
            return generate_latest(self.registry)
        finally:
            self._collector.custody = None
