"""The custody part of a SQLite store: ingest, the lead's moves, liveness, claims and their
outcomes, stall notices, the reconciler's expiries, delivery, dead-letter notices and reads.

Each operation is one job on the writer thread (many callers' jobs share one durable commit)
or a read on the reader's connection, both through the store's ``SqliteDb``; ``stores._frame``
checks its arguments and logs it. Every transition is an ``UPDATE ... WHERE`` naming the state
it expects (``_sql``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import attrs

from ...custody import _log as _clog
from ...custody._crashes import quarantine_death_outcome
from ...custody._records import (
    Assignment,
    Hand,
    JournalEntry,
    LeaseExpiry,
    PendingTask,
    PoolView,
    StallCandidate,
    Suspects,
    SweepPlanner,
    Swept,
    WaitingRetries,
    WorkerInfo,
    WorkerRole,
)
from ...custody._rooms import RoomPolicy, burst_reason, superseded_reason
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
    assign_refused,
    check_hands,
    check_limit,
    fail_outcome,
    journal_entry,
)
from .._frame import CustodyFrame, Pairs, lease_expiry
from .._rooms_sql import SUPERSEDED_OWNER
from . import _rows
from . import _sql as sql
from ._asks import answer
from ._claims import claim_for, claim_rows
from ._db import SqliteDb
from ._ready import WalkHint, ready_pending
from ._tenants import next_turn


class _Ingest(NamedTuple):
    """A new task's row as ``_sql.INGEST`` takes it (then policy, tenant, turn and id)."""

    id: str
    body: str
    room: str | None
    rank: int
    headers: str
    created: float
    updated: float


