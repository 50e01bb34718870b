"""The current run: one context variable, set in the handler's own task (as DBOS's
``_context.py`` and Temporal's ``workflow.info()`` do); ``run_of``, ``conversation_of`` and
``progress_of`` read it.

A session runs its handlers in its own nursery, in the context its opener had, not the
caller's; so a run is handed to its handler as the payload of the call (a ``Current``), and
``entering`` (installed with ``Session.wrap_handlers``) makes it current in the handler's task
before calling the agent's function with the task. A thread of a sync handler, and every task
the handler starts, inherit it.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

import attrs

from ..._session_runs import is_async
from ..custody._conversation import Conversation
from ..custody._rules import Task
from ._progress import Progress
from ._run import Run
from ._talk import Talk, as_talk


@attrs.define(eq=False)
class Current:
    """What a handler's run reads of itself: its ``Run``, its room's conversation (read on
    demand; a ``Conversation`` given here is the one it reads), its progress reporter, and the
    span it runs in (None: not traced). ``live`` until the call ends: a task the handler
    started in a longer-lived nursery inherits the variable, and must then find no run."""

    run: Run
    talk: Talk = attrs.field(converter=as_talk)
    progress: Progress
    span: Any = None
    live: bool = True

    @property
    def task(self) -> Task:
        return self.run.task


_CURRENT: Final[contextvars.ContextVar[Current | None]] = contextvars.ContextVar(
    "tether_run", default=None
)


def _current_of(task: Task) -> Current | None:
    """The current run if it is ``task``'s (the same task object: two attempts of one task
    are two objects, and a handler may hold tasks that are not its own)."""
    current = _CURRENT.get()
    if current is None or not current.live or current.run.task is not task:
        return None
    return current


def run_of(task: Task) -> Run:
    """The durable run ``task`` is in (a detached one outside a worker's run)."""
    current = _current_of(task)
    return Run(task) if current is None else current.run


def conversation_of(task: Task) -> Talk:
    """The conversation of the run ``task`` is in, read on demand: ``talk = await
    conversation_of(task)`` (a sync handler: ``conversation_of(task).read()``) gives
    ``.history`` (the turns before its message, oldest first, at most the worker's
    ``history_turns``), ``.state`` (a dict the run may change and return as ``Reply(body,
    state=...)``) and ``.version``. The first await of a run reads it in one store query; a
    run that never asks reads nothing. Outside a run, or for a task without a room: an empty
    conversation."""
    current = _current_of(task)
    return Talk(got=Conversation()) if current is None else current.talk


def progress_of(task: Task) -> Progress:
    """The progress reporter of the run ``task`` is in (a detached one outside a run)."""
    current = _current_of(task)
    return Progress() if current is None else current.progress


@contextmanager
def entered(current: Current) -> Iterator[Current]:
    """Make ``current`` the current run while the block runs (its span current too)."""
    token = _CURRENT.set(current)
    try:
        if current.span is None:
            yield current
        else:
            from opentelemetry import trace

            with trace.use_span(current.span, end_on_exit=False):
                yield current
    finally:
        _CURRENT.reset(token)


@contextmanager
def detached_run(
    task: Task, *, conversation: Conversation | None = None, progress: Progress | None = None
) -> Iterator[Current]:
    """Make a detached run of ``task`` current while the block runs, with ``conversation``
    (what ``await conversation_of(task)`` gives) and ``progress`` (``progress_of``): what an
    agent's unit test uses to call its handler by hand and look at what it reported."""
    current = Current(Run(task), conversation or Conversation(), progress or Progress())
    with entered(current):
        yield current


def entering(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn``, a task handler, called with a ``Current``'s task while that run is current:
    the wrapper ``Session.wrap_handlers`` installs on a run host's session."""
    if is_async(fn):

        async def run_async(current: Current) -> Any:
            with entered(current):
                return await fn(current.task)

        return functools.update_wrapper(run_async, fn)

    def run_plain(current: Current) -> Any:  # in the session's worker thread
        with entered(current):
            return fn(current.task)

    return functools.update_wrapper(run_plain, fn)
