"""SIGINT/SIGTERM → graceful shutdown, a second one → immediate cancel.

Plain ``signal.signal`` handlers hand over with ``TrioToken.run_sync_soon``, so no task waits for
signals (main thread only). See docs/guide/design.md, "Signals and the tree dump".
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import attrs
import trio

log = logging.getLogger("tether.runtime")

SHUTDOWN_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)


def signals_usable() -> bool:
    """True when this thread may install signal handlers (only Python's main thread may)."""
    return threading.current_thread() is threading.main_thread()


@attrs.define(eq=False)
class ShutdownSignals:
    """Cancels ``graceful`` on the first shutdown signal and ``immediate`` on the second.

    ``abort`` (if given) is called on the second signal too: supervisors shield their children
    and their shutdown from enclosing cancellations, so cancelling ``immediate`` alone would
    not reach them (the runtime passes its root supervisor's ``abort``).
    """

    graceful: trio.CancelScope
    immediate: trio.CancelScope
    abort: Callable[[str], None] | None = None
    received: list[signal.Signals] = attrs.field(init=False, factory=list)

    @property
    def immediate_requested(self) -> bool:
        return len(self.received) >= 2

    def deliver(self, signum: int) -> None:
        """Act on one signal (in the Trio thread)."""
        sig = signal.Signals(signum)
        self.received.append(sig)
        if len(self.received) == 1:
            log.warning("%s received: graceful shutdown (send it again to stop at once)", sig.name)
            self.graceful.cancel(reason=f"{sig.name}: graceful shutdown")
        else:
            log.warning("%s received again: cancelling everything now", sig.name)
            reason = f"{sig.name} (second shutdown signal): immediate stop"
            self.immediate.cancel(reason=reason)
            if self.abort is not None:
                self.abort(reason)

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Handle SIGINT and SIGTERM inside the block; the previous handlers come back after."""
        token = trio.lowlevel.current_trio_token()

        def handler(signum: int, frame: FrameType | None) -> None:
            try:
                token.run_sync_soon(self.deliver, signum)
            except trio.RunFinishedError:  # the run ended between two lines of teardown
                pass

        previous: dict[signal.Signals, Any] = {}
        try:
            for sig in SHUTDOWN_SIGNALS:
                previous[sig] = signal.signal(sig, handler)
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
