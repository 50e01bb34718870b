"""OpenTelemetry in tests: ``recorded_spans`` sets an SDK tracer provider with an in-memory
exporter for one test, then puts the API back as it was (no provider: tether records nothing
and adds no trace headers), so the tests after it see an unconfigured process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


def _unset_provider() -> None:
    """The API's global provider back to unset (it allows one ``set`` a process; the
    OpenTelemetry test suite resets it the same way)."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


@pytest.fixture
def recorded_spans() -> Iterator[InMemorySpanExporter]:
    """The spans this test's process makes, in memory, until the test ends."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _unset_provider()
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        _unset_provider()
        provider.shutdown()
