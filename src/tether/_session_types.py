"""The values and errors a session hands to its users: stats, failure records, exceptions."""

from __future__ import annotations

from typing import Literal

import attrs

Policy = Literal["concurrent", "serial", "replace", "drop"]
"""How a handler takes calls that arrive while it runs (see ``Session.on``)."""
POLICIES: frozenset[str] = frozenset({"concurrent", "serial", "replace", "drop"})

OnError = Literal["log", "raise"]
ON_ERROR_CHOICES: frozenset[str] = frozenset({"log", "raise"})


class SessionError(RuntimeError):
    """Base class of the errors a session raises itself (not those of its handlers)."""


class SessionClosed(SessionError):
    """``emit``/``call``/``on`` on a session that is closing or closed."""


class QueueFull(SessionError):
    """``emit``/``call`` would overflow a ``serial`` handler's bounded queue.

    Raised before anything is dispatched, so a refused event has no side effect at all.
    """


class HandlerDropped(SessionError):
    """A ``call`` whose run never started: a ``drop`` handler was busy, a ``replace`` run was
    superseded before it began, or the session closed with the run still queued."""


class HandlerCancelled(SessionError):
    """A ``call`` whose run was cancelled (``replace`` barge-in, ``interrupt`` or close)."""


@attrs.frozen
class SessionStats:
    """Counters of one session, exact at the moment ``Session.stats()`` was called.

    ``emitted`` counts accepted events (with or without handlers), ``unhandled`` those with no
    handler. The others count handler runs: ``started == finished + failed + cancelled +
    running``; ``dropped`` runs never started; ``queued`` wait in ``serial``/``replace`` slots.
    """

    emitted: int
    unhandled: int
    started: int
    finished: int
    failed: int
    cancelled: int
    dropped: int
    running: int
    queued: int


@attrs.frozen
class HandlerFailure:
    """One handler run that ended with an exception (kept in ``Session.failures``)."""

    session: str
    event: str
    handler: str
    task_name: str
    error: BaseException
    at: float
    via_call: bool
