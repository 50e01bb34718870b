"""The one definition of custody: task ids, worker names, states, transitions, records.

A closed set of states, the moves listed once and one predicate "still in custody", which every part
and backend builds on, so no check can infer custody from anything else.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from ..._protocol._bounds import MAX_BODY_BYTES as MAX_BODY_BYTES
from ..._protocol._bounds import MAX_HEADER_VALUE_CHARS as MAX_HEADER_VALUE_CHARS
from ..._protocol._bounds import MAX_HEADERS as MAX_HEADERS
from ..._protocol._bounds import MAX_ROOM_CHARS as MAX_ROOM_CHARS
from ..._protocol._bounds import TASK_ID_RULE as TASK_ID_RULE
from ..._protocol._bounds import WORKER_RULE as WORKER_RULE
from ..._protocol._bounds import BodyTooLarge as BodyTooLarge
from ..._protocol._bounds import InvalidTask as InvalidTask
from ..._protocol._bounds import InvalidTaskId as InvalidTaskId
from ..._protocol._bounds import InvalidWorkerName as InvalidWorkerName
from ..._protocol._bounds import check_body as check_body
from ..._protocol._bounds import check_headers as check_headers
from ..._protocol._bounds import check_task_id as check_task_id
from ..._protocol._bounds import check_text as check_text
from ..._protocol._bounds import check_worker as check_worker
from ._tenants import TENANT_HEADER, check_header_label, check_tenant

QUEUE_HEADER: Final = "queue"
"""The header naming a task's queue (issue #51); without it a task is in ``DEFAULT_QUEUE``."""
DEFAULT_QUEUE: Final = "default"
PARENT_HEADER: Final = "parent"
"""The header naming a child's parent task: set by ``run.spawn`` only (issue #51)."""


DEFAULT_QUEUES: Final = (DEFAULT_QUEUE,)
"""What a worker serves unless told otherwise."""


def queues_of(value: object) -> tuple[str, ...]:
    """Queue names, checked, sorted, without repeats: from a sequence of names or the text a
    store keeps them in (comma-joined; NULL or empty: the default queue)."""
    if value is None or value == "" or value == DEFAULT_QUEUES:
        return DEFAULT_QUEUES
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, list | tuple | set | frozenset) or not names:
        raise ValueError(f"queues must be a non-empty list of queue names, got {value!r}")
    return tuple(sorted({check_queue(name) for name in names}))


def check_queue(queue: object) -> str:
    """``queue`` if it is a valid queue name (a label, as a tenant's), else ``InvalidTask``."""
    return check_header_label(queue, QUEUE_HEADER)


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
    WAITING = "waiting"
    """A run parked itself (a durable sleep): no lease, no worker slot, no attempt spent;
    due at its ``not_before`` (the wake-up time), then pending again (issue #35)."""


IN_CUSTODY: Final = frozenset(
    {
        CustodyState.PENDING,
        CustodyState.ASSIGNED,
        CustodyState.CLAIMED,
        CustodyState.WAITING,
        CustodyState.RESULT,
    }
)
TERMINAL: Final = frozenset({CustodyState.DELIVERED, CustodyState.DEAD})
"""Where the bridge is done with a task. Only an operator's re-drive leaves one (dead ->
pending, see ``TRANSITIONS``)."""


def in_custody(state: CustodyState) -> bool:
    """Is a task in this state still the bridge's responsibility (not yet finished)?"""
    return state in IN_CUSTODY


def body_conflicts(tasks: Sequence[Task], stored: Mapping[str, str]) -> list[bool]:
    """For each of ``tasks``: is its id stored (``stored``: id -> body) with another body?

    Ingest keeps the first body of an id (a replay changes nothing); a replay whose body
    differs is not the gateway redelivering but a conflict, to be said, never merged."""
    return [t.id in stored and stored[t.id] != t.body for t in tasks]


_S = CustodyState
TRANSITIONS: Final[Mapping[CustodyState, frozenset[CustodyState]]] = {
    # pending -> claimed is the leaderless path (no live lead: workers claim directly)
    _S.PENDING: frozenset({_S.ASSIGNED, _S.CLAIMED, _S.DEAD}),
    # assigned -> pending: the pool lead returns a dead or stuck assignment
    _S.ASSIGNED: frozenset({_S.CLAIMED, _S.PENDING, _S.DEAD}),
    # claimed -> pending: failure or lease expiry (attempt + 1); -> dead past max_attempts;
    # claimed -> waiting: the run parked itself (a durable sleep; lease released, no attempt)
    _S.CLAIMED: frozenset({_S.RESULT, _S.PENDING, _S.DEAD, _S.WAITING}),
    # waiting -> pending: due (its wake-up time passed; the same attempt); -> dead: cancelled
    _S.WAITING: frozenset({_S.PENDING, _S.DEAD}),
    _S.RESULT: frozenset({_S.DELIVERED, _S.DEAD}),
    _S.DELIVERED: frozenset(),
    # dead -> pending: an operator's re-drive (``tether store retry``), the one move out of a
    # terminal state. A dead letter is often the world's fault (a model provider's outage, a
    # bug fixed since): the operator sends it again with fresh attempts instead of asking the
    # user to. Only an operator makes it, never the bridge: a task the bridge gave up on
    # stays dead until a person decides. Delivered stays terminal: its reply was confirmed.
    _S.DEAD: frozenset({_S.PENDING}),
}
"""Every allowed move. Besides the bridge's own, an operator may cancel a task not yet run to
a reply (pending, assigned, claimed or waiting -> dead, ``tether store cancel``; a claimed
task's run is fenced out: its heartbeat's renew fails and the run is cancelled) and re-drive a
dead one."""

