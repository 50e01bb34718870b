"""One frame for both backends' custody moves: check the arguments, run the operation, log.

So a call is checked and logged alike on SQLite and PostgreSQL, and each backend's custody
part (``_custody.py``) holds its operations alone (the ``_name`` methods: SQL and transaction).
Reads with nothing to check (``workers``, ``counts``) are the part's own, declared here.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import attrs

from ..custody import _log as _clog
from ..custody._children import check_not_child
from ..custody._crashes import (
    DEFAULT_MAX_QUARANTINE_DEATHS,
    Expired,
    ExpiryOutcome,
    check_max_crashes_alone,
    check_max_quarantine_deaths,
    expiry_outcome,
)
from ..custody._outage import expiry_cutoff
from ..custody._records import (
    WORKER_ROLES,
    JournalEntry,
    LeaseExpiry,
    PoolView,
    StallCandidate,
    Suspects,
    WaitingRetries,
    WorkerInfo,
    WorkerRole,
)
from ..custody._rooms import (
    DEFAULT_ROOM_POLICY,
    RoomPolicy,
    check_debounce,
    check_room_policy,
)
from ..custody._rules import (
    DEFAULT_QUEUES,
    Claim,
    CustodyState,
    Result,
    Task,
    TaskRecord,
    body_conflicts,
    check_claim_limit,
    check_delivery_lease,
    check_retry_after,
    check_task_id,
    check_worker,
    queues_of,
)
from ._common import (
    check_limit,
    check_permanent,
    check_reason,
    complete_args,
    fence_args,
    ingest_headers,
    ring_for_children,
)
from ._host import Host

Moves = dict[str, CustodyState]
"""An operator's moves or reads: task id -> the state it left (or was seen in)."""


