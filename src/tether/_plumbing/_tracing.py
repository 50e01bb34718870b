"""OpenTelemetry spans, if the ``otel`` extra is installed: tether uses only the API and its
global tracer provider (an application configures the SDK); without the API every call here
is a no-op that imports nothing.

A task's trace travels as a W3C ``traceparent`` string (the gateway protocol's ``trace``, kept
in the task's headers), so one message is one trace across processes and restarts.
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

TRACEPARENT_HEADER: Final = "traceparent"
"""The task header holding the task's trace (the gateway's, or the one its ingest began)."""

_TRACEPARENT: Final = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")

Attributes = Mapping[str, str | int | float | bool]

_api: Any = None
_loaded = False
_PROVIDER_ENV: Final = "OTEL_PYTHON_TRACER_PROVIDER"
_ABSENT: Final = object()


def is_traceparent(value: object) -> bool:
    """Whether ``value`` is a W3C ``traceparent`` of version 00 with non-zero ids."""
    if not isinstance(value, str):
        return False
    match = _TRACEPARENT.fullmatch(value)
    return match is not None and set(match[1]) != {"0"} and set(match[2]) != {"0"}


def _trace() -> Any:
    """``opentelemetry.trace``, or None if it is not installed (looked up once a process)."""
    global _api, _loaded
    if not _loaded:
        _loaded = True
        try:
            from opentelemetry import trace
        except ImportError:
            return None
        _api = trace
    return _api


_tracer_of: tuple[Any, Any] = (None, None)
"""The provider the cached tracer came from, and that tracer."""


def _tracer() -> Any:
    """tether's tracer, or None if nothing would record: the API is absent, or no SDK set a
    tracer provider yet (the API's proxy hands out spans that record nothing: skip them)."""
    global _tracer_of
    trace = _trace()
    if trace is None:
        return None
    # with no provider set, the API's get_tracer_provider looks the variable up in os.environ
    # on every call (~1% of a bridge's CPU, issue #49): read it once a process instead
    if getattr(trace, "_TRACER_PROVIDER", _ABSENT) is None and not _environment_names_provider():
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        return None
    if _tracer_of[0] is not provider:
        _tracer_of = (provider, provider.get_tracer("tether"))
    return _tracer_of[1]


@functools.cache
def _environment_names_provider() -> bool:
    """Whether the environment names a tracer provider for the API to load (read once a
    process: it is set when the process starts, as the SDK's own settings are)."""
    return _PROVIDER_ENV in os.environ


def enabled() -> bool:
    """Whether spans would be recorded: the API is installed and a provider is set."""
    return _tracer() is not None


def _parent(traceparent: str | None) -> Any:
    """The OpenTelemetry context whose parent is ``traceparent`` (None: the current one)."""
    if traceparent is None or not is_traceparent(traceparent):
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({TRACEPARENT_HEADER: traceparent})


@contextmanager
def span(
    name: str,
    *,
    traceparent: str | None = None,
    attributes: Attributes | None = None,
    start: float | None = None,
) -> Iterator[Any]:
    """A span around the block, the current span inside it (an agent's own spans nest under
    it): a child of ``traceparent`` if given, else of the current span. ``start``: when it
    began (``time.time()`` seconds), if earlier than now. Yields the span (None without the
    API); an exception leaving the block is recorded on it."""
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    with tracer.start_as_current_span(
        name,
        context=_parent(traceparent),
        attributes=dict(attributes or {}),
        start_time=None if start is None else int(start * 1e9),
    ) as current:
        yield current


def start_span(
    name: str,
    *,
    traceparent: str | None,
    attributes: Attributes | None = None,
    start: float | None = None,
) -> Any:
    """A span begun now (or at ``start``, ``time.time()`` seconds), not made current: for work
    done in batches, one span per task. End it with ``end_span``. None without the API."""
    tracer = _tracer()
    if tracer is None:
        return None
    return tracer.start_span(
        name,
        context=_parent(traceparent),
        attributes=dict(attributes or {}),
        start_time=None if start is None else int(start * 1e9),
    )


def end_span(begun: Any, attributes: Attributes | None = None, *, end: float | None = None) -> None:
    """End a span ``start_span`` began (nothing for None), with ``attributes`` added."""
    if begun is None:
        return
    if attributes:
        begun.set_attributes(dict(attributes))
    begun.end(end_time=None if end is None else int(end * 1e9))


def finished_span(
    name: str,
    *,
    traceparent: str | None,
    start: float,
    end: float | None = None,
    attributes: Attributes | None = None,
) -> None:
    """Record a span of something already over (``time.time()`` seconds): a task's queue wait,
    measured when it ends."""
    if _tracer() is None:
        return
    begun = start_span(name, traceparent=traceparent, attributes=attributes, start=start)
    end_span(begun, end=time.time() if end is None else end)


def set_attributes(current: Any, attributes: Attributes) -> None:
    """Add ``attributes`` to a span ``span()`` yielded (nothing for None)."""
    if current is not None:
        current.set_attributes(dict(attributes))


def traceparent_of(current: Any) -> str | None:
    """The ``traceparent`` of a span ``span()`` yielded, if it has a valid context (a span of
    a provider that records nothing has none)."""
    if current is None:
        return None
    context = current.get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def recording() -> bool:
    """Whether a recording span is current (a request made now would nest in a trace)."""
    trace = _trace()
    return trace is not None and trace.get_current_span().is_recording()
