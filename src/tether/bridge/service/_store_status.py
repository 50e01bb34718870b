"""``tether store status``: what the custody store holds, for an operator at a terminal.

Counts per state, retries waiting, the oldest in custody, dead letters (and how many the gateway has
not heard of) and crash suspects: where to look when replies are late.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ..._plumbing._converter import unstructure
from ..custody._crashes import SUSPECTS_RUN, run_words
from ..custody._roles import InspectStore
from ..custody._rules import IN_CUSTODY, CustodyState, TaskRecord
from ..pool._liveness import DEFAULT_DEAD_AFTER, is_alive


@attrs.frozen
class StatusEntry:
    """One task in a ``StoreStatus`` list (oldest in flight, or a dead letter)."""

    id: str
    state: CustodyState
    age_s: float
    """Seconds since the task was ingested (in flight) or since it went dead."""
    attempt: int
    owner: str | None
    reason: str | None
    crash_count: int = 0
    """Leases of the task lost because its worker's process died (not failed attempts)."""
    crashes_alone: int = 0
    """Of those, while it ran alone as a suspect (``max_crashes_alone`` of them: dead)."""
    quarantine_deaths: int = 0
    """Deaths of its quarantine process while it ran the task (``max_quarantine_deaths``:
    dead)."""
    last_quarantine_death: str | None = None
    """How the last of them died, naming the signal or exit code."""


@attrs.frozen
class StoreStatus:
    """What ``tether store status`` shows: counts per state, the oldest tasks in flight,
    the latest dead letters (``store_status`` reads it, ``render_store_status`` prints it)."""

    counts: dict[str, int]
    in_custody: int
    oldest_in_flight: tuple[StatusEntry, ...]
    dead_letters: tuple[StatusEntry, ...]
    schema_version: int = 1
    dead_unreported: int = 0
    """Dead letters the gateway has not confirmed hearing about (their users were not told)."""
    waiting_retries: int = 0
    """Pending tasks waiting out a retry backoff (no worker takes them before they are due)."""
    next_retry_in_s: float | None = None
    """Seconds until the first of them is due (None: none waits)."""
    suspects: int = 0
    """Tasks in custody that were in flight at a crash and have not finished since."""
    suspect_tasks: tuple[StatusEntry, ...] = ()
    """The first of them, most crashes while alone first."""
    sleeping: int = 0
    """Tasks ``waiting``: runs parked until their wake-up time (durable sleeps)."""
    next_wake_in_s: float | None = None
    """Seconds until the first of them is due (None: none waits)."""
    unserved: dict[str, int] = attrs.field(factory=dict)
    """Pending tasks per queue that no live worker serves (issue #51): they wait for one."""

    def to_document(self) -> dict[str, object]:
        return unstructure(self)  # type: ignore[no-any-return]


def _entry(record: TaskRecord, now: float, since: float) -> StatusEntry:
    return StatusEntry(
        id=record.task.id,
        state=record.state,
        age_s=round(max(0.0, now - since), 3),
        attempt=record.attempt,
        owner=record.owner,
        reason=record.reason,
        crash_count=record.crash_count,
        crashes_alone=record.crashes_alone,
        quarantine_deaths=record.quarantine_deaths,
        last_quarantine_death=record.last_quarantine_death,
    )


