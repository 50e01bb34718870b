"""PostgresStore: the custody store shared by many bridges and workers on many hosts.

The store is a facade (``stores._facade``) over its parts, one per capability (``_custody``,
``_operator``, ``_retention``, ``_steps``, ``_asks``, ``_limits``, ``_tenants``,
``_conversations``), each over the one ``PostgresDb`` (``_db``) built here: one
``trio.to_thread`` hop into psycopg's sync API (its async API does not run on Trio) with a
pooled autocommit connection. PostgreSQL's own group commit stands in for SQLite's writer
thread.

Time: leases use the store's ``clock`` (the caller's host clock, like SQLite). Hosts sharing
a database must keep their clocks synchronised (NTP) well within ``lease_s``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from functools import partial

import attrs
import trio
from psycopg_pool import ConnectionPool

from ...custody._crashes import DEFAULT_MAX_CRASHES_ALONE
from ...custody._outage import StoreReach
from ...custody._records import Hand, PoolView, SweepPlanner, Swept
from ...custody._roles import plan_then_assign, plan_then_assign_unclaimed
from ...custody._rules import check_worker
from ...custody._work_bell import WorkBell
from .._common import check_hands, check_limit
from .._facade import Parts, StoreFacade
from .._frame import check_settings
from ._asks import PostgresAsks
from ._connection import Conn as Conn
from ._connection import StoreConnectionLost as StoreConnectionLost
from ._connection import StoreTimeout as StoreTimeout
from ._connection import (
    check_timeouts,
    connector,
    open_pool,
)
from ._conversations import PostgresConversations
from ._custody import PostgresCustody
from ._db import PostgresDb
from ._dsn import redact_dsn
from ._durable import Durability, Synchronous
from ._events import PostgresEvents
from ._limits import PostgresLimits
from ._listen import RESULT, Listener, wants_work
from ._operator import PostgresOperator
from ._retention import PostgresRetention
from ._schedules import PostgresSchedules
from ._schema import check_schema
from ._steps import PostgresSteps
from ._tenants import PostgresTenants
from ._watchdog import Watchdog

log = logging.getLogger("tether.bridge.postgres")


@attrs.define(eq=False)
class PostgresStore(StoreFacade):
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
    max_crashes_alone: int = DEFAULT_MAX_CRASHES_ALONE
    """Crashes while it ran alone that prove a task kills its process (``custody._crashes``)."""
    durability: Durability = attrs.field(factory=Durability)
    """What waits for the WAL flush: promises (NORMAL, the default) or every commit (FULL)."""
    read_only: bool = attrs.field(default=False, kw_only=True)
    """Opened to inspect: ``counts`` reads without folding (issue #56)."""
    reach: StoreReach = attrs.field(init=False, factory=StoreReach)
    """Whether this process reaches the server, and since when (``custody._outage``)."""
    work_bell: WorkBell = attrs.field(init=False, factory=WorkBell)
    db: PostgresDb = attrs.field(init=False)
    """The one primitive every part runs on (implementer tier: tests reach the server and the
    statements through it)."""
    parts: Parts = attrs.field(init=False)
    """One part per capability, each over ``db`` (``stores._facade``)."""

    def __attrs_post_init__(self) -> None:
        self.db = db = PostgresDb(
            self,
            self._pool,
            self.dsn_shown,
            self.schema,
            self._channel,
            self.pool_size,
            self.durability,
        )
        steps = PostgresSteps(self, db)
        self.parts = Parts(
            custody=PostgresCustody(self, db, self.read_only),
            operator=PostgresOperator(self, steps, db),
            retention=PostgresRetention(self, db),
            steps=steps,
            asks=PostgresAsks(self, db),
            limits=PostgresLimits(self, db),
            tenants=PostgresTenants(self, db),
            rooms=PostgresConversations(self, db),
            schedules=PostgresSchedules(self, db),
            events=PostgresEvents(self, db),
        )

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

        setup = partial(
            open_pool,
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
        store = cls(
            shown,
            schema,
            clock,
            float(lease_s),
            max_attempts,
            max_body_bytes,
            pool_size,
            pool,
            Listener(connect, channel, partial(_notify, pool, channel)),
            channel,
            max_crashes_alone,
            Durability("FULL" if read_only else synchronous, Watchdog(statement_timeout_s)),
            read_only=read_only,
        )
        db = store.db
        await db.run(lambda conn: db.restarted_at(conn, clock()))  # the baseline
        return store

    async def aclose(self) -> None:
        """Stop the listener and close the pool (connections in use finish first). Idempotent."""
        if self.db.closed:
            return
        self.db.closed = True

        def close() -> None:
            self._listener.stop()
            self.db.pool.close()
            self.durability.watchdog.close()

        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(close)

    def stored_text(self, text: str) -> str:
        return text.replace("\0", "\\0")  # text cannot hold NUL

    async def plan_and_assign(
        self, decide: SweepPlanner, *, pending_limit: int = 1000
    ) -> tuple[PoolView, list[bool] | None]:
        """The view, then ``assign_many``: two transactions (``plan_then_assign``)."""
        return await plan_then_assign(self, decide, pending_limit=pending_limit)

    async def plan_assign_and_claim(
        self, decide: SweepPlanner, *, pending_limit: int = 1000, hands: Mapping[str, Hand]
    ) -> Swept:
        """Two transactions: the view, then the assignments and the hands' claims in one round
        trip (``PostgresCustody.assign_and_claim``). A task assigned to a worker of the lead's
        process runs with no claim statement of the worker's own and no notification."""
        check_hands(hands)
        if not hands:
            return await plan_then_assign_unclaimed(self, decide, pending_limit=pending_limit)
        view = await self.pool_view(pending_limit=pending_limit)
        pairs = decide(view)
        if pairs is None:
            return Swept(view, None)
        custody = self.parts.custody
        assert isinstance(custody, PostgresCustody)
        done, claims = await custody.assign_and_claim(pairs, hands)
        return Swept(view, done, claims)

    delivery_leases = True
    """Several bridges share this store: ``ready_results(holder=...)`` leases what it returns
    (``delivery_holder``/``delivery_until``, taken with ``FOR UPDATE SKIP LOCKED``)."""

    # -- waking idle workers ------------------------------------------------------------------

    async def wait_for_work(self, seconds: float, *, worker: str | None = None) -> bool:
        """Sleep until new pending work (or an assignment to ``worker``) may exist, at most
        ``seconds``.

        True if a notification woke us. Only a hint: the caller polls with ``claim`` either way.
        """
        if self.db.closed:
            raise trio.ClosedResourceError("the store is closed")
        if worker is not None:
            check_worker(worker)
        return await self._listener.wait(wants_work(worker), seconds)

    async def wait_for_results(self, seconds: float) -> bool:
        """Sleep until a result may be ready for delivery, at most ``seconds`` (a hint too)."""
        if self.db.closed:
            raise trio.ClosedResourceError("the store is closed")
        return await self._listener.wait(lambda payload: payload == RESULT, seconds)

    @property
    def listening(self) -> bool:
        """Is the LISTEN connection up (wake-ups can arrive)?"""
        return self._listener.listening.is_set()


def _notify(pool: ConnectionPool[Conn], channel: str, payload: str) -> None:
    """Tell the listeners on ``channel`` (the listener's own wake-up of its waiters)."""
    with pool.connection() as conn:
        conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))