OPERATOR_MOVES: Final[Mapping[CustodyState, frozenset[CustodyState]]] = {
    _S.PENDING: frozenset({_S.DEAD}),
    _S.ASSIGNED: frozenset({_S.DEAD}),
    _S.CLAIMED: frozenset({_S.DEAD}),
    _S.WAITING: frozenset({_S.DEAD}),
    _S.DEAD: frozenset({_S.PENDING}),
}
"""The moves an operator makes by hand: cancel (-> dead) and re-drive (dead -> pending). A
task with a stored reply (result) or a confirmed one (delivered) is neither cancelled nor
re-driven: its reply exists. One erasure is the exception: ``forget_room`` (issue #53)
withdraws a reply of the room not yet delivered (result -> dead, the move delivery makes for an
undeliverable reply), so no text of a forgotten room goes out after it."""

OPERATOR_PREFIX: Final = "operator: "
"""How an operator's move starts its recorded reason (the journal reads the actor off it)."""


def operator_may(src: CustodyState, dst: CustodyState) -> bool:
    """May an operator move a task from ``src`` to ``dst`` (cancel or re-drive)?"""
    return dst in OPERATOR_MOVES.get(src, frozenset())


def may_move(src: CustodyState, dst: CustodyState) -> bool:
    """Is ``src -> dst`` one of the allowed custody transitions?"""
    return dst in TRANSITIONS[src]


# ---------------------------------------------------------------------------------------------
# limits


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
    tenant = value.get(TENANT_HEADER)
    if tenant is not None:
        check_tenant(tenant)
    queue = value.get(QUEUE_HEADER)
    if queue is not None:
        check_queue(queue)


@attrs.frozen
class Task:
    """A chat task as the gateway gave it. The id is the gateway's, and the store's key."""

    id: str = attrs.field(validator=_id_validator)
    body: str = attrs.field(validator=_body_validator)
    room: str | None = attrs.field(default=None, validator=_room_validator)
    priority: str = attrs.field(default="normal", validator=_priority_validator)
    headers: dict[str, str] = attrs.field(factory=dict, validator=_headers_validator)

    @property
    def tenant(self) -> str | None:
        """Whose task this is (its ``tenant`` header), or None: the store serves tenants in
        turn so one tenant's burst cannot starve another's message."""
        return self.headers.get(TENANT_HEADER)

    @property
    def parent(self) -> str | None:
        """The task whose run spawned this one (``run.spawn``), or None (issue #51)."""
        return self.headers.get(PARENT_HEADER)

    @property
    def queue(self) -> str:
        """The queue the task waits in (its ``queue`` header, else ``default``): only a
        worker serving it takes it (issue #51)."""
        return self.headers.get(QUEUE_HEADER, DEFAULT_QUEUE)


@attrs.frozen
class Claim:
    """A worker's lease on a task.

    Fencing compares (id, owner, run), never ``lease_until``: an older copy of a live claim
    (same worker and run, earlier ``lease_until``) stays valid after a renew. ``attempt`` is
    the failure budget's count, which a re-drive resets; ``run`` is the claim's number among
    every claim of the task, which nothing resets, so no two claims of a task share a fence.
    """

    task: Task
    worker: str
    attempt: int
    lease_until: float
    run: int
    """The task's run number: bumped by every claim, never reset (the fence)."""
    suspect: bool = False
    """A suspect's claim taken to run in quarantine (``claim_many(quarantine=n)``): the worker
    runs it in a quarantine child and reports the child's death with ``quarantine_death``."""


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
    not_before: float | None = None
    """A pending task waiting out a retry backoff: nobody claims or assigns it before this
    (store clock). ``None``: due now (and for every state but pending)."""
    crash_count: int = 0
    """Leases of this task lost because their holder's process died (never failed attempts;
    see ``custody._crashes``)."""
    crashes_alone: int = 0
    """Of those, the crashes while it ran alone in its process (as a suspect)."""
    suspect: bool = False
    """It was in flight at a crash and has not finished since: it runs alone."""
    run: int = 0
    """How many times the task was claimed (the last claim's fence; nothing resets it)."""
    quarantine_deaths: int = 0
    """Deaths of its quarantine child while it ran this task (the proof that counts)."""
    last_quarantine_death: str | None = None
    """How the last of them died, naming the signal or exit code."""


class CustodyConflict(Exception):
    """A transition's compare-and-set found the task in another state than it expected."""


class StaleLease(CustodyConflict):
    """The claim was fenced out: the lease expired, or another attempt or worker holds it."""


class UnknownTask(LookupError):
    """No task with this id was ever ingested."""


class TaskGone(StaleLease, UnknownTask):
    """A claim fenced out because its task is no longer in the store at all: an operator
    forgot it, or a failover promoted a standby that never had it. To the claim's holder this
    is the news a lost lease brings (stop, change nothing), so it is a ``StaleLease``; to
    anyone who asks for the task by id it is an ``UnknownTask``."""


def check_retry_after(value: object) -> float:
    """A retry delay: finite seconds >= 0 (0: the task may run again at once)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value < float("inf")
    ):
        raise ValueError(f"retry_after must be a finite number of seconds >= 0, got {value!r}")
    return float(value)
