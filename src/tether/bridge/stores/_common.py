"""What every backend computes the same way: argument checks, fencing errors, row shapes.

The SQL stays per dialect (each backend's ``_sql.py``); what a caller sees does not. A bad
limit, a bad reason, a stale lease or an unknown task reads the same from SQLite and from
PostgreSQL, because both build it here. The conformance suite in ``tests/custody`` holds them to
it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from ..._plumbing._converter import unstructure
from ..._plumbing._when import duration, iso_time
from ..custody._crashes import failures
from ..custody._records import Hand, JournalEntry
from ..custody._rooms import SUPERSEDED_PREFIX, Superseded
from ..custody._rules import (
    IN_CUSTODY,
    OPERATOR_PREFIX,
    PRIORITY_RANK,
    Claim,
    CustodyState,
    StaleLease,
    Task,
    TaskGone,
    TaskRecord,
    UnknownTask,
    check_body,
    check_claim_limit,
    check_headers,
    check_task_id,
    check_worker,
)
from ._host import Host

RANK_PRIORITY: Final[Mapping[int, str]] = {rank: name for name, rank in PRIORITY_RANK.items()}
"""The stored priority rank back to its name."""
IN_CUSTODY_SQL: Final = ", ".join(f"'{s.value}'" for s in sorted(IN_CUSTODY))
"""``in_custody`` as an SQL list, for ``state IN (...)``: the one predicate, in both dialects."""
MAX_REASON_CHARS: Final = 4000
"""A stored failure or dead-letter reason is cut to this many characters."""


def check_limit(limit: object, what: str = "limit") -> int:
    """A batch limit must be an int >= 1."""
    if not (isinstance(limit, int) and limit >= 1):
        raise ValueError(f"{what} must be an int >= 1, got {limit!r}")
    return limit


def check_hands(hands: Mapping[str, Hand]) -> Mapping[str, Hand]:
    """The workers a sweep may claim for (``plan_assign_and_claim``): names and slots."""
    for worker, hand in hands.items():
        check_worker(worker)
        check_claim_limit(hand.slots)
    return hands


def ring_for_children(host: Host, claims: Iterable[Claim]) -> None:
    """A child's outcome stored may have woken its joining parent in the same transaction
    (the store's ``children_done``): this process's pool looks again at once (issue #51)."""
    if any(claim.task.parent is not None for claim in claims):
        host.work_bell.ring()


def check_reason(reason: object) -> str:
    """A reason is a non-empty str, stored cut to ``MAX_REASON_CHARS``."""
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(f"a reason must be a non-empty str, got {reason!r}")
    return reason[:MAX_REASON_CHARS]


def fence_args(claim: object) -> tuple[str, int, str]:
    """The fence of a claim, checked: ``(worker, run, task id)``."""
    if not isinstance(claim, Claim):
        raise TypeError(f"expected a Claim, got {type(claim).__name__}")
    return check_worker(claim.worker), claim.run, check_task_id(claim.task.id)


def complete_args(claim: object, body: object, max_body_bytes: int) -> tuple[str, int, str]:
    """A completion's fence ``(worker, run, task id)``, once the claim and the result body
    are checked (a str within the size limit): what ``complete_many`` checks for every item
    before it writes anything."""
    fence = fence_args(claim)
    if not isinstance(body, str):
        raise TypeError(f"a result body must be a str, got {type(body).__name__}")
    check_body(body, max_body_bytes, what=f"result of task {fence[2]!r}")
    return fence


def ingest_headers(task: object, max_body_bytes: int) -> str:
    """Check a task for ingest (type, body and headers within the size limit); return its
    headers as the JSON text both backends store."""
    if not isinstance(task, Task):
        raise TypeError(f"ingest takes a Task, got {type(task).__name__}")
    check_body(task.body, max_body_bytes, what=f"body of task {task.id!r}")
    if not task.headers:
        return "{}"
    headers = json.dumps(unstructure(task.headers), separators=(",", ":"))
    check_body(headers, max_body_bytes, what=f"headers of task {task.id!r}")
    check_headers(task.headers, f"task {task.id!r}")
    return headers


def task_from_row(row: Sequence[Any], body: str) -> Task:
    """A ``Task`` from a row that starts ``id, body, room, priority, headers`` (the body
    decoded by the backend)."""
    id, _, room, rank, headers = row[:5]
    return Task(
        id=id,
        body=body,
        room=room,
        priority=RANK_PRIORITY[rank],
        headers=json.loads(headers),  # the validator checks it is a dict of str to str
    )


def record_from_row(row: Sequence[Any], decode: Callable[[Any], str]) -> TaskRecord:
    """A ``TaskRecord`` from a row of ``task_from_row``'s columns, then ``state, owner,
    attempt, lease_until, result, reason, created_at, updated_at, not_before, crash_count,
    crashes_alone, suspect, run_no, quarantine_deaths, last_quarantine_death``; ``decode``
    turns a stored body or result into text."""
    _, body, _, _, _, state, owner, attempt, lease_until, result, reason = row[:11]
    created, updated, not_before, crashes, alone, suspect, run, deaths, last_death = row[11:20]
    return TaskRecord(
        task_from_row(row, decode(body)),
        CustodyState(state),
        owner,
        attempt,
        lease_until,
        None if result is None else decode(result),
        reason,
        created,
        updated,
        not_before,
        crash_count=crashes,
        crashes_alone=alone,
        suspect=bool(suspect),
        run=run,
        quarantine_deaths=deaths,
        last_quarantine_death=last_death,
    )


@attrs.frozen
class FoundState:
    """Where a task stood when a compare-and-set on it missed: the evidence for the error."""

    state: CustodyState
    owner: str | None
    attempt: int
    lease_until: float | None
    reason: str | None = None
    """The task's recorded reason (a superseded task's says so: see ``custody._rooms``)."""
    run: int = attrs.field(kw_only=True)
    """The task's run number (the fence of its latest claim)."""

    @property
    def owner_note(self) -> str:
        return owner_note(self.owner, self.attempt)


def owner_note(owner: str | None, attempt: int) -> str:
    """`` (owner w1, attempt 2)`` for an owned task, else nothing: for error messages."""
    return f" (owner {owner}, attempt {attempt})" if owner else ""


def stale_lease(seen: FoundState | None, claim: Claim, now: float, verb: str) -> Exception:
    """The error for a fenced-out claim: ``TaskGone`` if the task is gone, else a
    ``StaleLease`` saying whether the lease expired or someone else holds the task."""
    if seen is None:
        return task_gone(claim.task.id, verb)
    who = f"worker {claim.worker!r} (attempt {claim.attempt})"
    if (
        seen.state is CustodyState.CLAIMED
        and seen.owner == claim.worker
        and seen.run == claim.run
        and seen.lease_until is not None
    ):
        ago = duration(now - seen.lease_until)
        held = f"its lease expired at {iso_time(seen.lease_until)} ({ago} ago)"
    else:
        held = f"the store has it {seen.state.value}{seen.owner_note}"
        if seen.state is CustodyState.DEAD and (seen.reason or "").startswith(OPERATOR_PREFIX):
            held += f" ({seen.reason})"  # an operator cancelled it: the worker's log says so
    if seen.state is CustodyState.RESULT and (seen.reason or "").startswith(SUPERSEDED_PREFIX):
        return Superseded(f"cannot {verb} task {claim.task.id!r} for {who}: {seen.reason}")
    return StaleLease(f"cannot {verb} task {claim.task.id!r} for {who}: {held}")


def check_permanent(permanent: object) -> bool:
    if not isinstance(permanent, bool):
        raise TypeError(f"permanent must be a bool, got {type(permanent).__name__}")
    return permanent


def fail_outcome(
    reason: str, attempt: int, max_attempts: int, permanent: bool, crash_count: int = 0
) -> tuple[bool, str]:
    """Does a failed attempt end the task (dead), and the reason to store: a ``permanent``
    failure dies at once, any other once ``max_attempts`` failures are reached (runs lost to
    crashes, ``crash_count``, are not failures: ``custody._crashes``)."""
    check_permanent(permanent)
    if permanent:
        return True, f"permanent failure on attempt {attempt}: {reason}"
    failed = failures(attempt, crash_count)
    if failed >= max_attempts:
        if crash_count:
            return True, (
                f"failed on attempt {attempt} ({failed} failures of {max_attempts}; "
                f"{crash_count} lost to crashes): {reason}"
            )
        return True, f"failed on attempt {attempt} of {max_attempts}: {reason}"
    return False, reason


def assign_refused(record: TaskRecord, worker: str, now: float) -> str:
    """Why ``assign`` refused ``record``'s task: it is not pending, or waits for a retry."""
    what = f"cannot assign task {record.task.id!r} to {worker!r}"
    if record.state is CustodyState.PENDING and record.suspect:
        return (
            f"{what}: it is a suspect (in flight at {record.crash_count} crash(es)); "
            "a worker claims it alone, the lead never assigns it"
        )
    if record.state is CustodyState.PENDING and record.not_before is not None:
        return (
            f"{what}: it is pending but waits for a retry until "
            f"{iso_time(record.not_before)} (in {duration(record.not_before - now)})"
        )
    held = owner_note(record.owner, record.attempt)
    return f"{what}: it is {record.state.value}{held}, not pending"


def journal_entry(row: Sequence[Any]) -> JournalEntry:
    """A ``JournalEntry`` from ``at, src, dst, worker, attempt, reason, actor``."""
    at, src, dst, worker, attempt, reason, actor = row
    return JournalEntry(
        float(at),
        None if src is None else CustodyState(src),
        CustodyState(dst),
        worker,
        int(attempt),
        reason,
        actor,
    )


def unknown_task(id: str) -> UnknownTask:
    return UnknownTask(f"no task {id!r} in the store")


def task_gone(id: str, verb: str) -> TaskGone:
    """The error for a claim whose task is no longer in the store (``custody.TaskGone``)."""
    return TaskGone(f"cannot {verb} task {id!r}: no such task in the store")
