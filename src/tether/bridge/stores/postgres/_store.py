"""PostgresStore: the custody store shared by many bridges and workers on many hosts.

Each operation makes one ``trio.to_thread`` hop into psycopg's sync API (its async API does not
run on Trio) with a pooled autocommit connection, mostly one statement (``_sql``: the fence in
the ``WHERE``, claims with ``FOR UPDATE SKIP LOCKED``); ``stores._frame`` checks its arguments
and logs it. PostgreSQL's own group commit stands in for SQLite's writer thread.

Time: leases use the store's ``clock`` (the caller's host clock, like SQLite). Hosts sharing
a database must keep their clocks synchronised (NTP) well within ``lease_s``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Final

import attrs
import trio
from psycopg_pool import ConnectionPool

from ...._plumbing._when import clock_time, duration
from ...custody._crashes import (
    DEFAULT_MAX_CRASHES_ALONE,
    process_prefix,
    quarantine_death_outcome,
)
from ...custody._limits import WAITER_GRACE, Granted, LimitSpec, LimitView, NoPermit, decide
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
from ...custody._roles import plan_then_assign
from ...custody._rooms import SUPERSEDED_PREFIX, RoomPolicy
from ...custody._rules import (
    PRIORITY_RANK,
    Claim,
    CustodyConflict,
    CustodyState,
    Result,
    Task,
    TaskRecord,
    check_worker,
)
from ...custody._steps import over_task_limit
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
    task_gone,
    unknown_task,
)
from .._frame import Moves, check_settings, lease_expiry
from .._limits_frame import LimitsFrame, bucket_of, tenant_views_of, views_of
from .._operator import CANCELLED_PREFIX
from .._rooms_sql import SUPERSEDED_OWNER
from .._steps_frame import StepsFrame
from ._asks import PostgresAsks
from ._connection import Conn as Conn
from ._connection import (
    NoConnection,
    T,
    check_timeouts,
    connector,
    first_line,
    open_pool,
    run_on,
)
from ._connection import StoreConnectionLost as StoreConnectionLost
from ._connection import StoreTimeout as StoreTimeout
from ._conversations import PostgresConversations, lock_rooms_sql, with_conversations
from ._dsn import redact_dsn
from ._durable import Durability, Promise, Synchronous
from ._housekeeping import PostgresHousekeeping
from ._limits import LimitsSql
from ._listen import PENDING, RESULT, Listener, assigned_payload, wants_work
from ._schema import check_schema
from ._sql import QUEUE_WALK, Sql
from ._steps import StepsSql
from ._watchdog import Watchdog

log = logging.getLogger("tether.bridge.postgres")


@attrs.define(eq=False)
class PostgresStore(
    LimitsFrame, StepsFrame, PostgresAsks, PostgresConversations, PostgresHousekeeping
):
    """Custody in a PostgreSQL schema. Open with ``await PostgresStore.open(dsn)``."""

    dsn_shown: str
    """The DSN with its password removed: safe to log."""
    schema: str
    clock: Callable[[], float]
    lease_s: float
    max_attempts: int
    max_body_bytes: int
    pool_size: int
    _pool: ConnectionPool[Conn]
    _listener: Listener
    _channel: str
    _limiters: trio.lowlevel.RunVar[trio.CapacityLimiter] = attrs.field(init=False)
    max_crashes_alone: int = DEFAULT_MAX_CRASHES_ALONE
    """Crashes while it ran alone that prove a task kills its process (``custody._crashes``)."""
    durability: Durability = attrs.field(factory=Durability)
    """What waits for the WAL flush: promises (NORMAL, the default) or every commit (FULL)."""
    read_only: bool = attrs.field(default=False, kw_only=True)
    """Opened to inspect: ``counts`` reads without folding (issue #56)."""
    _closed: bool = attrs.field(init=False, default=False)
    _sql: Sql = attrs.field(init=False)
    reach: StoreReach = attrs.field(init=False, factory=StoreReach)
    """Whether this process reaches the server, and since when (``custody._outage``)."""
    work_bell: WorkBell = attrs.field(init=False, factory=WorkBell)
    _server_started: float | None = attrs.field(init=False, default=None)
    """When the server had last started as the store opened (``_restarted_at``)."""
    _steps_sql: StepsSql = attrs.field(init=False)
    _limits_sql: LimitsSql = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._limiters = trio.lowlevel.RunVar(f"tether-postgres-limiter-{id(self)}")
        self._sql = Sql(f'"{self.schema}"')
        self._steps_sql = StepsSql(f'"{self.schema}"')
        self._limits_sql = LimitsSql(f'"{self.schema}"')

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        schema: str = "tether",
        clock: Callable[[], float] = time.time,
        lease_s: float = 60.0,
        max_attempts: int = 5,
        max_body_bytes: int = 1 << 20,
        pool_size: int = 8,
        connect_timeout_s: float = 10.0,
        lock_timeout_s: float = 10.0,
        statement_timeout_s: float = 60.0,
        password: str | None = None,
        create: bool = True,
        max_crashes_alone: int = DEFAULT_MAX_CRASHES_ALONE,
        read_only: bool = False,
        synchronous: Synchronous = "NORMAL",
    ) -> PostgresStore:
        """Connect, create and migrate ``schema`` if needed, and open a pool of ``pool_size``.

        ``dsn`` is a libpq connection string or ``postgresql://`` URL. The password comes from
        ``password`` (e.g. read from a file), else libpq's own sources (``PGPASSWORD``,
        ``~/.pgpass`` or ``PGPASSFILE``). It never appears in an error or log message.

        A store call runs in a thread that cannot be abandoned (its caller must learn the
        outcome), so no statement may wait forever: one that waits for a row lock longer than
        ``lock_timeout_s`` (say an operator's open transaction holds it) or runs longer than
        ``statement_timeout_s`` is cancelled by the server and raises ``StoreTimeout``.
        ``create=False`` refuses (``NoSuchStore``) a schema that holds no tether store;
        ``read_only`` also one of an older version (no migration), and every session refuses
        writes (for tools that only inspect). ``synchronous``: NORMAL commits what promises
        nothing without waiting for the WAL flush and waits for it before a promise
        (``_durable``); FULL and EXTRA wait at every commit.
        """
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA; got {synchronous!r}")
        check_settings(lease_s, max_attempts, max_body_bytes, max_crashes_alone)
        check_limit(pool_size, "pool_size")
        check_timeouts(lock_timeout_s=lock_timeout_s, statement_timeout_s=statement_timeout_s)
        check_schema(schema)
        shown = redact_dsn(dsn)
        connect = connector(dsn, schema, connect_timeout_s, password, read_only=read_only)

        def setup() -> ConnectionPool[Conn]:
            return open_pool(
                dsn,
                shown,
                schema=schema,
                pool_size=pool_size,
                connect_timeout_s=connect_timeout_s,
                lock_timeout_s=lock_timeout_s,
                statement_timeout_s=statement_timeout_s,
                password=password,
                create=create,
                read_only=read_only,
            )

        pool = await trio.to_thread.run_sync(setup)
        channel = f"tether_{schema}"

        def notify(payload: str) -> None:
            with pool.connection() as conn:
                conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))

        store = cls(
            shown,
            schema,
            clock,
            float(lease_s),
            max_attempts,
            max_body_bytes,
            pool_size,
            pool,
            Listener(connect, channel, notify),
            channel,
            max_crashes_alone,
            Durability("FULL" if read_only else synchronous, Watchdog(statement_timeout_s)),
            read_only=read_only,
        )
        await store._run(lambda conn: store._restarted_at(conn, clock()))  # the baseline
        return store

    async def aclose(self) -> None:
        """Stop the listener and close the pool (connections in use finish first). Idempotent."""
        if self._closed:
            return
        self._closed = True

        def close() -> None:
            self._listener.stop()
            self._pool.close()
            self.durability.watchdog.close()

        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(close)

    async def _run(self, fn: Callable[[Conn], T], *, promise: Promise = False) -> T:
        """Run ``fn(conn)`` in one thread hop with a pooled autocommit connection; the store's
        limiter lets as many hops run as the pool has connections, so none waits for one. A
        ``promise`` returns once its commit (and every one before it) is flushed."""
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")
        try:
            limiter = self._limiters.get()
        except LookupError:
            limiter = trio.CapacityLimiter(self.pool_size)
            self._limiters.set(limiter)

        hop = partial(run_on, self._pool, self.durability.wrap(fn, promise), self.dsn_shown)
        while True:
            try:
                # not abandoned on cancel: the caller learns the outcome of a change that may
                # commit; a hop waits at most WAIT_HOP_S for a connection
                result = await trio.to_thread.run_sync(hop, limiter=limiter)
            except NoConnection as exc:  # nothing ran: wait for the server (cancellable here)
                self._unreachable(str(exc))
                await trio.lowlevel.checkpoint()
                if self._closed:
                    raise trio.ClosedResourceError("the store is closed") from None
                continue
            except StoreConnectionLost as exc:
                self._unreachable(first_line(exc))
                raise
            self._reachable()
            return result

    def _restarted_at(self, conn: Conn, now: float) -> float | None:
        """When the server restarted, on the store's clock, if it has since the store opened
        (an outage for every holder, even if this process made no call during it)."""
        started, uptime = conn.execute(SERVER_STARTED).fetchone() or (None, None)
        if self._server_started is None:
            self._server_started = started
        if started == self._server_started or uptime is None:
            return None
        return now - float(uptime)  # a span: the server's clock never meets the store's

    def _unreachable(self, why: str) -> None:
        """One line when an outage begins (``custody._outage``: it blames nobody)."""
        if self.reach.lost(self.clock()):
            log.warning(
                "PostgreSQL at %s unreachable (%s): store calls wait for it; leases that run "
                "out meanwhile are not held against their holders",
                self.dsn_shown,
                why,
            )

    def _reachable(self) -> None:
        """One line when an outage ends: the holders have a lease from now to renew."""
        outage = self.reach.reached(self.clock())
        if outage is not None:
            log.warning(
                "PostgreSQL at %s reachable again after %s; leases that ran out meanwhile "
                "lapse only if not renewed by %s",
                self.dsn_shown,
                duration(outage),
                clock_time(self.clock() + self.lease_s),
            )

    def _stored_text(self, text: str) -> str:
        return text.replace("\0", "\\0")  # text cannot hold NUL

    # -- waking idle workers ------------------------------------------------------------------

    async def wait_for_work(self, seconds: float, *, worker: str | None = None) -> bool:
        """Sleep until new pending work (or an assignment to ``worker``) may exist, at most
        ``seconds``.

        True if a notification woke us. Only a hint: the caller polls with ``claim`` either way.
        """
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")
        if worker is not None:
            check_worker(worker)
        return await self._listener.wait(wants_work(worker), seconds)

    async def wait_for_results(self, seconds: float) -> bool:
        """Sleep until a result may be ready for delivery, at most ``seconds`` (a hint too)."""
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")
        return await self._listener.wait(lambda payload: payload == RESULT, seconds)

    @property
    def listening(self) -> bool:
        """Is the LISTEN connection up (wake-ups can arrive)?"""
        return self._listener.listening.is_set()

    # -- ingest -------------------------------------------------------------------------------

    async def _ingest_many(
        self, tasks: Sequence[Task], headers: Sequence[str], policy: RoomPolicy
    ) -> tuple[list[bool], list[tuple[str, str]]]:
        ids = [task.id for task in tasks]
        rooms = [task.room for task in tasks]
        params: dict[str, Any] = {"ids": ids, "bodies": [_encode(t.body) for t in tasks]}
        params.update(rooms=rooms, ranks=[PRIORITY_RANK[t.priority] for t in tasks])
        params.update(headers=list(headers), now=self.clock(), chan=self._channel, policy=policy)
        params.update(owner=SUPERSEDED_OWNER, prefix=SUPERSEDED_PREFIX)
        tenants = [task.tenant for task in tasks]
        params.update(tenants=tenants, fairs=[NO_TURN] * len(tasks))
        sql, supersede, turns = self._sql.ingest, self._sql.supersede, self._sql.turns
        replace = policy == "replace" and any(room is not None for room in rooms)

        lock = lock_rooms_sql(self._s) if any(room is not None for room in rooms) else None

        def op(conn: Conn) -> tuple[list[bool], list[tuple[str, str]]]:
            with conn.transaction():  # replace: the new tasks and what they supersede at once
                if lock is not None:  # the rooms' conversations first, in order (issue #34)
                    conn.execute(lock, params)
                if any(tenant is not None for tenant in tenants):
                    params["fairs"] = _turns(conn.execute(turns, params).fetchall(), params)
                inserted = {r[0] for r in conn.execute(sql, params).fetchall()}
                fresh_rooms = _fresh_rooms(ids, rooms, inserted)
                # an open ask's answer runs no run of its own (issue #36)
                answered[:] = self._answers(conn, fresh_rooms, params["now"]) if fresh_rooms else []
                moved: list[tuple[str, str]] = []
                runs = inserted - {answer for _, answer in answered}
                if replace and runs:
                    fresh = {**params, "ids": sorted(runs)}
                    moved = [(r[0], r[1]) for r in conn.execute(supersede, fresh).fetchall()]
            first: list[bool] = []
            for id in ids:
                first.append(id in inserted)
                inserted.discard(id)  # a duplicate later in the batch is a replay
            return first, moved

        answered: list[tuple[str, str]] = []
        outcome = await self._run(op, promise=True)  # the ack follows
        log_answers(answered)
        return outcome

    async def _set_tenant_weight(self, tenant: str, weight: float) -> None:
        sql, params = self._sql.set_tenant_weight, {"tenant": tenant, "weight": weight}
        await self._run(lambda conn: conn.execute(sql, params))

    async def _tenant_views(self) -> list[TenantView]:
        sql = self._sql.tenant_views
        return await self._run(lambda conn: tenant_views_of(conn.execute(sql).fetchall()))

    async def _bodies(self, ids: Sequence[str]) -> Mapping[str, str]:
        sql = self._sql.bodies
        rows = await self._run(lambda c: c.execute(sql, {"ids": list(ids)}).fetchall())
        return {id: _decode(body) for id, body in rows}

    async def _prune_delivered(self, before: float, limit: int) -> int:
        sql = self._sql.prune
        return await self._run(
            lambda conn: conn.execute(sql, {"before": before, "limit": limit}).rowcount
        )

    async def _prune_tombstones(self, before: float, limit: int) -> int:
        sql = self._sql.prune_tombstones
        return await self._run(
            lambda conn: conn.execute(sql, {"before": before, "limit": limit}).rowcount
        )

    # -- lead ---------------------------------------------------------------------------------

    async def _pending(self, limit: int, now: float) -> Sequence[Task]:
        sql = self._sql.pending
        params = {"limit": limit, "now": now}
        return await self._run(lambda conn: [_task(r) for r in conn.execute(sql, params)])

    async def _assign(self, id: str, worker: str, now: float) -> None:
        params = {"id": id, "worker": worker, "now": now}
        params.update(chan=self._channel, payload=assigned_payload(worker))
        _, before = await self._cas(self._sql.assign, params)
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
        sql = outranked.postgres(self._sql.s)
        params = {"ahead": ahead, "limit": limit, "now": now, "chan": self._channel}
        return await self._run(lambda conn: [r[0] for r in conn.execute(sql, params)])

    async def _unassign(self, id: str, worker: str, now: float) -> bool:
        params = {"id": id, "worker": worker, "now": now, "chan": self._channel}
        params["payload"] = PENDING
        _, before = await self._cas(self._sql.unassign, params)
        return before is None

    async def _assign_many(self, pairs: Sequence[tuple[str, str]], now: float) -> set[str]:
        params: dict[str, Any] = {"ids": [i for i, _ in pairs], "workers": [w for _, w in pairs]}
        params.update(now=now, chan=self._channel)
        sql = self._sql.assign_many
        return await self._run(lambda conn: {r[0] for r in conn.execute(sql, params)})

    async def _return_assignments(self, worker: str, now: float) -> list[str]:
        params = {"worker": worker, "now": now, "chan": self._channel}
        sql = self._sql.return_assignments
        return await self._run(lambda conn: [r[0] for r in conn.execute(sql, params)])

    async def _pool_view(self, at: float, pending_limit: int, skip: list[str]) -> PoolView:
        sql = self._sql
        pending_sql = sql.queued_skipping_rooms if skip else sql.queued

        def op(conn: Conn) -> PoolView:
            # one snapshot for every read: a read-only REPEATABLE READ transaction
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                pending = [
                    PendingTask(id, room, RANK_PRIORITY[rank])
                    for id, room, rank in conn.execute(
                        pending_sql, {"limit": pending_limit, "skip": skip, "now": at}
                    )
                ]
                names = sorted({t.room for t in pending if t.room is not None})
                rooms: dict[str, str] = dict(
                    conn.execute(sql.view_rooms, {"rooms": names}).fetchall()
                )
                view = PoolView(
                    at=at,
                    workers=tuple(WorkerInfo(*r) for r in conn.execute(sql.workers)),
                    assigned=tuple(Assignment(*r) for r in conn.execute(sql.view_assigned)),
                    claims=dict(conn.execute(sql.view_claims).fetchall()),
                    pending=tuple(pending),
                    rooms=rooms,
                    busy_rooms=frozenset(r[0] for r in conn.execute(sql.view_busy_rooms)),
                    next_due=_one(conn.execute(sql.next_due, {"now": at}).fetchone()),
                )
            finally:
                conn.execute("COMMIT")
            return view

        return await self._run(op)

    async def plan_and_assign(
        self, decide: SweepPlanner, *, pending_limit: int = 1000
    ) -> tuple[PoolView, list[bool] | None]:
        """The view, then ``assign_many``: two transactions (``plan_then_assign``)."""
        return await plan_then_assign(self, decide, pending_limit=pending_limit)

    # -- liveness -----------------------------------------------------------------------------

    async def _beat(
        self, worker: str, role: WorkerRole, capacity: int, now: float
    ) -> list[WorkerInfo]:
        params = {"worker": worker, "role": role, "capacity": capacity, "now": now}
        sql = self._sql.beat
        return await self._run(lambda conn: [WorkerInfo(*r) for r in conn.execute(sql, params)])

    async def workers(self) -> Sequence[WorkerInfo]:
        sql = self._sql.workers
        return await self._run(lambda conn: [WorkerInfo(*r) for r in conn.execute(sql)])

    async def _remove_worker(self, worker: str) -> bool:
        sql = self._sql.remove_worker
        return await self._run(lambda conn: conn.execute(sql, {"worker": worker}).rowcount == 1)

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
        params = {"worker": worker, "leaderless": leaderless, "limit": limit, "prefix": prefix}
        params.update(now=now, until=until, quarantined=False)
        sql = self._sql
        process_key = {"key": f"tether-process:{self.schema}:{prefix or worker}"}
        pool_key = {"key": f"tether-suspects:{self.schema}"}

        def quarantined(conn: Conn, quarantine: int) -> list[Claim]:
            # suspects run in quarantine children (custody._crashes), most crashed first, one
            # statement each (each passes its room's gate), then ordinary work beside them
            suspects: list[Claim] = []
            with conn.transaction():
                conn.execute(QUEUE_WALK)
                for _ in range(min(quarantine, limit)):
                    rows = conn.execute(sql.claim_suspect, {**params, "quarantined": True})
                    got = [Claim(_task(r), worker, r[5], until, r[6], suspect=True) for r in rows]
                    if not got:
                        break
                    suspects += got
                rest = limit - len(suspects)
                if rest:
                    rows = conn.execute(sql.claim_many_among_suspects, {**params, "limit": rest})
                    suspects += [Claim(_task(r), worker, r[5], until, r[6]) for r in rows]
            return suspects

        def op(conn: Conn) -> list[Claim]:
            if quarantine is not None:
                return quarantined(conn, quarantine)
            # a suspect runs alone (custody._crashes). With no suspect in play (the usual
            # case) a claim is one statement (after ``QUEUE_WALK``, in its round trip), which
            # claims nothing once one is. Otherwise every
            # claim of a process holds its advisory lock, shared; a claim that may take a
            # suspect holds it exclusively and the pool's suspect lock too, so no other suspect
            # claim, and no locked claim of its process, commits between its checks and its
            # claim
            with conn.pipeline(), conn.transaction():  # one round trip
                conn.execute(QUEUE_WALK)
                claimed = conn.execute(sql.claim_many, params)
            rows = claimed.fetchall()
            if rows or not _one(conn.execute(sql.suspects_in_play).fetchone()):
                return [Claim(_task(row), worker, row[5], until, row[6]) for row in rows]
            with conn.transaction():
                conn.execute(QUEUE_WALK)
                may_take = bool(_one(conn.execute(sql.suspects_unclaimed).fetchone()))
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
                    # the process drains, then takes the suspect alone (a claim that holds
                    # only the shared lock leaves it to the next one)
                    if not may_take or _one(conn.execute(sql.process_busy, params).fetchone()):
                        return []
                    rows = conn.execute(sql.claim_suspect, params).fetchall()
                else:
                    rows = conn.execute(sql.claim_many_among_suspects, params).fetchall()
            return [Claim(_task(row), worker, row[5], until, row[6]) for row in rows]

        def conversing(conn: Conn) -> list[Claim]:
            # the conversations are read on the claim's connection (issue #34 perf)
            claims = op(conn)
            return claims if history is None else with_conversations(conn, self._s, claims, history)

        return await self._run(conversing)

    async def _renew(self, claim: Claim, now: float, until: float) -> float:
        params = _fence(claim, now)
        params["until"] = until
        new_until, before = await self._cas(self._sql.renew, params)
        if before is not None:
            raise stale_lease(before, claim, now, "renew")
        return float(new_until)

    async def _complete(self, claim: Claim, body: str, no_send: bool, now: float) -> None:
        params = self._complete_params(claim, body, no_send, now)
        _, before = await self._cas(self._sql.complete, params)
        if before is not None:
            raise stale_lease(before, claim, now, "complete")

    async def _complete_many(
        self, items: Sequence[tuple[str, int, str, str]], no_send: bool, now: float
    ) -> list[bool]:
        # one row per fence (the first): a repeat in the same call finds the task no longer
        # claimed, as a second ``complete`` would, and so reports False. Fences of one id that
        # differ (a stale claim beside the live one) can match at most one row between them.
        first: dict[tuple[str, int, str], int] = {}
        for i, (worker, run, id, _) in enumerate(items):
            first.setdefault((worker, run, id), i)
        params: dict[str, Any] = {"ids": [id for _, _, id in first], "no_send": no_send}
        params.update(workers=[worker for worker, _, _ in first], now=now, payload=RESULT)
        params.update(runs=[run for _, run, _ in first], chan=self._channel)
        params.update(bodies=[_encode(items[i][3]) for i in first.values()])
        sql = self._sql.complete_many
        moved = await self._run(
            lambda conn: {(r[1], r[2], r[0]) for r in conn.execute(sql, params)}
        )
        return [
            (worker, run, id) in moved and first[worker, run, id] == i
            for i, (worker, run, id, _) in enumerate(items)
        ]

    async def _fail(
        self, claim: Claim, reason: str, permanent: bool, not_before: float | None, now: float
    ) -> tuple[bool, str]:
        params = _fence(claim, now)
        params.update(chan=self._channel, payload=PENDING, not_before=not_before)
        sql = self._sql

        def op(conn: Conn) -> tuple[bool, str] | FoundState | None:
            # the failure budget leaves out the runs lost to crashes (custody._crashes)
            with conn.transaction():
                row = conn.execute(sql.fenced_crash_count, params).fetchone()
                if row is None:
                    return _seen(conn, sql.cas_state, params)
                dead, why = fail_outcome(
                    reason, claim.attempt, self.max_attempts, permanent, row[0]
                )
                conn.execute(sql.fail_dead if dead else sql.fail_repool, {**params, "reason": why})
                return dead, why

        outcome = await self._run(op)
        if not isinstance(outcome, tuple):
            raise stale_lease(outcome, claim, now, "fail")
        return outcome

    async def _quarantine_death(
        self, claim: Claim, death: str, max_deaths: int, now: float
    ) -> tuple[CustodyState, str]:
        params = _fence(claim, now)
        params.update(chan=self._channel, payload=PENDING)
        sql = self._sql

        def op(conn: Conn) -> tuple[CustodyState, str] | FoundState | None:
            with conn.transaction():
                row = conn.execute(sql.fenced_quarantine_deaths, params).fetchone()
                if row is None:
                    return _seen(conn, sql.cas_state, params)
                state, why = quarantine_death_outcome(
                    attempt=claim.attempt, deaths=row[0], max_deaths=max_deaths, death=death
                )
                values = {**params, "state": state.value, "reason": why, "death": death}
                conn.execute(sql.quarantine_death, values)
                return state, why

        outcome = await self._run(op)
        if not isinstance(outcome, tuple):
            raise stale_lease(outcome, claim, now, "record a quarantine death of")
        return outcome

    async def _release(self, claim: Claim, now: float) -> None:
        params = _fence(claim, now)
        params.update(chan=self._channel, payload=PENDING)
        _, before = await self._cas(self._sql.release, params)
        if before is not None:
            raise stale_lease(before, claim, now, "release")

    # -- stall notices ------------------------------------------------------------------------

    async def _stall_candidates(
        self, older_than: float, worker: str | None, limit: int
    ) -> list[StallCandidate]:
        params = {"older_than": older_than, "worker": worker, "limit": limit}
        sql = self._sql.stall_candidates
        return await self._run(lambda conn: [StallCandidate(*r) for r in conn.execute(sql, params)])

    async def _mark_stall_notified(self, id: str, now: float) -> bool:
        params = {"id": id, "now": now}
        sql = self._sql.mark_stall_notified
        return await self._run(
            lambda conn: conn.execute(sql, params).rowcount == 1, promise=True
        )  # the notice follows

    async def _clear_stall_notice(self, id: str) -> None:
        sql = self._sql.clear_stall_notice
        await self._run(lambda conn: conn.execute(sql, {"id": id}))

    async def _prune_stall_notices(self, limit: int) -> int:
        sql = self._sql.prune_stall_notices
        return await self._run(lambda conn: conn.execute(sql, {"limit": limit}).rowcount)

    # -- reconciler ---------------------------------------------------------------------------

    async def _expire_leases(self, limit: int, now: float) -> list[LeaseExpiry]:
        params = {"now": now, "limit": limit}
        return await self._settle(self._sql.expired_claims, params, restarted=False)

    async def _recover_claims(self, worker: str, now: float) -> list[LeaseExpiry]:
        params = {"now": now, "worker": worker}
        return await self._settle(self._sql.claims_of, params, restarted=True)

    async def _settle(
        self, select: str, params: Mapping[str, Any], *, restarted: bool
    ) -> list[LeaseExpiry]:
        """Read (and lock) leases with ``select``; write what ``custody._crashes`` decides."""
        now = params["now"]
        sql = self._sql

        def op(conn: Conn) -> list[LeaseExpiry]:
            with conn.transaction():
                query = dict(params)
                if not restarted:
                    query["cutoff"] = self._expiry_cutoff(now, self._restarted_at(conn, now))
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
                    conn.execute("SELECT pg_notify(%s, %s)", (self._channel, PENDING))
            return [lease_expiry(e, o, now) for e, o in settled]

        return await self._run(op)

    # -- delivery -----------------------------------------------------------------------------

    delivery_leases = True
    """Several bridges share this store: ``ready_results(holder=...)`` leases what it returns
    (``delivery_holder``/``delivery_until``, taken with ``FOR UPDATE SKIP LOCKED``)."""

    async def _ready_results(self, limit: int, lease: tuple[str, float] | None) -> list[Result]:
        params: dict[str, Any] = {"limit": limit}
        sql = self._sql.ready
        if lease is not None:
            now = self.clock()
            params.update(holder=lease[0], now=now, until=now + lease[1])
            sql = self._sql.take_results

        def op(conn: Conn) -> list[Result]:
            return [
                Result(_task(r), _decode(r[5]), r[6], r[7], r[8]) for r in conn.execute(sql, params)
            ]

        return await self._run(op, promise=bool)  # their posts follow

    async def _mark_delivered(self, id: str, now: float) -> bool:
        _, before = await self._cas(self._sql.deliver, {"id": id, "now": now})
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
            self._sql.deliver_many, self._sql.delivered_among, ids, now
        )
        done = [id in moved or id in already for id in ids]
        return done, [id for id in dict.fromkeys(ids) if id in moved]

    async def _dead_letter(
        self, id: str, reason: str, now: float
    ) -> tuple[bool, CustodyState | None]:
        params = {"id": id, "reason": reason, "now": now}
        _, before = await self._cas(self._sql.dead_letter, params, promise=True)
        if before is not None and before.state is not CustodyState.DEAD:
            raise CustodyConflict(f"cannot dead-letter task {id!r}: it is {before.state.value}")
        return before is None, None  # the statement does not say which state it left: "?"

    # -- operator -----------------------------------------------------------------------------

    async def _redrive(self, ids: Sequence[str], why: str, now: float) -> tuple[Moves, Moves]:
        params = {"ids": list(ids), "reason": why, "now": now, "chan": self._channel}
        return await self._operator(self._sql.redrive, params)

    async def _redrive_dead(
        self, text: str | None, limit: int, why: str, now: float, *, include_cancelled: bool
    ) -> tuple[list[str], Moves, Moves]:
        text = None if text is None else self._stored_text(text)
        params = {
            "text": text,
            "limit": limit,
            "reason": why,
            "now": now,
            "chan": self._channel,
            "skip": None if include_cancelled else CANCELLED_PREFIX,
        }
        moved, seen = await self._operator(self._sql.redrive_dead, params)
        return list(seen), moved, seen

    async def _cancel(self, ids: Sequence[str], why: str, now: float) -> tuple[Moves, Moves]:
        params = {"ids": list(ids), "reason": why, "now": now}
        return await self._operator(self._sql.cancel, params)

    async def _operator(self, sql: str, params: Mapping[str, Any]) -> tuple[Moves, Moves]:
        """Run an operator move: (moved: id -> the state it left, seen: id -> state read)."""
        rows = await self._run(lambda conn: conn.execute(sql, params).fetchall(), promise=True)
        seen = {row[0]: CustodyState(row[1]) for row in rows}
        moved = {row[0]: CustodyState(row[1]) for row in rows if row[2]}
        return moved, seen

    # -- reads --------------------------------------------------------------------------------

    async def _state(self, id: str) -> CustodyState | None:
        sql = self._sql.state

        def op(conn: Conn) -> CustodyState | None:
            row = conn.execute(sql, {"id": id}).fetchone()
            return None if row is None else CustodyState(row[0])

        return await self._run(op)

    async def _get(self, id: str) -> TaskRecord | None:
        sql = self._sql.get

        def op(conn: Conn) -> TaskRecord | None:
            row = conn.execute(sql, {"id": id}).fetchone()
            return None if row is None else _record(row)

        return await self._run(op)

    async def _records(
        self, state: CustodyState, limit: int, newest_first: bool
    ) -> list[TaskRecord]:
        sql = self._sql.records_newest if newest_first else self._sql.records_oldest
        params = {"state": state.value, "limit": limit}
        return await self._run(lambda conn: [_record(r) for r in conn.execute(sql, params)])

    async def counts(self) -> Mapping[CustodyState, int]:
        sql, fold = self._sql.counts, None if self.read_only else self._sql.fold_counts

        def op(conn: Conn) -> dict[CustodyState, int]:
            counts = dict.fromkeys(CustodyState, 0)
            if fold is not None:
                conn.execute(fold)
            for state, n in conn.execute(sql):
                counts[CustodyState(state)] = n
            return counts

        return await self._run(op)

    async def in_flight(self) -> Sequence[str]:
        sql = self._sql.in_flight
        return await self._run(lambda conn: [r[0] for r in conn.execute(sql)])

    # -- dead-letter notices ------------------------------------------------------------------

    async def _unreported_dead(self, limit: int) -> list[TaskRecord]:
        sql = self._sql.unreported_dead
        return await self._run(
            lambda conn: [_record(r) for r in conn.execute(sql, {"limit": limit})],
            promise=bool,  # a notice of each follows
        )

    async def _mark_dead_reported(self, ids: Sequence[str], now: float) -> list[bool]:
        # marked by a concurrent bridge is marked all the same
        marked, already = await self._mark(
            self._sql.mark_dead_reported, self._sql.dead_reported_among, ids, now
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

        return await self._run(op)

    async def waiting_retries(self) -> WaitingRetries:
        sql = self._sql.waiting_retries
        params = {"now": self.clock()}

        def op(conn: Conn) -> WaitingRetries:
            row = conn.execute(sql, params).fetchone()
            assert row is not None
            return WaitingRetries(int(row[0]), _one(row[1:]))

        return await self._run(op)

    async def _journal(self, id: str) -> list[JournalEntry]:
        sql = self._sql.journal
        return await self._run(
            lambda conn: [journal_entry(row) for row in conn.execute(sql, {"id": id})]
        )

    # -- durable runs (issue #35) -------------------------------------------------------------

    async def _steps(self, id: str) -> list[StepRecord]:
        sql = self._steps_sql.steps
        return await self._run(
            lambda conn: [StepRecord(*row) for row in conn.execute(sql, {"id": id})]
        )

    async def _record_step(
        self, claim: Claim, name: str, value: str, size: int, now: float
    ) -> StepRecord:
        params = _fence(claim, now)
        params.update(name=name, value=value, size=size)
        sql, state_sql = self._steps_sql.record, self._sql.cas_state

        def op(conn: Conn) -> StepRecord | FoundState | None:
            row = conn.execute(sql, params).fetchone()
            assert row is not None
            fenced, inserted, total, *old = row
            if not fenced:
                return _seen(conn, state_sql, params)
            if inserted:
                return StepRecord(name, value, now, claim.attempt, size)
            if old[0] is not None:
                return StepRecord(*old)
            raise over_task_limit(name, int(total), size)

        outcome = await self._run(op, promise=True)  # the step's effect has left already
        if isinstance(outcome, StepRecord):
            return outcome
        if outcome is None:
            raise task_gone(claim.task.id, f"record step {name!r} of")
        raise stale_lease(outcome, claim, now, f"record step {name!r} of")

    async def _park(self, claim: Claim, until: float, why: str, now: float) -> None:
        params = _fence(claim, now)
        params.update(until=until, why=why)
        _, before = await self._cas(self._steps_sql.park, params)
        if before is not None:
            raise stale_lease(before, claim, now, "park")

    async def _wake_due(self, limit: int, now: float) -> list[str]:
        sql = self._steps_sql.wake_due
        params = {"now": now, "limit": limit, "chan": self._channel}

        def op(conn: Conn) -> list[str]:
            with conn.transaction():
                ids = [r[0] for r in conn.execute(sql, params)]
                self._time_out(conn, ids, now)  # an ask past its deadline (issue #36)
            return ids

        return await self._run(op)

    async def waiting_runs(self) -> WaitingRuns:
        sql = self._steps_sql.waiting_runs

        def op(conn: Conn) -> WaitingRuns:
            row = conn.execute(sql).fetchone()
            assert row is not None
            count, first = row
            return WaitingRuns(int(count), None if first is None else float(first))

        return await self._run(op)

    async def _forget_dead_steps(
        self, ids: Sequence[str] | None, text: str | None, limit: int, skip: str | None = None
    ) -> None:
        if ids is None:
            sql = self._steps_sql.forget_matching
            text = None if text is None else self._stored_text(text)
            params: dict[str, Any] = {"text": text, "limit": limit, "skip": skip}
        else:
            sql, params = self._steps_sql.forget_ids, {"ids": list(ids)}
        await self._run(lambda conn: conn.execute(sql, params))

    # -- flow control (issue #38) -------------------------------------------------------------

    async def _set_limit(self, spec: LimitSpec, now: float) -> None:
        sql, params = self._limits_sql.set, {**attrs.asdict(spec), "now": now}
        await self._run(lambda conn: conn.execute(sql, params))

    async def _acquire_permit(
        self, claim: Claim, key: str, weight: float, now: float
    ) -> Granted | NoPermit:
        params = _fence(claim, now)
        params.update(key=key, weight=weight)
        q, state_sql = self._limits_sql, self._sql.cas_state

        def op(conn: Conn) -> Granted | NoPermit | FoundState | None:
            for _ in range(3):  # a grant between our two statements: ask again
                row = conn.execute(q.acquire, params).fetchone()
                assert row is not None
                fenced, permit, tokens, rate = row
                if not fenced:
                    return _seen(conn, state_sql, params)
                if permit is not None:
                    return Granted(int(permit), math.inf if rate is None else float(tokens))
                found = conn.execute(q.bucket, params).fetchone()
                if found is None:
                    return Granted(None)
                outcome = decide(bucket_of(found), weight, now)
                if isinstance(outcome, NoPermit):
                    until = now + (outcome.seconds or 0.0) + WAITER_GRACE
                    conn.execute(q.waiter, {**params, "until": until})
                    return outcome
            return NoPermit(0.0, "contended")

        outcome = await self._run(op)
        if isinstance(outcome, Granted | NoPermit):
            return outcome
        if outcome is None:
            raise task_gone(claim.task.id, f"acquire a permit of {key!r} for")
        raise stale_lease(outcome, claim, now, f"acquire a permit of {key!r} for")

    async def _release_permit(self, permit: int, now: float) -> list[tuple[str, str]]:
        sql = self._limits_sql.release
        params = {"permit": permit, "now": now, "chan": self._channel}
        return await self._run(lambda conn: [(i, k) for i, k, _ in conn.execute(sql, params)])

    async def _pause_limit(self, key: str, until: float, now: float) -> None:
        sql, params = self._limits_sql.pause, {"key": key, "until": until, "now": now}
        await self._run(lambda conn: conn.execute(sql, params))

    async def _limit_views(self, now: float) -> list[LimitView]:
        q = self._limits_sql

        def op(conn: Conn) -> list[LimitView]:
            with conn.transaction():
                rows = conn.execute(q.all).fetchall()
                waiting = {k: int(n) for k, n in conn.execute(q.waiters, {"now": now})}
            return views_of(rows, waiting, now)

        return await self._run(op)

    async def _suspects(self, limit: int) -> Suspects:
        sql = self._sql

        def op(conn: Conn) -> Suspects:
            with conn.transaction():
                count = _one(conn.execute(sql.suspects_count).fetchone())
                rows = conn.execute(sql.suspects, {"limit": limit}).fetchall()
            return Suspects(int(count or 0), tuple(_record(r) for r in rows))

        return await self._run(op)

    async def unreported_dead_count(self) -> int:
        sql = self._sql.unreported_dead_count

        def op(conn: Conn) -> int:
            row = conn.execute(sql).fetchone()
            assert row is not None
            return int(row[0])

        return await self._run(op)

    # -- compare-and-set ----------------------------------------------------------------------

    # -- what the conversations (``_conversations``) share with custody ----------------------

    @property
    def _s(self) -> str:
        return self._sql.s

    @property
    def _wake_channel(self) -> str:
        return self._channel

    def _missed(self, conn: Conn, claim: Claim, now: float, verb: str) -> Exception:
        return stale_lease(_seen(conn, self._sql.cas_state, _fence(claim, now)), claim, now, verb)

    def _complete_sql(self) -> str:
        return self._sql.complete

    def _complete_params(
        self, claim: Claim, body: str, no_send: bool, now: float
    ) -> dict[str, Any]:
        params = _fence(claim, now)
        params.update(body=_encode(body), no_send=no_send, chan=self._channel, payload=RESULT)
        return params

    async def _cas(
        self, sql: str, params: Mapping[str, Any], *, promise: bool = False
    ) -> tuple[Any, FoundState | None]:
        """Run a CAS statement; return (its RETURNING value, None) or (None, the row now).

        The row is read by a second statement only when the CAS changed nothing: a new
        statement sees what a concurrent transaction that made ours miss has committed (the
        first statement's snapshot could still show the state ours expected).
        """
        state_sql = self._sql.cas_state

        def op(conn: Conn) -> tuple[Any, FoundState | None]:
            row = conn.execute(sql, params).fetchone()
            if row is not None and row[0] is not None:
                return row[0], None
            seen = _seen(conn, state_sql, params)
            if seen is None:  # a fenced move's task is gone: its holder's lease is lost
                fenced = "run" in params
                raise task_gone(params["id"], "move") if fenced else unknown_task(params["id"])
            return None, seen

        return await self._run(op, promise=promise)


SERVER_STARTED: Final = (
    "SELECT extract(epoch FROM pg_postmaster_start_time())::float8, "
    "extract(epoch FROM clock_timestamp() - pg_postmaster_start_time())::float8"
)
"""When the server last started (on its clock: compared only with itself) and how long ago."""
_UTF8: Final = "utf-8"
_ERRORS: Final = "surrogatepass"  # any Python str round-trips exactly, as in check_body


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


def _encode(text: str) -> bytes:
    return text.encode(_UTF8, _ERRORS)


def _decode(data: bytes) -> str:
    return bytes(data).decode(_UTF8, _ERRORS)


def _task(row: Sequence[Any]) -> Task:
    return task_from_row(row, _decode(row[1]))


def _one(row: Sequence[Any] | None) -> float | None:
    """The first column of ``row`` as a float, or None (a NULL, or no row)."""
    return None if row is None or row[0] is None else float(row[0])


def _seen(conn: Conn, state_sql: str, params: Mapping[str, Any]) -> FoundState | None:
    """Where the task of a compare-and-set that missed stands now (None: no such task)."""
    row = conn.execute(state_sql, params).fetchone()
    if row is None:
        return None
    state, owner, attempt, lease_until, reason, run = row
    return FoundState(CustodyState(state), owner, attempt, lease_until, reason, run=run)


def _record(row: Sequence[Any]) -> TaskRecord:
    return record_from_row(row, _decode)


def _fence(claim: Claim, now: float) -> dict[str, Any]:
    """A claim's fence as parameters (checked by the frame)."""
    return {"id": claim.task.id, "worker": claim.worker, "run": claim.run, "now": now}


def _turns(read: Sequence[Sequence[Any]], params: Mapping[str, Any]) -> list[float]:
    """The turns of an ingest's tasks (``custody._tenants.next_turn``), in order, from the
    ``turns`` read of each task's tenant and priority: a later task of the same tenant and
    priority queues after the earlier ones of the batch."""
    last: dict[tuple[str, int], float] = {}
    out: list[float] = []
    for (tenant, rank, clock, pending_last, weight), head in zip(
        read, params["tenants"], strict=True
    ):
        if head is None:
            out.append(NO_TURN)
            continue
        key = (tenant, rank)
        turn = next_turn(clock, last.get(key, pending_last), weight or DEFAULT_WEIGHT)
        last[key] = turn
        out.append(turn)
    return out
