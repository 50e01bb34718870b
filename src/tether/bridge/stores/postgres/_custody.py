"""The custody part of a PostgreSQL store: ingest, the lead's moves, liveness, claims and their
outcomes, stall notices, the reconciler's expiries, delivery, dead-letter notices and reads.

Each operation makes one ``trio.to_thread`` hop (``_db.PostgresDb.run``) with a pooled
autocommit connection, mostly one statement (``_sql``: the fence in the ``WHERE``, claims with
``FOR UPDATE SKIP LOCKED``); ``stores._frame`` checks its arguments and logs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ...custody import _log as _clog
from ...custody._crashes import process_prefix, quarantine_death_outcome
from ...custody._records import (
    Assignment,
    Hand,
    JournalEntry,
    LeaseExpiry,
    PendingTask,
    PoolView,
    StallCandidate,
    Suspects,
    WaitingRetries,
    WorkerInfo,
    WorkerRole,
)
from ...custody._rooms import (
    BURST_PREFIX,
    SUPERSEDED_PREFIX,
    RoomPolicy,
    burst_reason,
    superseded_reason,
)
from ...custody._rules import (
    PRIORITY_RANK,
    Claim,
    CustodyConflict,
    CustodyState,
    Result,
    Task,
    TaskRecord,
)
from ...custody._tenants import NO_TURN
from .. import _outranked as outranked
from .._asks_frame import log_answers
from .._common import (
    RANK_PRIORITY,
    FoundState,
    assign_refused,
    fail_outcome,
    journal_entry,
    stale_lease,
)
from .._frame import CustodyFrame, Pairs, lease_expiry
from .._rooms_sql import SUPERSEDED_OWNER
from ._asks import answers
from ._connection import Conn
from ._conversations import lock_rooms_sql
from ._db import PostgresDb
from ._listen import PENDING, RESULT, assigned_payload
from ._merge import CompletionMerge, StatementMerge
from ._rows import (
    claim_of,
    complete_params,
    decode,
    encode,
    fence,
    one,
    record_of,
    result_of,
    seen,
    task_of,
)
from ._sql import GENERIC_PLANS, QUEUE_WALK, Sql
from ._tenants import turns as tenant_turns


@attrs.define(eq=False)
class PostgresCustody(CustodyFrame):
    """The custody part on the store's ``PostgresDb``."""

    db: PostgresDb
    read_only: bool
    """Opened to inspect: ``counts`` reads without folding (issue #56)."""
    completions: CompletionMerge = attrs.field(init=False)
    """Concurrent ``complete_many`` calls of this process share statements (``_merge``)."""
    claims: StatementMerge[tuple[str, int, float, float, int | None, list[str]], list[Claim]] = (
        attrs.field(init=False)
    )
    """So do its workers' claims of their assignments."""
    beats: StatementMerge[tuple[str, WorkerRole, int, float, str | None], list[WorkerInfo]] = (
        attrs.field(init=False)
    )
    """And its members' beats (they beat on one grid: one statement a beat for the process)."""

    def __attrs_post_init__(self) -> None:
        self.completions = CompletionMerge(self._complete_rows)
        self.claims = StatementMerge(self._claim_assigned)
        self.beats = StatementMerge(self._beat_many)

    # -- ingest -------------------------------------------------------------------------------

    async def _ingest_many(
        self, tasks: Sequence[Task], headers: Sequence[str], policy: RoomPolicy, debounce: float
    ) -> tuple[list[bool], list[tuple[str, str]]]:
        ids = [task.id for task in tasks]
        rooms = [task.room for task in tasks]
        params: dict[str, Any] = {"ids": ids, "bodies": [encode(t.body) for t in tasks]}
        params.update(rooms=rooms, ranks=[PRIORITY_RANK[t.priority] for t in tasks])
        params.update(
            headers=list(headers), now=self.host.clock(), chan=self.db.channel, policy=policy
        )
        params.update(owner=SUPERSEDED_OWNER, prefix=SUPERSEDED_PREFIX, burst=BURST_PREFIX)
        params.update(debounce=debounce)
        tenants = [task.tenant for task in tasks]
        params.update(tenants=tenants, fairs=[NO_TURN] * len(tasks))
        params.update(queues=[t.queue for t in tasks], parents=[t.parent for t in tasks])
        sql, supersede, turns_sql = self.db.sql.ingest, self.db.sql.supersede, self.db.sql.turns
        burst = self.db.sql.burst
        s, chan = self.db.s, self.db.channel
        replace = policy == "replace" and any(room is not None for room in rooms)

        lock = lock_rooms_sql(self.db.s) if any(room is not None for room in rooms) else None

        def op(conn: Conn) -> tuple[list[bool], list[tuple[str, str]]]:
            with conn.transaction():  # replace: the new tasks and what they supersede at once
                if lock is not None:  # the rooms' conversations first, in order (issue #34)
                    conn.execute(lock, params)
                if any(tenant is not None for tenant in tenants):
                    params["fairs"] = tenant_turns(
                        conn.execute(turns_sql, params).fetchall(), params
                    )
                inserted = {r[0] for r in conn.execute(sql, params).fetchall()}
                fresh_rooms = _fresh_rooms(ids, rooms, inserted)
                # an open ask's answer runs no run of its own (issue #36)
                answered[:] = (
                    answers(conn, s, chan, fresh_rooms, params["now"]) if fresh_rooms else []
                )
                moved: list[tuple[str, str]] = []
                runs = inserted - {answer for _, answer in answered}
                fresh = {**params, "ids": sorted(runs)} if runs and (debounce or replace) else {}
                if debounce and runs and any(room is not None for room in rooms):
                    moved += [(id, burst_reason(by)) for id, by in conn.execute(burst, fresh)]
                if replace and runs:
                    moved += [
                        (id, superseded_reason(by))
                        for id, by in conn.execute(supersede, fresh).fetchall()
                    ]
            first: list[bool] = []
            for id in ids:
                first.append(id in inserted)
                inserted.discard(id)  # a duplicate later in the batch is a replay
            return first, moved

        answered: list[tuple[str, str]] = []
        outcome = await self.db.run(op, promise=True)  # the ack follows
        log_answers(answered)
        return outcome

    async def _bodies(self, ids: Sequence[str]) -> Mapping[str, str]:
        sql = self.db.sql.bodies
        rows = await self.db.run(lambda c: c.execute(sql, {"ids": list(ids)}).fetchall())
        return {id: decode(body) for id, body in rows}

    # -- lead ---------------------------------------------------------------------------------

    async def _pending(self, limit: int, now: float) -> Sequence[Task]:
        sql = self.db.sql.pending
        params = {"limit": limit, "now": now}
        return await self.db.run(lambda conn: [task_of(r) for r in conn.execute(sql, params)])

    async def _assign(self, id: str, worker: str, now: float) -> None:
        params = {"id": id, "worker": worker, "now": now}
        params.update(chan=self.db.channel, payload=assigned_payload(worker))
        _, before = await self.db.cas(self.db.sql.assign, params)
        if before is not None:
            if before.state is CustodyState.PENDING:  # pending, but waiting out a backoff
                record = await self.get(id)
                if record is not None:
                    raise CustodyConflict(assign_refused(record, worker, now))
            raise CustodyConflict(
                f"cannot assign task {id!r} to {worker!r}: it is {before.state.value}"
                f"{before.owner_note}, not pending"
            )

    async def _return_outranked(self, ahead: str, limit: int, now: float) -> list[str]:
        sql = outranked.postgres(self.db.sql.s)
        params = {"ahead": ahead, "limit": limit, "now": now, "chan": self.db.channel}
        return await self.db.run(lambda conn: [r[0] for r in conn.execute(sql, params)])

    async def _unassign(self, id: str, worker: str, now: float) -> bool:
        params = {"id": id, "worker": worker, "now": now, "chan": self.db.channel}
        params["payload"] = PENDING
        _, before = await self.db.cas(self.db.sql.unassign, params)
        return before is None

    async def _assign_many(self, pairs: Sequence[tuple[str, str]], now: float) -> set[str]:
        params = self._assign_params(pairs, now, quiet=[])
        sql = self.db.sql.assign_many

        def op(conn: Conn) -> set[str]:
            with conn.pipeline(), conn.transaction():  # one round trip
                conn.execute(QUEUE_WALK)  # the rows by their keys (``PENDING_BY_KEY``)
                assigned = conn.execute(sql, params)
            return {r[0] for r in assigned.fetchall()}

        return await self.db.run(op)

    def _assign_params(
        self, pairs: Sequence[tuple[str, str]], now: float, quiet: list[str]
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"ids": [i for i, _ in pairs], "workers": [w for _, w in pairs]}
        params.update(now=now, chan=self.db.channel, quiet=quiet)
        return params

    async def assign_and_claim(
        self, pairs: Sequence[tuple[str, str]], hands: Mapping[str, Hand]
    ) -> tuple[list[bool], dict[str, list[Claim]]]:
        """``assign_many``, then, in the same transaction and round trip, the claims of the
        lead's own process's workers (``hands``, those that take ordinary work here) of what
        is now assigned to them, as their own merged claim would take it
        (``claim_assigned_for_many``). Those workers are rung in the process, not notified.
        A suspect in play leaves them to claim for themselves (nothing is claimed here)."""
        checked = Pairs.of(pairs)
        unique = checked.unique
        now = self.host.clock()
        until = now + self.host.lease_s
        wanted = {w: h.slots for w, h in sorted(hands.items()) if h.slots and not h.quarantines}
        params = self._assign_params(unique, now, quiet=sorted(hands))
        claim: dict[str, Any] = {"workers": list(wanted), "limits": list(wanted.values())}
        claim.update(now=now, until=until)
        sql = self.db.sql

        def op(conn: Conn) -> tuple[set[str], dict[str, list[Claim]]]:
            with conn.pipeline(), conn.transaction():  # one round trip
                conn.execute(QUEUE_WALK)  # the claims' walk; the assignment by key
                assigned = conn.execute(sql.assign_many, params) if unique else None
                claimed = conn.execute(sql.claim_assigned_for_many, claim) if wanted else None
            moved = set() if assigned is None else {r[0] for r in assigned.fetchall()}
            got: dict[str, list[Claim]] = {}
            for row in [] if claimed is None else claimed.fetchall():
                got.setdefault(row[-1], []).append(claim_of(row, row[-1], until))
            return moved, got

        moved, claims = await self.db.run(op)
        _clog.assigned(unique, moved)
        for worker, taken in claims.items():
            _clog.claimed(taken, worker)
        return checked.answers(moved), claims

    async def _return_assignments(self, worker: str, now: float) -> list[str]:
        params = {"worker": worker, "now": now, "chan": self.db.channel}
        sql = self.db.sql.return_assignments
        return await self.db.run(lambda conn: [r[0] for r in conn.execute(sql, params)])

    async def _pool_view(
        self, at: float, pending_limit: int, skip: list[str], skip_queues: list[str]
    ) -> PoolView:
        sql = self.db.sql.pool_view(bool(skip))
        params = {"limit": pending_limit, "skip": skip, "now": at, "lease": self.host.lease_s}
        params["skip_queues"] = skip_queues

        def op(conn: Conn) -> PoolView:
            with conn.pipeline(), conn.transaction():  # one round trip
                conn.execute(GENERIC_PLANS)
                read = conn.execute(sql, params)
            row = read.fetchone()
            assert row is not None
            pending, rooms, workers, assigned, claims, busy, next_due = row
            return PoolView(
                at=at,
                workers=tuple(WorkerInfo(*w) for w in workers or ()),
                assigned=tuple(Assignment(*a) for a in assigned or ()),
                claims=dict(claims or ()),
                pending=tuple(
                    PendingTask(id, room, RANK_PRIORITY[rank], queue)
                    for id, room, rank, queue in pending or ()
                ),
                rooms=dict(rooms or ()),
                busy_rooms=frozenset(busy or ()),
                next_due=None if next_due is None else float(next_due),
            )

        return await self.db.run(op)

    # -- liveness -----------------------------------------------------------------------------

    async def _beat(
        self, worker: str, role: WorkerRole, capacity: int, now: float, queues: str | None
    ) -> list[WorkerInfo]:
        return await self.beats.call(
            (worker, role, capacity, now, queues), kind="beat", rows=1, apart=worker
        )

    async def _beat_many(
        self, beats: Sequence[tuple[str, WorkerRole, int, float, str | None]]
    ) -> list[list[WorkerInfo]]:
        """The beats of several members in one statement; each is answered with every row."""
        params: dict[str, Any] = {"workers": [b[0] for b in beats], "roles": [b[1] for b in beats]}
        params.update(capacities=[b[2] for b in beats], now=max(b[3] for b in beats))
        params.update(queues=[b[4] for b in beats])
        sql = self.db.sql.beat_many
        members = await self.db.run(
            lambda conn: [WorkerInfo(*r) for r in conn.execute(sql, params)]
        )
        return [list(members) for _ in beats]

    async def workers(self) -> Sequence[WorkerInfo]:
        sql = self.db.sql.workers
        return await self.db.run(lambda conn: [WorkerInfo(*r) for r in conn.execute(sql)])

    async def _remove_worker(self, worker: str) -> bool:
        sql = self.db.sql.remove_worker
        return await self.db.run(lambda conn: conn.execute(sql, {"worker": worker}).rowcount == 1)

    # -- worker -------------------------------------------------------------------------------

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
        served = list(queues)
        if not leaderless:  # the pool's usual claim: merged (``_merge``)
            return await self.claims.call(
                (worker, limit, now, until, quarantine, served),
                kind="assigned",
                rows=limit,
                apart=worker,
            )
        params = _claim_params(worker, limit, now, until, leaderless=leaderless, queues=served)
        return await self.db.run(lambda conn: self._claim_on(conn, params, quarantine))

    def _claim_on(
        self,
        conn: Conn,
        params: dict[str, Any],
        quarantine: int | None = None,
        *,
        walked: bool = False,
    ) -> list[Claim]:
        """One worker's claim on ``conn`` (``params``: ``_claim_params``); ``walked``: its usual
        claim found nothing with a suspect in play (the merged statement's): go on from there."""
        sql = self.db.sql
        if quarantine is not None:
            return _claim_quarantined(conn, sql, params, quarantine)
        if walked:
            return self._beside_suspects(conn, params)
        # a suspect runs alone (custody._crashes). With no suspect in play (the usual case) a
        # claim is one statement (after ``QUEUE_WALK``, in its round trip), which claims
        # nothing once one is
        with conn.pipeline(), conn.transaction():  # one round trip
            conn.execute(QUEUE_WALK)
            claimed = conn.execute(sql.claim_many, params)
        rows = claimed.fetchall()
        if rows or not one(conn.execute(sql.suspects_in_play).fetchone()):
            return [claim_of(row, params["worker"], params["until"]) for row in rows]
        return self._beside_suspects(conn, params)

    def _beside_suspects(self, conn: Conn, params: dict[str, Any]) -> list[Claim]:
        prefix = params["prefix"]
        process_key = {"key": f"tether-process:{self.db.schema}:{prefix or params['worker']}"}
        pool_key = {"key": f"tether-suspects:{self.db.schema}"}
        return _claim_beside_suspects(conn, self.db.sql, params, process_key, pool_key)

    async def _claim_assigned(
        self, calls: Sequence[tuple[str, int, float, float, int | None, list[str]]]
    ) -> list[list[Claim]]:
        """The merged claims of several workers' assignments: one statement while no suspect
        is in play; with one in play, each worker the statement gave nothing claims as it
        would alone: suspects first into its quarantine places (``quarantine``), else beside
        the suspects (``_claim_on``)."""
        if len(calls) == 1:
            worker, limit, now, until, quarantine, served = calls[0]
            one_worker = _claim_params(worker, limit, now, until, leaderless=False, queues=served)
            return [await self.db.run(lambda conn: self._claim_on(conn, one_worker, quarantine))]
        now = max(c[2] for c in calls)
        until = max(c[3] for c in calls)
        params: dict[str, Any] = {"workers": [c[0] for c in calls], "now": now, "until": until}
        params["limits"] = [c[1] for c in calls]
        sql = self.db.sql

        def op(conn: Conn) -> list[list[Claim]]:
            with conn.pipeline(), conn.transaction():  # one round trip
                conn.execute(QUEUE_WALK)
                claimed = conn.execute(sql.claim_assigned_for_many, params)
            got: dict[str, list[Claim]] = {c[0]: [] for c in calls}
            for row in claimed.fetchall():
                got[row[-1]].append(claim_of(row, row[-1], until))
            if any(not c for c in got.values()) and one(
                conn.execute(sql.suspects_in_play).fetchone()
            ):
                for worker, limit, _, _, quarantine, served in calls:
                    if not got[worker]:
                        alone = _claim_params(
                            worker, limit, now, until, leaderless=False, queues=served
                        )
                        got[worker] = self._claim_on(conn, alone, quarantine, walked=True)
            return [got[c[0]] for c in calls]

        return await self.db.run(op)

    async def _renew(self, claim: Claim, now: float, until: float) -> float:
        params = fence(claim, now)
        params["until"] = until
        new_until, before = await self.db.cas(self.db.sql.renew, params)
        if before is not None:
            raise stale_lease(before, claim, now, "renew")
        return float(new_until)

    async def _complete(self, claim: Claim, body: str, no_send: bool, now: float) -> None:
        params = complete_params(claim, body, no_send, now, self.db.channel)
        _, before = await self.db.cas(self.db.sql.complete, params)
        if before is not None:
            raise stale_lease(before, claim, now, "complete")

    async def _complete_many(
        self, items: Sequence[tuple[str, int, str, str]], no_send: bool, now: float
    ) -> list[bool]:
        return await self.completions.complete_many(items, no_send, now)

    async def _complete_rows(
        self, items: Sequence[tuple[str, int, str, str]], no_send: bool, now: float
    ) -> set[tuple[str, int, str]]:
        """One statement for distinct fences (``completions`` merges the calls into it)."""
        params: dict[str, Any] = {"ids": [id for _, _, id, _ in items], "no_send": no_send}
        params.update(workers=[worker for worker, _, _, _ in items], now=now, payload=RESULT)
        params.update(runs=[run for _, run, _, _ in items], chan=self.db.channel)
        params.update(bodies=[encode(body) for _, _, _, body in items])
        sql = self.db.sql.complete_many
        return await self.db.run(
            lambda conn: {(worker, run, id) for id, worker, run, _ in conn.execute(sql, params)}
        )

    async def _fail(
        self, claim: Claim, reason: str, permanent: bool, not_before: float | None, now: float
    ) -> tuple[bool, str]:
        params = fence(claim, now)
        params.update(chan=self.db.channel, payload=PENDING, not_before=not_before)
        sql = self.db.sql

        def op(conn: Conn) -> tuple[bool, str] | FoundState | None:
            # the failure budget leaves out the runs lost to crashes (custody._crashes)
            with conn.transaction():
                row = conn.execute(sql.fenced_crash_count, params).fetchone()
                if row is None:
                    return seen(conn, sql.cas_state, params)
                dead, why = fail_outcome(
                    reason, claim.attempt, self.host.max_attempts, permanent, row[0]
                )
                conn.execute(sql.fail_dead if dead else sql.fail_repool, {**params, "reason": why})
                return dead, why

        outcome = await self.db.run(op)
        if not isinstance(outcome, tuple):
            raise stale_lease(outcome, claim, now, "fail")
        return outcome

    async def _quarantine_death(
        self, claim: Claim, death: str, max_deaths: int, now: float
    ) -> tuple[CustodyState, str]:
        params = fence(claim, now)
        params.update(chan=self.db.channel, payload=PENDING)
        sql = self.db.sql

        def op(conn: Conn) -> tuple[CustodyState, str] | FoundState | None:
            with conn.transaction():
                row = conn.execute(sql.fenced_quarantine_deaths, params).fetchone()
                if row is None:
                    return seen(conn, sql.cas_state, params)
                state, why = quarantine_death_outcome(
                    attempt=claim.attempt, deaths=row[0], max_deaths=max_deaths, death=death
                )
                values = {**params, "state": state.value, "reason": why, "death": death}
                conn.execute(sql.quarantine_death, values)
                return state, why

        outcome = await self.db.run(op)
        if not isinstance(outcome, tuple):
            raise stale_lease(outcome, claim, now, "record a quarantine death of")
        return outcome

    async def _release(self, claim: Claim, now: float) -> None:
        params = fence(claim, now)
        params.update(chan=self.db.channel, payload=PENDING)
        _, before = await self.db.cas(self.db.sql.release, params)
        if before is not None:
            raise stale_lease(before, claim, now, "release")

    # -- stall notices ------------------------------------------------------------------------

    async def _stall_candidates(
        self, older_than: float, worker: str | None, limit: int
    ) -> list[StallCandidate]:
        params = {"older_than": older_than, "worker": worker, "limit": limit}
        sql = self.db.sql.stall_candidates
        return await self.db.run(
            lambda conn: [StallCandidate(*r) for r in conn.execute(sql, params)]
        )

    async def _mark_stall_notified(self, id: str, now: float) -> bool:
        params = {"id": id, "now": now}
        sql = self.db.sql.mark_stall_notified
        return await self.db.run(
            lambda conn: conn.execute(sql, params).rowcount == 1, promise=True
        )  # the notice follows

    async def _clear_stall_notice(self, id: str) -> None:
        sql = self.db.sql.clear_stall_notice
        await self.db.run(lambda conn: conn.execute(sql, {"id": id}))

    async def _prune_stall_notices(self, limit: int) -> int:
        sql = self.db.sql.prune_stall_notices
        return await self.db.run(lambda conn: conn.execute(sql, {"limit": limit}).rowcount)

    # -- reconciler ---------------------------------------------------------------------------

    async def _expire_leases(self, limit: int, now: float) -> list[LeaseExpiry]:
        params = {"now": now, "limit": limit}
        return await self._settle(self.db.sql.expired_claims, params, restarted=False)

    async def _recover_claims(self, worker: str, now: float) -> list[LeaseExpiry]:
        params = {"now": now, "worker": worker}
        return await self._settle(self.db.sql.claims_of, params, restarted=True)

    async def _settle(
        self, select: str, params: Mapping[str, Any], *, restarted: bool
    ) -> list[LeaseExpiry]:
        """Read (and lock) leases with ``select``; write what ``custody._crashes`` decides."""
        now = params["now"]
        sql = self.db.sql

        def op(conn: Conn) -> list[LeaseExpiry]:
            with conn.transaction():
                query = dict(params)
                if not restarted:
                    query["cutoff"] = self._expiry_cutoff(now, self.db.restarted_at(conn, now))
                    if query["cutoff"] is None:
                        return []
                settled = self._settled(conn.execute(select, query), now, restarted=restarted)
                if not settled:
                    return []
                expired, outcomes = [e for e, _ in settled], [o for _, o in settled]
                conn.execute(
                    sql.settle_expired,
                    {
                        "ids": [e.id for e in expired],
                        "states": [o.state.value for o in outcomes],
                        "attempts": [o.attempt for o in outcomes],
                        "crashes": [o.crash_count for o in outcomes],
                        "alone": [o.crashes_alone for o in outcomes],
                        "suspects": [o.suspect for o in outcomes],
                        "reasons": [o.reason for o in outcomes],
                        "was": [e.run for e in expired],
                        "now": now,
                    },
                )
                if any(o.state is CustodyState.PENDING for o in outcomes):
                    conn.execute("SELECT pg_notify(%s, %s)", (self.db.channel, PENDING))
            return [lease_expiry(e, o, now) for e, o in settled]

        return await self.db.run(op)

    # -- delivery -----------------------------------------------------------------------------

    async def _ready_results(self, limit: int, lease: tuple[str, float] | None) -> list[Result]:
        params: dict[str, Any] = {"limit": limit}
        sql = self.db.sql.ready
        if lease is not None:
            now = self.host.clock()
            params.update(holder=lease[0], now=now, until=now + lease[1])
            sql = self.db.sql.take_results

        def op(conn: Conn) -> list[Result]:
            return [result_of(r) for r in conn.execute(sql, params)]

        return await self.db.run(op, promise=bool)  # their posts follow

    async def _mark_delivered(self, id: str, now: float) -> bool:
        _, before = await self.db.cas(self.db.sql.deliver, {"id": id, "now": now})
        if before is not None and before.state is not CustodyState.DELIVERED:
            raise CustodyConflict(
                f"cannot mark task {id!r} delivered: it is {before.state.value}, not result"
            )
        return before is None

    async def _mark_delivered_many(
        self, ids: Sequence[str], now: float
    ) -> tuple[list[bool], list[str]]:
        # delivered by a concurrent delivery is delivered all the same
        moved, already = await self._mark(
            self.db.sql.deliver_many, self.db.sql.delivered_among, ids, now
        )
        done = [id in moved or id in already for id in ids]
        return done, [id for id in dict.fromkeys(ids) if id in moved]

    async def _dead_letter(
        self, id: str, reason: str, now: float
    ) -> tuple[bool, CustodyState | None]:
        params = {"id": id, "reason": reason, "now": now}
        _, before = await self.db.cas(self.db.sql.dead_letter, params, promise=True)
        if before is not None and before.state is not CustodyState.DEAD:
            raise CustodyConflict(f"cannot dead-letter task {id!r}: it is {before.state.value}")
        return before is None, None  # the statement does not say which state it left: "?"

    # -- reads --------------------------------------------------------------------------------

    async def _state(self, id: str) -> CustodyState | None:
        sql = self.db.sql.state

        def op(conn: Conn) -> CustodyState | None:
            row = conn.execute(sql, {"id": id}).fetchone()
            return None if row is None else CustodyState(row[0])

        return await self.db.run(op)

    async def _get(self, id: str) -> TaskRecord | None:
        sql = self.db.sql.get

        def op(conn: Conn) -> TaskRecord | None:
            row = conn.execute(sql, {"id": id}).fetchone()
            return None if row is None else record_of(row)

        return await self.db.run(op)

    async def _records(
        self, state: CustodyState, limit: int, newest_first: bool
    ) -> list[TaskRecord]:
        sql = self.db.sql.records_newest if newest_first else self.db.sql.records_oldest
        params = {"state": state.value, "limit": limit}
        return await self.db.run(lambda conn: [record_of(r) for r in conn.execute(sql, params)])

    async def counts(self) -> Mapping[CustodyState, int]:
        sql, fold = self.db.sql.counts, None if self.read_only else self.db.sql.fold_counts

        def op(conn: Conn) -> dict[CustodyState, int]:
            counts = dict.fromkeys(CustodyState, 0)
            if fold is not None:
                conn.execute(fold)
            for state, n in conn.execute(sql):
                counts[CustodyState(state)] = n
            return counts

        return await self.db.run(op)

    async def in_flight(self) -> Sequence[str]:
        sql = self.db.sql.in_flight
        return await self.db.run(lambda conn: [r[0] for r in conn.execute(sql)])

    # -- dead-letter notices ------------------------------------------------------------------

    async def _unreported_dead(self, limit: int) -> list[TaskRecord]:
        sql = self.db.sql.unreported_dead
        return await self.db.run(
            lambda conn: [record_of(r) for r in conn.execute(sql, {"limit": limit})],
            promise=bool,  # a notice of each follows
        )

    async def _mark_dead_reported(self, ids: Sequence[str], now: float) -> list[bool]:
        # marked by a concurrent bridge is marked all the same
        marked, already = await self._mark(
            self.db.sql.mark_dead_reported, self.db.sql.dead_reported_among, ids, now
        )
        return [id in marked or id in already for id in ids]

    async def _mark(
        self, sql: str, marked_sql: str, ids: Sequence[str], now: float
    ) -> tuple[set[str], set[str]]:
        """Mark ``ids`` with ``sql``: (the ids it marked, those of the rest ``marked_sql`` finds
        marked already). The second is a new statement: it sees what a concurrent transaction
        that made ours miss committed."""

        def op(conn: Conn) -> tuple[set[str], set[str]]:
            marked = {r[0] for r in conn.execute(sql, {"ids": list(ids), "now": now})}
            missed = [id for id in ids if id not in marked]
            if not missed:
                return marked, set()
            return marked, {r[0] for r in conn.execute(marked_sql, {"ids": missed})}

        return await self.db.run(op)

    async def waiting_retries(self) -> WaitingRetries:
        sql = self.db.sql.waiting_retries
        params = {"now": self.host.clock()}

        def op(conn: Conn) -> WaitingRetries:
            row = conn.execute(sql, params).fetchone()
            assert row is not None
            return WaitingRetries(int(row[0]), one(row[1:]))

        return await self.db.run(op)

    async def pending_by_queue(self) -> dict[str, int]:
        sql = self.db.sql.pending_by_queue
        return await self.db.run(lambda conn: {q: int(n) for q, n in conn.execute(sql)})

    async def _journal(self, id: str) -> list[JournalEntry]:
        sql = self.db.sql.journal
        return await self.db.run(
            lambda conn: [journal_entry(row) for row in conn.execute(sql, {"id": id})]
        )

    async def _suspects(self, limit: int) -> Suspects:
        sql = self.db.sql

        def op(conn: Conn) -> Suspects:
            with conn.transaction():
                count = one(conn.execute(sql.suspects_count).fetchone())
                rows = conn.execute(sql.suspects, {"limit": limit}).fetchall()
            return Suspects(int(count or 0), tuple(record_of(r) for r in rows))

        return await self.db.run(op)

    async def unreported_dead_count(self) -> int:
        sql = self.db.sql.unreported_dead_count

        def op(conn: Conn) -> int:
            row = conn.execute(sql).fetchone()
            assert row is not None
            return int(row[0])

        return await self.db.run(op)


