"""Conversations, as a run sees them (issue #34): ``conversation_of(task)`` beside
``progress_of(task)``.

The worker has the room's conversation (the turns before the task's message, the room's
state and its version: bounded reads) before it calls the handler, read in the claim's own
transaction (``claim_many(history=n)``), so a sync handler in a thread reads it as an async
one does; a run that runs again after a state conflict reads the current state anew. The
handler returns ``Reply(body, state=...)`` to store a new state with its reply (``_agent``);
the worker stores both in one transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..custody._conversation import Conversation
from ..custody._rules import Task

_CONVERSING: dict[int, tuple[Task, Conversation]] = {}
"""The conversation of each task object a worker is running now, by the object's identity
(as ``_progress._RUNNING``: two attempts of one task are two objects)."""

_NONE = Conversation()


def conversation_of(task: Task) -> Conversation:
    """The conversation of the run ``task`` is in: ``.history`` (the turns before its message,
    oldest first, at most the worker's ``history_turns``), ``.state`` (a dict the run may
    change and return as ``Reply(body, state=...)``) and ``.version``. Outside a run, or for a
    task without a room: an empty conversation."""
    entry = _CONVERSING.get(id(task))
    if entry is not None and entry[0] is task:
        return entry[1]
    return _NONE


@contextmanager
def conversing(task: Task, conversation: Conversation) -> Iterator[Conversation]:
    """Make ``conversation`` what ``conversation_of(task)`` returns while the block runs."""
    key = id(task)
    _CONVERSING[key] = (task, conversation)
    try:
        yield conversation
    finally:
        if _CONVERSING.get(key, (None, None))[1] is conversation:
            del _CONVERSING[key]
