"""PostgresStore: the custody store shared by many bridges and workers on many hosts.

The same schema ideas as ``SqliteStore``: the state is a CHECKed column, every transition is one
``UPDATE ... WHERE`` naming the state it expects (and for leases the owner, the attempt and a
live ``lease_until``: fencing), claims pick rows with ``FOR UPDATE SKIP LOCKED`` so concurrent
workers on any host never wait for or take each other's row, and ingest is
``INSERT ... ON CONFLICT DO NOTHING``.

psycopg 3's async API does not run on Trio, so every method makes exactly one
``trio.to_thread`` hop (~0.2 ms) into its sync API with a connection from a
``psycopg_pool.ConnectionPool``; the store's own ``CapacityLimiter`` has as many tokens as the
pool has connections, so a thread never waits for a connection. Inside the hop each method is
one statement in autocommit (one network round trip, one commit): a compare-and-set that fails
reads the row's state in the same statement (a data-modifying CTE) to explain why. PostgreSQL
commits concurrent transactions with one WAL flush (its own group commit), so there is no
writer thread here.

Time: leases use the store's ``clock`` (the caller's host clock, like SQLite). Hosts sharing
a database must keep their clocks synchronised (NTP) well within ``lease_s``.

Size (over ~600 lines on purpose): one short method per operation of the store's roles
(parameters, one statement, the evidence when a compare-and-set missed). The statements live
in ``_sql``, connections and their failures in ``_connection``, wake-ups in ``_listen``, and
what both backends share in ``stores/_common``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Final

import attrs
import trio
from psycopg_pool import ConnectionPool

from ...custody import _log as _clog
from ...custody._crashes import (
    DEFAULT_MAX_CRASHES_ALONE,
    Expired,
    check_max_crashes_alone,
    expiry_outcome,
    process_prefix,
)
from ...custody._rooms import (
    SUPERSEDED_PREFIX,
    RoomPolicy,
    check_room_policy,
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
    body_conflicts,
    check_body,
    check_claim_limit,
    check_delivery_lease,
    check_retry_after,
    check_task_id,
    check_worker,
)
from ...custody._store import (
    WORKER_ROLES,
    Assignment,
    Decide,
    JournalEntry,
    LeaseExpiry,
    OperatorOutcome,
    PoolView,
    Queued,
    StallCandidate,
    Suspects,
    WaitingRetries,
    WorkerInfo,
    WorkerRole,
    plan_then_assign,
)
from .._common import (
    RANK_PRIORITY,
    Seen,
    assign_refused,
    check_limit,
    check_permanent,
    check_reason,
    complete_args,
    fail_outcome,
    fence_args,
    ingest_headers,
    journal_entry,
    stale_lease,
    task_from_row,
    unknown_task,
)
from .._operator import (
    cancel_outcomes,
    cancel_reason,
    check_contains,
    check_ids,
    redrive_outcomes,
    redrive_reason,
)
from .._rooms_sql import SUPERSEDED_OWNER
from ._connection import Conn as Conn
from ._connection import StoreConnectionLost as StoreConnectionLost
from ._connection import StoreTimeout as StoreTimeout
from ._connection import T, connector, open_pool, run_on
from ._dsn import redact_dsn
from ._listen import ASSIGNED_PREFIX, PENDING, RESULT, Listener, assigned_payload
from ._schema import check_schema
from ._sql import Sql


@attrs.define(eq=False)
class PostgresStore:
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
    _closed: bool = attrs.field(init=False, default=False)
    _sql: Sql = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._limiters = trio.lowlevel.RunVar(f"tether-postgres-limiter-{id(self)}")
        self._sql = Sql(f'"{self.schema}"')

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
        writes (for tools that only inspect).
        """
        if not lease_s > 0:
            raise ValueError(f"lease_s must be > 0, got {lease_s!r}")
        check_limit(max_attempts, "max_attempts")
        check_limit(max_body_bytes, "max_body_bytes")
        check_limit(pool_size, "pool_size")
        check_max_crashes_alone(max_crashes_alone)
        for name, value in (
            ("lock_timeout_s", lock_timeout_s),
            ("statement_timeout_s", statement_timeout_s),
        ):
            if not (isinstance(value, int | float) and 0 < value < 86_400):
                raise ValueError(f"{name} must be between 0 and 86400 seconds, got {value!r}")
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

        return cls(
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
        )

    async def aclose(self) -> None:
        """Stop the listener and close the pool (connections in use finish first). Idempotent."""
        if self._closed:
            return
        self._closed = True

        def close() -> None:
            self._listener.stop()
            self._pool.close()

        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(close)

    async def __aenter__(self) -> PostgresStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _run(self, fn: Callable[[Conn], T]) -> T:
        """Run ``fn(conn)`` in one thread hop with a pooled autocommit connection."""
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")
        try:
            limiter = self._limiters.get()
        except LookupError:
            limiter = trio.CapacityLimiter(self.pool_size)
            self._limiters.set(limiter)

        def hop() -> T:
            return run_on(self._pool, fn, self.dsn_shown)

        # not abandoned on cancel: the caller learns the outcome of a change that may commit
        return await trio.to_thread.run_sync(hop, limiter=limiter)

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
        mine = None if worker is None else assigned_payload(worker)

        def wants(payload: str) -> bool:
            if payload == PENDING:
                return True
            return payload.startswith(ASSIGNED_PREFIX) and (mine is None or payload == mine)

        return await self._listener.wait(wants, seconds)

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

    async def ingest(self, task: Task, *, room_policy: RoomPolicy = "concurrent") -> bool:
        [new] = await self.ingest_many([task], room_policy=room_policy)
        return new

    async def ingest_many(
        self, tasks: Sequence[Task], *, room_policy: RoomPolicy = "concurrent"
    ) -> list[bool]:
        policy = check_room_policy(room_policy)
        rows = [self._ingest_row(task) for task in tasks]  # all valid, or nothing is stored
        if not rows:
            return []
        ids, bodies, rooms, ranks, headers = (list(col) for col in zip(*rows, strict=True))
        params: dict[str, Any] = {"ids": ids, "bodies": bodies, "rooms": rooms, "ranks": ranks}
        params.update(headers=headers, now=self.clock(), chan=self._channel, policy=policy)
        params.update(owner=SUPERSEDED_OWNER, prefix=SUPERSEDED_PREFIX)
        sql, supersede = self._sql.ingest, self._sql.supersede
        replace = policy == "replace" and any(room is not None for room in rooms)

        def op(conn: Conn) -> tuple[list[bool], list[tuple[str, str]]]:
            with conn.transaction():  # replace: the new tasks and what they supersede at once
                inserted = {r[0] for r in conn.execute(sql, params).fetchall()}
                moved: list[tuple[str, str]] = []
                if replace and inserted:
                    fresh = {**params, "ids": sorted(inserted)}
                    moved = [(r[0], r[1]) for r in conn.execute(supersede, fresh).fetchall()]
            first: list[bool] = []
            for row in rows:
                first.append(row[0] in inserted)
                inserted.discard(row[0])  # a duplicate later in the batch is a replay
            return first, moved

        new, superseded = await self._run(op)
        _clog.ingested(ids, new)
        for id, by in superseded:
            _clog.moved(id, None, CustodyState.RESULT, reason=superseded_reason(by))
        return new

    def _ingest_row(self, task: Task) -> tuple[Any, ...]:
        headers = ingest_headers(task, self.max_body_bytes)
        return (task.id, _encode(task.body), task.room, PRIORITY_RANK[task.priority], headers)

    async def body_conflicts(self, tasks: Sequence[Task]) -> list[bool]:
        ids = sorted({t.id for t in tasks})
        sql = f"SELECT id, body FROM {self._sql.s}.tasks WHERE id = ANY(%(ids)s::text[])"
        rows = await self._run(lambda c: c.execute(sql, {"ids": ids}).fetchall()) if ids else []
        return body_conflicts(tasks, {id: _decode(body) for id, body in rows})

    async def prune_delivered(self, before: float, *, limit: int = 10_000) -> int:
        check_limit(limit)
        sql = self._sql.prune
        count: int = await self._run(
            lambda conn: conn.execute(sql, {"before": before, "limit": limit}).rowcount
        )
        _clog.pruned(count, before)
        return count

    async def prune_tombstones(self, before: float, *, limit: int = 10_000) -> int:
        check_limit(limit)
        sql = self._sql.prune_tombstones
        return await self._run(
            lambda conn: conn.execute(sql, {"before": before, "limit": limit}).rowcount
        )

    # -- lead ---------------------------------------------------------------------------------

    async def pending(self, *, limit: int = 100) -> Sequence[Task]:
        check_limit(limit)
        sql = self._sql.pending
        params = {"limit": limit, "now": self.clock()}

        def op(conn: Conn) -> list[Task]:
            return [_task(r) for r in conn.execute(sql, params)]

        return await self._run(op)

    async def assign(self, id: str, worker: str) -> None:
        check_task_id(id)
        check_worker(worker)
        now = self.clock()
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
        _clog.moved(id, CustodyState.PENDING, CustodyState.ASSIGNED, worker=worker)

    async def unassign(self, id: str, worker: str) -> bool:
        check_task_id(id)
        check_worker(worker)
        params = {"id": id, "worker": worker, "now": self.clock(), "chan": self._channel}
        params["payload"] = PENDING
        _, before = await self._cas(self._sql.unassign, params)
        if before is None:
            _clog.moved(id, CustodyState.ASSIGNED, CustodyState.PENDING, worker=worker)
        return before is None

    async def assign_many(self, pairs: Sequence[tuple[str, str]]) -> list[bool]:
        checked = [(check_task_id(id), check_worker(worker)) for id, worker in pairs]
        if not checked:
            return []
        first: dict[str, int] = {}  # a repeated id: the first pair decides, later ones are False
        for n, (id, _) in enumerate(checked):
            first.setdefault(id, n)
        unique = [checked[n] for n in sorted(first.values())]
        params: dict[str, Any] = {"ids": [i for i, _ in unique], "workers": [w for _, w in unique]}
        params.update(now=self.clock(), chan=self._channel)
        sql = self._sql.assign_many

        def op(conn: Conn) -> set[str]:
            return {r[0] for r in conn.execute(sql, params)}

        moved = await self._run(op)
        _clog.assigned(unique, moved)
        return [id in moved and first[id] == n for n, (id, _) in enumerate(checked)]

    async def return_assignments(self, worker: str) -> Sequence[str]:
        check_worker(worker)
        params = {"worker": worker, "now": self.clock(), "chan": self._channel}
        sql = self._sql.return_assignments
        ids: list[str] = await self._run(lambda conn: [r[0] for r in conn.execute(sql, params)])
        _clog.returned(ids, CustodyState.ASSIGNED, worker=worker, why="assignment given back")
        return ids

    async def pool_view(
        self, *, pending_limit: int = 1000, skip_rooms: Collection[str] = ()
    ) -> PoolView:
        check_limit(pending_limit, "pending_limit")
        if isinstance(skip_rooms, str) or not all(isinstance(r, str) for r in skip_rooms):
            raise TypeError(f"skip_rooms must be a collection of str, got {skip_rooms!r:.80}")
        skip = sorted(skip_rooms)
        at = self.clock()
        sql = self._sql
        pending_sql = sql.queued_skipping_rooms if skip else sql.queued

        def op(conn: Conn) -> PoolView:
            # one snapshot for every read: a read-only REPEATABLE READ transaction
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                pending = [
                    Queued(id, room, RANK_PRIORITY[rank])
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
        self, decide: Decide, *, pending_limit: int = 1000
    ) -> tuple[PoolView, list[bool] | None]:
        return await plan_then_assign(self, decide, pending_limit=pending_limit)

    # -- liveness -----------------------------------------------------------------------------

    async def beat(self, worker: str, role: WorkerRole, capacity: int) -> Sequence[WorkerInfo]:
        check_worker(worker)
        if role not in WORKER_ROLES:
            raise ValueError(f"role must be 'lead' or 'worker', got {role!r}")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"capacity must be an int >= 0, got {capacity!r}")
        params = {"worker": worker, "role": role, "capacity": capacity, "now": self.clock()}
        sql = self._sql.beat
        return await self._run(lambda conn: [WorkerInfo(*r) for r in conn.execute(sql, params)])

    async def workers(self) -> Sequence[WorkerInfo]:
        sql = self._sql.workers
        return await self._run(lambda conn: [WorkerInfo(*r) for r in conn.execute(sql)])

    async def remove_worker(self, worker: str) -> bool:
        check_worker(worker)
        sql = self._sql.remove_worker
        return await self._run(lambda conn: conn.execute(sql, {"worker": worker}).rowcount == 1)

    # -- worker -------------------------------------------------------------------------------

    async def claim(self, worker: str, *, leaderless: bool = False) -> Claim | None:
        claims = await self.claim_many(worker, 1, leaderless=leaderless)
        return claims[0] if claims else None

    async def claim_many(
        self, worker: str, limit: int, *, leaderless: bool = False
    ) -> Sequence[Claim]:
        check_worker(worker)
        check_claim_limit(limit)
        now = self.clock()
        lease_until = now + self.lease_s
        params = {
            "worker": worker,
            "leaderless": leaderless,
            "limit": limit,
            "now": now,
            "until": lease_until,
        }
        params["prefix"] = prefix = process_prefix(worker)
        sql = self._sql
        process_key = {"key": f"tether-process:{self.schema}:{prefix or worker}"}
        pool_key = {"key": f"tether-suspects:{self.schema}"}

        def op(conn: Conn) -> list[Claim]:
            # a suspect runs alone (custody._crashes). With no suspect in play (the usual
            # case) a claim is one statement, which claims nothing once one is. Otherwise every
            # claim of a process holds its advisory lock, shared; a claim that may take a
            # suspect holds it exclusively and the pool's suspect lock too, so no other suspect
            # claim, and no locked claim of its process, commits between its checks and its
            # claim
            rows = conn.execute(sql.claim_many, params).fetchall()
            if rows or not _one(conn.execute(sql.suspects_in_play).fetchone()):
                return [Claim(_task(row), worker, row[5], lease_until) for row in rows]
            with conn.transaction():
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
            return [Claim(_task(row), worker, row[5], lease_until) for row in rows]

        claims = await self._run(op)
        for claim in claims:
            _clog.moved(
                claim.task.id, None, CustodyState.CLAIMED, worker=worker, attempt=claim.attempt
            )
        return claims

    async def renew(self, claim: Claim) -> Claim:
        params = self._fence_params(claim)
        params["until"] = params["now"] + self.lease_s
        until, before = await self._cas(self._sql.renew, params)
        if before is not None:
            raise stale_lease(before, claim, params["now"], "renew")
        return attrs.evolve(claim, lease_until=float(until))

    async def complete(self, claim: Claim, body: str, *, no_send: bool = False) -> None:
        params = self._fence_params(claim)
        if not isinstance(body, str):
            raise TypeError(f"a result body must be a str, got {type(body).__name__}")
        check_body(body, self.max_body_bytes, what=f"result of task {claim.task.id!r}")
        if not isinstance(no_send, bool):
            raise TypeError(f"no_send must be a bool, got {type(no_send).__name__}")
        params.update(body=_encode(body), no_send=no_send, chan=self._channel, payload=RESULT)
        _, before = await self._cas(self._sql.complete, params)
        if before is not None:
            raise stale_lease(before, claim, params["now"], "complete")
        _clog.moved(
            claim.task.id,
            CustodyState.CLAIMED,
            CustodyState.RESULT,
            worker=claim.worker,
            attempt=claim.attempt,
        )

    async def complete_many(
        self, outcomes: Sequence[tuple[Claim, str]], *, no_send: bool = False
    ) -> list[bool]:
        fences = [complete_args(claim, body, self.max_body_bytes) for claim, body in outcomes]
        if not isinstance(no_send, bool):
            raise TypeError(f"no_send must be a bool, got {type(no_send).__name__}")
        # one row per fence (the first): a repeat in the same call finds the task no longer
        # claimed, as a second ``complete`` would, and so reports False. Fences of one id that
        # differ (a stale claim beside the live one) can match at most one row between them.
        first: dict[tuple[str, int, str], int] = {}
        for i, fence in enumerate(fences):
            first.setdefault(fence, i)
        if not first:
            return []
        params = {
            "ids": [id for _, _, id in first],
            "workers": [worker for worker, _, _ in first],
            "attempts": [attempt for _, attempt, _ in first],
            "bodies": [_encode(outcomes[i][1]) for i in first.values()],
            "no_send": no_send,
            "now": self.clock(),
            "chan": self._channel,
            "payload": RESULT,
        }
        sql = self._sql.complete_many

        def op(conn: Conn) -> set[tuple[str, int, str]]:
            return {(r[1], r[2], r[0]) for r in conn.execute(sql, params)}

        moved = await self._run(op)
        for worker, attempt, id in moved:
            _clog.moved(
                id, CustodyState.CLAIMED, CustodyState.RESULT, worker=worker, attempt=attempt
            )
        return [fence in moved and first[fence] == i for i, fence in enumerate(fences)]

    async def fail(
        self,
        claim: Claim,
        reason: str,
        *,
        retry_after: float = 0.0,
        permanent: bool = False,
    ) -> CustodyState:
        params = self._fence_params(claim)
        reason = _pg_reason(reason)
        delay = check_retry_after(retry_after)
        check_permanent(permanent)
        not_before = params["now"] + delay if delay > 0 else None
        params.update(chan=self._channel, payload=PENDING, not_before=not_before)
        sql = self._sql

        def op(conn: Conn) -> tuple[bool, str] | Seen | None:
            # the failure budget leaves out the runs lost to crashes (custody._crashes)
            with conn.transaction():
                row = conn.execute(sql.fenced_crash_count, params).fetchone()
                if row is None:
                    now = conn.execute(sql.cas_state, params).fetchone()
                    if now is None:
                        return None
                    state, owner, attempt, lease_until, why = now
                    return Seen(CustodyState(state), owner, attempt, lease_until, why)
                dead, why = fail_outcome(
                    reason, claim.attempt, self.max_attempts, permanent, row[0]
                )
                conn.execute(sql.fail_dead if dead else sql.fail_repool, {**params, "reason": why})
                return dead, why

        outcome = await self._run(op)
        if not isinstance(outcome, tuple):
            raise stale_lease(outcome, claim, params["now"], "fail")
        dead, reason = outcome
        target = CustodyState.DEAD if dead else CustodyState.PENDING
        _clog.moved(
            claim.task.id,
            CustodyState.CLAIMED,
            target,
            worker=claim.worker,
            attempt=claim.attempt,
            reason=reason if not_before is None else f"{reason}; retry in {delay:.3f}s",
            level=None if dead else logging.WARNING,
        )
        return target

    def _fence_params(self, claim: Claim) -> dict[str, Any]:
        worker, attempt, id = fence_args(claim)
        return {"id": id, "worker": worker, "attempt": attempt, "now": self.clock()}

    async def release(self, claim: Claim) -> None:
        params = self._fence_params(claim)
        params.update(chan=self._channel, payload=PENDING)
        _, before = await self._cas(self._sql.release, params)
        if before is not None:
            raise stale_lease(before, claim, params["now"], "release")
        _clog.moved(
            claim.task.id,
            CustodyState.CLAIMED,
            CustodyState.PENDING,
            worker=claim.worker,
            reason="released unfinished",
        )

    # -- stall notices ------------------------------------------------------------------------

    async def stall_candidates(
        self, older_than: float, *, worker: str | None = None, limit: int = 1000
    ) -> Sequence[StallCandidate]:
        check_limit(limit)
        if worker is not None:
            check_worker(worker)
        params = {"older_than": older_than, "worker": worker, "limit": limit}
        sql = self._sql.stall_candidates
        return await self._run(lambda conn: [StallCandidate(*r) for r in conn.execute(sql, params)])

    async def mark_stall_notified(self, id: str) -> bool:
        check_task_id(id)
        params = {"id": id, "now": self.clock()}
        sql = self._sql.mark_stall_notified
        return await self._run(lambda conn: conn.execute(sql, params).rowcount == 1)

    async def clear_stall_notice(self, id: str) -> None:
        check_task_id(id)
        sql = self._sql.clear_stall_notice
        await self._run(lambda conn: conn.execute(sql, {"id": id}))

    async def prune_stall_notices(self, *, limit: int = 10_000) -> int:
        check_limit(limit)
        sql = self._sql.prune_stall_notices
        return await self._run(lambda conn: conn.execute(sql, {"limit": limit}).rowcount)

    # -- reconciler ---------------------------------------------------------------------------

    async def expire_leases(self, *, limit: int = 10_000) -> Sequence[LeaseExpiry]:
        check_limit(limit)
        params = {"now": self.clock(), "limit": limit}
        return await self._settle(self._sql.expired_claims, params, restarted=False)

    async def recover_claims(self, worker: str) -> Sequence[LeaseExpiry]:
        params = {"now": self.clock(), "worker": check_worker(worker)}
        return await self._settle(self._sql.claims_of, params, restarted=True)

    async def _settle(
        self, select: str, params: Mapping[str, Any], *, restarted: bool
    ) -> list[LeaseExpiry]:
        """Read (and lock) leases with ``select``; write what ``custody._crashes`` decides."""
        now = params["now"]
        sql = self._sql

        def op(conn: Conn) -> list[LeaseExpiry]:
            with conn.transaction():
                expired = [
                    Expired(id, owner, attempt, until, bool(suspect), crashes, alone, beat)
                    for id, owner, attempt, until, suspect, crashes, alone, beat in conn.execute(
                        select, params
                    )
                ]
                if not expired:
                    return []
                outcomes = [
                    expiry_outcome(
                        e,
                        now=now,
                        lease_s=self.lease_s,
                        max_attempts=self.max_attempts,
                        max_crashes_alone=self.max_crashes_alone,
                        restarted=restarted,
                    )
                    for e in expired
                ]
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
                        "was": [e.attempt for e in expired],
                        "now": now,
                    },
                )
                if any(o.state is CustodyState.PENDING for o in outcomes):
                    conn.execute("SELECT pg_notify(%s, %s)", (self._channel, PENDING))
            return [
                LeaseExpiry(
                    e.id, e.owner, e.attempt, e.lease_until, now, o.state, o.reason, o.crash
                )
                for e, o in zip(expired, outcomes, strict=True)
            ]

        expiries = await self._run(op)
        _clog.expired(expiries)
        return expiries

    # -- delivery -----------------------------------------------------------------------------

    delivery_leases = True
    """Several bridges share this store: ``ready_results(holder=...)`` leases what it returns
    (``delivery_holder``/``delivery_until``, taken with ``FOR UPDATE SKIP LOCKED``)."""

    async def ready_results(
        self, *, limit: int = 100, holder: str | None = None, lease_s: float | None = None
    ) -> Sequence[Result]:
        check_limit(limit)
        lease = check_delivery_lease(holder, lease_s)
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

        return await self._run(op)

    async def mark_delivered(self, id: str) -> None:
        check_task_id(id)
        _, before = await self._cas(self._sql.deliver, {"id": id, "now": self.clock()})
        if before is not None and before.state is not CustodyState.DELIVERED:
            raise CustodyConflict(
                f"cannot mark task {id!r} delivered: it is {before.state.value}, not result"
            )
        if before is None:
            _clog.moved(id, CustodyState.RESULT, CustodyState.DELIVERED)

    async def mark_delivered_many(self, ids: Sequence[str]) -> list[bool]:
        checked = [check_task_id(id) for id in ids]
        if not checked:
            return []
        params = {"ids": checked, "now": self.clock()}
        sql, delivered_sql = self._sql.deliver_many, self._sql.delivered_among

        def op(conn: Conn) -> tuple[set[str], set[str]]:
            moved = {r[0] for r in conn.execute(sql, params)}
            missed = [id for id in checked if id not in moved]
            already: set[str] = set()
            if missed:
                # a new statement: it sees what a concurrent delivery that made ours miss
                # committed (delivered there is delivered all the same)
                already = {r[0] for r in conn.execute(delivered_sql, {"ids": missed})}
            return moved, already

        moved, already = await self._run(op)
        for id in moved:
            _clog.moved(id, CustodyState.RESULT, CustodyState.DELIVERED)
        return [id in moved or id in already for id in checked]

    async def dead_letter(self, id: str, reason: str) -> None:
        check_task_id(id)
        reason = _pg_reason(reason)
        params = {"id": id, "reason": reason, "now": self.clock()}
        _, before = await self._cas(self._sql.dead_letter, params)
        if before is not None and before.state is not CustodyState.DEAD:
            raise CustodyConflict(f"cannot dead-letter task {id!r}: it is {before.state.value}")
        if before is None:  # the statement does not say which state it left: logged as "?"
            _clog.moved(id, None, CustodyState.DEAD, reason=reason)

    # -- operator -----------------------------------------------------------------------------

    async def redrive(
        self, ids: Sequence[str], *, reason: str | None = None
    ) -> Sequence[OperatorOutcome]:
        checked = check_ids(ids)
        why = _pg_reason(redrive_reason(reason))
        params = {"ids": checked, "reason": why, "now": self.clock(), "chan": self._channel}
        moved, seen = await self._operator(self._sql.redrive, params)
        for id in moved:
            _clog.moved(id, CustodyState.DEAD, CustodyState.PENDING, reason=why)
        return redrive_outcomes(checked, moved, seen)

    async def redrive_dead(
        self,
        *,
        reason_contains: str | None = None,
        reason: str | None = None,
        limit: int = 10_000,
    ) -> Sequence[OperatorOutcome]:
        text = check_contains(reason_contains)
        check_limit(limit)
        why = _pg_reason(redrive_reason(reason))
        params = {
            "text": None if text is None else text.replace("\0", "\\0"),
            "limit": limit,
            "reason": why,
            "now": self.clock(),
            "chan": self._channel,
        }
        moved, seen = await self._operator(self._sql.redrive_dead, params)
        for id in moved:
            _clog.moved(id, CustodyState.DEAD, CustodyState.PENDING, reason=why)
        return redrive_outcomes(list(seen), moved, seen)

    async def cancel(self, ids: Sequence[str], reason: str) -> Sequence[OperatorOutcome]:
        checked = check_ids(ids)
        why = _pg_reason(cancel_reason(reason))
        params = {"ids": checked, "reason": why, "now": self.clock()}
        moved, seen = await self._operator(self._sql.cancel, params)
        for id, source in moved.items():
            _clog.moved(id, source, CustodyState.DEAD, reason=why)
        return cancel_outcomes(checked, moved, seen)

    async def _operator(
        self, sql: str, params: Mapping[str, Any]
    ) -> tuple[dict[str, CustodyState], dict[str, CustodyState]]:
        """Run an operator move: (moved: id -> the state it left, seen: id -> state read)."""

        def op(conn: Conn) -> list[tuple[Any, ...]]:
            return conn.execute(sql, params).fetchall()

        rows = await self._run(op)
        seen = {row[0]: CustodyState(row[1]) for row in rows}
        moved = {row[0]: CustodyState(row[1]) for row in rows if row[2]}
        return moved, seen

    # -- reads --------------------------------------------------------------------------------

    async def state(self, id: str) -> CustodyState | None:
        check_task_id(id)
        sql = self._sql.state

        def op(conn: Conn) -> CustodyState | None:
            row = conn.execute(sql, {"id": id}).fetchone()
            return None if row is None else CustodyState(row[0])

        return await self._run(op)

    async def get(self, id: str) -> TaskRecord | None:
        check_task_id(id)
        sql = self._sql.get

        def op(conn: Conn) -> TaskRecord | None:
            row = conn.execute(sql, {"id": id}).fetchone()
            return None if row is None else _record(row)

        return await self._run(op)

    async def records(
        self, state: CustodyState, *, limit: int = 20, newest_first: bool = False
    ) -> Sequence[TaskRecord]:
        state = CustodyState(state)
        check_limit(limit)
        sql = self._sql.records_newest if newest_first else self._sql.records_oldest
        params = {"state": state.value, "limit": limit}
        return await self._run(lambda conn: [_record(r) for r in conn.execute(sql, params)])

    async def counts(self) -> Mapping[CustodyState, int]:
        sql = self._sql.counts

        def op(conn: Conn) -> dict[CustodyState, int]:
            counts = dict.fromkeys(CustodyState, 0)
            for state, n in conn.execute(sql):
                counts[CustodyState(state)] = n
            return counts

        return await self._run(op)

    async def in_flight(self) -> Sequence[str]:
        sql = self._sql.in_flight
        return await self._run(lambda conn: [r[0] for r in conn.execute(sql)])

    # -- dead-letter notices ------------------------------------------------------------------

    async def unreported_dead(self, *, limit: int = 100) -> Sequence[TaskRecord]:
        check_limit(limit)
        sql = self._sql.unreported_dead
        return await self._run(
            lambda conn: [_record(r) for r in conn.execute(sql, {"limit": limit})]
        )

    async def mark_dead_reported(self, ids: Sequence[str]) -> list[bool]:
        checked = [check_task_id(id) for id in ids]
        if not checked:
            return []
        params = {"ids": checked, "now": self.clock()}
        sql, marked_sql = self._sql.mark_dead_reported, self._sql.dead_reported_among

        def op(conn: Conn) -> set[str]:
            marked = {r[0] for r in conn.execute(sql, params)}
            missed = [id for id in checked if id not in marked]
            if missed:
                # a new statement: it sees a marker a concurrent bridge committed meanwhile
                marked |= {r[0] for r in conn.execute(marked_sql, {"ids": missed})}
            return marked

        marked = await self._run(op)
        return [id in marked for id in checked]

    async def waiting_retries(self) -> WaitingRetries:
        sql = self._sql.waiting_retries
        params = {"now": self.clock()}

        def op(conn: Conn) -> WaitingRetries:
            row = conn.execute(sql, params).fetchone()
            assert row is not None
            return WaitingRetries(int(row[0]), _one(row[1:]))

        return await self._run(op)

    async def journal(self, id: str) -> Sequence[JournalEntry]:
        check_task_id(id)
        sql = self._sql.journal
        return await self._run(
            lambda conn: [journal_entry(row) for row in conn.execute(sql, {"id": id})]
        )

    async def suspects(self, *, limit: int = 100) -> Suspects:
        check_limit(limit)
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

    async def _cas(self, sql: str, params: Mapping[str, Any]) -> tuple[Any, Seen | None]:
        """Run a CAS statement; return (its RETURNING value, None) or (None, the row now).

        The row is read by a second statement only when the CAS changed nothing: a new
        statement sees what a concurrent transaction that made ours miss has committed (the
        first statement's snapshot could still show the state ours expected).
        """
        state_sql = self._sql.cas_state

        def op(conn: Conn) -> tuple[Any, Seen | None]:
            row = conn.execute(sql, params).fetchone()
            if row is not None and row[0] is not None:
                return row[0], None
            now = conn.execute(state_sql, params).fetchone()
            if now is None:
                raise unknown_task(params["id"])
            state, owner, attempt, lease_until, reason = now
            return None, Seen(CustodyState(state), owner, attempt, lease_until, reason)

        return await self._run(op)


