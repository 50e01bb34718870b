"""The one definition of custody: task ids, worker names, states, transitions, records.

A public file-based bridge lost replies because one of its checks inferred "still pending" from
which files existed and forgot one of them. Here custody is a value with a closed set of
states, the allowed moves between them are listed once, and "still in custody" is one
predicate that ingest, the reconciler, the pool and delivery all share. Every backend builds its
constraints and queries from this module, so no place can disagree with another.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from typing import Any, Final

import attrs


class CustodyState(enum.StrEnum):
    """Where an acknowledged task is. Exactly one at any time, stored as a constrained column."""

    PENDING = "pending"
    """Durably stored and acked to the gateway; waiting for the lead (or a leaderless worker)."""
    ASSIGNED = "assigned"
    """The lead chose a worker (the owner); only that worker may claim it."""
    CLAIMED = "claimed"
    """A worker holds a lease (owner, attempt, lease_until) renewed by its heartbeat."""
    RESULT = "result"
    """The reply is stored and waits for delivery."""
    DELIVERED = "delivered"
    """The gateway confirmed the reply. Terminal."""
    DEAD = "dead"
    """Undeliverable or over ``max_attempts``, with its reason. Terminal, never dropped."""


IN_CUSTODY: Final = frozenset(
    {CustodyState.PENDING, CustodyState.ASSIGNED, CustodyState.CLAIMED, CustodyState.RESULT}
)
TERMINAL: Final = frozenset({CustodyState.DELIVERED, CustodyState.DEAD})


def in_custody(state: CustodyState) -> bool:
    """Is a task in this state still the bridge's responsibility (not yet finished)?"""
    return state in IN_CUSTODY


_S = CustodyState
TRANSITIONS: Final[Mapping[CustodyState, frozenset[CustodyState]]] = {
    # pending -> claimed is the leaderless path (no live lead: workers claim directly)
    _S.PENDING: frozenset({_S.ASSIGNED, _S.CLAIMED, _S.DEAD}),
    # assigned -> pending: the pool lead returns a dead or stuck assignment
    _S.ASSIGNED: frozenset({_S.CLAIMED, _S.PENDING, _S.DEAD}),
    # claimed -> pending: failure or lease expiry (attempt + 1); -> dead past max_attempts
    _S.CLAIMED: frozenset({_S.RESULT, _S.PENDING, _S.DEAD}),
    _S.RESULT: frozenset({_S.DELIVERED, _S.DEAD}),
    _S.DELIVERED: frozenset(),
    _S.DEAD: frozenset(),
}


def may_move(src: CustodyState, dst: CustodyState) -> bool:
    """Is ``src -> dst`` one of the allowed custody transitions?"""
    return dst in TRANSITIONS[src]


# ---------------------------------------------------------------------------------------------
# identifiers


class InvalidTask(ValueError):
    """A task (or a value about one) broke a rule; nothing was stored."""


class InvalidTaskId(InvalidTask):
    """A task id broke the id rule; the message names the rule."""


class BodyTooLarge(InvalidTask):
    """A task body or result is over the store's configured size limit."""


class InvalidWorkerName(ValueError):
    """A worker name broke the worker-name rule; the message names the rule."""


TASK_ID_RULE: Final = "[A-Za-z0-9][A-Za-z0-9_~.-]{0,127}"
WORKER_RULE: Final = "[A-Za-z0-9][A-Za-z0-9_-]{0,63}"
_TASK_ID_RE: Final = re.compile(TASK_ID_RULE)
_WORKER_RE: Final = re.compile(WORKER_RULE)
MAX_ROOM_CHARS: Final = 256

MAX_BODY_BYTES: Final = 1 << 20
"""The one limit on a task body or result (UTF-8 bytes): the custody store's default, and what
the gateway's request limit is sized from, so every stored result can be delivered."""
JSON_ESCAPE_FACTOR: Final = 6
"""The most bytes JSON spends on one byte of UTF-8 text: a control character is ``\\u0001``."""
ENVELOPE_BYTES: Final = 64 * 1024
"""Room for everything around a body in a request (id, flags, metadata) with plenty to spare."""
MAX_REQUEST_BYTES: Final = MAX_BODY_BYTES * JSON_ESCAPE_FACTOR + ENVELOPE_BYTES
"""The gateway's default request limit: a ``MAX_BODY_BYTES`` body JSON-escaped, plus envelope."""


def check_task_id(value: object) -> str:
    """Return ``value`` if it is a valid task id, else raise ``InvalidTaskId`` naming the rule."""
    if (  # the common case, checked without building an error message
        type(value) is str
        and 0 < len(value) <= 128
        and value[0].isascii()
        and value[0].isalnum()
        and ".." not in value
        and _TASK_ID_RE.fullmatch(value) is not None
    ):
        return value
    if not isinstance(value, str):
        raise InvalidTaskId(f"task id must be a str, got {type(value).__name__}")
    shown = repr(value[:140])
    if not value:
        raise InvalidTaskId("task id must not be empty")
    if len(value) > 128:
        raise InvalidTaskId(f"task id {shown}... is {len(value)} characters; the limit is 128")
    if ".." in value:
        raise InvalidTaskId(f"task id {shown} must not contain '..'")
    if not value[0].isascii() or not value[0].isalnum():
        raise InvalidTaskId(f"task id {shown} must start with a letter or digit (A-Z a-z 0-9)")
    if _TASK_ID_RE.fullmatch(value) is None:
        bad = next(c for c in value if _TASK_ID_RE.fullmatch("a" + c) is None)
        raise InvalidTaskId(
            f"task id {shown} contains {bad!r}; allowed are letters, digits and _ ~ . - "
            f"(rule {TASK_ID_RULE})"
        )
    return value


