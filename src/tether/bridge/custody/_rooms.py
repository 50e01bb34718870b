"""Room policies: the rules of a conversation, kept by the store rather than by one process.

A room is one conversation. Chat has rules a job queue does not: the replies of a room must come
in the order its messages arrived, and a person who corrects themselves wants the stale answer
dropped. Several bridges and workers share one store, so these rules live in the store's claim
and ingest paths (a rule held in one process's memory would not bind the others, nor survive a
restart). The policy is chosen when a task is ingested and stored with it:

- ``concurrent``: no rule; tasks of a room run as they come (the behaviour before rooms).
- ``serial`` (the default): one run per room at a time, in arrival order. A task of a room may
  be assigned or claimed only when no other task of the room is claimed and no earlier one is
  still waiting (pending, assigned) or holds a reply not yet delivered. The reply of the last
  run is delivered before the next run starts, so replies reach the gateway in order even
  across bridges and delivery retries.
- ``replace`` (barge-in): ordered like ``serial``, and a newer message supersedes the older
  ones of its room still in custody before delivery: in the ingest's own transaction each of
  them (pending, assigned, or claimed: a run in progress) becomes a no-send result with the
  reason ``"superseded by <id>"``. Nothing is lost silently; the running worker finds its lease
  fenced out (``Superseded``) and cancels the run after its soft-stop grace.

A superseded result is a no-send reply: it never blocks the room (nothing reaches the user), so
the newer task starts at once.
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
