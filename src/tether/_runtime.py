"""open_runtime(): the registry, the background scope and (later) the root supervisor."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from ._background import BackgroundScope
from ._registry import TaskRegistry
from ._util import open_nursery_unwrapped

log = logging.getLogger("tether.runtime")

_CURRENT: contextvars.ContextVar[Runtime | None] = contextvars.ContextVar(
    "tether_runtime", default=None
)


@attrs.define(eq=False)
class Runtime:
    """A running tether runtime. Get one from ``open_runtime()``."""

    registry: TaskRegistry
    background: BackgroundScope
    grace: float

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any, name: str | None = None) -> None:
        """Run ``fn(*args)`` as a background task owned by the runtime.

        The task is never lost (the runtime's nursery holds it even when the caller keeps no
        reference), an uncaught exception is logged at WARNING and counted, and on exit the
        runtime waits ``grace`` seconds for it, then cancels it.
        """
        self.background.spawn(fn, *args, name=name)

    def active_count(self) -> int:
        """Background tasks still running."""
        return self.background.active_count()

    @property
    def failed_count(self) -> int:
        """Background tasks that ended with an uncaught exception."""
        return self.background.failures


def current_runtime() -> Runtime | None:
    """The runtime whose block the caller runs in, if any (sessions use its registry)."""
    return _CURRENT.get()


@asynccontextmanager
async def open_runtime(
    *, grace: float = 5.0, registry: TaskRegistry | None = None
) -> AsyncIterator[Runtime]:
    """Open a runtime: install the task registry and own a background scope.

    Leaving the block drains the background scope: no new spawns, up to ``grace`` seconds for
    running tasks to finish, then they are cancelled.
    """
    registry = registry if registry is not None else TaskRegistry()
    trio.lowlevel.add_instrument(registry)
    registry.adopt_running()
    try:
        async with open_nursery_unwrapped() as bg_nursery:
            runtime = Runtime(
                registry=registry, background=BackgroundScope(bg_nursery), grace=grace
            )
            token = _CURRENT.set(runtime)
            try:
                yield runtime
            finally:
                _CURRENT.reset(token)
                await runtime.background.drain(grace)
    finally:
        try:
            trio.lowlevel.remove_instrument(registry)
        except KeyError:
            pass