@attrs.define(eq=False)
class SqliteCustody(CustodyFrame):
    """The custody part on the store's ``SqliteDb``."""

    rings_at_commit = True

    db: SqliteDb
    _walks: WalkHint = attrs.field(init=False, factory=WalkHint)
    """How this store's ready reads go while its backlog is deep (``_ready``)."""

    # -- ingest -------------------------------------------------------------------------------

    async def _ingest_many(
        self, tasks: Sequence[Task], headers: Sequence[str], policy: RoomPolicy, debounce: float
    ) -> tuple[list[bool], list[tuple[str, str]]]:
        rows: list[_Ingest] = []
        for task, json_headers in zip(tasks, headers, strict=True):
            now = self.host.clock()
            rank = PRIORITY_RANK[task.priority]
            rows.append(_Ingest(task.id, task.body, task.room, rank, json_headers, now, now))
        tenants = [task.tenant for task in tasks]
        superseded: list[tuple[str, str]] = []
        answered: list[tuple[str, str]] = []

        def op(conn: sqlite3.Connection) -> list[bool]:
            superseded.clear()  # (a replayed job starts over)
            answered.clear()
            new = []
            for row, tenant in zip(rows, tenants, strict=True):
                turn = NO_TURN if tenant is None else next_turn(conn, tenant, row.rank)
                values = (*row, policy, tenant, turn, row.id)
                fresh = conn.execute(sql.INGEST, values).rowcount == 1
                new.append(fresh)
                asker = (
                    answer(conn, row.id, row.room, row.body, row.created)
                    if fresh and row.room
                    else None
                )
                if asker is not None:  # an open ask's answer: no run of its own (issue #36)
                    answered.append((asker, row.id))
            if not debounce and policy != "replace":
                return new
            answers = {answer for _, answer in answered}
            newest = {
                row.room: row
                for row, fresh in zip(rows, new, strict=True)
                if fresh and row.room and row.id not in answers
            }
            if debounce and newest:  # per room, the burst's newest takes the others' place
                batch = json.dumps([row.id for row, fresh in zip(rows, new, strict=True) if fresh])
                for room, row in newest.items():
                    superseded.extend(_burst(conn, row.id, room, row.updated, debounce, batch))
            if policy == "replace":  # per room, the newest new task supersedes the older ones
                for room, row in newest.items():
                    superseded.extend(
                        (id, superseded_reason(by))
                        for id, by in _supersede(conn, row.id, room, row.updated)
                    )
            return new

        def committed(new: list[bool]) -> None:
            if any(new):  # the pool may take them while the ack's sync runs
                self.host.work_bell.ring()

        new = await self.db.write(op, promise=True, committed=committed)  # the ack follows
        log_answers(answered)
        return new, superseded

    async def _bodies(self, ids: Sequence[str]) -> Mapping[str, str]:
        found = json.dumps(list(ids))
        return dict(await self.db.read(lambda c: c.execute(sql.BODIES, (found,)).fetchall()))

    # -- lead ---------------------------------------------------------------------------------

    async def _assign(self, id: str, worker: str, now: float) -> None:
        def op(conn: sqlite3.Connection) -> None:
            if not _assign_one(conn, id, worker, now):
                rec = _rows.require(conn, id)
                raise CustodyConflict(assign_refused(rec, worker, now))

        await self.db.write(op)

    async def _pending(self, limit: int, now: float) -> Sequence[Task]:
        def op(conn: sqlite3.Connection) -> list[Task]:
            return [
                _rows.task_of(r) for r in conn.execute(sql.PENDING, {"now": now, "limit": limit})
            ]

        return await self.db.read(op)

    async def _return_outranked(self, ahead: str, limit: int, now: float) -> list[str]:
        params = {"ahead": ahead, "limit": limit, "now": now}
        return await self.db.write(lambda c: [r[0] for r in c.execute(outranked.SQLITE, params)])

    async def _unassign(self, id: str, worker: str, now: float) -> bool:
        def op(conn: sqlite3.Connection) -> bool:
            if conn.execute(sql.UNASSIGN, (now, id, worker)).rowcount != 1:
                _rows.require(conn, id)
                return False
            return True

        return await self.db.write(op)

    async def _assign_many(self, pairs: Sequence[tuple[str, str]], now: float) -> set[str]:
        return await self.db.write(lambda conn: _assign_pairs(conn, pairs, now))

    async def _return_assignments(self, worker: str, now: float) -> list[str]:
        def op(conn: sqlite3.Connection) -> list[str]:
            return [r[0] for r in conn.execute(sql.RETURN_ASSIGNMENTS, (now, worker)).fetchall()]

        return await self.db.write(op)

    async def _pool_view(
        self, at: float, pending_limit: int, skip: list[str], skip_queues: list[str]
    ) -> PoolView:
        rooms, lease = json.dumps(skip), self.host.lease_s
        return await self.db.read(
            lambda conn: _pool_view(
                conn, at, pending_limit, rooms, self._walks, lease, set(skip_queues)
            )
        )

    async def plan_and_assign(
        self, decide: SweepPlanner, *, pending_limit: int = 1000
    ) -> tuple[PoolView, list[bool] | None]:
        """The view, the plan and its assignments in one writer transaction."""
        swept = await self.plan_assign_and_claim(decide, pending_limit=pending_limit, hands={})
        return swept.view, swept.done

    async def plan_assign_and_claim(
        self, decide: SweepPlanner, *, pending_limit: int = 1000, hands: Mapping[str, Hand]
    ) -> Swept:
        """The view, the plan, its assignments and the hands' claims in one writer transaction:
        a task assigned to a worker of the lead's process is claimed before the commit."""
        check_limit(pending_limit, "pending_limit")
        check_hands(hands)
        now = self.host.clock()
        until = now + self.host.lease_s
        unique: list[tuple[str, str]] = []

        def op(conn: sqlite3.Connection) -> tuple[Swept, set[str]]:
            view = _pool_view(conn, now, pending_limit, "[]", self._walks, self.host.lease_s)
            pairs = decide(view)
            if pairs is None:
                return Swept(view, None), set()
            checked = Pairs.of(pairs)
            unique[:] = checked.unique
            moved = _assign_pairs(conn, unique, now)
            done = checked.answers(moved)
            claims = {
                worker: claim_for(conn, self._walks, worker, hands[worker], now, until)
                for worker in sorted({w for id, w in unique if id in moved and w in hands})
            }
            return Swept(view, done, {w: c for w, c in claims.items() if c}), moved

        swept, moved = await self.db.write(op)
        _clog.assigned(unique, moved)
        for worker, claims in swept.claims.items():
            _clog.claimed(claims, worker)
        return swept

    # -- liveness -----------------------------------------------------------------------------

    async def _beat(
        self, worker: str, role: WorkerRole, capacity: int, now: float, queues: str | None
    ) -> list[WorkerInfo]:
        def op(conn: sqlite3.Connection) -> list[WorkerInfo]:
            conn.execute(sql.BEAT, (worker, role, capacity, now, now, queues))
            return _rows.workers(conn)

        return await self.db.write(op)

    async def workers(self) -> Sequence[WorkerInfo]:
        return await self.db.read(_rows.workers)

    async def _remove_worker(self, worker: str) -> bool:
        return await self.db.write(
            lambda conn: conn.execute(sql.REMOVE_WORKER, (worker,)).rowcount == 1
        )

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
        served = json.dumps(queues)

        def op(conn: sqlite3.Connection) -> list[Claim]:
            return claim_rows(
                conn, self._walks, worker, limit, leaderless, now, until, quarantine, served
            )

        return await self.db.write(op)

    async def _renew(self, claim: Claim, now: float, until: float) -> float:
        fence = (claim.task.id, claim.worker, claim.run)

        def op(conn: sqlite3.Connection) -> float:
            row = conn.execute(sql.RENEW, (until, now, *fence)).fetchone()
            if row is None:
                raise _rows.stale(conn, claim, now, "renew")
            return float(row[0])

        return await self.db.write(op)

    async def _complete(self, claim: Claim, body: str, no_send: bool, now: float) -> None:
        values = (body, int(no_send), now, claim.task.id, claim.worker, claim.run)

        def op(conn: sqlite3.Connection) -> None:
            if conn.execute(sql.COMPLETE, values).rowcount != 1:
                raise _rows.stale(conn, claim, now, "complete")

        await self.db.write(op)

    async def _complete_many(
        self, items: Sequence[tuple[str, int, str, str]], no_send: bool, now: float
    ) -> list[bool]:
        flag = int(no_send)

        def op(conn: sqlite3.Connection) -> list[bool]:
            return [
                conn.execute(sql.COMPLETE, (body, flag, now, id, worker, run)).rowcount == 1
                for worker, run, id, body in items
            ]

        return await self.db.write(op)

    async def _fail(
        self, claim: Claim, reason: str, permanent: bool, not_before: float | None, now: float
    ) -> tuple[bool, str]:
        fence = sql.fence_params(claim, now)

        def op(conn: sqlite3.Connection) -> tuple[bool, str]:
            # the failure budget leaves out the runs lost to crashes (custody._crashes)
            crashes = conn.execute(sql.FENCED_CRASH_COUNT, fence).fetchone()
            if crashes is None:
                raise _rows.stale(conn, claim, now, "fail")
            dead, why = fail_outcome(
                reason, claim.attempt, self.host.max_attempts, permanent, crashes[0]
            )
            conn.execute(
                sql.FAIL_DEAD if dead else sql.FAIL_REPOOL,
                {"not_before": not_before, "reason": why, **fence},
            )
            return dead, why

        return await self.db.write(op)

    async def _quarantine_death(
        self, claim: Claim, death: str, max_deaths: int, now: float
    ) -> tuple[CustodyState, str]:
        fence = sql.fence_params(claim, now)

        def op(conn: sqlite3.Connection) -> tuple[CustodyState, str]:
            row = conn.execute(sql.FENCED_QUARANTINE_DEATHS, fence).fetchone()
            if row is None:
                raise _rows.stale(conn, claim, now, "record a quarantine death of")
            state, why = quarantine_death_outcome(
                attempt=claim.attempt, deaths=row[0], max_deaths=max_deaths, death=death
            )
            values = {**fence, "state": state.value, "reason": why, "death": death}
            conn.execute(sql.QUARANTINE_DEATH, values)
            return state, why

        return await self.db.write(op)

    async def _release(self, claim: Claim, now: float) -> None:
        values = (now, claim.task.id, claim.worker, claim.run)

        def op(conn: sqlite3.Connection) -> None:
            if conn.execute(sql.RELEASE, values).rowcount != 1:
                raise _rows.stale(conn, claim, now, "release")

        await self.db.write(op)

    # -- stall notices ------------------------------------------------------------------------

    async def _stall_candidates(
        self, older_than: float, worker: str | None, limit: int
    ) -> list[StallCandidate]:
        params = (older_than, worker, worker, limit)
        return await self.db.read(
            lambda conn: [StallCandidate(*r) for r in conn.execute(sql.STALL_CANDIDATES, params)]
        )

    async def _mark_stall_notified(self, id: str, now: float) -> bool:
        return await self.db.write(
            lambda conn: conn.execute(sql.MARK_STALL_NOTIFIED, (id, now)).rowcount == 1,
            promise=True,  # the notice follows
        )

    async def _clear_stall_notice(self, id: str) -> None:
        await self.db.write(lambda conn: conn.execute(sql.CLEAR_STALL_NOTICE, (id,)))

    async def _prune_stall_notices(self, limit: int) -> int:
        return await self.db.write(
            lambda conn: conn.execute(sql.PRUNE_STALL_NOTICES, (limit,)).rowcount
        )

    # -- reconciler ---------------------------------------------------------------------------

    async def _expire_leases(self, limit: int, now: float) -> list[LeaseExpiry]:
        cutoff = self._expiry_cutoff(now)
        if cutoff is None:
            return []

        def op(conn: sqlite3.Connection) -> list[LeaseExpiry]:
            # the writer holds the write lock: the evidence read and the updates see the same
            # rows; each lease is settled by custody._crashes (a crash or a failed attempt)
            rows = conn.execute(sql.EXPIRED_CLAIMS, (cutoff, limit)).fetchall()
            return self._settle(conn, rows, now, restarted=False)

        return await self.db.write(op)

    async def _recover_claims(self, worker: str, now: float) -> list[LeaseExpiry]:
        def op(conn: sqlite3.Connection) -> list[LeaseExpiry]:
            rows = conn.execute(sql.CLAIMS_OF, (worker,)).fetchall()
            return self._settle(conn, rows, now, restarted=True)

        return await self.db.write(op)

    def _settle(
        self, conn: sqlite3.Connection, rows: Sequence[Any], now: float, *, restarted: bool
    ) -> list[LeaseExpiry]:
        """Write the outcome ``custody._crashes`` decides for each expired lease read."""
        out: list[LeaseExpiry] = []
        updates: list[dict[str, Any]] = []
        for e, o in self._settled(rows, now, restarted=restarted):
            updates.append(
                {
                    "state": o.state.value,
                    "attempt": o.attempt,
                    "crashes": o.crash_count,
                    "alone": o.crashes_alone,
                    "suspect": int(o.suspect),
                    "reason": o.reason,
                    "now": now,
                    "id": e.id,
                    "owner": e.owner,
                    "run": e.run,
                }
            )
            out.append(lease_expiry(e, o, now))
        conn.executemany(sql.SETTLE_EXPIRED, updates)
        return out

    # -- delivery -----------------------------------------------------------------------------

    async def _ready_results(self, limit: int, lease: tuple[str, float] | None) -> list[Result]:
        # the lease is checked by the frame, then this is a plain read (no leases here)
        def op(conn: sqlite3.Connection) -> list[Result]:
            rows = conn.execute(sql.READY, (limit,)).fetchall()
            return [_rows.result_of(r) for r in rows]

        return await self.db.promised(await self.db.read(op))  # their posts follow

    async def _mark_delivered(self, id: str, now: float) -> bool:
        def op(conn: sqlite3.Connection) -> bool:
            if conn.execute(sql.DELIVER, (now, id)).rowcount != 1:
                rec = _rows.require(conn, id)
                if rec.state is not CustodyState.DELIVERED:
                    raise CustodyConflict(
                        f"cannot mark task {id!r} delivered: it is {rec.state.value}, not result"
                    )
                return False
            return True

        return await self.db.write(op)

    async def _mark_delivered_many(
        self, ids: Sequence[str], now: float
    ) -> tuple[list[bool], list[str]]:
        def op(conn: sqlite3.Connection) -> tuple[list[bool], list[str]]:
            done: list[bool] = []
            moved: list[str] = []
            for id in ids:
                if conn.execute(sql.DELIVER, (now, id)).rowcount == 1:
                    done.append(True)
                    moved.append(id)
                else:
                    rec = _rows.record(conn, id)
                    done.append(rec is not None and rec.state is CustodyState.DELIVERED)
            return done, moved

        return await self.db.write(op)

    async def _dead_letter(
        self, id: str, reason: str, now: float
    ) -> tuple[bool, CustodyState | None]:
        def op(conn: sqlite3.Connection) -> tuple[bool, CustodyState | None]:
            before = conn.execute(sql.STATE, (id,)).fetchone()
            if conn.execute(sql.DEAD_LETTER, (reason, now, id)).rowcount != 1:
                rec = _rows.require(conn, id)
                if rec.state is not CustodyState.DEAD:
                    raise CustodyConflict(
                        f"cannot dead-letter task {id!r}: it is {rec.state.value}"
                    )
                return False, None
            return True, CustodyState(before[0])

        return await self.db.write(op, promise=True)

    # -- dead-letter notices ------------------------------------------------------------------

    async def _unreported_dead(self, limit: int) -> list[TaskRecord]:
        found = await self.db.read(
            lambda conn: [_rows.record_of(r) for r in conn.execute(sql.UNREPORTED_DEAD, (limit,))]
        )
        return await self.db.promised(found)  # a notice of each follows

    async def _mark_dead_reported(self, ids: Sequence[str], now: float) -> list[bool]:
        def op(conn: sqlite3.Connection) -> list[bool]:
            done = []
            for id in ids:
                conn.execute(sql.MARK_DEAD_REPORTED, (now, id))
                done.append(conn.execute(sql.DEAD_REPORTED, (id,)).fetchone() is not None)
            return done

        return await self.db.write(op)

    async def unreported_dead_count(self) -> int:
        return await self.db.read(
            lambda conn: int(conn.execute(sql.UNREPORTED_DEAD_COUNT).fetchone()[0])
        )

    # -- reads --------------------------------------------------------------------------------

    async def _state(self, id: str) -> CustodyState | None:
        def op(conn: sqlite3.Connection) -> CustodyState | None:
            row = conn.execute(sql.STATE, (id,)).fetchone()
            return None if row is None else CustodyState(row[0])

        return await self.db.read(op)

    async def _get(self, id: str) -> TaskRecord | None:
        return await self.db.read(lambda conn: _rows.record(conn, id))

    async def counts(self) -> Mapping[CustodyState, int]:
        def op(conn: sqlite3.Connection) -> dict[CustodyState, int]:
            counts = dict.fromkeys(CustodyState, 0)
            for state, n in conn.execute(sql.COUNTS):
                counts[CustodyState(state)] = n
            return counts

        return await self.db.read(op)

    async def in_flight(self) -> Sequence[str]:
        return await self.db.read(lambda conn: [r[0] for r in conn.execute(sql.IN_FLIGHT)])

    async def _records(
        self, state: CustodyState, limit: int, newest_first: bool
    ) -> list[TaskRecord]:
        query = sql.RECORDS_NEWEST if newest_first else sql.RECORDS_OLDEST
        return await self.db.read(
            lambda conn: [_rows.record_of(r) for r in conn.execute(query, (state.value, limit))]
        )

    async def waiting_retries(self) -> WaitingRetries:
        now = self.host.clock()

        def op(conn: sqlite3.Connection) -> WaitingRetries:
            (count,) = conn.execute(sql.WAITING_RETRIES, (now,)).fetchone()
            return WaitingRetries(int(count), _rows.next_due(conn, now))

        return await self.db.read(op)

    async def pending_by_queue(self) -> dict[str, int]:
        return await self.db.read(lambda conn: dict(conn.execute(sql.PENDING_BY_QUEUE).fetchall()))

    async def _journal(self, id: str) -> list[JournalEntry]:
        return await self.db.read(
            lambda conn: [journal_entry(row) for row in conn.execute(sql.JOURNAL, {"id": id})]
        )

    async def _suspects(self, limit: int) -> Suspects:
        def op(conn: sqlite3.Connection) -> Suspects:
            (count,) = conn.execute(sql.SUSPECTS_COUNT).fetchone()
            rows = conn.execute(sql.SUSPECTS, (limit,))
            return Suspects(int(count), tuple(_rows.record_of(r) for r in rows))

        return await self.db.read(op)


