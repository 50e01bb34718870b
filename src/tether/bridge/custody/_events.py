"""The rules of events (issue #52): ``await run.wait_for(key)`` parks a run until an event
with that key arrives (``POST /v1/events``, ``tether store send-event``).

An event is stored durably before its sender hears it was, idempotent by its id (a replay with
another key or body is refused), and kept until its TTL ends, so one that comes before its
wait is there when the wait comes. A key's events are a stream every run reads on its own: a
run's waits on a key take the key's kept events in arrival order, each once per run; one event
wakes every run waiting on its key. The store wakes the waiters in the transaction that keeps
the event.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

import attrs

from ..._protocol._bounds import InvalidTask, check_task_id

EVENT_WAIT: Final = "awaiting event "
"""The reason of a run parked on an event begins so (then the key): the store's wake reads it."""
WAIT_PREFIX: Final = "~wait:"
"""A run's n-th ``wait_for`` records ``~wait:n`` (the event it took) and ``~wait:n:until``."""
DEFAULT_EVENT_TTL_S: Final = 7 * 86400.0
"""Seconds an event is kept for the waits that come after it (``--event-ttl``)."""
MAX_EVENT_BYTES: Final = 256 * 1024
"""The largest event body (its JSON text, UTF-8)."""


class InvalidEvent(InvalidTask):
    """An event broke a rule (key, id, body); nothing was stored."""


class EventConflict(InvalidEvent):
    """An event id already stored with another key or body."""


class WaitTimeout(Exception):
    """No event with the wait's key came before its timeout (a later run that reaches the
    wait past its deadline raises it again, unless the event came by then)."""


def check_event_key(value: object) -> str:
    """An event key follows the task id rule (``payment.42``, ``ci~pr-17``)."""
    try:
        return check_task_id(value)
    except InvalidTask as exc:
        raise InvalidEvent(f"event key {value!r:.80}: {exc}".replace("task id", "an id")) from None


def check_event_id(value: object) -> str:
    try:
        return check_task_id(value)
    except InvalidTask as exc:
        raise InvalidEvent(f"event id {value!r:.80}: {exc}".replace("task id", "an id")) from None


def event_body(value: Any, limit: int = MAX_EVENT_BYTES) -> str:
    """The JSON text of an event's body (any JSON value), within ``limit`` bytes."""
    try:  # keys sorted: a replay that orders an object's keys otherwise is the same event
        text = json.dumps(
            value, ensure_ascii=False, allow_nan=False, separators=(",", ":"), sort_keys=True
        )
        size = len(text.encode("utf-8"))
    except (TypeError, ValueError, RecursionError) as exc:  # (UnicodeEncodeError: a ValueError)
        raise InvalidEvent(f"an event's body must be JSON text: {exc}") from None
    if size > limit:
        raise InvalidEvent(f"an event's body is {size} bytes, over the {limit} an event may hold")
    return text


def check_ttl(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"an event TTL must be finite seconds > 0, got {value!r}")
    return float(value)


def check_wait_timeout(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"run.wait_for needs a finite timeout > 0 seconds, got {value!r}")
    return float(value)


@attrs.frozen
class Event:
    """A kept event: its id, key, body (JSON text), when it came and until when it is kept."""

    id: str
    key: str
    body: str
    at: float
    until: float

    @property
    def value(self) -> Any:
        return json.loads(self.body)


@attrs.frozen
class EventSent:
    """What ``send_event`` did: stored a new event (``new``) or absorbed a replay, and which
    waiting runs it woke."""

    event: Event
    new: bool
    woken: tuple[str, ...] = ()


@attrs.frozen
class EventWaiter:
    """A run parked on an event: its task, the key and when its wait times out."""

    task_id: str
    key: str
    until: float | None
