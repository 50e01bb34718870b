"""The reference gateway and traces (issue #40, item 2): a submission begins the message's
trace (or continues the sender's ``trace``), and the task handed to a bridge carries it; a
``trace`` that is not a traceparent is refused; without a trace the task has no ``trace``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from support.gateway import RunningGateway
from support.tracing import recorded_spans as recorded_spans
from tether._plumbing import _tracing

StartGateway = Callable[..., Awaitable[RunningGateway]]
SENDER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def _poll(gateway: RunningGateway, http: httpx.AsyncClient) -> list[dict[str, Any]]:
    response = await http.get(
        f"{gateway.url}/v1/tasks", params={"wait": 0}, headers=gateway.headers()
    )
    assert response.status_code == 200, response.text
    tasks: list[dict[str, Any]] = response.json()["tasks"]
    return tasks


async def test_a_submission_continues_the_senders_trace_and_the_task_carries_it(
    start_gateway: StartGateway, http: httpx.AsyncClient, recorded_spans: InMemorySpanExporter
) -> None:
    gateway = await start_gateway()
    response = await http.post(
        f"{gateway.url}/v1/messages",
        json={"room": "r", "text": "hi", "trace": SENDER},
        headers=gateway.headers(),
    )
    assert response.status_code == 201, response.text
    (submit,) = recorded_spans.get_finished_spans()
    context = submit.get_span_context()
    assert context is not None
    assert submit.name == "tether.gateway.submit"
    assert f"{context.trace_id:032x}" == SENDER.split("-")[1]
    assert submit.parent is not None
    assert f"{submit.parent.span_id:016x}" == SENDER.split("-")[2]
    (task,) = await _poll(gateway, http)
    assert task["trace"] == f"00-{context.trace_id:032x}-{context.span_id:016x}-01"

    refused = await http.post(
        f"{gateway.url}/v1/messages",
        json={"room": "r", "text": "hi", "trace": "not-a-trace"},
        headers=gateway.headers(),
    )
    assert refused.status_code == 400
    assert "trace must be a W3C traceparent" in refused.text


async def test_without_opentelemetry_a_task_has_no_trace(
    start_gateway: StartGateway, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_tracing, "_loaded", True)
    monkeypatch.setattr(_tracing, "_api", None)
    gateway = await start_gateway()
    await gateway.submit("hi")
    (task,) = await _poll(gateway, http)
    assert "trace" not in task