def _claim_params(
    worker: str, limit: int, now: float, until: float, *, leaderless: bool, queues: list[str]
) -> dict[str, Any]:
    """A claim's statement parameters (``_sql``'s ``claim_many`` and its kin); ``queues``:
    those whose pending tasks and suspects it may take."""
    params: dict[str, Any] = {"worker": worker, "leaderless": leaderless, "limit": limit}
    params["queues"] = queues
    params.update(prefix=process_prefix(worker), now=now, until=until, quarantined=False)
    return params


def _claim_quarantined(
    conn: Conn, sql: Sql, params: dict[str, Any], quarantine: int
) -> list[Claim]:
    """Suspects to run in quarantine children (custody._crashes), most crashed first, one
    statement each (each passes its room's gate), then ordinary work beside them."""
    worker, until, limit = params["worker"], params["until"], params["limit"]
    suspects: list[Claim] = []
    ordinary = None
    # pipelined: the first look for a suspect goes with BEGIN and QUEUE_WALK, the ordinary
    # claim with COMMIT (two round trips where there were four: a bridge claims this way)
    with conn.pipeline():
        with conn.transaction():
            conn.execute(QUEUE_WALK)
            for _ in range(min(quarantine, limit)):
                rows = conn.execute(sql.claim_suspect, {**params, "quarantined": True})
                got = [claim_of(r, worker, until, suspect=True) for r in rows.fetchall()]
                if not got:
                    break
                suspects += got
            rest = limit - len(suspects)
            if rest:
                ordinary = conn.execute(sql.claim_many_among_suspects, {**params, "limit": rest})
        if ordinary is not None:
            suspects += [claim_of(r, worker, until) for r in ordinary.fetchall()]
    return suspects


