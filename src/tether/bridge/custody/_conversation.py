"""Conversations (issue #34): each room's turns and the state its agent keeps, as the store
hands them out and takes them back.

A turn is made by the custody move itself, in its transaction (ingest takes the person's
message; storing a result makes the reply; delivery makes it delivered; a ``replace`` that
supersedes a run marks the text it had shown as interrupted): while a task is kept its turns
are read from its own row (issue #49), so the conversation can never disagree with custody.
The state is one JSON object per room, written with a result under the lease's fence and a
version (``StateConflict`` when stale).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import attrs

from ._rules import CustodyConflict, InvalidTask, _room_validator
from ._turns import Conversation as Conversation
from ._turns import Turn as Turn
from ._turns import TurnOutcome as TurnOutcome
from ._turns import TurnRole as TurnRole

HISTORY_OUTCOMES: Final[frozenset[str]] = frozenset(
    {"received", "result", "delivered", "interrupted", "asked"}
)
"""The turns a run's history holds (a reply still streaming is not said yet)."""

DEFAULT_HISTORY_TURNS: Final = 50
"""Turns a run's history holds at most (``--history-turns``)."""
DEFAULT_ROOM_KEEP: Final = 500
"""Turns a room keeps at most (``--room-keep``); retention prunes the older ones."""
MAX_HISTORY_TURNS: Final = 10_000
MAX_STATE_BYTES: Final = 1 << 20
"""A room's state, as UTF-8 JSON, is at most this (1 MiB)."""


@attrs.frozen
class RoomView:
    """A room as an operator sees it (``tether store room``)."""

    room: str
    turns: tuple[Turn, ...]
    """The newest turns (at most the limit asked for), oldest first, streaming ones included."""
    turn_count: int
    state: Mapping[str, Any]
    version: int
    state_bytes: int


@attrs.frozen
class ConversationCounts:
    """What the metrics show: rooms with a conversation, turns kept, bytes of state."""

    rooms: int
    turns: int
    state_bytes: int


@attrs.frozen
class ForgottenRoom:
    """What ``forget_room`` erased of a room, in one transaction (issue #53): every count is of
    what the store held; all 0 for a room it held nothing of (erasing twice is harmless)."""

    room: str
    turns: int = 0
    """Turns the room's conversation showed (messages, replies, questions, shown text)."""
    state: bool = False
    """Whether the room had a state (its agent's memory of it), now gone."""
    tasks: int = 0
    """Tasks whose text was erased: the room's, and the child runs they spawned (their
    bodies come from the room's). Their rows stay (custody never drops a task silently) as
    ids, states and times: message, reply, reason and room are blanked, and every header but
    the labels custody reads (queue, parent, depth, tenant, schedule)."""
    cancelled: int = 0
    """Of those, the tasks still in custody (pending, assigned, claimed, waiting or with a
    reply not yet delivered): moved to ``dead`` first, a running one fenced out at its next
    heartbeat, so no reply of the room goes out after it."""
    steps: int = 0
    """Step records deleted (a step's value is the run's own text)."""
    asks: int = 0
    """Questions deleted, with the answers taken for them."""
    scrubbed: bool = False
    """The erased text is gone from the store's files as well, not only from its tables.
    SQLite: deleted content is zeroed as it is deleted and the WAL was checkpointed and
    truncated after the commit (False: another connection kept it busy; the older pages stay
    in the WAL until its next checkpoint). PostgreSQL: always False; the old row versions stay
    in the tables' pages until vacuum lets new rows overwrite them, and in the server's WAL
    until it is recycled (docs/guide/conversations.md)."""


@attrs.frozen
class StateWrite:
    """A new state for the room of a run's task, based on the version the run read."""

    state_json: str
    base_version: int


class StateConflict(CustodyConflict):
    """A state based on an older version than the room's (another run of a ``concurrent``
    room stored one meanwhile): nothing was written; the run runs again with the current one."""


class StateTooLarge(InvalidTask, ValueError):
    """A room's state over ``MAX_STATE_BYTES``, or not a JSON object: refused, nothing stored."""


def encode_state(state: object, *, task_id: str, limit: int = MAX_STATE_BYTES) -> str:
    """``state`` as the compact JSON text the stores keep: a JSON object of finite numbers,
    within ``limit`` bytes as UTF-8; else ``StateTooLarge`` saying what was wrong."""
    if not isinstance(state, Mapping):
        raise StateTooLarge(
            f"task {task_id!r}: a room's state must be a JSON object (a dict), "
            f"got {type(state).__name__}"
        )
    try:
        text = json.dumps(state, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StateTooLarge(f"task {task_id!r}: the room's state is not JSON: {exc}") from None
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise StateTooLarge(
            f"task {task_id!r}: the room's state is {size} bytes as JSON, over the "
            f"{limit}-byte limit ({limit // 1024} KiB); keep less in it"
        )
    return text


def decode_state(text: str | None) -> dict[str, Any]:
    """A stored state (None: never written) as a dict."""
    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


def check_window(value: object, what: str = "history_turns") -> int:
    """A history window or retention: an int from 0 to ``MAX_HISTORY_TURNS``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_HISTORY_TURNS:
        raise ValueError(f"{what} must be an int from 0 to {MAX_HISTORY_TURNS}, got {value!r}")
    return value


def check_version(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"a state's base version must be an int >= 0, got {value!r}")
    return value


def check_room(value: object) -> str:
    """A room name as tasks carry it (``Task.room``'s rule; ``InvalidTask`` otherwise)."""
    _room_validator(None, None, value)
    if value is None:
        raise InvalidTask("a room must be a non-empty str, got None")
    return str(value)


def turn_from_row(row: tuple[Any, ...]) -> Turn:
    """``(role, text, task_id, at, outcome)`` as both stores read it."""
    role, text, task_id, at, outcome = row
    return Turn(role, text, task_id, float(at), outcome)
