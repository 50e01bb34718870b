"""What an ingest of this process rings: the pools running in it on the same store object
(issue #47, item 12). A program that embeds a pool and ingests by itself then needs no
doorbell of the pool's own, and no task waits out a sweep or an idle poll. A hint only: the
pool's polls stay the source of truth (other processes' ingests reach it by the store's news).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import attrs


@attrs.define(eq=False)
class IngestBell:
    """A store's listeners for "this process stored new tasks"; rung in the Trio thread."""

    _listeners: list[Callable[[], None]] = attrs.field(init=False, factory=list)

    def ring(self) -> None:
        for listener in tuple(self._listeners):
            listener()

    @contextmanager
    def listening(self, listener: Callable[[], None]) -> Iterator[None]:
        """``listener()`` after each ingest of this process that stored a new task, while the
        block runs."""
        self._listeners.append(listener)
        try:
            yield
        finally:
            self._listeners.remove(listener)