@attrs.define(eq=False)
class CustodyFrame(abc.ABC):
    """The custody moves of a store (ingest, lead, liveness, worker, stall notices,
    reconciler, delivery, dead-letter notices, reads), each around the backend part's
    ``_name`` operation.

    A backend part implements every abstract ``_name`` (and the reads with nothing to check);
    an operation that refuses (a stale lease, a conflict) raises, and nothing is logged."""

    host: Host
    """The store's settings, reach and work bell (``_host``)."""
    rings_at_commit: ClassVar[bool] = False
    """Does the backend ring the work bell itself as an ingest's commit is done (before the
    ack's sync)? Otherwise ``ingest_many`` rings it once the ingest returns."""

    def _settled(
        self, rows: Iterable[Sequence[Any]], now: float, *, restarted: bool
    ) -> list[tuple[Expired, ExpiryOutcome]]:
        """Each expired lease read (``id, owner, attempt, lease_until, suspect, crash_count,
        crashes_alone, last_beat, run_no, quarantined, waiting_for``) with what
        ``custody._crashes`` decides for it."""
        settled = []
        for id, owner, attempt, until, suspect, crashes, alone, beat, run, q, key in rows:
            e = Expired(
                id, owner, attempt, until, bool(suspect), crashes, alone, beat, run, bool(q), key
            )
            o = expiry_outcome(
                e,
                now=now,
                lease_s=self.host.lease_s,
                max_attempts=self.host.max_attempts,
                max_crashes_alone=self.host.max_crashes_alone,
                restarted=restarted,
            )
            settled.append((e, o))
        return settled

    # -- ingest -------------------------------------------------------------------------------

    async def ingest(
        self,
        task: Task,
        *,
        room_policy: RoomPolicy = DEFAULT_ROOM_POLICY,
        debounce_s: float = 0.0,
    ) -> bool:
        [new] = await self.ingest_many([task], room_policy=room_policy, debounce_s=debounce_s)
        return new

    async def ingest_many(
        self,
        tasks: Sequence[Task],
        *,
        room_policy: RoomPolicy = DEFAULT_ROOM_POLICY,
        debounce_s: float = 0.0,
    ) -> list[bool]:
        policy, debounce = check_room_policy(room_policy), check_debounce(debounce_s)
        headers = [ingest_headers(task, self.host.max_body_bytes) for task in tasks]  # all or none
        for task in tasks:
            check_not_child(task.headers, f"task {task.id!r}")
        if not tasks:
            return []
        new, superseded = await self._ingest_many(tasks, headers, policy, debounce)
        _clog.ingested((task.id for task in tasks), new)
        for id, why in superseded:
            _clog.moved(id, None, CustodyState.RESULT, reason=why)
        if any(new) and not self.rings_at_commit:
            self.host.work_bell.ring()
        return new

    @abc.abstractmethod
    async def _ingest_many(
        self, tasks: Sequence[Task], headers: Sequence[str], policy: RoomPolicy, debounce: float
    ) -> tuple[list[bool], list[tuple[str, str]]]:
        """(new? per task, (id, reason) per task a newer one ended: a ``replace`` superseded
        it, or, with a ``debounce`` (seconds, issue #52), it was still waiting out its own
        when a newer message of its room came: ``burst_reason``). With a debounce, each
        room's newest new task may not be claimed before now + ``debounce``."""

    async def body_conflicts(self, tasks: Sequence[Task]) -> list[bool]:
        stored = await self._bodies(sorted({t.id for t in tasks})) if tasks else {}
        return body_conflicts(tasks, stored)

    @abc.abstractmethod
    async def _bodies(self, ids: Sequence[str]) -> Mapping[str, str]:
        """The stored body of each of ``ids`` that exists."""

    # -- lead ---------------------------------------------------------------------------------

    async def pending(self, *, limit: int = 100) -> Sequence[Task]:
        return await self._pending(check_limit(limit), self.host.clock())

    @abc.abstractmethod
    async def _pending(self, limit: int, now: float) -> Sequence[Task]: ...

    async def assign(self, id: str, worker: str) -> None:
        check_task_id(id)
        check_worker(worker)
        await self._assign(id, worker, self.host.clock())
        _clog.moved(id, CustodyState.PENDING, CustodyState.ASSIGNED, worker=worker)

    @abc.abstractmethod
    async def _assign(self, id: str, worker: str, now: float) -> None:
        """Raises ``CustodyConflict`` (saying why) unless the task moved."""

    async def unassign(self, id: str, worker: str) -> bool:
        check_task_id(id)
        check_worker(worker)
        done = await self._unassign(id, worker, self.host.clock())
        if done:
            _clog.moved(id, CustodyState.ASSIGNED, CustodyState.PENDING, worker=worker)
        return done

    @abc.abstractmethod
    async def _unassign(self, id: str, worker: str, now: float) -> bool: ...

    async def return_outranked(self, ahead: str, *, limit: int = 100) -> Sequence[str]:
        ids = await self._return_outranked(
            check_task_id(ahead), check_limit(limit), self.host.clock()
        )
        for id in ids:
            _clog.moved(id, CustodyState.ASSIGNED, CustodyState.PENDING, reason=f"behind {ahead}")
        return ids

    @abc.abstractmethod
    async def _return_outranked(self, ahead: str, limit: int, now: float) -> list[str]:
        """``stores._outranked``: the ids given back (the worst placed ``limit``)."""

    async def assign_many(self, pairs: Sequence[tuple[str, str]]) -> list[bool]:
        checked = Pairs.of(pairs)
        if not checked.checked:
            return []
        moved = await self._assign_many(checked.unique, self.host.clock())
        _clog.assigned(checked.unique, moved)
        return checked.answers(moved)

    @abc.abstractmethod
    async def _assign_many(self, pairs: Sequence[tuple[str, str]], now: float) -> set[str]:
        """Assign each ``(id, worker)`` (ids unique) that is pending; the ids that moved."""

    async def return_assignments(self, worker: str) -> Sequence[str]:
        check_worker(worker)
        ids = await self._return_assignments(worker, self.host.clock())
        _clog.returned(ids, CustodyState.ASSIGNED, worker=worker, why="assignment given back")
        return ids

    @abc.abstractmethod
    async def _return_assignments(self, worker: str, now: float) -> list[str]: ...

    async def pool_view(
        self,
        *,
        pending_limit: int = 1000,
        skip_rooms: Collection[str] = (),
        skip_queues: Collection[str] = (),
    ) -> PoolView:
        check_limit(pending_limit, "pending_limit")
        for name, value in (("skip_rooms", skip_rooms), ("skip_queues", skip_queues)):
            if isinstance(value, str) or not all(isinstance(r, str) for r in value):
                raise TypeError(f"{name} must be a collection of str, got {value!r:.80}")
        return await self._pool_view(
            self.host.clock(), pending_limit, sorted(skip_rooms), sorted(skip_queues)
        )

    @abc.abstractmethod
    async def _pool_view(
        self, at: float, pending_limit: int, skip: list[str], skip_queues: list[str]
    ) -> PoolView:
        """The view; its pending tasks of the queues served by a worker that beat within the
        lease (any queue while none did), none of ``skip`` (rooms) or ``skip_queues``."""

    # -- liveness -----------------------------------------------------------------------------

    async def beat(
        self,
        worker: str,
        role: WorkerRole,
        capacity: int,
        *,
        queues: Sequence[str] = DEFAULT_QUEUES,
    ) -> Sequence[WorkerInfo]:
        check_worker(worker)
        if role not in WORKER_ROLES:
            raise ValueError(f"role must be 'lead' or 'worker', got {role!r}")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"capacity must be an int >= 0, got {capacity!r}")
        served = queues_of(queues)
        kept = None if served == DEFAULT_QUEUES else ",".join(served)
        return await self._beat(worker, role, capacity, self.host.clock(), kept)

    @abc.abstractmethod
    async def _beat(
        self, worker: str, role: WorkerRole, capacity: int, now: float, queues: str | None
    ) -> list[WorkerInfo]:
        """Upsert the member's beat (``queues``: comma-joined, None for the default queue)."""

    async def remove_worker(self, worker: str) -> bool:
        return await self._remove_worker(check_worker(worker))

    @abc.abstractmethod
    async def _remove_worker(self, worker: str) -> bool: ...

    # -- worker -------------------------------------------------------------------------------

    async def claim(
        self, worker: str, *, leaderless: bool = False, queues: Sequence[str] = DEFAULT_QUEUES
    ) -> Claim | None:
        claims = await self.claim_many(worker, 1, leaderless=leaderless, queues=queues)
        return claims[0] if claims else None

    async def claim_many(
        self,
        worker: str,
        limit: int,
        *,
        leaderless: bool = False,
        quarantine: int | None = None,
        queues: Sequence[str] = DEFAULT_QUEUES,
    ) -> Sequence[Claim]:
        check_worker(worker)
        served = queues_of(queues)
        check_claim_limit(limit)
        if quarantine is not None and (
            isinstance(quarantine, bool) or not isinstance(quarantine, int) or quarantine < 0
        ):
            raise ValueError(f"quarantine must be None or an int >= 0, got {quarantine!r}")
        now = self.host.clock()
        until = now + self.host.lease_s
        claims = await self._claim_many(worker, limit, leaderless, now, until, quarantine, served)
        _clog.claimed(claims, worker)
        return claims

    @abc.abstractmethod
    async def _claim_many(
        self,
        worker: str,
        limit: int,
        leaderless: bool,
        now: float,
        until: float,
        quarantine: int | None,
        queues: tuple[str, ...],
    ) -> list[Claim]:
        """With ``quarantine`` a number: up to that many suspects first (``Claim.suspect``,
        marked quarantined in the store), then ordinary work for the rest of ``limit``;
        ``None``: the rule of suspects running alone in their process. Pending tasks and
        suspects only of ``queues``; assignments are the lead's, already matched."""

    async def renew(self, claim: Claim) -> Claim:
        fence_args(claim)
        now = self.host.clock()
        until = await self._renew(claim, now, now + self.host.lease_s)
        return attrs.evolve(claim, lease_until=until)

    @abc.abstractmethod
    async def _renew(self, claim: Claim, now: float, until: float) -> float:
        """The lease's new end; raises ``StaleLease`` (``stale_lease``) if fenced out."""

    async def complete(self, claim: Claim, body: str, *, no_send: bool = False) -> None:
        complete_args(claim, body, self.host.max_body_bytes)
        check_no_send(no_send)
        await self._complete(claim, body, no_send, self.host.clock())
        _clog.left_claim(claim, CustodyState.RESULT)
        ring_for_children(self.host, [claim])

    @abc.abstractmethod
    async def _complete(self, claim: Claim, body: str, no_send: bool, now: float) -> None:
        """Raises ``StaleLease`` (``stale_lease``) if fenced out."""

    async def complete_many(
        self, outcomes: Sequence[tuple[Claim, str]], *, no_send: bool = False
    ) -> list[bool]:
        check_no_send(no_send)
        fences = [complete_args(claim, body, self.host.max_body_bytes) for claim, body in outcomes]
        if not fences:
            return []
        items = [(*fence, body) for fence, (_, body) in zip(fences, outcomes, strict=True)]
        done = await self._complete_many(items, no_send, self.host.clock())
        for (claim, _), moved in zip(outcomes, done, strict=True):
            if moved:
                _clog.left_claim(claim, CustodyState.RESULT)
        ring_for_children(
            self.host, [claim for (claim, _), moved in zip(outcomes, done, strict=True) if moved]
        )
        return done

    @abc.abstractmethod
    async def _complete_many(
        self, items: Sequence[tuple[str, int, str, str]], no_send: bool, now: float
    ) -> list[bool]:
        """Store each ``(worker, run, id, body)`` under its fence; True per item stored
        (a repeat of an item stored earlier in the call is False)."""

    async def fail(
        self,
        claim: Claim,
        reason: str,
        *,
        retry_after: float = 0.0,
        permanent: bool = False,
    ) -> CustodyState:
        fence_args(claim)
        reason = self.host.stored_text(check_reason(reason))
        delay = check_retry_after(retry_after)
        check_permanent(permanent)
        now = self.host.clock()
        not_before = now + delay if delay > 0 else None
        dead, why = await self._fail(claim, reason, permanent, not_before, now)
        target = CustodyState.DEAD if dead else CustodyState.PENDING
        if dead:
            ring_for_children(self.host, [claim])
        _clog.left_claim(
            claim,
            target,
            reason=why if not_before is None else f"{why}; retry in {delay:.3f}s",
            level=None if dead else logging.WARNING,
        )
        return target

    @abc.abstractmethod
    async def _fail(
        self, claim: Claim, reason: str, permanent: bool, not_before: float | None, now: float
    ) -> tuple[bool, str]:
        """(dead?, the reason stored) by ``fail_outcome``, read under the fence in the same
        transaction; raises ``StaleLease`` (``stale_lease``) if fenced out."""

    async def quarantine_death(
        self, claim: Claim, death: str, *, max_deaths: int = DEFAULT_MAX_QUARANTINE_DEATHS
    ) -> CustodyState:
        fence_args(claim)
        death = self.host.stored_text(check_reason(death))
        check_max_quarantine_deaths(max_deaths)
        state, why = await self._quarantine_death(claim, death, max_deaths, self.host.clock())
        _clog.left_claim(
            claim, state, reason=why, level=None if state is CustodyState.DEAD else logging.WARNING
        )
        return state

    @abc.abstractmethod
    async def _quarantine_death(
        self, claim: Claim, death: str, max_deaths: int, now: float
    ) -> tuple[CustodyState, str]:
        """(the new state, the reason stored) by ``quarantine_death_outcome``, read under the
        fence in the same transaction; raises ``StaleLease`` (``stale_lease``) if fenced out."""

    async def release(self, claim: Claim) -> None:
        fence_args(claim)
        await self._release(claim, self.host.clock())
        _clog.moved(
            claim.task.id,
            CustodyState.CLAIMED,
            CustodyState.PENDING,
            worker=claim.worker,
            reason="released unfinished",
        )

    @abc.abstractmethod
    async def _release(self, claim: Claim, now: float) -> None:
        """Raises ``StaleLease`` (``stale_lease``) if fenced out."""

    async def recover_claims(self, worker: str) -> Sequence[LeaseExpiry]:
        check_worker(worker)
        expiries = await self._recover_claims(worker, self.host.clock())
        _clog.expired(expiries)
        return expiries

    @abc.abstractmethod
    async def _recover_claims(self, worker: str, now: float) -> list[LeaseExpiry]: ...

    # -- stall notices ------------------------------------------------------------------------

    async def stall_candidates(
        self, older_than: float, *, worker: str | None = None, limit: int = 1000
    ) -> Sequence[StallCandidate]:
        check_limit(limit)
        if worker is not None:
            check_worker(worker)
        return await self._stall_candidates(older_than, worker, limit)

    @abc.abstractmethod
    async def _stall_candidates(
        self, older_than: float, worker: str | None, limit: int
    ) -> list[StallCandidate]: ...

    async def mark_stall_notified(self, id: str) -> bool:
        return await self._mark_stall_notified(check_task_id(id), self.host.clock())

    @abc.abstractmethod
    async def _mark_stall_notified(self, id: str, now: float) -> bool: ...

    async def clear_stall_notice(self, id: str) -> None:
        await self._clear_stall_notice(check_task_id(id))

    @abc.abstractmethod
    async def _clear_stall_notice(self, id: str) -> None: ...

    async def prune_stall_notices(self, *, limit: int = 10_000) -> int:
        return await self._prune_stall_notices(check_limit(limit))

    @abc.abstractmethod
    async def _prune_stall_notices(self, limit: int) -> int: ...

    # -- reconciler ---------------------------------------------------------------------------

    async def expire_leases(self, *, limit: int = 10_000) -> Sequence[LeaseExpiry]:
        expiries = await self._expire_leases(check_limit(limit), self.host.clock())
        _clog.expired(expiries)
        return expiries

    @abc.abstractmethod
    async def _expire_leases(self, limit: int, now: float) -> list[LeaseExpiry]: ...

    def _expiry_cutoff(self, now: float, server_started: float | None = None) -> float | None:
        """``custody._outage.expiry_cutoff`` from the later of this process's last return of
        the store and ``server_started`` (when the server last started: an outage for all)."""
        backs = [t for t in (self.host.reach.back_at, server_started) if t is not None]
        return expiry_cutoff(now, self.host.lease_s, max(backs) if backs else None)

    # -- delivery -----------------------------------------------------------------------------

    async def ready_results(
        self, *, limit: int = 100, holder: str | None = None, lease_s: float | None = None
    ) -> Sequence[Result]:
        check_limit(limit)
        lease = check_delivery_lease(holder, lease_s)
        return await self._ready_results(limit, lease)

    @abc.abstractmethod
    async def _ready_results(self, limit: int, lease: tuple[str, float] | None) -> list[Result]: ...

    async def mark_delivered(self, id: str) -> None:
        check_task_id(id)
        if await self._mark_delivered(id, self.host.clock()):
            _clog.moved(id, CustodyState.RESULT, CustodyState.DELIVERED)

    @abc.abstractmethod
    async def _mark_delivered(self, id: str, now: float) -> bool:
        """True if it moved, False if already delivered; else raises ``CustodyConflict``."""

    async def mark_delivered_many(self, ids: Sequence[str]) -> list[bool]:
        checked = [check_task_id(id) for id in ids]
        if not checked:
            return []
        done, moved = await self._mark_delivered_many(checked, self.host.clock())
        for id in moved:
            _clog.moved(id, CustodyState.RESULT, CustodyState.DELIVERED)
        return done

    @abc.abstractmethod
    async def _mark_delivered_many(
        self, ids: Sequence[str], now: float
    ) -> tuple[list[bool], list[str]]:
        """(delivered now? per id, the ids this call moved)."""

    async def dead_letter(self, id: str, reason: str) -> None:
        check_task_id(id)
        reason = self.host.stored_text(check_reason(reason))
        moved, source = await self._dead_letter(id, reason, self.host.clock())
        if moved:
            _clog.moved(id, source, CustodyState.DEAD, reason=reason)

    @abc.abstractmethod
    async def _dead_letter(
        self, id: str, reason: str, now: float
    ) -> tuple[bool, CustodyState | None]:
        """(moved?, the state it left if known); raises ``CustodyConflict`` unless it moved
        or was dead already."""

    # -- dead-letter notices ------------------------------------------------------------------

    async def unreported_dead(self, *, limit: int = 100) -> Sequence[TaskRecord]:
        return await self._unreported_dead(check_limit(limit))

    @abc.abstractmethod
    async def _unreported_dead(self, limit: int) -> list[TaskRecord]: ...

    async def mark_dead_reported(self, ids: Sequence[str]) -> list[bool]:
        checked = [check_task_id(id) for id in ids]
        if not checked:
            return []
        return await self._mark_dead_reported(checked, self.host.clock())

    @abc.abstractmethod
    async def _mark_dead_reported(self, ids: Sequence[str], now: float) -> list[bool]: ...

    # -- reads --------------------------------------------------------------------------------

    async def state(self, id: str) -> CustodyState | None:
        return await self._state(check_task_id(id))

    @abc.abstractmethod
    async def _state(self, id: str) -> CustodyState | None: ...

    async def get(self, id: str) -> TaskRecord | None:
        return await self._get(check_task_id(id))

    @abc.abstractmethod
    async def _get(self, id: str) -> TaskRecord | None: ...

    async def records(
        self, state: CustodyState, *, limit: int = 20, newest_first: bool = False
    ) -> Sequence[TaskRecord]:
        return await self._records(CustodyState(state), check_limit(limit), newest_first)

    @abc.abstractmethod
    async def _records(
        self, state: CustodyState, limit: int, newest_first: bool
    ) -> list[TaskRecord]: ...

    async def journal(self, id: str) -> Sequence[JournalEntry]:
        return await self._journal(check_task_id(id))

    @abc.abstractmethod
    async def _journal(self, id: str) -> list[JournalEntry]: ...

    async def suspects(self, *, limit: int = 100) -> Suspects:
        return await self._suspects(check_limit(limit))

    @abc.abstractmethod
    async def _suspects(self, limit: int) -> Suspects: ...

    # -- the backend's own (nothing to check) -------------------------------------------------

    @abc.abstractmethod
    async def workers(self) -> Sequence[WorkerInfo]: ...

    @abc.abstractmethod
    async def counts(self) -> Mapping[CustodyState, int]: ...

    @abc.abstractmethod
    async def in_flight(self) -> Sequence[str]: ...

    @abc.abstractmethod
    async def waiting_retries(self) -> WaitingRetries: ...

    @abc.abstractmethod
    async def pending_by_queue(self) -> dict[str, int]: ...

    @abc.abstractmethod
    async def unreported_dead_count(self) -> int: ...


