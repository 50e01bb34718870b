"""A task's spans (OpenTelemetry, if installed): ingest, queue wait, each attempt's run, each
step and wait inside it, delivery, and the gateway requests made for it; all in the task's one
trace, whose ``traceparent`` the task carries in its headers from ingest on.

Every span has the attributes ``tether.task.id`` and ``tether.room``; the worker's spans
``tether.worker`` and ``tether.attempt`` too; a span's end says ``tether.outcome``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import attrs

from ..._plumbing._tracing import (
    TRACEPARENT_HEADER,
    Attributes,
    end_span,
    finished_span,
    is_traceparent,
    span,
    start_span,
    traceparent_of,
)
from ..._plumbing._when import iso_time
from ..custody._rules import Claim, Task

INGESTED_AT: Final = "ingested_at"
"""The task header saying when a traced task was taken in (``time.time()``): its queue wait
begins there, whichever process claims it."""


def task_trace(task: Task) -> str | None:
    """The task's ``traceparent``, if it is traced."""
    value = task.headers.get(TRACEPARENT_HEADER)
    return value if is_traceparent(value) else None


def task_attributes(task: Task) -> dict[str, str | int]:
    return {"tether.task.id": task.id, "tether.room": task.room or ""}


def claim_attributes(claim: Claim) -> dict[str, str | int]:
    return {
        **task_attributes(claim.task),
        "tether.worker": claim.worker,
        "tether.attempt": claim.attempt,
    }


@attrs.define(eq=False)
class TaskTrace:
    """The ingest span of one polled task, and the headers that carry its trace on."""

    begun: Any
    headers: dict[str, str]

    @classmethod
    def begin(cls, id: str, room: str, delivery: int, trace: str | None) -> TaskTrace:
        """Begin the ingest span: a child of the gateway's ``trace``, or the root of the
        task's trace if the gateway sent none (or one that is not a traceparent)."""
        given = trace if is_traceparent(trace) else None
        now = time.time()
        begun = start_span(
            "tether.ingest",
            traceparent=given,
            attributes={"tether.task.id": id, "tether.room": room, "tether.delivery": delivery},
        )
        carried = given or traceparent_of(begun)
        headers = {} if carried is None else {TRACEPARENT_HEADER: carried, INGESTED_AT: repr(now)}
        return cls(begun, headers)

    def end(self, outcome: str) -> None:
        end_span(self.begun, {"tether.outcome": outcome})


def queue_waited(claim: Claim) -> None:
    """The queue wait of a claimed task, from its ingest to this claim (for a later attempt
    too: the wait includes the earlier attempts)."""
    trace = task_trace(claim.task)
    try:
        since = float(claim.task.headers[INGESTED_AT])
    except (KeyError, ValueError):
        return
    if trace is not None:
        finished_span(
            "tether.queue_wait", traceparent=trace, start=since, attributes=claim_attributes(claim)
        )


@contextmanager
def run_span(claim: Claim) -> Iterator[Any]:
    """One attempt's span; the agent's handler runs with it current (``_current.entered``), so
    its own spans, and the step and wait spans, nest under it. A process killed mid-run never
    ends it (OpenTelemetry exports a span when it ends): the attempt's queue wait span, ended
    at the claim, shows the attempt."""
    task = claim.task
    attributes = claim_attributes(claim)
    with span("tether.run", traceparent=task_trace(task), attributes=attributes) as current:
        yield current


@contextmanager
def step_span(task: Task, name: str) -> Iterator[Any]:
    """A step of the current run (``run.step``), nested under its run span (current: the
    step's own outside calls nest under it). The caller says ``tether.outcome``: recorded,
    replayed or not recorded (a detached run)."""
    attributes = {**task_attributes(task), "tether.step": name}
    with span("tether.step", attributes=attributes) as current:
        yield current


@attrs.define(eq=False)
class WaitTrace:
    """The span of one wait of a run (``run.sleep``, a permit, ``run.ask``): begun when the
    wait begins, ended with how it ended (returned, parked, or the exception it raised) and
    its due time (``tether.wait.until``) once known. Nothing nests in a wait: not current."""

    begun: Any
    outcome: str | None = None
    due: float | None = None

    def until(self, epoch: float) -> None:
        """The wait is due at ``epoch`` (the store's clock)."""
        self.due = epoch

    def end(self, outcome: str) -> None:
        if self.outcome is not None:
            return
        self.outcome = outcome
        ended: dict[str, str] = {"tether.outcome": outcome}
        if self.due is not None:
            ended["tether.wait.until"] = iso_time(self.due)
        end_span(self.begun, ended)


@contextmanager
def wait_span(task: Task, kind: str, attributes: Attributes | None = None) -> Iterator[WaitTrace]:
    """A wait of the current run, kind ``kind``, nested under its run span: ended returned
    when the block ends, with the exception's name if one leaves it, unless the block ended it
    first (``WaitTrace.end``: parked)."""
    begun = start_span(
        "tether.wait",
        traceparent=None,
        attributes={**task_attributes(task), "tether.wait": kind, **(attributes or {})},
    )
    traced = WaitTrace(begun)
    try:
        yield traced
    except BaseException as exc:
        traced.end(f"raised {type(exc).__name__}")
        raise
    traced.end("returned")
