"""A run's conversation, read on demand (DESIGN: "Conversations are read on demand"): the
claim reads no history, so a run that never asks pays nothing; the first ``await
conversation_of(task)`` reads it in one store query and later awaits read nothing.

A sync handler runs in the session's worker thread, where nothing can be awaited: it calls
``conversation_of(task).read()``, which blocks its thread on the same one read (through
``trio.from_thread``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, NoReturn

import attrs
import trio

from ..custody._conversation import Conversation

Loader = Callable[[], Awaitable[Conversation]]
"""Reads a run's conversation from its store (or its quarantine child's parent)."""

OLD_FORM = (
    "conversation_of(task) is read on demand now: write `talk = await conversation_of(task)` "
    "(in a sync handler: `talk = conversation_of(task).read()`), then read talk.{name}"
)


@attrs.define(eq=False)
class Talk:
    """What ``conversation_of(task)`` returns, one per call of a handler: awaited, the run's
    ``Conversation`` (``got`` once read or given), read through ``load`` at most once (None:
    nothing to read: an empty conversation); in a sync handler, ``.read()``. The old sync
    attributes raise a ``TypeError`` saying what to write instead."""

    load: Loader | None = None
    got: Conversation | None = None
    _lock: trio.Lock = attrs.field(factory=trio.Lock)

    async def get(self) -> Conversation:
        if self.got is None:
            async with self._lock:  # two tasks of one handler read once, not twice
                if self.got is None:
                    self.got = Conversation() if self.load is None else await self.load()
        return self.got

    def __await__(self) -> Generator[Any, None, Conversation]:
        return self.get().__await__()

    def read(self) -> Conversation:
        """The conversation, for a sync handler (blocks its worker thread on the read)."""
        if self.got is not None:
            return self.got
        try:
            trio.lowlevel.current_task()
        except RuntimeError:  # not in Trio's thread: a sync handler's worker thread
            return trio.from_thread.run(self.get)
        raise TypeError(
            "conversation_of(task).read() blocks: it is for a sync handler (in its worker "
            "thread); in an async handler write `talk = await conversation_of(task)`"
        )

    @property
    def history(self) -> NoReturn:
        raise TypeError(OLD_FORM.format(name="history"))

    @property
    def state(self) -> NoReturn:
        raise TypeError(OLD_FORM.format(name="state"))

    @property
    def version(self) -> NoReturn:
        raise TypeError(OLD_FORM.format(name="version"))


def as_talk(value: Talk | Conversation) -> Talk:
    """A ``Talk`` as given, or one holding the given conversation (nothing to read)."""
    return value if isinstance(value, Talk) else Talk(got=value)
