"""OpenTelemetry (issue #40, item 2): one trace per message, from the reference gateway's
submit through the bridge's ingest, queue wait, run (the agent's own spans inside it) and
delivery, in one process; and across processes: a bridge SIGKILLed mid-run and restarted
continues the same trace, and both attempts show in it."""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from support.agents import traced
from support.gateway import RunningGateway
from support.service import BRIDGE_COMMAND, STARTED, bridge_env
from support.span_file import SITE, SPANS_ENV, read_span_lines
from support.tracing import recorded_spans as recorded_spans
from support.waiting import wait_until
from tether import ChildSpec, open_runtime
from tether.bridge import BridgeConfig, BridgeService, SqliteStore


def _named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def _ids(span: ReadableSpan) -> tuple[int, int, int | None]:
    context = span.get_span_context()
    assert context is not None
    return context.trace_id, context.span_id, None if span.parent is None else span.parent.span_id


async def test_one_message_is_one_trace_from_submit_to_delivery(
    gateway: RunningGateway,
    token_file: Path,
    store: SqliteStore,
    recorded_spans: InMemorySpanExporter,
) -> None:
    config = BridgeConfig(
        gateway=gateway.url, token_file=token_file, workers=1, poll_wait=0.5, grace=1.0
    )
    service = BridgeService(config, store=store, factory=traced.factory)
    task_id = await gateway.submit("hello", room="r1")
    async with open_runtime(handle_signals=False) as runtime:
        await runtime.supervisor.start_child(
            ChildSpec("bridge", service.run, shutdown_grace=service.stop_grace)
        )

        async def delivered() -> bool:
            return bool(_named(recorded_spans.get_finished_spans(), "tether.delivery"))

        await wait_until(delivered, within=20, step=0.02)
    spans = recorded_spans.get_finished_spans()
    (submit,) = _named(spans, "tether.gateway.submit")
    trace_id, submit_id, parent = _ids(submit)
    assert parent is None  # the gateway began the message's trace
    assert submit.attributes is not None
    assert submit.attributes["tether.task.id"] == task_id
    ours = [s for s in spans if _ids(s)[0] == trace_id]
    names = sorted(s.name for s in ours)
    assert names == sorted(
        [
            "tether.gateway.submit",
            "tether.ingest",
            "tether.queue_wait",
            "tether.run",
            "agent.think",
            "tether.delivery",
            "tether.gateway.request",
        ]
    )
    by_name = {s.name: s for s in ours}
    for name in ("tether.ingest", "tether.queue_wait", "tether.run", "tether.delivery"):
        assert _ids(by_name[name])[2] == submit_id, name  # each a child of the submit
    assert _ids(by_name["agent.think"])[2] == _ids(by_name["tether.run"])[1]
    assert _ids(by_name["tether.gateway.request"])[2] == _ids(by_name["tether.delivery"])[1]
    run = by_name["tether.run"].attributes
    assert run is not None
    assert (run["tether.task.id"], run["tether.room"], run["tether.attempt"]) == (task_id, "r1", 1)
    assert run["tether.outcome"] == "completed"
    assert str(run["tether.worker"]).endswith("w1")
    for name, outcome in (("tether.ingest", "ingested"), ("tether.delivery", "delivered")):
        attributes = by_name[name].attributes
        assert attributes is not None
        assert attributes["tether.outcome"] == outcome


async def _start_bridge(
    gateway: RunningGateway, token_file: Path, folder: Path, spans: Path, hold: Path
) -> trio.Process:
    env = bridge_env()
    env["PYTHONPATH"] = os.pathsep.join([str(SITE), env["PYTHONPATH"]])
    env[SPANS_ENV] = str(spans)
    env["TETHER_TEST_HOLD"] = str(hold)
    args = [
        *BRIDGE_COMMAND,
        "--gateway", gateway.url,
        "--token-file", str(token_file),
        "--store", str(folder / "custody.db"),
        "--agent", "support.agents.traced:factory",
        "--workers", "1",
        "--poll-wait", "0.5",
        "--reconcile-interval", "0.2",
        "--lease-s", "2",
        "--grace", "1",
        "--log-level", "WARNING",
    ]  # fmt: skip
    with open(folder / "bridge.log", "ab") as sink:  # noqa: ASYNC230 - a file handle for the child
        process = await trio.lowlevel.open_process(args, stderr=sink, env=env)
    STARTED.append(process)
    return process


@pytest.mark.slow
async def test_a_bridge_killed_mid_run_and_restarted_continues_the_messages_trace(
    gateway: RunningGateway,
    token_file: Path,
    tmp_path: Path,
    recorded_spans: InMemorySpanExporter,
) -> None:
    spans, hold = tmp_path / "spans.jsonl", tmp_path / "hold"
    hold.touch()
    task_id = await gateway.submit("survive", room="r2")
    first = await _start_bridge(gateway, token_file, tmp_path, spans, hold)

    async def started() -> bool:
        return await trio.Path(str(hold) + ".started").exists()

    await wait_until(started, within=30, step=0.02)
    first.send_signal(signal.SIGKILL)
    assert await first.wait() == -signal.SIGKILL
    hold.unlink()
    second = await _start_bridge(gateway, token_file, tmp_path, spans, hold)

    async def delivered() -> bool:
        return any(s.name == "tether.delivery" for s in read_span_lines(spans))

    await wait_until(delivered, within=30, step=0.05)
    second.send_signal(signal.SIGTERM)
    with trio.fail_after(30):
        assert await second.wait() == 0, (tmp_path / "bridge.log").read_text()[-3000:]
    assert (await gateway.message(task_id))["reply"] == "traced: survive"

    (submit,) = _named(recorded_spans.get_finished_spans(), "tether.gateway.submit")
    trace_id, submit_id, _ = _ids(submit)
    lines = read_span_lines(spans)
    assert {
        line.trace_id for line in lines if line.attributes.get("tether.task.id") == task_id
    } == {f"{trace_id:032x}"}
    waits = [line for line in lines if line.name == "tether.queue_wait"]
    assert sorted((w.attributes["tether.attempt"], w.pid) for w in waits) == [
        (1, first.pid),
        (2, second.pid),
    ]
    (run,) = [line for line in lines if line.name == "tether.run"]  # attempt 1 never ended
    assert (run.attributes["tether.attempt"], run.attributes["tether.outcome"]) == (2, "completed")
    assert run.pid == second.pid
    for line in lines:
        if line.name in {"tether.ingest", "tether.queue_wait", "tether.run", "tether.delivery"}:
            assert line.parent_id == f"{submit_id:016x}", line
