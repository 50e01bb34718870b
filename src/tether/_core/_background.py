"""The background scope: Trio's answer to fire-and-forget, a nursery the runtime holds open.

An uncaught exception is logged once and counted, never lost; on close the scope waits ``grace``
seconds, then cancels the rest. See docs/guide/design.md, "The background scope".
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio
import trio_util

from ._owner import start_soon_owned

log = logging.getLogger("tether.background")

BACKGROUND_OWNER = "runtime.background"


class ScopeClosed(RuntimeError):
    """Raised by ``spawn`` once the background scope has started closing."""


@attrs.define(eq=False)
class BackgroundScope:
    """Owns background tasks. Built by ``open_runtime``; use ``Runtime.spawn``."""

    _nursery: trio.Nursery
    owner: str = BACKGROUND_OWNER
    _active: trio_util.AsyncValue[int] = attrs.field(
        init=False, factory=lambda: trio_util.AsyncValue(0)
    )
    failures: int = attrs.field(init=False, default=0)
    started: int = attrs.field(init=False, default=0)
    closing: bool = attrs.field(init=False, default=False)

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any, name: str | None = None) -> None:
        """Run ``fn(*args)`` in the background; it is never lost and never fails silently."""
        if self.closing:
            raise ScopeClosed(f"cannot spawn {name or _name_of(fn)!r}: the runtime is closing")
        label = name if name is not None else _name_of(fn)
        self._active.value += 1
        self.started += 1
        start_soon_owned(self._nursery, self.owner, self._guarded, fn, args, label, name=label)

    def active_count(self) -> int:
        return int(self._active.value)

    async def _guarded(
        self, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...], label: str
    ) -> None:
        try:
            await fn(*args)
        except Exception as exc:
            self.failures += 1
            log.warning("background task %r failed: %r", label, exc, exc_info=exc)
        finally:
            self._active.value -= 1

    async def wait_idle(self) -> None:
        await self._active.wait_value(0)

    async def drain(self, grace: float) -> int:
        """Stop accepting, wait up to ``grace`` for running tasks, cancel the rest.

        Returns how many tasks were still running at the deadline (and so were cancelled).
        """
        self.closing = True
        with trio.move_on_after(grace):
            await self.wait_idle()
        left = int(self._active.value)
        if left:
            log.warning(
                "background scope: %d task(s) still running after %.3gs grace; cancelling",
                left,
                grace,
            )
        self._nursery.cancel_scope.cancel(reason=f"background scope closed after {grace}s grace")
        return left


def _name_of(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