# -- helpers (run in the writer's or the reader's thread) -----------------------------------------


def _burst(
    conn: sqlite3.Connection, newest: str, room: str, now: float, debounce: float, batch: str
) -> list[tuple[str, str]]:
    """A room's debounce (issue #52): ``newest`` waits ``debounce`` seconds, and the room's
    older messages still waiting out their own (never claimed; or new in this ``batch``)
    become no-send results "answered with ``newest``". Returns ``(id, reason)`` per task."""
    conn.execute(sql.HOLD, (now + debounce, newest))
    why = burst_reason(newest)
    rows = conn.execute(
        sql.ABSORB,
        {
            "owner": SUPERSEDED_OWNER,
            "why": why,
            "now": now,
            "room": room,
            "id": newest,
            "batch": batch,
        },
    ).fetchall()
    return [(r[0], why) for r in rows]


def _supersede(
    conn: sqlite3.Connection, newer: str, room: str, now: float
) -> list[tuple[str, str]]:
    """``replace``: every older task of ``room`` still waiting or running becomes a no-send
    result "superseded by ``newer``" (a running worker's lease is fenced out: ``Superseded``).
    Returns ``(id, newer)`` per task moved."""
    rows = conn.execute(
        sql.SUPERSEDE, (SUPERSEDED_OWNER, superseded_reason(newer), now, room, newer, newer)
    ).fetchall()
    return [(r[0], newer) for r in rows]