async def store_status(store: InspectStore, *, limit: int = 10) -> StoreStatus:
    """A snapshot of ``store``: counts, the ``limit`` oldest in flight, the newest dead letters."""
    now = store.clock()
    counts = await store.counts()
    oldest: list[TaskRecord] = []
    for state in (
        CustodyState.PENDING,
        CustodyState.ASSIGNED,
        CustodyState.CLAIMED,
        CustodyState.WAITING,
        CustodyState.RESULT,
    ):
        if counts[state]:
            oldest.extend(await store.records(state, limit=limit))
    oldest.sort(key=lambda r: r.created_at)
    dead = await store.records(CustodyState.DEAD, limit=limit, newest_first=True)
    unreported = await store.unreported_dead_count() if counts[CustodyState.DEAD] else 0
    waiting = await store.waiting_retries() if counts[CustodyState.PENDING] else None
    next_in = None
    if waiting is not None and waiting.next_due is not None:
        next_in = round(max(0.0, waiting.next_due - now), 3)
    suspects = await store.suspects(limit=limit)
    parked = await store.waiting_runs() if counts[CustodyState.WAITING] else None
    wake_in = None
    if parked is not None and parked.next_wake is not None:
        wake_in = round(max(0.0, parked.next_wake - now), 3)
    unserved: dict[str, int] = {}
    if counts[CustodyState.PENDING]:
        live = [
            w
            for w in await store.workers()
            if w.role == "worker" and is_alive(w, now, DEFAULT_DEAD_AFTER)
        ]
        unserved = {
            queue: n
            for queue, n in (await store.pending_by_queue()).items()
            if not any(w.serves(queue) for w in live)
        }
    return StoreStatus(
        counts={state.value: counts[state] for state in CustodyState},
        in_custody=sum(counts[state] for state in IN_CUSTODY),
        oldest_in_flight=tuple(_entry(r, now, r.created_at) for r in oldest[:limit]),
        dead_letters=tuple(_entry(r, now, r.updated_at) for r in dead),
        dead_unreported=unreported,
        waiting_retries=0 if waiting is None else waiting.count,
        next_retry_in_s=next_in,
        suspects=suspects.count,
        suspect_tasks=tuple(_entry(r, now, r.created_at) for r in suspects.records),
        sleeping=0 if parked is None else parked.count,
        next_wake_in_s=wake_in,
        unserved=unserved,
    )


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def _due(seconds: float) -> str:
    """When the next one is due: an overdue one (clamped to 0) is due now, not "in 0.0s"."""
    return "due now (the reconciler wakes it)" if seconds <= 0 else f"due in {_age(seconds)}"


def render_store_status(status: StoreStatus, where: str) -> str:
    """The status as a few aligned lines of text."""
    lines = [f"custody store {where}"]
    for state, count in status.counts.items():
        lines.append(f"  {state:<10} {count:>8}")
    lines.append(f"  {'in custody':<10} {status.in_custody:>8}")
    if status.waiting_retries:
        due = "" if status.next_retry_in_s is None else f", next {_due(status.next_retry_in_s)}"
        lines.append(f"waiting for a retry: {status.waiting_retries} pending{due}")
    if status.sleeping:
        wake = (
            "" if status.next_wake_in_s is None else f", the next is {_due(status.next_wake_in_s)}"
        )
        lines.append(f"parked runs waiting to wake: {status.sleeping}{wake}")
    for queue, n in status.unserved.items():
        lines.append(
            f"queue {queue}: {n} pending, no live worker serves it "
            f"(start one with --queues {queue})"
        )
    if status.suspects:
        lines.append(
            f"suspects (in flight when a worker process died; each runs {SUSPECTS_RUN}): "
            f"{status.suspects}"
        )
        lines.extend(
            f"  {e.id}  {e.state.value}  crashes {e.crash_count} "
            f"({e.crashes_alone} alone)  {run_words(e.attempt, e.crash_count)}"
            + (
                f"  quarantine deaths {e.quarantine_deaths} (last: {e.last_quarantine_death})"
                if e.quarantine_deaths
                else ""
            )
            for e in status.suspect_tasks
        )
    lines.append("oldest in flight:" if status.oldest_in_flight else "nothing in flight")
    lines.extend(_rows(status.oldest_in_flight, dead=False))
    if status.counts[CustodyState.DEAD.value]:
        dead = status.counts[CustodyState.DEAD.value]
        told = (
            f"{status.dead_unreported} not yet reported to the gateway"
            if status.dead_unreported
            else "all reported to the gateway"
        )
        lines.append(f"dead letters: {dead} ({told}), newest first:")
        lines.extend(_rows(status.dead_letters, dead=True))
    else:
        lines.append("no dead letters")
    return "\n".join(lines)


def _rows(entries: Sequence[StatusEntry], *, dead: bool) -> list[str]:
    rows = []
    for e in entries:
        if dead:
            rows.append(
                f"  {e.id}  {_age(e.age_s)} ago  {run_words(e.attempt, e.crash_count)}: {e.reason}"
            )
        else:
            owner = f" by {e.owner}" if e.owner else ""
            rows.append(
                f"  {e.id}  {e.state.value}{owner}  age {_age(e.age_s)}  "
                f"{run_words(e.attempt, e.crash_count)}"
            )
    return rows
