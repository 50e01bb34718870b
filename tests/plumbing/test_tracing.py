"""OpenTelemetry is optional (issue #40, item 2): importing tether imports neither it nor
trio-asyncio; without the API every tracing call is a no-op; a ``traceparent`` is checked."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from support.tracing import recorded_spans as recorded_spans
from tether._plumbing import _tracing
from tether._plumbing._tracing import (
    end_span,
    finished_span,
    is_traceparent,
    span,
    start_span,
    traceparent_of,
)

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_traceparent_is_version_00_with_non_zero_ids() -> None:
    assert is_traceparent(GOOD)
    for bad in (
        None,
        "",
        GOOD.upper(),
        "01" + GOOD[2:],
        "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",
        GOOD + "-extra",
    ):
        assert not is_traceparent(bad), bad


def test_importing_tether_imports_neither_opentelemetry_nor_trio_asyncio() -> None:
    """And with the package made unimportable after that, a span is a no-op."""
    code = (
        "import sys, tether, tether.bridge, tether.gateway, tether.observe\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'opentelemetry', 'trio_asyncio', 'pydantic_ai'}))\n"
        "sys.modules['opentelemetry'] = None  # as if not installed\n"
        "from tether._plumbing import _tracing\n"
        "with _tracing.span('x') as s: assert s is None\n"
        "assert not _tracing.enabled()\n"
        "print('no-op')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "no-op"]


def test_without_the_api_every_call_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_tracing, "_loaded", True)
    monkeypatch.setattr(_tracing, "_api", None)
    assert not _tracing.enabled()
    assert not _tracing.recording()
    with span("x", traceparent=GOOD, attributes={"a": 1}) as current:
        assert current is None
    begun = start_span("y", traceparent=GOOD)
    assert begun is None
    end_span(begun, {"a": 1})
    finished_span("z", traceparent=GOOD, start=0.0)
    assert traceparent_of(None) is None


class _CountingEnviron(dict[str, str]):
    """``os.environ`` stand-in that counts the lookups of one name."""

    def __init__(self, watched: str, *args: Any) -> None:
        super().__init__(*args)
        self.watched = watched
        self.looks = 0

    def __contains__(self, key: object) -> bool:
        self.looks += key == self.watched
        return super().__contains__(key)


def test_with_the_api_and_no_provider_a_check_reads_no_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The API's ``get_tracer_provider`` looks up ``OTEL_PYTHON_TRACER_PROVIDER`` on every
    call while no provider is set; a bridge asks several times a message (issue #49's
    profile: ~1% of its CPU), so the answer is read once a process."""
    from opentelemetry import trace

    assert getattr(trace, "_TRACER_PROVIDER", "absent") is None  # the API as installed
    _tracing.enabled()  # the once-a-process read happens here (or happened before)
    environ = _CountingEnviron("OTEL_PYTHON_TRACER_PROVIDER", os.environ)
    monkeypatch.setattr(os, "environ", environ)
    for _ in range(5):
        assert not _tracing.enabled()
        with span("x") as current:
            assert current is None
    assert environ.looks == 0


def test_a_provider_set_later_in_the_process_is_seen_at_once(
    recorded_spans: InMemorySpanExporter,
) -> None:
    """Reading the environment once must not cache "disabled": a provider the application sets
    after tether's first check records the very next span."""
    assert _tracing.enabled()
    with span("after") as current:
        assert current is not None
    assert [s.name for s in recorded_spans.get_finished_spans()] == ["after"]