def _pool_view(
    conn: sqlite3.Connection,
    at: float,
    pending_limit: int,
    skip: str,
    walks: WalkHint,
    lease: float,
    skip_queues: set[str] | None = None,
) -> PoolView:
    """The pool as one transaction sees it (``skip``: a JSON list of rooms to read past).
    Only the queues served by a worker that beat within ``lease`` are read (every queue while
    none did), but those in ``skip_queues``: a backlog nobody serves (or whose workers are
    full) never fills the window ahead of the tasks somebody can take (issue #51)."""
    pending: list[PendingTask] = []
    rooms: dict[str, str] = {}
    workers = _rows.workers(conn)
    served = {
        q for w in workers if w.role == "worker" and w.last_beat >= at - lease for q in w.queues
    }
    # no worker beat within the lease: every queue (the view still shows what waits)
    queues = json.dumps(sorted(served - (skip_queues or set()))) if served else None
    ready = json.dumps(ready_pending(conn, at, pending_limit, skip, walks, queues))
    for id, room, rank, keeper, queue in conn.execute(sql.VIEW_PENDING, (ready,)):
        pending.append(PendingTask(id, room, RANK_PRIORITY[rank], queue))
        if keeper is not None:
            rooms[room] = keeper
    return PoolView(
        at=at,
        workers=tuple(workers),
        assigned=tuple(Assignment(*r) for r in conn.execute(sql.VIEW_ASSIGNED)),
        claims=dict(conn.execute(sql.VIEW_CLAIMS).fetchall()),
        pending=tuple(pending),
        rooms=rooms,
        busy_rooms=frozenset(r[0] for r in conn.execute(sql.VIEW_BUSY_ROOMS)),
        next_due=_rows.next_due(conn, at),
    )


def _assign_pairs(
    conn: sqlite3.Connection, pairs: Sequence[tuple[str, str]], now: float
) -> set[str]:
    """Assign each pending ``(id, worker)`` (ids unique) in one statement (a sweep assigns
    dozens per commit); the ids that moved. A room goes to its last pair's worker."""
    order = {id: n for n, (id, _) in enumerate(pairs)}
    rows = conn.execute(sql.ASSIGN_MANY, (now, json.dumps(pairs), now)).fetchall()
    rows.sort(key=lambda row: order[row[0]])
    for _, room, worker in rows:
        if room is not None:
            _rows.note_room(conn, room, worker, now)
    return {id for id, _, _ in rows}


def _assign_one(conn: sqlite3.Connection, id: str, worker: str, now: float) -> bool:
    row = conn.execute(sql.ASSIGN, (worker, now, id, now)).fetchone()
    if row is None:
        return False
    (room,) = row
    if room is not None:
        _rows.note_room(conn, room, worker, now)
    return True
