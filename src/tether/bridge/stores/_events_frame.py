"""Events in the store (issue #52), framed as ``_frame`` frames custody: check the arguments,
run the backend part's ``_name`` operation, log and journal the moves.

``send_event`` keeps the event and wakes its key's waiting runs in one transaction; a run's
``park_event`` parks it, or (an event it has not taken came meanwhile) puts it back at once.
On PostgreSQL both take one lock per key first, so neither misses the other.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Sequence
from typing import Any

import attrs

from ..._plumbing._when import iso_time
from ..custody import _log as _clog
from ..custody._events import (
    DEFAULT_EVENT_TTL_S,
    EVENT_WAIT,
    MAX_EVENT_BYTES,
    Event,
    EventConflict,
    EventSent,
    EventWaiter,
    check_event_id,
    check_event_key,
    check_ttl,
    event_body,
)
from ..custody._rules import Claim, CustodyState
from ..custody._steps import check_wake_at
from ._common import check_limit, check_reason, fence_args
from ._host import Host
from ._steps_frame import parked_or_back

log = logging.getLogger("tether.bridge.events")


@attrs.define(eq=False)
class EventsFrame(abc.ABC):
    """``EventStore``'s methods around a backend part's operations."""

    host: Host

    async def send_event(
        self, id: str, key: str, body: Any, *, ttl_s: float = DEFAULT_EVENT_TTL_S
    ) -> EventSent:
        """Keep the event (idempotent by ``id``) and wake every run waiting on ``key``; a
        replayed id with another key or body raises ``EventConflict`` and changes nothing."""
        id, key, ttl_s = check_event_id(id), check_event_key(key), check_ttl(ttl_s)
        text = event_body(body, min(self.host.max_body_bytes, MAX_EVENT_BYTES))
        now = self.host.clock()
        event = Event(id, key, text, now, now + ttl_s)
        kept, new, woken = await self._send(event, now)
        if kept is None:
            raise EventConflict(f"event {id!r} was sent before with another key or body")
        for task in woken:
            _clog.moved(task, CustodyState.WAITING, CustodyState.PENDING, reason=f"event {id}")
        if woken:
            self.host.work_bell.ring()
        if new:
            log.info(
                "event %s (key %s) kept until %s; woke %d run(s)",
                id,
                key,
                iso_time(event.until),
                len(woken),
            )
        return EventSent(kept, new, tuple(woken))

    @abc.abstractmethod
    async def _send(self, event: Event, now: float) -> tuple[Event | None, bool, list[str]]:
        """In one transaction: insert ``event`` unless its id is kept (then the kept one,
        or None if its key or body differ: nothing done), and for a new one move every run
        waiting on its key ``waiting -> pending``; (the kept event, whether it is new, the
        woken ids)."""

    async def take_event(self, key: str, taken: Sequence[str]) -> Event | None:
        """The first kept event of ``key`` (arrival order) not in ``taken``: a wait's read."""
        return await self._take(check_event_key(key), list(taken), self.host.clock())

    @abc.abstractmethod
    async def _take(self, key: str, taken: list[str], now: float) -> Event | None: ...

    async def park_event(
        self, claim: Claim, key: str, taken: Sequence[str], until: float, why: str
    ) -> CustodyState:
        """Under the fence: claimed -> waiting on ``key`` until ``until``, or claimed ->
        pending (the same attempt) if an event of ``key`` not in ``taken`` is kept by now."""
        fence_args(claim)
        key, until = check_event_key(key), check_wake_at(until)
        reason = self.host.stored_text(check_reason(f"{EVENT_WAIT}{key}: {why}"))
        state = await self._park(claim, key, list(taken), until, reason, self.host.clock())
        return parked_or_back(
            self.host, claim, state, f"{reason}; due {iso_time(until)}",
            f"an event of {key} came as it parked",
        )  # fmt: skip

    @abc.abstractmethod
    async def _park(
        self, claim: Claim, key: str, taken: list[str], until: float, why: str, now: float
    ) -> CustodyState:
        """See ``park_event``; ``StaleLease`` if fenced out."""

    async def events(self, *, key: str | None = None, limit: int = 1000) -> Sequence[Event]:
        """Kept events (of ``key``, or all) whose TTL has not ended, oldest first."""
        key = None if key is None else check_event_key(key)
        return await self._events(key, check_limit(limit), self.host.clock())

    @abc.abstractmethod
    async def _events(self, key: str | None, limit: int, now: float) -> list[Event]: ...

    async def drop_event(self, id: str) -> bool:
        """An operator drops a kept event: later waits no longer take it."""
        found = await self._drop(check_event_id(id))
        if found:
            log.info("event %s dropped by the operator", id)
        return found

    @abc.abstractmethod
    async def _drop(self, id: str) -> bool: ...

    async def event_waiters(self) -> Sequence[EventWaiter]:
        """The runs parked on an event, by key."""
        return await self._waiters()

    @abc.abstractmethod
    async def _waiters(self) -> list[EventWaiter]: ...

    async def prune_events(self, *, limit: int = 1000) -> Sequence[str]:
        """Drop kept events whose TTL ended: their ids (each logged)."""
        ids = await self._prune(self.host.clock(), check_limit(limit))
        if ids:
            log.info(
                "%d event(s) expired unread by later waits: %s",
                len(ids),
                ", ".join(ids[:10]) + (", ..." if len(ids) > 10 else ""),
            )
        return ids

    @abc.abstractmethod
    async def _prune(self, now: float, limit: int) -> list[str]: ...
