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


def is_room_policy(value: object) -> TypeGuard[RoomPolicy]:
    return isinstance(value, str) and value in ROOM_POLICIES


def check_room_policy(value: object) -> RoomPolicy:
    """Return ``value`` if it names a room policy, else ``ValueError`` naming the choices."""
    if not is_room_policy(value):
        raise ValueError(
            f"room policy must be one of {', '.join(ROOM_POLICIES)}; got {value!r:.80}"
        )
    return value


def superseded_reason(newer_id: str) -> str:
    """The reason a superseded task's no-send result records."""
    return f"{SUPERSEDED_PREFIX}{newer_id}"


class Superseded(StaleLease):
    """The claim was fenced out because a newer message of its room superseded the task
    (``replace``): the store already holds its no-send result; the run should stop."""
