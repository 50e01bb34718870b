"""Health: is every supervised child running, and was the gateway reached recently?

One predicate per question: :func:`children_problems` for the supervisors,
:func:`gateway_check` for the gateway; :func:`check_health` combines them into the document
``GET /healthz`` returns (200 when ``ok``, 503 otherwise).
"""

from __future__ import annotations

from datetime import datetime

import attrs

from .._child import ChildSnapshot
from .._protocol._connection import ConnectionStatus
from ._observed import Observed


@attrs.frozen
class ChildHealth:
    supervisor: str
    child: str
    state: str
    restarts: int
    healthy: bool
    last_error: str | None


@attrs.frozen
class GatewayHealth:
    """``age_s``: seconds since the gateway last answered (None: never, in this run)."""

    gateway: str
    ok: bool
    last_ok: str | None
    age_s: float | None
    window_s: float
    error: str | None


@attrs.frozen
class HealthReport:
    """``/healthz``: ok or not, and why (each supervised child, the gateway connection)."""

    ok: bool
    status: str  # ok | unhealthy | stopping
    problems: list[str]
    children: list[ChildHealth]
    gateway: GatewayHealth | None


def child_problem(supervisor: str, child: ChildSnapshot) -> str | None:
    """One sentence saying why ``child`` is not healthy (None when it is)."""
    if child.healthy:
        return None
    state = "in backoff" if child.state == "backoff" else child.state
    error = f" (last error: {child.last_error})" if child.last_error else ""
    return f"child {child.name!r} of supervisor {supervisor!r} is {state}{error}"


def gateway_check(status: ConnectionStatus, now: float, window: float) -> GatewayHealth:
    """The gateway is healthy when its last successful answer is at most ``window`` old."""
    age: float | None = None
    if status.last_ok is not None:
        try:
            age = max(0.0, now - datetime.fromisoformat(status.last_ok).timestamp())
        except ValueError:
            age = None
    return GatewayHealth(
        gateway=status.gateway,
        ok=age is not None and age <= window,
        last_ok=status.last_ok,
        age_s=None if age is None else round(age, 3),
        window_s=window,
        error=status.error,
    )


def check_health(observed: Observed) -> HealthReport:
    """Call in the Trio thread (it reads supervisors' live state)."""
    children: list[ChildHealth] = []
    problems: list[str] = []
    stopping = False
    entries = observed.directory.supervisors()
    if not entries:
        problems.append("no supervisor is running")
    for entry in entries:
        snap = entry.supervisor.snapshot()
        stopping = stopping or snap.closing
        for child in snap.children:
            problem = child_problem(snap.name, child)
            if problem is not None:
                problems.append(problem)
            children.append(
                ChildHealth(
                    supervisor=snap.name,
                    child=child.name,
                    state=child.state,
                    restarts=child.restarts,
                    healthy=problem is None,
                    last_error=child.last_error,
                )
            )
    gateway = None
    if observed.gateway is not None:
        gateway = gateway_check(observed.gateway(), observed.wall_clock(), observed.gateway_window)
        if not gateway.ok:
            when = "never" if gateway.age_s is None else f"{gateway.age_s:.0f} s ago"
            problems.append(
                f"gateway {gateway.gateway} last answered {when} "
                f"(window {gateway.window_s:g} s)" + (f": {gateway.error}" if gateway.error else "")
            )
    cache = observed.custody_cache
    if cache is not None and cache.watching:
        problem = cache.latest().problem
        if problem is not None:
            problems.append(problem)
    if stopping:
        problems.insert(0, "shutting down")
    status = "stopping" if stopping else ("unhealthy" if problems else "ok")
    return HealthReport(
        ok=not problems, status=status, problems=problems, children=children, gateway=gateway
    )