_UTF8: Final = "utf-8"
_ERRORS: Final = "surrogatepass"  # any Python str round-trips exactly, as in check_body


def _encode(text: str) -> bytes:
    return text.encode(_UTF8, _ERRORS)


def _decode(data: bytes) -> str:
    return bytes(data).decode(_UTF8, _ERRORS)


def _task(row: Sequence[Any]) -> Task:
    return task_from_row(row, _decode(row[1]))


def _one(row: Sequence[Any] | None) -> float | None:
    """The first column of ``row`` as a float, or None (a NULL, or no row)."""
    return None if row is None or row[0] is None else float(row[0])


def _record(row: Sequence[Any]) -> TaskRecord:
    owner, attempt, lease_until, result, reason, created_at, updated_at, not_before = row[6:14]
    crash_count, crashes_alone, suspect = row[14:17]
    return TaskRecord(
        _task(row),
        CustodyState(row[5]),
        owner,
        attempt,
        lease_until,
        None if result is None else _decode(result),
        reason,
        created_at,
        updated_at,
        not_before,
        crash_count=crash_count,
        crashes_alone=crashes_alone,
        suspect=bool(suspect),
    )


def _pg_reason(reason: object) -> str:
    return check_reason(reason).replace("\0", "\\0")  # text cannot hold NUL