def check_worker(value: object) -> str:
    """Return ``value`` if it is a valid worker name, else raise ``InvalidWorkerName``."""
    if not isinstance(value, str):
        raise InvalidWorkerName(f"worker name must be a str, got {type(value).__name__}")
    if _WORKER_RE.fullmatch(value) is None:
        raise InvalidWorkerName(
            f"worker name {value[:80]!r} must match {WORKER_RULE} "
            "(a letter or digit, then up to 63 letters, digits, _ or -)"
        )
    return value


MAX_CLAIM_BATCH: Final = 1000
"""The most leases one ``claim_many`` call hands out."""


def check_claim_limit(value: object) -> int:
    """Return ``value`` if it is a valid ``claim_many`` limit (an int from 1 to 1000)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CLAIM_BATCH:
        raise ValueError(f"claim limit must be an int from 1 to {MAX_CLAIM_BATCH}, got {value!r}")
    return value


def check_delivery_lease(holder: object, lease_s: object) -> tuple[str, float] | None:
    """Check ``ready_results``' lease arguments: both absent (a plain read, ``None``) or a
    holder named like a worker with a finite ``lease_s`` > 0 (returned as a pair)."""
    if holder is None:
        if lease_s is not None:
            raise ValueError("ready_results got lease_s without a holder: name the holder")
        return None
    check_worker(holder)
    if (
        isinstance(lease_s, bool)
        or not isinstance(lease_s, int | float)
        or not 0 < lease_s < float("inf")
    ):
        raise ValueError(f"a delivery lease needs lease_s > 0 seconds, got {lease_s!r}")
    assert isinstance(holder, str)
    return holder, float(lease_s)


class Priority(enum.StrEnum):
    URGENT = "urgent"
    NORMAL = "normal"
    LOW = "low"


PRIORITY_RANK: Final[Mapping[str, int]] = {"urgent": 0, "normal": 1, "low": 2}
"""Lower rank is served first. Stored as the rank so an index orders the queue."""


def check_priority(value: object) -> str:
    if not isinstance(value, str) or value not in PRIORITY_RANK:
        raise InvalidTask(f"priority must be one of urgent, normal, low; got {value!r}")
    return value


def check_text(value: str, what: str) -> bytes:
    """``value`` as UTF-8, or ``InvalidTask`` naming the first lone surrogate (JSON can carry
    ``"\\ud800"``, but no store or gateway can encode it)."""
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start]
        raise InvalidTask(
            f"{what} contains a lone surrogate {bad!r} at index {exc.start}; "
            "text must be valid Unicode (encodable as UTF-8)"
        ) from None


def check_body(value: str, limit: int, what: str = "task body") -> str:
    """Refuse a body over ``limit`` UTF-8 bytes (the store's configured size limit), or one
    that is not valid Unicode."""
    size = len(check_text(value, what))
    if size > limit:
        raise BodyTooLarge(f"{what} is {size} bytes; the limit is {limit} bytes")
    return value


# ---------------------------------------------------------------------------------------------
# records


def _id_validator(_inst: Any, _attr: Any, value: Any) -> None:
    check_task_id(value)


def _priority_validator(_inst: Any, _attr: Any, value: Any) -> None:
    check_priority(value)


def _body_validator(_inst: Any, _attr: Any, value: Any) -> None:
    if not isinstance(value, str):
        raise InvalidTask(f"task body must be a str, got {type(value).__name__}")


def _room_validator(_inst: Any, _attr: Any, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value or len(value) > MAX_ROOM_CHARS or "\0" in value:
        raise InvalidTask(
            f"room must be None or a non-empty str of at most {MAX_ROOM_CHARS} characters "
            f"without NUL; got {value!r:.80}"
        )
    check_text(value, "room")


def _headers_validator(_inst: Any, _attr: Any, value: Any) -> None:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidTask(f"headers must be a dict of str to str; got {value!r:.80}")


@attrs.frozen
class Task:
    """A chat task as the gateway gave it. The id is the gateway's, and the store's key."""

    id: str = attrs.field(validator=_id_validator)
    body: str = attrs.field(validator=_body_validator)
    room: str | None = attrs.field(default=None, validator=_room_validator)
    priority: str = attrs.field(default="normal", validator=_priority_validator)
    headers: dict[str, str] = attrs.field(factory=dict, validator=_headers_validator)


@attrs.frozen
class Claim:
    """A worker's lease on a task.

    Fencing compares (id, owner, attempt), never ``lease_until``: an older copy of a live claim
    (same worker and attempt, earlier ``lease_until``) stays valid after a renew.
    """

    task: Task
    worker: str
    attempt: int
    lease_until: float


@attrs.frozen
class Result:
    """A stored reply waiting for delivery."""

    task: Task
    body: str
    worker: str
    attempt: int
    no_send: bool = False
    """The agent asked delivery to confirm the task without posting a message."""


@attrs.frozen
class TaskRecord:
    """Everything the store holds about one task (a snapshot, for evidence and inspection)."""

    task: Task
    state: CustodyState
    owner: str | None
    attempt: int
    lease_until: float | None
    result: str | None
    reason: str | None
    created_at: float
    updated_at: float


class CustodyConflict(Exception):
    """A transition's compare-and-set found the task in another state than it expected."""


class StaleLease(CustodyConflict):
    """The claim was fenced out: the lease expired, or another attempt or worker holds it."""


class UnknownTask(LookupError):
    """No task with this id was ever ingested."""
