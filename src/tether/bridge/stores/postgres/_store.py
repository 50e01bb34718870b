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
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Final, TypeVar

import attrs
import psycopg
import trio
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from ...._converter import unstructure
from ...custody import _log as _clog
from ...custody._rules import (
    IN_CUSTODY,
    PRIORITY_RANK,
    Claim,
    CustodyConflict,
    CustodyState,
    Result,
    StaleLease,
    Task,
    TaskRecord,
    UnknownTask,
    body_conflicts,
    check_body,
    check_claim_limit,
    check_delivery_lease,
    check_task_id,
    check_worker,
)
from ...custody._store import (
    WORKER_ROLES,
    Assignment,
    Decide,
    LeaseExpiry,
    PoolView,
    Queued,
    StallCandidate,
    WorkerInfo,
    WorkerRole,
    plan_then_assign,
)
from ._dsn import redact_dsn
from ._listen import ASSIGNED_PREFIX, PENDING, RESULT, Listener, assigned_payload
from ._schema import check_schema, migrate

T = TypeVar("T")
Conn = psycopg.Connection[TupleRow]

_RANK_PRIORITY: Final = {rank: name for name, rank in PRIORITY_RANK.items()}
_IN_CUSTODY_SQL: Final = ", ".join(f"'{s.value}'" for s in sorted(IN_CUSTODY))
_TASK_COLS: Final = "t.id, t.body, t.room, t.priority, t.headers"
_RECORD_COLS: Final = (
    f"{_TASK_COLS}, t.state, t.owner, t.attempt, t.lease_until, t.result, t.reason, "
    "t.created_at, t.updated_at"
)
_FENCE: Final = (
    "t.id = %(id)s AND t.state = 'claimed' AND t.owner = %(worker)s "
    "AND t.attempt = %(attempt)s AND t.lease_until > %(now)s"
)
_NO_DELIVERY_LEASE: Final = "delivery_holder = NULL, delivery_until = NULL"
"""Every transition out of ``result`` drops the delivery lease (a CHECK insists)."""
_UTF8: Final = "utf-8"
_ERRORS: Final = "surrogatepass"  # any Python str round-trips exactly, as in check_body
MAX_REASON_CHARS: Final = 4000


class StoreTimeout(TimeoutError):
    """A statement waited longer than the store's ``lock_timeout_s``/``statement_timeout_s``
    (another session holds a task's row lock, or the server is overloaded); nothing changed."""


