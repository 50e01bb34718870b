"""The records a session keeps per handler, per run and per ``call``, and small validators."""

from __future__ import annotations

import inspect
import math
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import trio

from ._session_types import Policy

FINISHED = 0
FAILED = 1
CANCELLED = 2
DROPPED = 3  # accepted but cancelled before it began: it never started


@attrs.define(eq=False, slots=True)
class Handler:
    """One registration: the function, its policy and the runs it has in flight."""

    event: str
    fn: Callable[[Any], Any]
    policy: Policy
    max_queue: int
    task_name: str
    is_async: bool
    # runs handed to a worker and not yet settled (identity set: two runs are two entries)
    runs: set[HandlerRun] = attrs.field(factory=set)
    # serial backlog, or the one pending replacement of a ``replace`` handler
    queue: deque[HandlerRun] = attrs.field(factory=deque)


@attrs.define(eq=False, slots=True)
class CallWaiter:
    """Collects the outcomes of one ``call``; results keep registration order."""

    results: list[Any]
    errors: list[Exception | None]
    remaining: int
    done: trio.Event = attrs.field(factory=trio.Event)

    def settle(self, index: int, result: Any, error: Exception | None) -> None:
        self.results[index] = result
        self.errors[index] = error
        self.remaining -= 1
        if self.remaining == 0:
            self.done.set()


@attrs.define(eq=False, slots=True)
class HandlerRun:
    """One handler call for one event. ``scope`` is set only while a worker executes it."""

    handler: Handler
    payload: Any
    waiter: CallWaiter | None = None
    index: int = 0
    scope: trio.CancelScope | None = None
    cancel_requested: bool = False


def summarise(names: Iterable[str], limit: int = 10) -> str:
    ordered = sorted(names)
    text = ", ".join(ordered[:limit]) or "-"
    return text + (f" and {len(ordered) - limit} more" if len(ordered) > limit else "")


def check_grace(grace: float) -> float:
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not grace >= 0:
        raise ValueError(f"grace must be a number of seconds >= 0, got {grace!r}")
    if math.isnan(grace):  # pragma: no cover - caught by the >= test above
        raise ValueError("grace must not be NaN")
    return float(grace)


def is_async(fn: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - an object with an async __call__
    return call is not None and inspect.iscoroutinefunction(call)
