"""open_runtime(): the registry, the background scope, the root supervisor and signals."""

from __future__ import annotations

import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, nullcontext
from typing import Any

import attrs
import trio

from ._core._background import BackgroundScope
from ._core._context import DIRECTORY, RUNTIME
from ._core._directory import Directory
from ._core._registry import TaskRegistry
from ._core._util import open_nursery_unwrapped
from ._signals import ShutdownSignals, signals_usable
from ._supervisor import RestartPolicy, Supervisor, supervising
from ._tree_dump import TREE_DUMP_SIGNAL, tree_dump_on_signal

log = logging.getLogger("tether.runtime")

ROOT_SUPERVISOR = "runtime"


@attrs.define(eq=False)
class Runtime:
    """A running tether runtime. Get one from ``open_runtime()``.

    ``supervisor`` is the root supervisor (name ``"runtime"``): long-running services go there
    as children; ``spawn`` is for short background work.
    """

    registry: TaskRegistry
    background: BackgroundScope
    grace: float
    supervisor: Supervisor = attrs.field(factory=lambda: Supervisor(name=ROOT_SUPERVISOR))
    _signals: ShutdownSignals | None = attrs.field(default=None, repr=False)
    directory: Directory = attrs.field(factory=Directory, repr=False)
    """The supervisors and sessions open in this runtime (for observers)."""

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

    @property
    def handles_signals(self) -> bool:
        """Whether SIGINT/SIGTERM are turned into a shutdown by this runtime."""
        return self._signals is not None

    def request_shutdown(self, signum: int | None = None) -> None:
        """Behave as if a shutdown signal arrived (first call graceful, second immediate)."""
        if self._signals is None:
            raise RuntimeError("this runtime does not handle signals (handle_signals=False)")
        self._signals.deliver(signum if signum is not None else signal.SIGTERM)


def _signals_wanted(handle_signals: bool | None) -> bool:
    """``open_runtime``'s ``handle_signals``: by default on in the main thread (the only one
    Python lets install signal handlers); asked for elsewhere, a ``RuntimeError``."""
    if handle_signals is None:
        return signals_usable()
    if handle_signals and not signals_usable():
        raise RuntimeError(
            "open_runtime(handle_signals=True) must run in the main thread: Python only lets "
            "the main thread install signal handlers"
        )
    return handle_signals


@asynccontextmanager
async def open_runtime(
    *,
    grace: float = 5.0,
    registry: TaskRegistry | None = None,
    handle_signals: bool | None = None,
    policy: RestartPolicy | None = None,
    tree_dump_signal: int | None = TREE_DUMP_SIGNAL,
) -> AsyncIterator[Runtime]:
    """Open a runtime: task registry, background scope, root supervisor, signal handling.

    Leaving the block stops the root supervisor's children (soft stop, each child's
    ``shutdown_grace``, then cancel; reverse start order), then drains the background scope:
    no new spawns, up to ``grace`` seconds for running tasks to finish, then they are cancelled.
    ``grace`` bounds the background tasks only: a child that ignores its soft stop keeps its
    own ``shutdown_grace`` (``ChildSpec``, 5 s by default), so leaving
    ``open_runtime(grace=1.0)`` may take those 5 s and then 1 s more. Give such children a
    shorter ``shutdown_grace`` (a service's graceful stop may rightly need longer than
    ``grace``, so the runtime does not cut it short).

    Signals (``handle_signals``; default: on when called from the main thread, the only one
    Python lets install signal handlers; ``True`` elsewhere raises ``RuntimeError``): the first
    SIGINT or SIGTERM cancels the block's body and runs the graceful exit above, after which
    ``open_runtime`` returns normally (a service's process exits 0). A second signal cancels
    everything at once, and ``open_runtime`` then raises ``KeyboardInterrupt``. While the
    runtime is open, Trio's own Ctrl-C handling is replaced by this; it is restored after.

    ``tree_dump_signal`` (default SIGUSR1; None turns it off): while signals are handled,
    this signal logs the live task tree with each task's await stack (``_tree_dump``).

    ``policy`` configures the root supervisor (default ``RestartPolicy()``).
    """
    handle_signals = _signals_wanted(handle_signals)
    registry = registry if registry is not None else TaskRegistry()
    supervisor = Supervisor(name=ROOT_SUPERVISOR, policy=policy or RestartPolicy())
    trio.lowlevel.add_instrument(registry)
    registry.adopt_running()
    try:
        with trio.CancelScope() as immediate:
            graceful = trio.CancelScope()
            signals = (
                ShutdownSignals(graceful, immediate, abort=supervisor.abort)
                if handle_signals
                else None
            )
            dumps = (
                tree_dump_on_signal(registry, tree_dump_signal)
                if handle_signals and tree_dump_signal is not None
                else nullcontext()
            )
            with signals.installed() if signals is not None else nullcontext(), dumps:
                async with open_nursery_unwrapped() as bg_nursery:
                    runtime = Runtime(
                        registry=registry,
                        background=BackgroundScope(bg_nursery),
                        grace=grace,
                        supervisor=supervisor,
                        signals=signals,
                    )
                    token = RUNTIME.set(runtime)
                    dir_token = DIRECTORY.set(runtime.directory)
                    try:
                        async with supervising(supervisor):
                            with graceful:
                                yield runtime
                    finally:
                        DIRECTORY.reset(dir_token)
                        RUNTIME.reset(token)
                        await runtime.background.drain(grace)
        if immediate.cancelled_caught:
            raise KeyboardInterrupt("second shutdown signal: the runtime was cancelled")
    finally:
        try:
            trio.lowlevel.remove_instrument(registry)
        except KeyError:
            pass