class StoreConnectionLost(ConnectionError):
    """The connection broke during a call: whether its change committed is unknown.

    Safe to retry in the custody model: a lost claim's lease expires and is repooled, a
    repeated ingest is a replay, a repeated complete of a committed result is ``StaleLease``.
    """


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
    _closed: bool = attrs.field(init=False, default=False)
    _sql: _Sql = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._limiters = trio.lowlevel.RunVar(f"tether-postgres-limiter-{id(self)}")
        self._sql = _Sql(f'"{self.schema}"')

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
    ) -> PostgresStore:
        """Connect, create and migrate ``schema`` if needed, and open a pool of ``pool_size``.

        ``dsn`` is a libpq connection string or ``postgresql://`` URL. The password comes from
        ``password`` (e.g. read from a file), else libpq's own sources (``PGPASSWORD``,
        ``~/.pgpass`` or ``PGPASSFILE``). It never appears in an error or log message.

        A store call runs in a thread that cannot be abandoned (its caller must learn the
        outcome), so no statement may wait forever: one that waits for a row lock longer than
        ``lock_timeout_s`` (say an operator's open transaction holds it) or runs longer than
        ``statement_timeout_s`` is cancelled by the server and raises ``StoreTimeout``.
        ``create=False`` refuses (``NoSuchStore``) a schema that holds no tether store.
        """
        if not lease_s > 0:
            raise ValueError(f"lease_s must be > 0, got {lease_s!r}")
        if not (isinstance(max_attempts, int) and max_attempts >= 1):
            raise ValueError(f"max_attempts must be an int >= 1, got {max_attempts!r}")
        if not (isinstance(max_body_bytes, int) and max_body_bytes >= 1):
            raise ValueError(f"max_body_bytes must be an int >= 1, got {max_body_bytes!r}")
        if not (isinstance(pool_size, int) and pool_size >= 1):
            raise ValueError(f"pool_size must be an int >= 1, got {pool_size!r}")
        for name, value in (
            ("lock_timeout_s", lock_timeout_s),
            ("statement_timeout_s", statement_timeout_s),
        ):
            if not (isinstance(value, int | float) and 0 < value < 86_400):
                raise ValueError(f"{name} must be between 0 and 86400 seconds, got {value!r}")
        check_schema(schema)
        shown = redact_dsn(dsn)
        limits = (
            f"SET lock_timeout = {round(lock_timeout_s * 1000)}; "
            f"SET statement_timeout = {round(statement_timeout_s * 1000)}"
        )

        def configure(conn: Conn) -> None:
            conn.execute(limits.encode())

        kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(1, round(connect_timeout_s)),
            "application_name": f"tether-{schema}",
        }
        if password is not None:
            kwargs["password"] = password

        def connect() -> Conn:
            return psycopg.connect(dsn, **kwargs)

        def setup() -> ConnectionPool[Conn]:
            try:
                with connect() as conn:
                    migrate(conn, schema, create=create)
            except psycopg.OperationalError as exc:
                raise ConnectionError(
                    f"cannot connect to PostgreSQL at {shown}: {_first_line(exc)}"
                ) from None
            pool: ConnectionPool[Conn] = ConnectionPool(
                dsn,
                min_size=1,
                max_size=pool_size,
                kwargs=kwargs,
                open=False,
                name=f"tether-{schema}",
                timeout=connect_timeout_s + 30.0,
                configure=configure,
            )
            try:
                pool.open(wait=True, timeout=connect_timeout_s)
            except BaseException as exc:
                pool.close()
                if isinstance(exc, psycopg.OperationalError):
                    raise ConnectionError(
                        f"cannot open a connection pool to PostgreSQL at {shown}: "
                        f"{_first_line(exc)}"
                    ) from None
                raise
            return pool

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
            used: Conn | None = None
            try:
                with self._pool.connection() as conn:
                    used = conn
                    return fn(conn)
            except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled) as exc:
                raise StoreTimeout(
                    f"PostgreSQL at {self.dsn_shown} cancelled a store statement "
                    f"({_first_line(exc)}); nothing changed"
                ) from exc
            except psycopg.OperationalError as exc:
                if used is None or not used.broken:
                    raise
                # the server restarted or the network broke: the pool's other idle
                # connections are likely dead too; replace them now, not one failure each
                self._pool.check()
                raise StoreConnectionLost(
                    f"lost the connection to PostgreSQL at {self.dsn_shown} "
                    f"({_first_line(exc)}); this call's outcome is unknown, retry it"
                ) from exc

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

    async def ingest(self, task: Task) -> bool:
        [new] = await self.ingest_many([task])
        return new

    async def ingest_many(self, tasks: Sequence[Task]) -> list[bool]:
        rows = [self._ingest_row(task) for task in tasks]  # all valid, or nothing is stored
        if not rows:
            return []
        ids, bodies, rooms, ranks, headers = (list(col) for col in zip(*rows, strict=True))
        params: dict[str, Any] = {"ids": ids, "bodies": bodies, "rooms": rooms, "ranks": ranks}
        params.update(headers=headers, now=self.clock(), chan=self._channel)
        sql = self._sql.ingest

        def op(conn: Conn) -> list[bool]:
            inserted = {r[0] for r in conn.execute(sql, params).fetchall()}
            first: list[bool] = []
            for row in rows:
                first.append(row[0] in inserted)
                inserted.discard(row[0])  # a duplicate later in the batch is a replay
            return first

        new = await self._run(op)
        _clog.ingested(ids, new)
        return new

    def _ingest_row(self, task: Task) -> tuple[Any, ...]:
        if not isinstance(task, Task):
            raise TypeError(f"ingest takes a Task, got {type(task).__name__}")
        check_body(task.body, self.max_body_bytes, what=f"body of task {task.id!r}")
        headers = "{}"
        if task.headers:
            headers = json.dumps(unstructure(task.headers), separators=(",", ":"))
            check_body(headers, self.max_body_bytes, what=f"headers of task {task.id!r}")
        return (task.id, _encode(task.body), task.room, PRIORITY_RANK[task.priority], headers)

    async def body_conflicts(self, tasks: Sequence[Task]) -> list[bool]:
        ids = sorted({t.id for t in tasks})
        sql = f"SELECT id, body FROM {self._sql.s}.tasks WHERE id = ANY(%(ids)s::text[])"
        rows = await self._run(lambda c: c.execute(sql, {"ids": ids}).fetchall()) if ids else []
        return body_conflicts(tasks, {id: _decode(body) for id, body in rows})

    async def prune_delivered(self, before: float, *, limit: int = 10_000) -> int:
        _check_limit(limit)
        sql = self._sql.prune
        count: int = await self._run(
            lambda conn: conn.execute(sql, {"before": before, "limit": limit}).rowcount
        )
        _clog.pruned(count, before)
        return count

    async def prune_tombstones(self, before: float, *, limit: int = 10_000) -> int:
        _check_limit(limit)
        sql = self._sql.prune_tombstones
        return await self._run(
            lambda conn: conn.execute(sql, {"before": before, "limit": limit}).rowcount
        )

    # -- lead ---------------------------------------------------------------------------------

    async def pending(self, *, limit: int = 100) -> Sequence[Task]:
        _check_limit(limit)
        sql = self._sql.pending

        def op(conn: Conn) -> list[Task]:
            return [_task(r) for r in conn.execute(sql, {"limit": limit})]

        return await self._run(op)

    async def assign(self, id: str, worker: str) -> None:
        check_task_id(id)
        check_worker(worker)
        params = {"id": id, "worker": worker, "now": self.clock()}
        params.update(chan=self._channel, payload=assigned_payload(worker))
        _, before = await self._cas(self._sql.assign, params)
        if before is not None:
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
        if not (isinstance(pending_limit, int) and pending_limit >= 1):
            raise ValueError(f"pending_limit must be an int >= 1, got {pending_limit!r}")
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
                    Queued(id, room, _RANK_PRIORITY[rank])
                    for id, room, rank in conn.execute(
                        pending_sql, {"limit": pending_limit, "skip": skip}
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
        check_worker(worker)
        now = self.clock()
        lease_until = now + self.lease_s
        params = {"worker": worker, "leaderless": leaderless, "now": now, "until": lease_until}
        sql = self._sql.claim

        def op(conn: Conn) -> Claim | None:
            row = conn.execute(sql, params).fetchone()
            if row is None:
                return None
            return Claim(_task(row), worker, row[5], lease_until)

        claim: Claim | None = await self._run(op)
        if claim is not None:
            _clog.moved(
                claim.task.id, None, CustodyState.CLAIMED, worker=worker, attempt=claim.attempt
            )
        return claim

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
        sql = self._sql.claim_many

        def op(conn: Conn) -> list[Claim]:
            return [
                Claim(_task(row), worker, row[5], lease_until) for row in conn.execute(sql, params)
            ]

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
            raise _stale(before, claim, params["now"], "renew")
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
            raise _stale(before, claim, params["now"], "complete")
        _clog.moved(
            claim.task.id,
            CustodyState.CLAIMED,
            CustodyState.RESULT,
            worker=claim.worker,
            attempt=claim.attempt,
        )

    async def fail(self, claim: Claim, reason: str) -> CustodyState:
        params = self._fence_params(claim)
        reason = _check_reason(reason)
        dead = claim.attempt >= self.max_attempts
        if dead:
            reason = f"failed on attempt {claim.attempt} of {self.max_attempts}: {reason}"
        params.update(reason=reason, chan=self._channel, payload=PENDING)
        sql = self._sql.fail_dead if dead else self._sql.fail_repool
        _, before = await self._cas(sql, params)
        if before is not None:
            raise _stale(before, claim, params["now"], "fail")
        target = CustodyState.DEAD if dead else CustodyState.PENDING
        _clog.moved(
            claim.task.id,
            CustodyState.CLAIMED,
            target,
            worker=claim.worker,
            attempt=claim.attempt,
            reason=reason,
            level=None if dead else logging.WARNING,
        )
        return target

    def _fence_params(self, claim: Claim) -> dict[str, Any]:
        if not isinstance(claim, Claim):
            raise TypeError(f"expected a Claim, got {type(claim).__name__}")
        return {
            "id": check_task_id(claim.task.id),
            "worker": check_worker(claim.worker),
            "attempt": claim.attempt,
            "now": self.clock(),
        }

    async def release(self, claim: Claim) -> None:
        params = self._fence_params(claim)
        params.update(chan=self._channel, payload=PENDING)
        _, before = await self._cas(self._sql.release, params)
        if before is not None:
            raise _stale(before, claim, params["now"], "release")
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
        _check_limit(limit)
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
        _check_limit(limit)
        sql = self._sql.prune_stall_notices
        return await self._run(lambda conn: conn.execute(sql, {"limit": limit}).rowcount)

    # -- reconciler ---------------------------------------------------------------------------

    async def expire_leases(self, *, limit: int = 10_000) -> Sequence[LeaseExpiry]:
        _check_limit(limit)
        now = self.clock()
        params = {"now": now, "max": self.max_attempts, "limit": limit, "chan": self._channel}
        sql = self._sql.expire

        def op(conn: Conn) -> list[LeaseExpiry]:
            rows = sorted(conn.execute(sql, params).fetchall(), key=lambda r: (r[3], r[6]))
            return [
                LeaseExpiry(id, owner, attempt, until, now, CustodyState(state), reason)
                for id, owner, attempt, until, state, reason, _seq, _signal in rows
            ]

        expiries: list[LeaseExpiry] = await self._run(op)
        _clog.expired(expiries)
        return expiries

    # -- delivery -----------------------------------------------------------------------------

    delivery_leases = True
    """Several bridges share this store: ``ready_results(holder=...)`` leases what it returns
    (``delivery_holder``/``delivery_until``, taken with ``FOR UPDATE SKIP LOCKED``)."""

    async def ready_results(
        self, *, limit: int = 100, holder: str | None = None, lease_s: float | None = None
    ) -> Sequence[Result]:
        _check_limit(limit)
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
        reason = _check_reason(reason)
        params = {"id": id, "reason": reason, "now": self.clock()}
        _, before = await self._cas(self._sql.dead_letter, params)
        if before is not None and before.state is not CustodyState.DEAD:
            raise CustodyConflict(f"cannot dead-letter task {id!r}: it is {before.state.value}")
        if before is None:  # the statement does not say which state it left: logged as "?"
            _clog.moved(id, None, CustodyState.DEAD, reason=reason)

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
        _check_limit(limit)
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
        _check_limit(limit)
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

    async def unreported_dead_count(self) -> int:
        sql = self._sql.unreported_dead_count

        def op(conn: Conn) -> int:
            row = conn.execute(sql).fetchone()
            assert row is not None
            return int(row[0])

        return await self._run(op)

    # -- compare-and-set ----------------------------------------------------------------------

    async def _cas(self, sql: str, params: Mapping[str, Any]) -> tuple[Any, _Before | None]:
        """Run a CAS statement; return (its RETURNING value, None) or (None, the row now).

        The row is read by a second statement only when the CAS changed nothing: a new
        statement sees what a concurrent transaction that made ours miss has committed (the
        first statement's snapshot could still show the state ours expected).
        """
        state_sql = self._sql.cas_state

        def op(conn: Conn) -> tuple[Any, _Before | None]:
            row = conn.execute(sql, params).fetchone()
            if row is not None and row[0] is not None:
                return row[0], None
            now = conn.execute(state_sql, params).fetchone()
            if now is None:
                raise UnknownTask(f"no task {params['id']!r} in the store")
            state, owner, attempt, lease_until = now
            return None, _Before(CustodyState(state), owner, attempt, lease_until)

        return await self._run(op)


@attrs.frozen
class _Before:
    state: CustodyState
    owner: str | None
    attempt: int
    lease_until: float | None

    @property
    def owner_note(self) -> str:
        return f" (owner {self.owner}, attempt {self.attempt})" if self.owner else ""


def _cas_sql(
    update: str, returning: str, notify: bool = False, also: str = "", extra: str = ""
) -> str:
    """Wrap ``update`` (aliased ``t``): one row, its RETURNING value or NULL if nothing moved.

    With ``notify`` the same statement signals the listeners when (and only if) it moved;
    ``also`` adds a CTE over ``u`` (whose ``extra`` RETURNING columns it may read).
    """
    signal = ", count(pg_notify(%(chan)s, %(payload)s))" if notify else ""
    more = f", {extra}" if extra else ""
    also = f", {also}" if also else ""
    return (
        f"WITH u AS ({update} RETURNING {returning} AS done{more}){also} "
        f"SELECT min(done){signal} FROM u"
    )


@attrs.frozen
class _Sql:
    """Every statement of the store, with the schema filled in once."""

    s: str

    @property
    def ingest(self) -> str:
        return (
            f"WITH ins AS (INSERT INTO {self.s}.tasks AS t "
            "(id, body, room, priority, headers, state, attempt, created_at, updated_at) "
            "SELECT id, body, room, priority, headers, 'pending', 1, %(now)s, %(now)s "
            "FROM unnest(%(ids)s::text[], %(bodies)s::bytea[], %(rooms)s::text[], "
            "%(ranks)s::smallint[], %(headers)s::text[]) WITH ORDINALITY "
            "AS v (id, body, room, priority, headers, ord) "
            f"WHERE NOT EXISTS (SELECT 1 FROM {self.s}.tombstones b WHERE b.id = v.id) "
            "ORDER BY ord "
            "ON CONFLICT (id) DO NOTHING RETURNING id) "
            "SELECT id, pg_notify(%(chan)s, 'pending')::text FROM ins"
        )

    @property
    def prune(self) -> str:
        # the deleted rows leave tombstones in the same statement (one transaction)
        return (
            f"WITH gone AS (DELETE FROM {self.s}.tasks WHERE id IN (SELECT id FROM {self.s}.tasks "
            "WHERE state = 'delivered' AND updated_at < %(before)s "
            "LIMIT %(limit)s FOR UPDATE SKIP LOCKED) RETURNING id, updated_at) "
            f"INSERT INTO {self.s}.tombstones AS b (id, delivered_at) "
            "SELECT id, updated_at FROM gone "
            "ON CONFLICT (id) DO UPDATE SET delivered_at = excluded.delivered_at"
        )

    @property
    def prune_tombstones(self) -> str:
        return (
            f"DELETE FROM {self.s}.tombstones WHERE id IN (SELECT id FROM {self.s}.tombstones "
            "WHERE delivered_at < %(before)s ORDER BY delivered_at LIMIT %(limit)s)"
        )

    @property
    def pending(self) -> str:
        return (
            f"SELECT {_TASK_COLS} FROM {self.s}.tasks t WHERE t.state = 'pending' "
            "ORDER BY t.priority, t.seq LIMIT %(limit)s"
        )

    @property
    def queued(self) -> str:
        return (
            f"SELECT id, room, priority FROM {self.s}.tasks t WHERE t.state = 'pending' "
            "ORDER BY t.priority, t.seq LIMIT %(limit)s"
        )

    @property
    def queued_skipping_rooms(self) -> str:
        return (
            f"SELECT id, room, priority FROM {self.s}.tasks t WHERE t.state = 'pending' "
            "AND (t.room IS NULL OR NOT (t.room = ANY(%(skip)s::text[]))) "
            "ORDER BY t.priority, t.seq LIMIT %(limit)s"
        )

    @property
    def assign(self) -> str:
        return _cas_sql(
            f"UPDATE {self.s}.tasks t SET state = 'assigned', owner = %(worker)s, "
            "updated_at = %(now)s WHERE t.id = %(id)s AND t.state = 'pending'",
            "1",
            notify=True,
            also=self._note_room("u.room", "%(worker)s"),
            extra="t.room",
        )

    def _note_room(self, room: str, worker: str) -> str:
        # a data-modifying CTE: it runs whether or not the outer SELECT reads it
        return (
            f"r AS (INSERT INTO {self.s}.rooms AS r (room, worker, at) "
            f"SELECT {room}, {worker}, %(now)s FROM u WHERE {room} IS NOT NULL "
            "ON CONFLICT (room) DO UPDATE SET worker = excluded.worker, at = excluded.at)"
        )

    @property
    def assign_many(self) -> str:
        return (
            "WITH v AS (SELECT * FROM unnest(%(ids)s::text[], %(workers)s::text[]) "
            "WITH ORDINALITY AS v (id, worker, ord)), "
            f"u AS (UPDATE {self.s}.tasks t SET state = 'assigned', owner = v.worker, "
            "updated_at = %(now)s FROM v WHERE t.id = v.id AND t.state = 'pending' "
            "RETURNING t.id, t.room, v.worker, v.ord), "
            # one row per room (ON CONFLICT cannot touch a row twice): the last pair wins
            f"r AS (INSERT INTO {self.s}.rooms AS r (room, worker, at) "
            "SELECT DISTINCT ON (room) room, worker, %(now)s FROM u WHERE room IS NOT NULL "
            "ORDER BY room, ord DESC "
            "ON CONFLICT (room) DO UPDATE SET worker = excluded.worker, at = excluded.at) "
            "SELECT id, pg_notify(%(chan)s, 'assigned ' || worker)::text FROM u"
        )

    @property
    def return_assignments(self) -> str:
        return (
            f"WITH u AS (UPDATE {self.s}.tasks t SET state = 'pending', owner = NULL, "
            "updated_at = %(now)s WHERE t.state = 'assigned' AND t.owner = %(worker)s "
            "RETURNING t.id, t.seq) "
            "SELECT id, pg_notify(%(chan)s, 'pending')::text FROM u ORDER BY seq"
        )

    @property
    def view_assigned(self) -> str:
        return (
            f"SELECT id, owner, room, updated_at FROM {self.s}.tasks "
            "WHERE state = 'assigned' ORDER BY updated_at, seq"
        )

    @property
    def view_claims(self) -> str:
        return f"SELECT owner, count(*) FROM {self.s}.tasks WHERE state = 'claimed' GROUP BY owner"

    @property
    def view_rooms(self) -> str:
        return f"SELECT room, worker FROM {self.s}.rooms WHERE room = ANY(%(rooms)s::text[])"

    @property
    def workers(self) -> str:
        # COLLATE "C": byte order, as SQLite sorts, whatever the database's locale
        return (
            "SELECT name, role, capacity, last_beat, started_at "
            f'FROM {self.s}.workers ORDER BY name COLLATE "C"'
        )

    @property
    def beat(self) -> str:
        # the outer SELECT reads the statement's snapshot (before the upsert): add the new row
        return (
            f"WITH b AS (INSERT INTO {self.s}.workers AS w "
            "(name, role, capacity, last_beat, started_at) "
            "VALUES (%(worker)s, %(role)s, %(capacity)s, %(now)s, %(now)s) "
            "ON CONFLICT (name) DO UPDATE SET role = excluded.role, "
            "capacity = excluded.capacity, last_beat = excluded.last_beat "
            "RETURNING name, role, capacity, last_beat, started_at) "
            "SELECT * FROM (SELECT name, role, capacity, last_beat, started_at "
            f"FROM {self.s}.workers WHERE name <> %(worker)s UNION ALL SELECT * FROM b) m "
            'ORDER BY name COLLATE "C"'
        )

    @property
    def remove_worker(self) -> str:
        return f"DELETE FROM {self.s}.workers WHERE name = %(worker)s"

    @property
    def release(self) -> str:
        return _cas_sql(
            f"UPDATE {self.s}.tasks t SET state = 'pending', owner = NULL, lease_until = NULL, "
            f"updated_at = %(now)s WHERE {_FENCE}",
            "1",
            notify=True,
        )

    @property
    def stall_candidates(self) -> str:
        return (
            f"SELECT t.id, t.room, t.owner, t.created_at FROM {self.s}.tasks t "
            "WHERE t.state = 'claimed' AND t.created_at <= %(older_than)s "
            "AND (%(worker)s::text IS NULL OR t.owner = %(worker)s) "
            f"AND NOT EXISTS (SELECT FROM {self.s}.stall_notices s WHERE s.id = t.id) "
            "ORDER BY t.created_at, t.seq LIMIT %(limit)s"
        )

    @property
    def mark_stall_notified(self) -> str:
        return (
            f"INSERT INTO {self.s}.stall_notices (id, notified_at) VALUES (%(id)s, %(now)s) "
            "ON CONFLICT (id) DO NOTHING"
        )

    @property
    def clear_stall_notice(self) -> str:
        return f"DELETE FROM {self.s}.stall_notices WHERE id = %(id)s"

    @property
    def prune_stall_notices(self) -> str:
        return (
            f"DELETE FROM {self.s}.stall_notices WHERE id IN (SELECT s.id "
            f"FROM {self.s}.stall_notices s LEFT JOIN {self.s}.tasks t ON t.id = s.id "
            f"WHERE t.id IS NULL OR t.state NOT IN ({_IN_CUSTODY_SQL}) LIMIT %(limit)s "
            "FOR UPDATE OF s SKIP LOCKED)"
        )

    @property
    def unassign(self) -> str:
        return _cas_sql(
            f"UPDATE {self.s}.tasks t SET state = 'pending', owner = NULL, updated_at = %(now)s "
            "WHERE t.id = %(id)s AND t.state = 'assigned' AND t.owner = %(worker)s",
            "1",
            notify=True,
        )

    @property
    def claim(self) -> str:
        # own assignments first; pending ones only when leaderless and none of ours is there.
        # SKIP LOCKED: a row another transaction is claiming is passed over, never waited for.
        tasks = f"{self.s}.tasks"
        return (
            f"WITH mine AS (SELECT id FROM {tasks} WHERE state = 'assigned' "
            "AND owner = %(worker)s ORDER BY priority, seq LIMIT 1 FOR UPDATE SKIP LOCKED), "
            f"pool AS (SELECT id FROM {tasks} WHERE %(leaderless)s AND state = 'pending' "
            "AND NOT EXISTS (SELECT FROM mine) ORDER BY priority, seq LIMIT 1 "
            "FOR UPDATE SKIP LOCKED), "
            "pick AS (SELECT id FROM mine UNION ALL SELECT id FROM pool), "
            f"u AS (UPDATE {tasks} t SET state = 'claimed', owner = %(worker)s, "
            "lease_until = %(until)s, updated_at = %(now)s FROM pick "
            "WHERE t.id = pick.id AND t.state IN ('assigned', 'pending') "
            f"RETURNING {_TASK_COLS}, t.attempt), "
            f"{self._note_room('u.room', '%(worker)s')} "
            "SELECT * FROM u"
        )

    @property
    def claim_many(self) -> str:
        # ``claim`` for up to %(limit)s rows: own assignments first, then (leaderless) pending
        # ones to make up the rest, returned in that order (priority, then age, in each)
        tasks = f"{self.s}.tasks"
        return (
            f"WITH mine AS (SELECT id FROM {tasks} WHERE state = 'assigned' "
            "AND owner = %(worker)s ORDER BY priority, seq LIMIT %(limit)s "
            "FOR UPDATE SKIP LOCKED), "
            f"pool AS (SELECT id FROM {tasks} WHERE %(leaderless)s AND state = 'pending' "
            "ORDER BY priority, seq LIMIT greatest(0, %(limit)s - (SELECT count(*) FROM mine)) "
            "FOR UPDATE SKIP LOCKED), "
            "pick AS (SELECT id, 0 AS grp FROM mine UNION ALL SELECT id, 1 FROM pool), "
            f"u AS (UPDATE {tasks} t SET state = 'claimed', owner = %(worker)s, "
            "lease_until = %(until)s, updated_at = %(now)s FROM pick "
            "WHERE t.id = pick.id AND t.state IN ('assigned', 'pending') "
            f"RETURNING {_TASK_COLS}, t.attempt, pick.grp, t.priority AS rank, t.seq), "
            # one row per room (ON CONFLICT cannot touch a row twice)
            f"r AS (INSERT INTO {self.s}.rooms AS r (room, worker, at) "
            "SELECT DISTINCT room, %(worker)s, %(now)s FROM u WHERE room IS NOT NULL "
            "ON CONFLICT (room) DO UPDATE SET worker = excluded.worker, at = excluded.at) "
            "SELECT * FROM u ORDER BY grp, rank, seq"
        )

    @property
    def renew(self) -> str:
        return _cas_sql(
            f"UPDATE {self.s}.tasks t SET lease_until = greatest(t.lease_until, %(until)s), "
            f"updated_at = %(now)s WHERE {_FENCE}",
            "t.lease_until",
        )

    @property
    def complete(self) -> str:
        return _cas_sql(
            f"UPDATE {self.s}.tasks t SET state = 'result', result = %(body)s, "
            f"no_send = %(no_send)s, lease_until = NULL, updated_at = %(now)s WHERE {_FENCE}",
            "1",
            notify=True,
        )

    @property
    def fail_repool(self) -> str:
        return _cas_sql(
            f"UPDATE {self.s}.tasks t SET state = 'pending', owner = NULL, lease_until = NULL, "
            "attempt = t.attempt + 1, reason = %(reason)s, updated_at = %(now)s "
            f"WHERE {_FENCE}",
            "1",
            notify=True,
        )

    @property
    def fail_dead(self) -> str:
        return _cas_sql(
            f"UPDATE {self.s}.tasks t SET state = 'dead', lease_until = NULL, "
            f"reason = %(reason)s, updated_at = %(now)s WHERE {_FENCE}",
            "1",
        )

    @property
    def expire(self) -> str:
        over = "e.attempt >= %(max)s"
        return (
            f"WITH e AS (SELECT id, owner, attempt, lease_until, seq FROM {self.s}.tasks "
            "WHERE state = 'claimed' AND lease_until <= %(now)s "
            "ORDER BY lease_until, seq LIMIT %(limit)s FOR UPDATE SKIP LOCKED), "
            f"u AS (UPDATE {self.s}.tasks t SET "
            f"state = CASE WHEN {over} THEN 'dead' ELSE 'pending' END, "
            f"owner = CASE WHEN {over} THEN e.owner END, "
            f"attempt = CASE WHEN {over} THEN e.attempt ELSE e.attempt + 1 END, "
            "reason = format('lease of worker %%s on attempt %%s expired at %%s (now %%s); ', "
            "e.owner, e.attempt, round(e.lease_until::numeric, 3), "
            "round(%(now)s::numeric, 3)) || "
            f"CASE WHEN {over} THEN format('max_attempts %%s reached', %(max)s) "
            "ELSE format('repooled as attempt %%s', e.attempt + 1) END, "
            "lease_until = NULL, updated_at = %(now)s FROM e WHERE t.id = e.id "
            "RETURNING e.id, e.owner, e.attempt, e.lease_until, t.state, t.reason, e.seq) "
            "SELECT u.*, CASE WHEN u.state = 'pending' "
            "THEN pg_notify(%(chan)s, 'pending')::text END FROM u"
        )

    @property
    def ready(self) -> str:
        return (
            f"SELECT {_TASK_COLS}, t.result, t.owner, t.attempt, t.no_send FROM {self.s}.tasks t "
            "WHERE t.state = 'result' ORDER BY t.priority, t.seq LIMIT %(limit)s"
        )

    @property
    def take_results(self) -> str:
        # results whose delivery lease is free, lapsed or the holder's own (a delivery loop
        # restarted in the same process re-posts at once); SKIP LOCKED: a row another holder
        # is taking or a mark is committing is passed over, never waited for
        return (
            f"WITH pick AS (SELECT id FROM {self.s}.tasks WHERE state = 'result' "
            "AND (delivery_until IS NULL OR delivery_until <= %(now)s "
            "OR delivery_holder = %(holder)s) "
            "ORDER BY priority, seq LIMIT %(limit)s FOR UPDATE SKIP LOCKED), "
            f"u AS (UPDATE {self.s}.tasks t SET delivery_holder = %(holder)s, "
            "delivery_until = %(until)s FROM pick WHERE t.id = pick.id AND t.state = 'result' "
            f"RETURNING {_TASK_COLS}, t.result, t.owner, t.attempt, t.no_send, "
            "t.priority AS rank, t.seq) "
            "SELECT * FROM u ORDER BY rank, seq"
        )

    @property
    def deliver(self) -> str:
        return _cas_sql(
            f"UPDATE {self.s}.tasks t SET state = 'delivered', {_NO_DELIVERY_LEASE}, "
            "updated_at = %(now)s WHERE t.id = %(id)s AND t.state = 'result'",
            "1",
        )

    @property
    def deliver_many(self) -> str:
        return (
            f"UPDATE {self.s}.tasks t SET state = 'delivered', {_NO_DELIVERY_LEASE}, "
            "updated_at = %(now)s "
            "WHERE t.id = ANY(%(ids)s::text[]) AND t.state = 'result' RETURNING t.id"
        )

    @property
    def delivered_among(self) -> str:
        return (
            f"SELECT t.id FROM {self.s}.tasks t "
            "WHERE t.id = ANY(%(ids)s::text[]) AND t.state = 'delivered'"
        )

    @property
    def dead_letter(self) -> str:
        return _cas_sql(
            f"UPDATE {self.s}.tasks t SET state = 'dead', lease_until = NULL, "
            f"{_NO_DELIVERY_LEASE}, reason = %(reason)s, updated_at = %(now)s "
            f"WHERE t.id = %(id)s AND t.state IN ({_IN_CUSTODY_SQL})",
            "1",
        )

    @property
    def cas_state(self) -> str:
        return f"SELECT state, owner, attempt, lease_until FROM {self.s}.tasks WHERE id = %(id)s"

    @property
    def state(self) -> str:
        return f"SELECT state FROM {self.s}.tasks WHERE id = %(id)s"

    @property
    def get(self) -> str:
        return f"SELECT {_RECORD_COLS} FROM {self.s}.tasks t WHERE t.id = %(id)s"

    @property
    def records_oldest(self) -> str:
        return (
            f"SELECT {_RECORD_COLS} FROM {self.s}.tasks t WHERE t.state = %(state)s "
            "ORDER BY t.seq LIMIT %(limit)s"
        )

    @property
    def records_newest(self) -> str:
        return (
            f"SELECT {_RECORD_COLS} FROM {self.s}.tasks t WHERE t.state = %(state)s "
            "ORDER BY t.seq DESC LIMIT %(limit)s"
        )

    @property
    def counts(self) -> str:
        return f"SELECT state, count(*) FROM {self.s}.tasks GROUP BY state"

    @property
    def in_flight(self) -> str:
        return f"SELECT id FROM {self.s}.tasks WHERE state IN ({_IN_CUSTODY_SQL}) ORDER BY seq"

    @property
    def unreported_dead(self) -> str:
        return (
            f"SELECT {_RECORD_COLS} FROM {self.s}.tasks t "
            "WHERE t.state = 'dead' AND t.dead_reported_at IS NULL "
            "ORDER BY t.updated_at, t.seq LIMIT %(limit)s"
        )

    @property
    def mark_dead_reported(self) -> str:
        return (
            f"UPDATE {self.s}.tasks t SET dead_reported_at = %(now)s "
            "WHERE t.id = ANY(%(ids)s::text[]) AND t.state = 'dead' "
            "AND t.dead_reported_at IS NULL RETURNING t.id"
        )

    @property
    def dead_reported_among(self) -> str:
        return (
            f"SELECT t.id FROM {self.s}.tasks t WHERE t.id = ANY(%(ids)s::text[]) "
            "AND t.state = 'dead' AND t.dead_reported_at IS NOT NULL"
        )

    @property
    def unreported_dead_count(self) -> str:
        return (
            f"SELECT count(*) FROM {self.s}.tasks WHERE state = 'dead' AND dead_reported_at IS NULL"
        )


# -- helpers -------------------------------------------------------------------------------------


def _encode(text: str) -> bytes:
    return text.encode(_UTF8, _ERRORS)


def _decode(data: bytes) -> str:
    return bytes(data).decode(_UTF8, _ERRORS)


def _task(row: Sequence[Any]) -> Task:
    return Task(
        id=row[0],
        body=_decode(row[1]),
        room=row[2],
        priority=_RANK_PRIORITY[row[3]],
        headers=json.loads(row[4]),  # the validator checks it is a dict of str to str
    )


def _record(row: Sequence[Any]) -> TaskRecord:
    owner, attempt, lease_until, result, reason, created_at, updated_at = row[6:13]
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
    )


def _stale(before: _Before, claim: Claim, now: float, verb: str) -> StaleLease:
    who = f"worker {claim.worker!r} (attempt {claim.attempt})"
    if (
        before.state is CustodyState.CLAIMED
        and before.owner == claim.worker
        and before.attempt == claim.attempt
        and before.lease_until is not None
    ):
        held = f"its lease expired at {before.lease_until:.3f} (now {now:.3f})"
    else:
        held = f"the store has it {before.state.value}{before.owner_note}"
    return StaleLease(f"cannot {verb} task {claim.task.id!r} for {who}: {held}")


def _check_reason(reason: object) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(f"a reason must be a non-empty str, got {reason!r}")
    return reason[:MAX_REASON_CHARS].replace("\0", "\\0")  # text cannot hold NUL


def _check_limit(limit: object) -> None:
    if not (isinstance(limit, int) and limit >= 1):
        raise ValueError(f"limit must be an int >= 1, got {limit!r}")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
