"""A run's bounds (issue #53): a step's result, a room's state and a reply each have a size
limit (``--max-step-bytes``, ``--max-state-bytes``, ``--max-reply-bytes``).

Over one the run fails ``TooLarge``, a ``Permanent``: its task is dead on this attempt, the
reason giving the size and the limit. Never retried: a run again makes the same value again
(pydantic-ai #7157 retried an oversized payload for ever). A handler that catches it and
raises something else still fails permanently; one that returns completes.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Final

import attrs

from ..custody._conversation import MAX_STATE_BYTES, encode_state
from ..custody._rules import MAX_BODY_BYTES, Task
from ..custody._steps import MAX_STEP_BYTES, StepTooLarge, encode_step_value
from ._retry import Permanent

DEFAULT_MAX_STEP_BYTES: Final = MAX_STEP_BYTES
"""The largest result a step records by default (``--max-step-bytes``): 1 MiB, JSON."""
DEFAULT_MAX_STATE_BYTES: Final = MAX_STATE_BYTES
"""The largest state a room keeps by default (``--max-state-bytes``): 1 MiB, JSON."""
DEFAULT_MAX_REPLY_BYTES: Final = 256 * 1024
"""The largest reply by default (``--max-reply-bytes``): 256 KiB of UTF-8, a chat message."""
CEILINGS: Final = {
    "max_step_bytes": (MAX_STEP_BYTES, "what a store records of one step"),
    "max_state_bytes": (MAX_STATE_BYTES, "what a store keeps of a room's state"),
    "max_reply_bytes": (MAX_BODY_BYTES, "the store's body limit: a reply is stored as a result"),
}
"""Each bound's setting, its highest value and why: what the stores take at most."""


class TooLarge(Permanent):
    """A step's result, a room's state or a reply over its size limit: the run fails at once
    (its task dead, never retried), ``reason`` naming what it was, its ``size`` and the
    ``limit`` in bytes, and the setting that sets it."""

    def __init__(self, reason: str, *, size: int, limit: int) -> None:
        super().__init__(reason)
        self.size = size
        self.limit = limit


def check_bound(setting: str, value: object) -> int:
    """``value`` if it is a valid ``setting`` (``max_step_bytes`` ...): an int from 1 to its
    ceiling (``CEILINGS``); else ``ValueError`` saying the range and why."""
    ceiling, why = CEILINGS[setting]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= ceiling:
        raise ValueError(
            f"{setting} must be a number of bytes from 1 to {ceiling:,} ({why}), got {value!r}"
        )
    return value


@attrs.frozen
class Bounds:
    """The size limits of a worker's runs, in bytes: a step's result and a room's state as
    JSON, a reply as UTF-8 (``step``: ``--max-step-bytes``, ``state``: ``--max-state-bytes``,
    ``reply``: ``--max-reply-bytes``); each at most what the stores take."""

    step: int = attrs.field(
        default=DEFAULT_MAX_STEP_BYTES, validator=lambda _i, _a, v: check_bound("max_step_bytes", v)
    )
    state: int = attrs.field(
        default=DEFAULT_MAX_STATE_BYTES,
        validator=lambda _i, _a, v: check_bound("max_state_bytes", v),
    )
    reply: int = attrs.field(
        default=DEFAULT_MAX_REPLY_BYTES,
        validator=lambda _i, _a, v: check_bound("max_reply_bytes", v),
    )


def encode_step(name: str, value: Any, limit: int) -> tuple[str, int]:
    """Step ``name``'s result as the JSON text it records, and its size; ``TooLarge`` over
    ``limit`` bytes, ``StepError`` for a value JSON cannot hold."""
    try:
        return encode_step_value(name, value, limit)
    except StepTooLarge as exc:
        raise TooLarge(
            f"step {name!r} returned {exc.size:,} bytes of JSON, over the {limit:,} bytes a "
            "step may record (--max-step-bytes); record a reference (a file name, an id) "
            "instead",
            size=exc.size,
            limit=limit,
        ) from None


def check_reply(body: str, state: Mapping[str, Any] | None, bounds: Bounds, task: Task) -> None:
    """Refuse a reply over ``bounds.reply`` or a state over ``bounds.state`` (``TooLarge``),
    before the store is asked; a state that is not a JSON object is ``StateTooLarge``, as
    the store says it."""
    size = len(body.encode("utf-8", "surrogatepass"))  # a lone surrogate: the store says so
    if size > bounds.reply:
        raise TooLarge(
            f"the reply to task {task.id!r} is {size:,} bytes, over the {bounds.reply:,} bytes "
            "a reply may be (--max-reply-bytes); send a link or a file instead",
            size=size,
            limit=bounds.reply,
        )
    if state is None:
        return
    text = encode_state(state, task_id=task.id, limit=sys.maxsize)  # its size is checked here
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > bounds.state:
        raise TooLarge(
            f"the state of room {task.room!r} is {size:,} bytes of JSON, over the "
            f"{bounds.state:,} bytes a room's state may hold (--max-state-bytes); keep less "
            "in it",
            size=size,
            limit=bounds.state,
        )


def over_a_bound(exc: BaseException) -> TooLarge | None:
    """The bound ``exc`` comes from, if any: a ``TooLarge`` it is or was raised while
    handling (a handler that wrapped it), or a store's refusal of a step past its task's
    total (``StepTooLarge``). Such a run fails permanently whatever the handler made of it."""
    seen: set[int] = set()
    found: BaseException | None = exc
    while found is not None and id(found) not in seen:
        if isinstance(found, TooLarge):
            return found
        if isinstance(found, StepTooLarge):
            return TooLarge(str(found), size=found.size, limit=found.limit)
        seen.add(id(found))
        found = found.__cause__ or found.__context__
    return None


def within_store(bounds: Bounds | None, store: object) -> Bounds:
    """``bounds`` checked against ``store``'s body limit (``max_body_bytes``, which both stores
    have): a reply limit over it is refused, since such a reply could never be stored. None:
    the defaults, the reply's lowered to the store's limit if that is lower."""
    body = getattr(store, "max_body_bytes", None)
    if bounds is None:
        bounds = Bounds()
        if isinstance(body, int) and body < bounds.reply:
            return attrs.evolve(bounds, reply=body)
        return bounds
    if isinstance(body, int) and bounds.reply > body:
        raise ValueError(
            f"max_reply_bytes ({bounds.reply:,}) is over the store's body limit ({body:,} "
            "bytes): a reply that large could never be stored; lower --max-reply-bytes"
        )
    return bounds
