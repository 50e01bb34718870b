"""SqliteStore: the embedded custody store (one file, WAL, one writer thread, group commit).

Each operation is one job on the writer thread (``_plumbing._sqlite_writer``: many callers'
jobs share one durable commit) or a read on the reader's connection (a WAL snapshot that never
waits behind the writer's fsync); ``stores._frame`` checks its arguments and logs it. Every
transition is an ``UPDATE ... WHERE`` naming the state it expects (``_sql``).

Durability: every connection runs ``journal_mode=WAL``. By default (``synchronous="NORMAL"``) a
transition commits without waiting for the disk and the writer syncs the WAL before a promise
(``_durable``: the ingest whose ack follows, the results delivery posts, an operator's move), so
what was promised survives power loss or an OS crash and a transition that promised nothing may
be lost with it (its task goes back to an earlier custody state). ``synchronous="FULL"`` syncs
at every commit. Both survive a *process* crash (the page cache outlives a SIGKILL:
``tests/custody/test_crash.py``); ``tests/service/test_durable_at_promises.py`` cuts the WAL
back to the last barrier, as a machine crash would, and checks what the gateway was told.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs

from ...._plumbing._sqlite_writer import SqliteWriter
from ...custody import _log as _clog
from ...custody._crashes import (
    DEFAULT_MAX_CRASHES_ALONE,
    process_prefix,
    quarantine_death_outcome,
)
from ...custody._limits import Granted, LimitSpec, LimitView, NoPermit
from ...custody._outage import StoreReach
from ...custody._records import (
    Assignment,
    JournalEntry,
    LeaseExpiry,
    PendingTask,
    PoolView,
    StallCandidate,
    StepRecord,
    Suspects,
    SweepPlanner,
    WaitingRetries,
    WaitingRuns,
    WorkerInfo,
    WorkerRole,
)
from ...custody._rooms import RoomPolicy, superseded_reason
from ...custody._rules import (
    MAX_BODY_BYTES,
    PRIORITY_RANK,
    Claim,
    CustodyConflict,
    CustodyState,
    Result,
    Task,
    TaskRecord,
    check_task_id,
    check_worker,
)
from ...custody._tenants import (
    DEFAULT_WEIGHT,
    NO_TURN,
    TenantView,
    next_turn,
)
from ...custody._work_bell import WorkBell
from .. import _outranked as outranked
from .._asks_frame import log_answers
from .._common import (
    RANK_PRIORITY,
    FoundState,
    assign_refused,
    check_limit,
    fail_outcome,
    journal_entry,
    record_from_row,
    stale_lease,
    task_from_row,
    unknown_task,
)
from .._frame import Moves, check_settings, first_pairs, lease_expiry
from .._limits_frame import LimitsFrame, tenant_views_of
from .._operator import CANCELLED_PREFIX
from .._rooms_sql import SUPERSEDED_OWNER
from .._steps_frame import StepsFrame
from . import _asks as asks_sql
from . import _limits as limits_sql
from . import _sql as sql
from . import _steps as steps_sql
from ._access import explain_open_failure
from ._asks import SqliteAsks
from ._connection import Synchronous as Synchronous
from ._connection import connect_reader, connect_writer
from ._conversations import SqliteConversations, with_conversations
from ._durable import barrier_for
from ._news import RESULT, WORK, StoreNews, news_path
from ._ready import WalkHint, ready_pending
from ._space import SqliteSpace

T = TypeVar("T")


@attrs.define(eq=False)
class SqliteStore(LimitsFrame, StepsFrame, SqliteAsks, SqliteConversations, SqliteSpace):
    """Custody in one SQLite file. Open with ``await SqliteStore.open(path)``."""

    path: Path
    clock: Callable[[], float]
    lease_s: float
    max_attempts: int
    max_body_bytes: int
    _writer: SqliteWriter
    _reader: SqliteWriter
    """Reads run on their own connection and thread: in WAL mode they see every committed
    change without waiting behind the writer's batch and its fsync (a lead's sweep or
    delivery's look is then a read, not a wait for someone else's commit)."""
    _news: StoreNews
    """What this process's commits made, told to the other processes on the file (``_news``)."""
    max_crashes_alone: int = DEFAULT_MAX_CRASHES_ALONE
    """Crashes while it ran alone that prove a task kills its process (``custody._crashes``)."""
    reach: StoreReach = attrs.field(init=False, factory=StoreReach)
    """A file in this process's reach is not lost to an outage; kept for the one rule."""
    work_bell: WorkBell = attrs.field(init=False, factory=WorkBell)
    _walks: WalkHint = attrs.field(init=False, factory=WalkHint)
    """How this store's ready reads go while its backlog is deep (``_ready``)."""

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        lease_s: float = 60.0,
        max_attempts: int = 5,
        max_body_bytes: int = MAX_BODY_BYTES,
        synchronous: Synchronous = "NORMAL",
        max_batch: int = 512,
        busy_timeout_s: float = 10.0,
        max_crashes_alone: int = DEFAULT_MAX_CRASHES_ALONE,
    ) -> SqliteStore:
        """Open (creating and migrating if needed) the store at ``path``.

        The file is created 0600 before SQLite opens it (an existing looser one is tightened)
        and every missing parent directory 0700 (``tether._plumbing._fs``). ``synchronous="NORMAL"``
        makes a commit survive power loss before a promise is made on it (``_durable``);
        ``"FULL"`` makes every commit survive it.
        ``max_batch`` caps how many transitions share one commit (1 = a commit each).
        """
        check_settings(lease_s, max_attempts, max_body_bytes, max_crashes_alone)
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA; got {synchronous!r}")
        check_limit(max_batch, "max_batch")
        db = Path(path)
        news = StoreNews(news_path(db))
        writer = SqliteWriter(
            connect=explain_open_failure(
                db, lambda: news.install(connect_writer(db, synchronous, busy_timeout_s))
            ),
            max_batch=max_batch,
            barrier=barrier_for(db, synchronous),
            after_commit=news.after_commit,
        )
        try:
            await writer.start()  # creates and migrates the file
        except BaseException:
            news.close()
            raise
        reader = SqliteWriter(
            connect=lambda: connect_reader(db, busy_timeout_s),
            max_batch=max_batch,
            name="tether-sqlite-reader",
        )
        try:
            await reader.start()
        except BaseException:
            await writer.close()
            news.close()
            raise
        return cls(
            db,
            clock,
            float(lease_s),
            max_attempts,
            max_body_bytes,
            writer,
            reader,
            news,
            max_crashes_alone,
        )

    @property
    def commits(self) -> int:
        """Durable commits so far (each may carry many transitions)."""
        return self._writer.commits

    async def aclose(self) -> None:
        try:
            await self._writer.close()
        finally:
            await self._reader.close()
            self._news.close()

    # -- news from other processes (hints; see ``_news``) --------------------------------------

    async def wait_for_work(self, seconds: float, *, worker: str | None = None) -> bool:
        """Sleep until another process on this file made work (a task pending or assigned),
        at most ``seconds``; ``True`` if it did. Only a hint: the caller looks either way."""
        return await self._news.wait(WORK, seconds)

    async def wait_for_results(self, seconds: float) -> bool:
        """Sleep until another process on this file stored a result, at most ``seconds``."""
        return await self._news.wait(RESULT, seconds)

    async def _read(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """Run the read-only ``op`` in one read transaction (a consistent snapshot)."""
        return await self._reader.run(op, readonly=True)

    async def _promised(self, found: list[T]) -> list[T]:
        """``found`` (a read), once what it found is durable: a promise is made on each."""
        if found and self._writer.barrier is not None:
            await self._writer.sync()
        return found

    async def _write(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``op`` as one job of the writer (its own savepoint in a group commit)."""
        return await self._writer.run(op)

    def _stale(self, conn: sqlite3.Connection, claim: Claim, now: float, verb: str) -> Exception:
        return _stale(conn, claim, now, verb)

    # -- ingest -------------------------------------------------------------------------------

    async def _ingest_many(
        self, tasks: Sequence[Task], headers: Sequence[str], policy: RoomPolicy
    ) -> tuple[list[bool], list[tuple[str, str]]]:
        rows: list[tuple[Any, ...]] = []
        for task, json_headers in zip(tasks, headers, strict=True):
            now = self.clock()
            rank = PRIORITY_RANK[task.priority]
            rows.append((task.id, task.body, task.room, rank, json_headers, now, now))
        tenants = [task.tenant for task in tasks]
        superseded: list[tuple[str, str]] = []
        answered: list[tuple[str, str]] = []

        def op(conn: sqlite3.Connection) -> list[bool]:
            superseded.clear()  # (a replayed job starts over)
            answered.clear()
            new = []
            for row, tenant in zip(rows, tenants, strict=True):
                turn = NO_TURN if tenant is None else _next_turn(conn, tenant, row[3])
                values = (*row, policy, tenant, turn, row[0])
                fresh = conn.execute(sql.INGEST, values).rowcount == 1
                new.append(fresh)
                asker = (
                    asks_sql.answer(conn, row[0], row[2], row[1], row[5])
                    if fresh and row[2]
                    else None
                )
                if asker is not None:  # an open ask's answer: no run of its own (issue #36)
                    answered.append((asker, row[0]))
            if policy == "replace":  # per room, the newest new task supersedes the older ones
                answers = {answer for _, answer in answered}
                newest = {
                    row[2]: row
                    for row, fresh in zip(rows, new, strict=True)
                    if fresh and row[2] and row[0] not in answers
                }
                for room, row in newest.items():
                    superseded.extend(_supersede(conn, row[0], room, row[6]))
            return new

        new = await self._writer.run(op, promise=True)  # the ack follows
        log_answers(answered)
        return new, superseded

    async def _bodies(self, ids: Sequence[str]) -> Mapping[str, str]:
        found = json.dumps(list(ids))
        return dict(await self._read(lambda c: c.execute(sql.BODIES, (found,)).fetchall()))

    async def _prune_delivered(self, before: float, limit: int) -> int:
        def op(conn: sqlite3.Connection) -> int:
            gone = conn.execute(sql.PRUNE, (before, limit)).fetchall()
            conn.executemany(sql.TOMBSTONE, gone)
            return len(gone)

        return await self._writer.run(op)

    async def _prune_tombstones(self, before: float, limit: int) -> int:
        return await self._writer.run(
            lambda conn: conn.execute(sql.PRUNE_TOMBSTONES, (before, limit)).rowcount
        )

    # -- lead ---------------------------------------------------------------------------------

    async def _assign(self, id: str, worker: str, now: float) -> None:
        def op(conn: sqlite3.Connection) -> None:
            if not _assign_one(conn, id, worker, now):
                rec = _require(conn, id)
                raise CustodyConflict(assign_refused(rec, worker, now))

        await self._writer.run(op)

    async def _pending(self, limit: int, now: float) -> Sequence[Task]:
        def op(conn: sqlite3.Connection) -> list[Task]:
            return [_task(r) for r in conn.execute(sql.PENDING, {"now": now, "limit": limit})]

        return await self._read(op)

    async def _return_outranked(self, ahead: str, limit: int, now: float) -> list[str]:
        params = {"ahead": ahead, "limit": limit, "now": now}
        return await self._writer.run(lambda c: [r[0] for r in c.execute(outranked.SQLITE, params)])

    async def _unassign(self, id: str, worker: str, now: float) -> bool:
        def op(conn: sqlite3.Connection) -> bool:
            if conn.execute(sql.UNASSIGN, (now, id, worker)).rowcount != 1:
                _require(conn, id)
                return False
            return True

        return await self._writer.run(op)

    async def _assign_many(self, pairs: Sequence[tuple[str, str]], now: float) -> set[str]:
        return await self._writer.run(lambda conn: _assign_pairs(conn, pairs, now))

    async def _return_assignments(self, worker: str, now: float) -> list[str]:
        def op(conn: sqlite3.Connection) -> list[str]:
            return [r[0] for r in conn.execute(sql.RETURN_ASSIGNMENTS, (now, worker)).fetchall()]

        return await self._writer.run(op)

    async def _pool_view(self, at: float, pending_limit: int, skip: list[str]) -> PoolView:
        rooms = json.dumps(skip)
        return await self._read(
            lambda conn: _pool_view(conn, at, pending_limit, rooms, self._walks)
        )

    async def plan_and_assign(
        self, decide: SweepPlanner, *, pending_limit: int = 1000
    ) -> tuple[PoolView, list[bool] | None]:
        """The view, the plan and its assignments in one writer transaction."""
        check_limit(pending_limit, "pending_limit")
        now = self.clock()
        unique: list[tuple[str, str]] = []

        def op(conn: sqlite3.Connection) -> tuple[PoolView, list[bool] | None, set[str]]:
            view = _pool_view(conn, now, pending_limit, "[]", self._walks)
            pairs = decide(view)
            if pairs is None:
                return view, None, set()
            checked = [(check_task_id(id), check_worker(worker)) for id, worker in pairs]
            once, first = first_pairs(checked)
            unique[:] = once
            moved = _assign_pairs(conn, unique, now)
            return (
                view,
                [id in moved and first[id] == n for n, (id, _) in enumerate(checked)],
                moved,
            )

        view, done, moved = await self._writer.run(op)
        _clog.assigned(unique, moved)
        return view, done

    # -- liveness -----------------------------------------------------------------------------

    async def _beat(
        self, worker: str, role: WorkerRole, capacity: int, now: float
    ) -> list[WorkerInfo]:
        def op(conn: sqlite3.Connection) -> list[WorkerInfo]:
            conn.execute(sql.BEAT, (worker, role, capacity, now, now))
            return _workers(conn)

        return await self._writer.run(op)

    async def workers(self) -> Sequence[WorkerInfo]:
        return await self._read(_workers)

    async def _remove_worker(self, worker: str) -> bool:
        return await self._writer.run(
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
        *,
        history: int | None = None,
    ) -> list[Claim]:
        prefix = process_prefix(worker)

        def op(conn: sqlite3.Connection) -> list[Claim]:
            p = {"worker": worker, "prefix": prefix, "now": now, "until": until, "quarantined": 0}
            if quarantine is not None:
                # suspects run in quarantine children (custody._crashes), most crashed first,
                # one statement each (so each passes its room's gate), beside ordinary work
                suspects: list[Claim] = []
                for _ in range(min(quarantine, limit)):
                    rows = conn.execute(sql.CLAIM_SUSPECT, {**p, "quarantined": 1}).fetchall()
                    if not rows:
                        break
                    suspects += [_suspect_claim(conn, r, worker, now, until) for r in rows]
                if len(suspects) == limit:
                    return suspects
                return suspects + ordinary(conn, limit - len(suspects), True)
            # a suspect runs alone (custody._crashes): first the isolation rule, then the
            # worker's own assignments, then (leaderless) pending tasks, each queue in
            # (priority, age) order; one UPDATE claims each queue's share
            here, anywhere, waiting, mine = conn.execute(sql.SUSPECT_FLAGS, p).fetchone()
            if here:
                return []  # a suspect runs in this process: nothing else does
            if waiting and not anywhere:
                if conn.execute(sql.PROCESS_BUSY, p).fetchone()[0]:
                    return []  # the process drains, then takes the suspect alone
                rows = conn.execute(sql.CLAIM_SUSPECT, p).fetchall()
                for room in {r[2] for r in rows if r[2] is not None}:
                    _note_room(conn, room, worker, now)
                return [Claim(_task(r), worker, r[5], until, r[7]) for r in rows]
            return ordinary(conn, limit, bool(mine))

        def ordinary(conn: sqlite3.Connection, limit: int, mine: bool) -> list[Claim]:
            assigned = (worker, until, now, worker, limit)
            rows = conn.execute(sql.CLAIM_ASSIGNED, assigned).fetchall() if mine else []
            taken = len(rows)
            ready = (
                ready_pending(conn, now, limit - taken, hint=self._walks)
                if taken < limit and leaderless
                else []
            )
            if ready:
                rows += conn.execute(
                    sql.claim_ready(len(ready)), (worker, until, now, *ready)
                ).fetchall()
            if len(rows) > 1:  # RETURNING order is unspecified: queue order, assignments first
                rows[:taken] = sorted(rows[:taken], key=_queue_place)
                rows[taken:] = sorted(rows[taken:], key=_queue_place)
            for room in {r[2] for r in rows if r[2] is not None}:
                _note_room(conn, room, worker, now)  # the claiming worker keeps these rooms
            return [Claim(_task(r), worker, r[5], until, r[7]) for r in rows]

        def conversing(conn: sqlite3.Connection) -> list[Claim]:
            # the conversations are read in the claim's transaction (issue #34 perf)
            claims = op(conn)
            return claims if history is None else with_conversations(conn, claims, history)

        return await self._writer.run(conversing)

    async def _renew(self, claim: Claim, now: float, until: float) -> float:
        fence = (claim.task.id, claim.worker, claim.run)

        def op(conn: sqlite3.Connection) -> float:
            row = conn.execute(sql.RENEW, (until, now, *fence)).fetchone()
            if row is None:
                raise _stale(conn, claim, now, "renew")
            return float(row[0])

        return await self._writer.run(op)

    async def _complete(self, claim: Claim, body: str, no_send: bool, now: float) -> None:
        values = (body, int(no_send), now, claim.task.id, claim.worker, claim.run)

        def op(conn: sqlite3.Connection) -> None:
            if conn.execute(sql.COMPLETE, values).rowcount != 1:
                raise _stale(conn, claim, now, "complete")

        await self._writer.run(op)

    async def _complete_many(
        self, items: Sequence[tuple[str, int, str, str]], no_send: bool, now: float
    ) -> list[bool]:
        flag = int(no_send)

        def op(conn: sqlite3.Connection) -> list[bool]:
            return [
                conn.execute(sql.COMPLETE, (body, flag, now, id, worker, run)).rowcount == 1
                for worker, run, id, body in items
            ]

        return await self._writer.run(op)

    async def _fail(
        self, claim: Claim, reason: str, permanent: bool, not_before: float | None, now: float
    ) -> tuple[bool, str]:
        fence = sql.fence_params(claim, now)

        def op(conn: sqlite3.Connection) -> tuple[bool, str]:
            # the failure budget leaves out the runs lost to crashes (custody._crashes)
            crashes = conn.execute(sql.FENCED_CRASH_COUNT, fence).fetchone()
            if crashes is None:
                raise _stale(conn, claim, now, "fail")
            dead, why = fail_outcome(
                reason, claim.attempt, self.max_attempts, permanent, crashes[0]
            )
            conn.execute(
                sql.FAIL_DEAD if dead else sql.FAIL_REPOOL,
                {"not_before": not_before, "reason": why, **fence},
            )
            return dead, why

        return await self._writer.run(op)

    async def _quarantine_death(
        self, claim: Claim, death: str, max_deaths: int, now: float
    ) -> tuple[CustodyState, str]:
        fence = sql.fence_params(claim, now)

        def op(conn: sqlite3.Connection) -> tuple[CustodyState, str]:
            row = conn.execute(sql.FENCED_QUARANTINE_DEATHS, fence).fetchone()
            if row is None:
                raise _stale(conn, claim, now, "record a quarantine death of")
            state, why = quarantine_death_outcome(
                attempt=claim.attempt, deaths=row[0], max_deaths=max_deaths, death=death
            )
            values = {**fence, "state": state.value, "reason": why, "death": death}
            conn.execute(sql.QUARANTINE_DEATH, values)
            return state, why

        return await self._writer.run(op)

    async def _release(self, claim: Claim, now: float) -> None:
        values = (now, claim.task.id, claim.worker, claim.run)

        def op(conn: sqlite3.Connection) -> None:
            if conn.execute(sql.RELEASE, values).rowcount != 1:
                raise _stale(conn, claim, now, "release")

        await self._writer.run(op)

    # -- stall notices ------------------------------------------------------------------------

    async def _stall_candidates(
        self, older_than: float, worker: str | None, limit: int
    ) -> list[StallCandidate]:
        params = (older_than, worker, worker, limit)
        return await self._read(
            lambda conn: [StallCandidate(*r) for r in conn.execute(sql.STALL_CANDIDATES, params)]
        )

    async def _mark_stall_notified(self, id: str, now: float) -> bool:
        return await self._writer.run(
            lambda conn: conn.execute(sql.MARK_STALL_NOTIFIED, (id, now)).rowcount == 1,
            promise=True,  # the notice follows
        )

    async def _clear_stall_notice(self, id: str) -> None:
        await self._writer.run(lambda conn: conn.execute(sql.CLEAR_STALL_NOTICE, (id,)))

    async def _prune_stall_notices(self, limit: int) -> int:
        return await self._writer.run(
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

        return await self._writer.run(op)

    async def _recover_claims(self, worker: str, now: float) -> list[LeaseExpiry]:
        def op(conn: sqlite3.Connection) -> list[LeaseExpiry]:
            rows = conn.execute(sql.CLAIMS_OF, (worker,)).fetchall()
            return self._settle(conn, rows, now, restarted=True)

        return await self._writer.run(op)

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

    delivery_leases = False
    """One bridge per file: delivery's look stays a read on the read connection (a lease would
    make it a writer commit). Two bridges on one file may both post a result; the gateway
    absorbs the duplicate."""

    async def _ready_results(self, limit: int, lease: tuple[str, float] | None) -> list[Result]:
        # the lease is checked by the frame, then this is a plain read (no leases here)
        def op(conn: sqlite3.Connection) -> list[Result]:
            rows = conn.execute(sql.READY, (limit,)).fetchall()
            return [Result(_task(r), r[5], r[6], r[7], bool(r[8])) for r in rows]

        return await self._promised(await self._read(op))  # their posts follow

    async def _mark_delivered(self, id: str, now: float) -> bool:
        def op(conn: sqlite3.Connection) -> bool:
            if conn.execute(sql.DELIVER, (now, id)).rowcount != 1:
                rec = _require(conn, id)
                if rec.state is not CustodyState.DELIVERED:
                    raise CustodyConflict(
                        f"cannot mark task {id!r} delivered: it is {rec.state.value}, not result"
                    )
                return False
            return True

        return await self._writer.run(op)

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
                    rec = _record(conn, id)
                    done.append(rec is not None and rec.state is CustodyState.DELIVERED)
            return done, moved

        return await self._writer.run(op)

    async def _dead_letter(
        self, id: str, reason: str, now: float
    ) -> tuple[bool, CustodyState | None]:
        def op(conn: sqlite3.Connection) -> tuple[bool, CustodyState | None]:
            before = conn.execute(sql.STATE, (id,)).fetchone()
            if conn.execute(sql.DEAD_LETTER, (reason, now, id)).rowcount != 1:
                rec = _require(conn, id)
                if rec.state is not CustodyState.DEAD:
                    raise CustodyConflict(
                        f"cannot dead-letter task {id!r}: it is {rec.state.value}"
                    )
                return False, None
            return True, CustodyState(before[0])

        return await self._writer.run(op, promise=True)

    # -- dead-letter notices ------------------------------------------------------------------

    async def _unreported_dead(self, limit: int) -> list[TaskRecord]:
        found = await self._read(
            lambda conn: [_record_of(r) for r in conn.execute(sql.UNREPORTED_DEAD, (limit,))]
        )
        return await self._promised(found)  # a notice of each follows

    async def _mark_dead_reported(self, ids: Sequence[str], now: float) -> list[bool]:
        def op(conn: sqlite3.Connection) -> list[bool]:
            done = []
            for id in ids:
                conn.execute(sql.MARK_DEAD_REPORTED, (now, id))
                done.append(conn.execute(sql.DEAD_REPORTED, (id,)).fetchone() is not None)
            return done

        return await self._writer.run(op)

    async def unreported_dead_count(self) -> int:
        return await self._read(
            lambda conn: int(conn.execute(sql.UNREPORTED_DEAD_COUNT).fetchone()[0])
        )

    # -- operator -----------------------------------------------------------------------------

    async def _redrive(self, ids: Sequence[str], why: str, now: float) -> tuple[Moves, Moves]:
        return await self._writer.run(lambda conn: _redrive_rows(conn, ids, why, now), promise=True)

    async def _redrive_dead(
        self, text: str | None, limit: int, why: str, now: float, *, include_cancelled: bool
    ) -> tuple[list[str], Moves, Moves]:
        skip = None if include_cancelled else CANCELLED_PREFIX

        def op(conn: sqlite3.Connection) -> tuple[list[str], Moves, Moves]:
            ids = [r[0] for r in conn.execute(sql.DEAD_MATCHING, (text, limit, skip))]
            return ids, *_redrive_rows(conn, ids, why, now)

        return await self._writer.run(op, promise=True)

    async def _cancel(self, ids: Sequence[str], why: str, now: float) -> tuple[Moves, Moves]:
        def op(conn: sqlite3.Connection) -> tuple[Moves, Moves]:
            # the writer holds the write lock: the states read here are the ones the UPDATE sees
            seen = _states(conn, ids)
            rows = conn.execute(sql.CANCEL, (why, now, json.dumps(list(ids)))).fetchall()
            return {r[0]: seen[r[0]] for r in rows}, seen

        return await self._writer.run(op, promise=True)

    # -- reads --------------------------------------------------------------------------------

    async def _state(self, id: str) -> CustodyState | None:
        def op(conn: sqlite3.Connection) -> CustodyState | None:
            row = conn.execute(sql.STATE, (id,)).fetchone()
            return None if row is None else CustodyState(row[0])

        return await self._read(op)

    async def _get(self, id: str) -> TaskRecord | None:
        return await self._read(lambda conn: _record(conn, id))

    async def counts(self) -> Mapping[CustodyState, int]:
        def op(conn: sqlite3.Connection) -> dict[CustodyState, int]:
            counts = dict.fromkeys(CustodyState, 0)
            for state, n in conn.execute(sql.COUNTS):
                counts[CustodyState(state)] = n
            return counts

        return await self._read(op)

    async def in_flight(self) -> Sequence[str]:
        return await self._read(lambda conn: [r[0] for r in conn.execute(sql.IN_FLIGHT)])

    async def _records(
        self, state: CustodyState, limit: int, newest_first: bool
    ) -> list[TaskRecord]:
        query = sql.RECORDS_NEWEST if newest_first else sql.RECORDS_OLDEST
        return await self._read(
            lambda conn: [_record_of(r) for r in conn.execute(query, (state.value, limit))]
        )

    async def waiting_retries(self) -> WaitingRetries:
        now = self.clock()

        def op(conn: sqlite3.Connection) -> WaitingRetries:
            (count,) = conn.execute(sql.WAITING_RETRIES, (now,)).fetchone()
            return WaitingRetries(int(count), _next_due(conn, now))

        return await self._read(op)

    async def _journal(self, id: str) -> list[JournalEntry]:
        return await self._read(
            lambda conn: [journal_entry(row) for row in conn.execute(sql.JOURNAL, (id,))]
        )

    async def _suspects(self, limit: int) -> Suspects:
        def op(conn: sqlite3.Connection) -> Suspects:
            (count,) = conn.execute(sql.SUSPECTS_COUNT).fetchone()
            rows = conn.execute(sql.SUSPECTS, (limit,))
            return Suspects(int(count), tuple(_record_of(r) for r in rows))

        return await self._read(op)

    # -- durable runs (issue #35) -------------------------------------------------------------

    async def _steps(self, id: str) -> list[StepRecord]:
        return await self._read(lambda conn: steps_sql.steps_of(conn, id))

    async def _record_step(
        self, claim: Claim, name: str, value: str, size: int, now: float
    ) -> StepRecord:
        params = {
            **sql.fence_params(claim, now),
            "attempt": claim.attempt,  # the record's: which attempt's run recorded it
            "name": name,
            "value": value,
            "size": size,
        }

        def op(conn: sqlite3.Connection) -> StepRecord:
            record = steps_sql.record_step(conn, params)
            if record is None:
                raise _stale(conn, claim, now, f"record step {name!r} of")
            return record

        return await self._writer.run(op, promise=True)  # the step's effect has left already

    async def _park(self, claim: Claim, until: float, why: str, now: float) -> None:
        params = {**sql.fence_params(claim, now), "until": until, "why": why}

        def op(conn: sqlite3.Connection) -> None:
            if conn.execute(steps_sql.PARK, params).rowcount != 1:
                raise _stale(conn, claim, now, "park")

        await self._writer.run(op)

    async def _wake_due(self, limit: int, now: float) -> list[str]:
        def op(conn: sqlite3.Connection) -> list[str]:
            ids = steps_sql.wake_due(conn, now, limit)
            asks_sql.time_out(conn, ids, now)  # an ask past its deadline (issue #36)
            return ids

        return await self._writer.run(op)

    async def waiting_runs(self) -> WaitingRuns:
        return await self._read(steps_sql.waiting_runs)

    async def _forget_dead_steps(
        self, ids: Sequence[str] | None, text: str | None, limit: int, skip: str | None = None
    ) -> None:
        await self._writer.run(
            lambda conn: steps_sql.forget_dead_steps(conn, ids, text, limit, skip)
        )

    # -- flow control (issue #38) -------------------------------------------------------------

    async def _set_limit(self, spec: LimitSpec, now: float) -> None:
        params = {**attrs.asdict(spec), "now": now}
        await self._writer.run(lambda conn: conn.execute(limits_sql.SET, params))

    async def _acquire_permit(
        self, claim: Claim, key: str, weight: float, now: float
    ) -> Granted | NoPermit:
        params = {**sql.fence_params(claim, now), "key": key, "weight": weight}

        def op(conn: sqlite3.Connection) -> Granted | NoPermit:
            outcome = limits_sql.acquire(conn, params)
            if outcome is None:
                raise _stale(conn, claim, now, f"acquire a permit of {key!r} for")
            return outcome

        return await self._writer.run(op)

    async def _release_permit(self, permit: int, now: float) -> list[tuple[str, str]]:
        return await self._writer.run(lambda conn: limits_sql.release(conn, permit, now))

    async def _pause_limit(self, key: str, until: float, now: float) -> None:
        params = {"key": key, "until": until, "now": now}
        await self._writer.run(lambda conn: conn.execute(limits_sql.PAUSE, params))

    async def _limit_views(self, now: float) -> list[LimitView]:
        return await self._read(lambda conn: limits_sql.views(conn, now))

    async def _set_tenant_weight(self, tenant: str, weight: float) -> None:
        await self._writer.run(lambda conn: conn.execute(sql.SET_TENANT_WEIGHT, (tenant, weight)))

    async def _tenant_views(self) -> list[TenantView]:
        return await self._read(lambda conn: tenant_views_of(conn.execute(sql.TENANT_VIEWS)))


# -- helpers (run in the writer's or the reader's thread) -----------------------------------------


def _task(row: Sequence[Any]) -> Task:
    return task_from_row(row, row[1])


def _record(conn: sqlite3.Connection, id: str) -> TaskRecord | None:
    row = conn.execute(sql.GET, (id,)).fetchone()
    if row is None:
        return None
    return _record_of(row)


def _record_of(row: Sequence[Any]) -> TaskRecord:
    return record_from_row(row, str)


def _require(conn: sqlite3.Connection, id: str) -> TaskRecord:
    rec = _record(conn, id)
    if rec is None:
        raise unknown_task(id)
    return rec


def _states(conn: sqlite3.Connection, ids: Sequence[str]) -> Moves:
    """The state of each of ``ids`` that exists."""
    rows = conn.execute(sql.STATES, (json.dumps(list(ids)),))
    return {id: CustodyState(state) for id, state in rows}


def _redrive_rows(
    conn: sqlite3.Connection, ids: Sequence[str], why: str, now: float
) -> tuple[Moves, Moves]:
    """dead -> pending for those of ``ids`` that are dead: fresh attempts, due now, nothing of
    the dead run kept (owner, lease, stored reply, stall and dead-notice markers, crash counts
    and the suspect mark: the operator vouches for it). Returns
    (moved: id -> dead, seen: every existing id -> its state before)."""
    seen = _states(conn, ids)
    rows = conn.execute(sql.REDRIVE, (why, now, json.dumps(list(ids)))).fetchall()
    moved = [r[0] for r in rows]
    conn.execute(sql.REDRIVE_CLEAR_STALLS, (json.dumps(moved),))
    return dict.fromkeys(moved, CustodyState.DEAD), seen


def _suspect_claim(
    conn: sqlite3.Connection, row: Sequence[Any], worker: str, now: float, until: float
) -> Claim:
    """A suspect claimed to run in quarantine (its room noted for the worker)."""
    if row[2] is not None:
        _note_room(conn, row[2], worker, now)
    return Claim(_task(row), worker, row[5], until, row[7], suspect=True)


def _stale(conn: sqlite3.Connection, claim: Claim, now: float, verb: str) -> Exception:
    rec = _record(conn, claim.task.id)
    seen = (
        None
        if rec is None
        else FoundState(rec.state, rec.owner, rec.attempt, rec.lease_until, rec.reason, run=rec.run)
    )
    return stale_lease(seen, claim, now, verb)


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
    conn: sqlite3.Connection, at: float, pending_limit: int, skip: str, walks: WalkHint
) -> PoolView:
    """The pool as one transaction sees it (``skip``: a JSON list of rooms to read past)."""
    pending: list[PendingTask] = []
    rooms: dict[str, str] = {}
    ready = json.dumps(ready_pending(conn, at, pending_limit, skip, walks))
    for id, room, rank, keeper in conn.execute(sql.VIEW_PENDING, (ready,)):
        pending.append(PendingTask(id, room, RANK_PRIORITY[rank]))
        if keeper is not None:
            rooms[room] = keeper
    return PoolView(
        at=at,
        workers=tuple(_workers(conn)),
        assigned=tuple(Assignment(*r) for r in conn.execute(sql.VIEW_ASSIGNED)),
        claims=dict(conn.execute(sql.VIEW_CLAIMS).fetchall()),
        pending=tuple(pending),
        rooms=rooms,
        busy_rooms=frozenset(r[0] for r in conn.execute(sql.VIEW_BUSY_ROOMS)),
        next_due=_next_due(conn, at),
    )


def _next_due(conn: sqlite3.Connection, now: float) -> float | None:
    (due,) = conn.execute(sql.NEXT_DUE, (now,)).fetchone()
    return None if due is None else float(due)


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
            _note_room(conn, room, worker, now)
    return {id for id, _, _ in rows}


def _assign_one(conn: sqlite3.Connection, id: str, worker: str, now: float) -> bool:
    row = conn.execute(sql.ASSIGN, (worker, now, id, now)).fetchone()
    if row is None:
        return False
    if row[0] is not None:
        _note_room(conn, row[0], worker, now)
    return True


def _note_room(conn: sqlite3.Connection, room: str, worker: str, now: float) -> None:
    conn.execute(sql.NOTE_ROOM, (room, worker, now))


def _queue_place(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A claimed row's place in the queue (``sql.QUEUE_ORDER``): rank, turn, rowid."""
    return (row[3], row[8], row[6])


def _next_turn(conn: sqlite3.Connection, tenant: str, rank: int) -> float:
    """A new task's turn among the tenants (``custody._tenants.next_turn``), read in the
    ingest's transaction: a later task of the same ingest sees the earlier ones' turns."""
    clock, last, weight = conn.execute(
        sql.TURN_INPUTS, {"tenant": tenant, "priority": rank}
    ).fetchone()
    return next_turn(clock, last, DEFAULT_WEIGHT if weight is None else weight)


def _workers(conn: sqlite3.Connection) -> list[WorkerInfo]:
    return [WorkerInfo(*r) for r in conn.execute(sql.WORKERS)]
