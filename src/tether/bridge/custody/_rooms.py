"""Room policies (``serial``, ``replace``, ``concurrent``): a conversation's rules, kept by the
store so they bind every process sharing it and survive restarts. See docs/guide/design.md, "Rooms".
"""

from __future__ import annotations

from typing import Final, Literal, TypeGuard

from ._rules import StaleLease

RoomPolicy = Literal["concurrent", "serial", "replace"]
ROOM_POLICIES: Final[tuple[RoomPolicy, ...]] = ("concurrent", "serial", "replace")
DEFAULT_ROOM_POLICY: Final[RoomPolicy] = "serial"
ORDERED_POLICIES: Final[frozenset[str]] = frozenset({"serial", "replace"})
"""The policies under which a room runs one task at a time, in arrival order."""

SUPERSEDED_PREFIX: Final = "superseded by "
BURST_PREFIX: Final = "answered with "
"""A message a newer one of its burst took the place of (issue #52) ends with this reason."""
MAX_DEBOUNCE_S: Final = 60.0


def is_room_policy(value: object) -> TypeGuard[RoomPolicy]:
    return isinstance(value, str) and value in ROOM_POLICIES


def check_room_policy(value: object) -> RoomPolicy:
    """Return ``value`` if it names a room policy, else ``ValueError`` naming the choices."""
    if not is_room_policy(value):
        raise ValueError(
            f"room policy must be one of {', '.join(ROOM_POLICIES)}; got {value!r:.80}"
        )
    return value


def check_debounce(value: object) -> float:
    """A room's debounce: finite seconds from 0 (off) to ``MAX_DEBOUNCE_S``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (0 <= value <= MAX_DEBOUNCE_S)
    ):
        raise ValueError(
            f"a room's debounce must be 0 to {MAX_DEBOUNCE_S:g} seconds, got {value!r}"
        )
    return float(value)


def burst_reason(newer_id: str) -> str:
    """The reason of a message a newer one of its burst took the place of."""
    return f"{BURST_PREFIX}{newer_id}"


def superseded_reason(newer_id: str) -> str:
    """The reason a superseded task's no-send result records."""
    return f"{SUPERSEDED_PREFIX}{newer_id}"


class Superseded(StaleLease):
    """The claim was fenced out because a newer message of its room superseded the task
    (``replace``): the store already holds its no-send result; the run should stop."""
