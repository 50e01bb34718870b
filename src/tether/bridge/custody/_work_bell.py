"""What this process's own store calls ring when they make pending work outside the pool's
own paths: an ingest that stored a new task (issue #47, item 12), a permit given back that
woke the run parked for it (item 3). The pools running in this process on the same store
object listen, so a program that embeds a pool and ingests by itself rings no doorbell of the
pool's by hand, and no task waits out a sweep or an idle poll. A hint only: the pool's polls
stay the source of truth (other processes' work reaches it by the store's news or NOTIFY).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import attrs


@attrs.define(eq=False)
class WorkBell:
    """A store's listeners for "this process made pending work"; rung in the Trio thread."""

    _listeners: list[Callable[[], None]] = attrs.field(init=False, factory=list)

    def ring(self) -> None:
        for listener in tuple(self._listeners):
            listener()

    @contextmanager
    def listening(self, listener: Callable[[], None]) -> Iterator[None]:
        """``listener()`` each time the bell rings, while the block runs."""
        self._listeners.append(listener)
        try:
            yield
        finally:
            self._listeners.remove(listener)
