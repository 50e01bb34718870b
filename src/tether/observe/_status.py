"""``GET /status``: supervisors and their children (with backoff), sessions, custody counts and
the gateway connection, as one document that ``tether status`` renders."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs
import trio

from .._child import ChildSnapshot
from .._plumbing._converter import unstructure
from .._protocol._connection import ConnectionStatus
from ._custody_cache import CachedReading
from ._health import HealthReport, check_health
from ._observed import Observed

PoolLines = Callable[[dict[str, Any]], list[str]]
"""Renders the ``pool`` section of ``/status`` (its JSON form) as lines for ``tether status``."""


@attrs.frozen
class ChildView:
    """``uptime_s`` while running; ``backoff_s`` (seconds until the restart) while in backoff."""

    name: str
    state: str
    restart: str
    restarts: int
    last_error: str | None
    uptime_s: float | None
    backoff_s: float | None


@attrs.frozen
class SupervisorView:
    name: str
    opened_by: str | None
    strategy: str
    closing: bool
    recent_restarts: int
    children: list[ChildView]


@attrs.frozen
class SessionView:
    name: str
    running: int
    queued: int
    finished: int
    failed: int
    cancelled: int
    dropped: int


@attrs.frozen
class TimingView:
    """One timing histogram in brief: how many observations, and the p50/p99 of the recent
    ones (None before the first)."""

    name: str
    count: int
    p50_s: float | None
    p99_s: float | None


@attrs.frozen
class StatusReport:
    """``/status`` (what ``tether status`` prints): health, supervisors, sessions, custody."""

    health: HealthReport
    supervisors: list[SupervisorView]
    sessions: list[SessionView]
    custody: dict[str, int] | None
    in_flight: int | None
    custody_error: str | None
    gateway: ConnectionStatus | None
    live_tasks: int
    handler_failures: int
    background_failures: int | None
    pool: dict[str, Any] | None = None
    """The service's pool membership (its JSON form; the service renders it)."""
    timings: list[TimingView] = attrs.field(factory=list)
    oldest_s: dict[str, float] = attrs.field(factory=dict)
    """Age (since intake) of the oldest task in each in-custody state that holds any."""
    custody_age_s: float | None = None
    """How old the custody reading is (the endpoint reads the store in the background)."""


def child_view(child: ChildSnapshot, now: float) -> ChildView:
    return ChildView(
        name=child.name,
        state=child.state,
        restart=child.restart,
        restarts=child.restarts,
        last_error=child.last_error,
        uptime_s=None
        if child.running_since is None or child.state != "running"
        else round(now - child.running_since, 3),
        backoff_s=None
        if child.backoff_until is None
        else round(max(0.0, child.backoff_until - now), 3),
    )


async def read_custody(observed: Observed) -> CachedReading | None:
    """The latest custody reading with its age (None when the service hands no store)."""
    cache = observed.custody_cache
    return None if cache is None else await cache.read()


async def status_report(observed: Observed) -> StatusReport:
    """Read everything ``/status`` shows from ``observed`` now."""
    cached = await read_custody(observed)
    reading = None if cached is None else cached.reading
    counts = None if reading is None else reading.counts
    now = trio.current_time()
    supervisors = []
    for entry in observed.directory.supervisors():
        snap = entry.supervisor.snapshot()
        supervisors.append(
            SupervisorView(
                name=snap.name,
                opened_by=entry.opened_by,
                strategy=snap.strategy,
                closing=snap.closing,
                recent_restarts=snap.recent_restarts,
                children=[child_view(c, now) for c in snap.children],
            )
        )
    sessions = []
    for session in observed.directory.sessions():
        stats = session.stats()
        sessions.append(
            SessionView(
                name=session.name,
                running=stats.running,
                queued=stats.queued,
                finished=stats.finished,
                failed=stats.failed,
                cancelled=stats.cancelled,
                dropped=stats.dropped,
            )
        )
    return StatusReport(
        health=check_health(observed),
        supervisors=supervisors,
        sessions=sessions,
        custody=None if counts is None else dict(counts),
        in_flight=None if reading is None else reading.in_flight,
        custody_error=None if cached is None else cached.problem,
        gateway=None if observed.gateway is None else observed.gateway(),
        live_tasks=observed.registry.count(),
        handler_failures=observed.directory.handler_failures(),
        background_failures=None if observed.runtime is None else observed.runtime.failed_count,
        pool=None if observed.pool is None else unstructure(observed.pool()),
        timings=timing_views(observed),
        oldest_s={} if reading is None else dict(reading.oldest_s),
        custody_age_s=None if cached is None else cached.age_s,
    )