def lease_expiry(e: Expired, o: ExpiryOutcome, now: float) -> LeaseExpiry:
    """What a settled lease reports (``CustodyFrame._settled``)."""
    return LeaseExpiry(e.id, e.owner, e.attempt, e.lease_until, now, o.state, o.reason, o.crash)


def check_settings(
    lease_s: float, max_attempts: int, max_body_bytes: int, max_crashes_alone: int
) -> None:
    """What every backend's ``open`` checks first."""
    if not lease_s > 0:
        raise ValueError(f"lease_s must be > 0, got {lease_s!r}")
    check_limit(max_attempts, "max_attempts")
    check_limit(max_body_bytes, "max_body_bytes")
    check_max_crashes_alone(max_crashes_alone)


def check_no_send(no_send: object) -> bool:
    if not isinstance(no_send, bool):
        raise TypeError(f"no_send must be a bool, got {type(no_send).__name__}")
    return no_send


@attrs.frozen
class Pairs:
    """``(id, worker)`` pairs to assign, checked: each id's first pair decides (``unique``, in
    order), a repeated id's later pairs answer False."""

    checked: list[tuple[str, str]]
    unique: list[tuple[str, str]]
    _first: dict[str, int]
    """Each id's index in ``checked``."""

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str]]) -> Pairs:
        checked = [(check_task_id(id), check_worker(worker)) for id, worker in pairs]
        first: dict[str, int] = {}
        for n, (id, _) in enumerate(checked):
            first.setdefault(id, n)
        return cls(checked, [checked[n] for n in sorted(first.values())], first)

    def answers(self, moved: Collection[str]) -> list[bool]:
        """Per pair given: did it assign (its id moved, and it was that id's first pair)?"""
        return [id in moved and self._first[id] == n for n, (id, _) in enumerate(self.checked)]
