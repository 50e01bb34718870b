"""OpenTelemetry is optional (issue #40, item 2): importing tether imports neither it nor
trio-asyncio; without the API every tracing call is a no-op; a ``traceparent`` is checked."""

from __future__ import annotations

import subprocess
import sys

import pytest

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