def timing_views(observed: Observed) -> list[TimingView]:
    if observed.timings is None:
        return []
    return [
        TimingView(
            name=h.name,
            count=h.total,
            p50_s=_rounded(h.quantile(0.5)),
            p99_s=_rounded(h.quantile(0.99)),
        )
        for h in observed.timings.histograms
    ]


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.1f}ms" if value < 1 else f"{value:.2f}s"


def render_status(report: StatusReport, *, pool_lines: PoolLines | None = None) -> str:
    """The report as text for a terminal; ``pool_lines`` (the service's) renders its pool
    section, else that section is one line of JSON."""
    health = report.health
    lines = [f"health: {health.status}"]
    lines += [f"  ! {problem}" for problem in health.problems]
    for sup in report.supervisors:
        under = f" (in {sup.opened_by})" if sup.opened_by else ""
        closing = ", closing" if sup.closing else ""
        lines.append(
            f"supervisor {sup.name}{under}: {sup.strategy}, "
            f"{sup.recent_restarts} recent restart(s){closing}"
        )
        for child in sup.children:
            detail = ""
            if child.backoff_s is not None:
                detail = f", restart in {child.backoff_s:.1f}s"
            elif child.uptime_s is not None:
                detail = f", up {child.uptime_s:.1f}s"
            error = f", last error: {child.last_error}" if child.last_error else ""
            lines.append(
                f"  {child.name:<20} {child.state:<9} restarts={child.restarts}"
                f" ({child.restart}){detail}{error}"
            )
    if report.custody is not None:
        counts = ", ".join(f"{state} {n}" for state, n in report.custody.items())
        age = "" if report.custody_age_s is None else f", read {report.custody_age_s:.1f}s ago"
        lines.append(f"custody: {report.in_flight} in flight ({counts}{age})")
    if report.custody_error is not None:
        lines.append(f"custody: store down: {report.custody_error}")
    if report.oldest_s:
        oldest = ", ".join(f"{state} {age:.1f}s" for state, age in report.oldest_s.items())
        lines.append(f"oldest in custody: {oldest}")
    for timing in report.timings:
        if timing.count == 0:
            lines.append(f"{timing.name:<11} no observations yet")
        else:
            lines.append(
                f"{timing.name:<11} p50 {_seconds(timing.p50_s)}  p99 {_seconds(timing.p99_s)}"
                f"  ({timing.count} observed)"
            )
    gw = report.gateway
    if gw is not None:
        state = "connected" if gw.connected else "NOT connected"
        backoff = f", backing off {gw.backoff_s:.1f}s" if gw.backoff_s else ""
        error = f", last error: {gw.error}" if gw.error else ""
        lines.append(
            f"gateway {gw.gateway}: {state}, last ok {gw.last_ok or 'never'}{backoff}{error}"
        )
    if report.pool is not None:
        if pool_lines is None:
            lines.append(f"pool: {json.dumps(report.pool, sort_keys=True)}")
        else:
            lines += pool_lines(report.pool)
    if report.sessions:
        lines.append(f"sessions: {len(report.sessions)}")
        for s in report.sessions:
            lines.append(
                f"  {s.name:<20} running={s.running} queued={s.queued} finished={s.finished} "
                f"failed={s.failed} cancelled={s.cancelled} dropped={s.dropped}"
            )
    background = (
        ""
        if report.background_failures is None
        else f", {report.background_failures} background failure(s)"
    )
    lines.append(
        f"{report.live_tasks} live task(s), {report.handler_failures} handler failure(s)"
        f"{background}"
    )
    return "\n".join(lines)
