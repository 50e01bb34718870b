"""OpenTelemetry in tests: one SDK tracer provider per test process (the API takes only one),
whose spans go to the in-memory exporter of the test that asked (``recorded_spans``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class _Switch(SpanProcessor):
    """Sends spans to the exporter of the test running now, if it asked for them."""

    def __init__(self) -> None:
        self.exporter: InMemorySpanExporter | None = None

    def on_end(self, span: ReadableSpan) -> None:
        exporter = self.exporter
        if exporter is not None:
            exporter.export([span])


_SWITCH = _Switch()
_installed = False


def install_provider() -> None:
    """The test process's provider, installed once (the API refuses a second)."""
    global _installed
    if not _installed:
        _installed = True
        provider = TracerProvider()
        provider.add_span_processor(_SWITCH)
        trace.set_tracer_provider(provider)


@pytest.fixture
def recorded_spans() -> Iterator[InMemorySpanExporter]:
    """The spans this test's process makes, in memory, until the test ends."""
    install_provider()
    exporter = InMemorySpanExporter()
    _SWITCH.exporter = exporter
    try:
        yield exporter
    finally:
        _SWITCH.exporter = None