def _claim_beside_suspects(
    conn: Conn,
    sql: Sql,
    params: dict[str, Any],
    process_key: dict[str, str],
    pool_key: dict[str, str],
) -> list[Claim]:
    """A claim with a suspect in play: every claim of a process holds its advisory lock,
    shared; a claim that may take a suspect holds it exclusively and the pool's suspect lock
    too, so no other suspect claim, and no locked claim of its process, commits between its
    checks and its claim."""
    with conn.transaction():
        conn.execute(QUEUE_WALK)
        may_take = bool(one(conn.execute(sql.suspects_unclaimed).fetchone()))
        if may_take:
            conn.execute(sql.lock, process_key)
            conn.execute(sql.lock, pool_key)
        else:
            conn.execute(sql.lock_shared, process_key)
        flags = conn.execute(sql.suspect_flags, params).fetchone()
        assert flags is not None
        here, anywhere, waiting = flags
        if here:
            return []  # a suspect runs in this process: nothing else does
        if waiting and not anywhere:
            # the process drains, then takes the suspect alone (a claim that holds only the
            # shared lock leaves it to the next one)
            if not may_take or one(conn.execute(sql.process_busy, params).fetchone()):
                return []
            rows = conn.execute(sql.claim_suspect, params).fetchall()
        else:
            rows = conn.execute(sql.claim_many_among_suspects, params).fetchall()
    return [claim_of(row, params["worker"], params["until"]) for row in rows]


def _fresh_rooms(
    ids: Sequence[str], rooms: Sequence[str | None], inserted: set[str]
) -> list[tuple[str, str]]:
    """The new messages of rooms, ``(id, room)`` in arrival order (each id once)."""
    seen: set[str] = set()
    fresh: list[tuple[str, str]] = []
    for id, room in zip(ids, rooms, strict=True):
        if room is not None and id in inserted and id not in seen:
            seen.add(id)
            fresh.append((id, room))
    return fresh
