"""A JSON-lines span exporter for bridge processes under test: ``otel_site/sitecustomize.py``
installs it in a child when ``TETHER_TEST_SPANS`` names the file; the test reads the file."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

SPANS_ENV = "TETHER_TEST_SPANS"
SITE = Path(__file__).resolve().parent / "otel_site"


@attrs.frozen
class SpanLine:
    """A finished span as the file exporter writes it (one JSON object a line)."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    attributes: dict[str, Any]
    pid: int


def span_line(span: ReadableSpan, pid: int) -> SpanLine:
    context = span.get_span_context()
    assert context is not None
    return SpanLine(
        name=span.name,
        trace_id=f"{context.trace_id:032x}",
        span_id=f"{context.span_id:016x}",
        parent_id=None if span.parent is None else f"{span.parent.span_id:016x}",
        attributes=dict(span.attributes or {}),
        pid=pid,
    )


class FileSpanExporter(SpanExporter):
    """Appends each span to a file as a JSON line, flushed at once (a SIGKILL loses none)."""

    def __init__(self, path: Path, pid: int) -> None:
        self._path, self._pid = path, pid
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(attrs.asdict(span_line(s, self._pid))) + "\n" for s in spans)
        with self._lock, open(self._path, "a", encoding="utf-8") as sink:
            sink.write(lines)
        return SpanExportResult.SUCCESS


def read_span_lines(path: Path) -> list[SpanLine]:
    if not path.exists():
        return []
    return [SpanLine(**json.loads(line)) for line in path.read_text().splitlines() if line]


def install_file_exporter(path: Path, pid: int) -> None:
    """A child process's provider: every span to ``path`` as it ends."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path, pid)))
    trace.set_tracer_provider(provider)
