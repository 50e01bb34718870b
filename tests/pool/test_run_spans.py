"""Step and wait spans (issue #47, item 1): inside an attempt's ``tether.run`` span, each
``run.step`` is a ``tether.step`` span saying whether it ran and was recorded or was replayed,
and each wait (``run.sleep``, a permit of a limit, ``run.ask``) is a ``tether.wait`` span
saying its kind, its due time when one is known and how it ended (returned or parked)."""

from __future__ import annotations

from collections.abc import Sequence

import trio
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from support.agents.handler import agent
from support.pool_fixtures import StoreAwareClock
from support.tracing import recorded_spans as recorded_spans
from support.waiting import state_is as _is
from support.waiting import wait_until
from tether._plumbing._when import iso_time
from tether.bridge import CustodyState, SqliteStore, Task, run_of
from tether.bridge.custody._limits import LimitSpec
from tether.bridge.pool import PoolWorker, RetryBackoff

S = CustodyState


def _named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return sorted((s for s in spans if s.name == name), key=lambda s: s.start_time or 0)


def _parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def _id(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.span_id


def _attrs(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


async def test_steps_and_waits_are_spans_inside_their_runs_span(
    timed_store: SqliteStore, mock_clock: StoreAwareClock, recorded_spans: InMemorySpanExporter
) -> None:
    """Attempt 1 records step ``a`` and fails; attempt 2 replays ``a``, records ``b``, sleeps
    1 s in place, takes two permits of a key allowing one a second (the second waits) and
    parks on a long sleep."""
    await timed_store.set_limit(LimitSpec("k", rate=1.0, burst=1))
    attempts: list[int] = []
    parked_until: list[float] = []

    async def handle(task: Task) -> str:
        run = run_of(task)
        attempts.append(1)
        await run.step("a", lambda: 1)
        if len(attempts) == 1:
            raise ConnectionError("the provider went away")
        await run.step("b", lambda: 2)
        await run.sleep(1)
        async with run.limit("k"):
            pass
        async with run.limit("k"):
            pass
        await run.sleep(600)
        return "unreachable"

    worker = PoolWorker(
        timed_store, "w1", agent(handle), poll_interval=0.2, retry_backoff=RetryBackoff(0, 0)
    )
    await timed_store.ingest(Task("t", "x"))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _is(timed_store, "t", S.WAITING), within=60)
        worker.request_stop()
    parked = await timed_store.get("t")
    assert parked is not None
    assert parked.not_before is not None
    parked_until.append(parked.not_before)
    spans = recorded_spans.get_finished_spans()
    first, second = _named(spans, "tether.run")
    steps = _named(spans, "tether.step")
    assert [(_attrs(s)["tether.step"], _attrs(s)["tether.outcome"]) for s in steps] == [
        ("a", "recorded"),
        ("a", "replayed"),
        ("b", "recorded"),
    ]
    assert [_parent_id(s) for s in steps] == [_id(first), _id(second), _id(second)]
    for step in steps:
        assert _attrs(step)["tether.task.id"] == "t"
    waits = _named(spans, "tether.wait")
    assert all(_parent_id(w) == _id(second) for w in waits)
    kinds = [(_attrs(w)["tether.wait"], _attrs(w)["tether.outcome"]) for w in waits]
    assert kinds == [("sleep", "returned"), ("permit", "returned"), ("sleep", "parked")]
    sleep, permit, park = (_attrs(w) for w in waits)
    assert permit["tether.wait.key"] == "k"
    assert park["tether.wait.until"] == iso_time(parked_until[0])
    assert isinstance(sleep["tether.wait.until"], str)
    assert isinstance(permit["tether.wait.until"], str)  # a rate's wait is known ahead


async def test_an_ask_is_a_wait_span_with_its_deadline(
    timed_store: SqliteStore, mock_clock: StoreAwareClock, recorded_spans: InMemorySpanExporter
) -> None:
    deadline: list[float] = []

    async def handle(task: Task) -> str:
        run = run_of(task)
        return await run.ask("which table?", timeout=3600)

    worker = PoolWorker(timed_store, "w1", agent(handle), poll_interval=0.2)
    await timed_store.ingest(Task("t", "book", room="r"), room_policy="serial")
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _is(timed_store, "t", S.WAITING))
        worker.request_stop()
    parked = await timed_store.get("t")
    assert parked is not None
    assert parked.not_before is not None
    deadline.append(parked.not_before)  # the ask's deadline: when the task is due again
    spans = recorded_spans.get_finished_spans()
    (run,) = _named(spans, "tether.run")
    (wait,) = _named(spans, "tether.wait")
    assert _parent_id(wait) == _id(run)
    attributes = _attrs(wait)
    assert (attributes["tether.wait"], attributes["tether.outcome"]) == ("ask", "parked")
    assert attributes["tether.wait.until"] == iso_time(deadline[0])
