"""The values the Store roles hand out and take: pool views, assignments, journal entries,
stall candidates, operator outcomes. Plain frozen records; the rules live in ``_rules``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final, Literal

import attrs

from ._rules import DEFAULT_QUEUE, DEFAULT_QUEUES, Claim, CustodyState, TaskRecord, queues_of


@attrs.frozen
class LeaseExpiry:
    """Evidence of one expired lease the store acted on."""

    id: str
    worker: str
    attempt: int
    lease_until: float
    now: float
    outcome: CustodyState
    """``PENDING`` (repooled with ``attempt + 1``, or the same attempt after a crash) or
    ``DEAD`` (``max_attempts`` reached, or proven to kill its process)."""
    reason: str
    crash: bool = False
    """The holder's process died: a crash expiry (no attempt burnt; see ``custody._crashes``)."""


WorkerRole = Literal["lead", "worker"]
WORKER_ROLES: Final[tuple[WorkerRole, ...]] = ("lead", "worker")


@attrs.frozen
class WorkerInfo:
    """A pool member's last beat, as the store holds it (liveness is judged by the reader)."""

    name: str
    role: WorkerRole
    capacity: int
    """How many tasks (assigned + claimed) the member takes at once; 0 for the lead."""
    last_beat: float
    started_at: float
    """When this member's current run began beating (it is reset by ``remove_worker``)."""
    queues: tuple[str, ...] = attrs.field(default=DEFAULT_QUEUES, converter=queues_of)
    """The queues whose tasks it takes (issue #51; the store keeps them comma-joined)."""

    def serves(self, queue: str) -> bool:
        """Does this member take tasks of ``queue``?"""
        return queue in self.queues


@attrs.frozen
class Assignment:
    """A task the lead assigned to ``worker`` at ``since`` (store clock), not yet claimed."""

    id: str
    worker: str
    room: str | None
    since: float


@attrs.frozen
class PendingTask:
    """A pending task as the lead plans with it: its id, room and priority, nothing more.

    A sweep reads a window of the queue every time it runs, so it does not read (or validate)
    bodies and headers it never looks at; those were checked when the task was ingested."""

    id: str
    room: str | None = None
    priority: str = "normal"
    queue: str = DEFAULT_QUEUE


@attrs.frozen
class PoolView:
    """Everything one lead sweep decides from, read in one transaction."""

    at: float
    workers: tuple[WorkerInfo, ...]
    assigned: tuple[Assignment, ...]
    """Every assignment, oldest first."""
    claims: Mapping[str, int]
    """Claimed tasks per worker (a worker absent here holds none)."""
    pending: tuple[PendingTask, ...]
    """Pending tasks in assignment order (priority, then age), at most ``pending_limit``, none
    of a room in ``skip_rooms``."""
    rooms: Mapping[str, str]
    """For the rooms of ``pending``: the worker that last took a task of that room."""
    busy_rooms: frozenset[str] = frozenset()
    """Rooms with a task claimed now (a run in flight). ``pending`` holds only tasks their
    room's policy lets run now (``custody._rooms``); a room with nothing in flight may move
    to another worker."""
    next_due: float | None = None
    """The earliest ``not_before`` (store clock) of a pending task still waiting out a retry
    backoff (``pending`` leaves those out), or None: when the lead should look again."""


JournalActor = Literal["bridge", "lead", "worker", "reconciler", "operator"]


@attrs.frozen
class JournalEntry:
    """One step of a task's custody history (appended in the same transaction as the move)."""

    at: float
    """When (store clock)."""
    src: CustodyState | None
    """The state it left (None: ingested)."""
    dst: CustodyState
    worker: str | None
    """The owner involved (the worker assigned, claiming, or whose lease ended)."""
    attempt: int
    """The attempt the move concerns (a failure names the attempt that failed)."""
    reason: str | None
    """The reason recorded by this move (a failure, an expiry, a dead letter), else None."""
    actor: JournalActor
    """Who moved it: ``bridge`` (ingest, delivery, dead letters), ``lead`` (assignments),
    ``worker`` (claims and outcomes), ``reconciler`` (lease expiry), ``operator``."""


@attrs.frozen
class WaitingRetries:
    """Pending tasks waiting out a retry backoff: how many, and when the first is due."""

    count: int
    next_due: float | None


@attrs.frozen
class Suspects:
    """Tasks in custody that were in flight at a crash and have not finished since."""

    count: int
    records: tuple[TaskRecord, ...]
    """The first ``limit`` of them, most crashes first."""


@attrs.frozen
class StallCandidate:
    """A claimed task older than the stall threshold with no stall notice recorded yet."""

    id: str
    room: str | None
    worker: str
    created_at: float


SweepPlanner = Callable[[PoolView], "Sequence[tuple[str, str]] | None"]
"""A sweep's decision from a view: the ``(id, worker)`` pairs to assign, or None (see
``Store.plan_and_assign``)."""


@attrs.frozen
class Hand:
    """A worker in the lead's own process with free slots now: the lead claims for it, in
    the sweep's own transaction, up to ``slots`` of the tasks assigned to it
    (``Store.plan_assign_and_claim``), so the task needs no claim of the worker's own."""

    slots: int
    quarantines: bool = False
    """Does the worker's process run suspects in quarantine children? Then only ordinary work
    is claimed for it (suspects are the worker's to claim, one place each); otherwise the rule
    of a suspect running alone in its process holds, as for the worker's own claim."""


@attrs.frozen
class Swept:
    """What ``Store.plan_assign_and_claim`` did: the view it planned from, which assignments
    took (None: ``decide`` assigned nothing), and the claims it made for each hand."""

    view: PoolView
    done: list[bool] | None
    claims: Mapping[str, Sequence[Claim]] = attrs.field(factory=dict)


@attrs.frozen
class OperatorOutcome:
    """What an operator's verb did to one task: moved it, or refused and changed nothing."""

    id: str
    done: bool
    """True: the task moved (``state`` is where it is now). False: refused, nothing changed."""
    state: CustodyState | None
    """The task's state after the call (None: no such task)."""
    detail: str
    """One line: what was done, or why it was refused."""


@attrs.frozen
class StepRecord:
    """One recorded step of a durable run (issue #35): what a replay returns instead of
    running the step again."""

    name: str
    value: str
    """The step's result as JSON text (``custody._steps.decode_step_value`` reads it)."""
    at: float
    """When it was recorded (store clock)."""
    attempt: int
    """The attempt whose run recorded it."""
    size: int
    """``value``'s size in bytes (UTF-8)."""
    version: str | None = None
    """The agent version whose run recorded it (issue #53; None: unversioned, or recorded
    before versions were kept)."""
    fingerprint: str | None = None
    """The fingerprint of the arguments its step was asked with (``custody._versions``; None:
    the run's own records, a fork's copies, and records made before versions were kept)."""
    call: str | None = None
    """The function its step called, by qualified name (None: a lambda, the run's own)."""


@attrs.frozen
class WaitingRuns:
    """Tasks parked in ``waiting`` (durable sleeps): how many, and the earliest wake-up."""

    count: int
    next_wake: float | None
