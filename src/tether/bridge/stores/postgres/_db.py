"""The one primitive every part of a PostgreSQL store runs on: a thread hop with a pooled
autocommit connection (``run``), a compare-and-set that reads the row it missed (``cas``), and
the schema's statements.

The store builds one ``PostgresDb`` at open and hands it to each part (``_store``); a part never
touches the pool but through it. It also tells when the server is out of reach and back
(``custody._outage``), and when the server restarted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Final

import attrs
import trio
from psycopg_pool import ConnectionPool

from ...._plumbing._when import clock_time, duration
from ...custody._rules import Claim
from .._common import FoundState, stale_lease, task_gone, unknown_task
from .._host import Host
from ._connection import Conn, NoConnection, StoreConnectionLost, T, first_line, run_on
from ._durable import Durability, Promise
from ._rows import fence, seen
from ._sql import Sql

log = logging.getLogger("tether.bridge.postgres")

SERVER_STARTED: Final = (
    "SELECT extract(epoch FROM pg_postmaster_start_time())::float8, "
    "extract(epoch FROM clock_timestamp() - pg_postmaster_start_time())::float8"
)
"""When the server last started (on its clock: compared only with itself) and how long ago."""


@attrs.define(eq=False)
class PostgresDb:
    """A PostgreSQL store's pool and statements (implementer tier: tests reach the server and
    the statements through it, never through a store's private fields)."""

    host: Host
    pool: ConnectionPool[Conn]
    dsn_shown: str
    schema: str
    channel: str
    """The channel idle workers listen on (``_listen``)."""
    pool_size: int
    durability: Durability
    closed: bool = attrs.field(init=False, default=False)
    sql: Sql = attrs.field(init=False)
    """The custody statements, with the schema filled in."""
    _limiters: trio.lowlevel.RunVar[trio.CapacityLimiter] = attrs.field(init=False)
    _server_started: float | None = attrs.field(init=False, default=None)
    """When the server had last started as the store opened (``restarted_at``)."""

    def __attrs_post_init__(self) -> None:
        self._limiters = trio.lowlevel.RunVar(f"tether-postgres-limiter-{id(self)}")
        self.sql = Sql(f'"{self.schema}"')

    @property
    def s(self) -> str:
        """The quoted schema."""
        return self.sql.s

    async def run(self, fn: Callable[[Conn], T], *, promise: Promise = False) -> T:
        """Run ``fn(conn)`` in one thread hop with a pooled autocommit connection; the store's
        limiter lets as many hops run as the pool has connections, so none waits for one. A
        ``promise`` returns once its commit (and every one before it) is flushed."""
        if self.closed:
            raise trio.ClosedResourceError("the store is closed")
        try:
            limiter = self._limiters.get()
        except LookupError:
            limiter = trio.CapacityLimiter(self.pool_size)
            self._limiters.set(limiter)

        hop = partial(run_on, self.pool, self.durability.wrap(fn, promise), self.dsn_shown)
        while True:
            try:
                # not abandoned on cancel: the caller learns the outcome of a change that may
                # commit; a hop waits at most WAIT_HOP_S for a connection
                result = await trio.to_thread.run_sync(hop, limiter=limiter)
            except NoConnection as exc:  # nothing ran: wait for the server (cancellable here)
                self._unreachable(str(exc))
                await trio.lowlevel.checkpoint()
                if self.closed:
                    raise trio.ClosedResourceError("the store is closed") from None
                continue
            except StoreConnectionLost as exc:
                self._unreachable(first_line(exc))
                raise
            self._reachable()
            return result

    async def cas(
        self, sql: str, params: Mapping[str, Any], *, promise: bool = False
    ) -> tuple[Any, FoundState | None]:
        """Run a CAS statement; return (its RETURNING value, None) or (None, the row now).

        The row is read by a second statement only when the CAS changed nothing: a new
        statement sees what a concurrent transaction that made ours miss has committed (the
        first statement's snapshot could still show the state ours expected).
        """
        state_sql = self.sql.cas_state

        def op(conn: Conn) -> tuple[Any, FoundState | None]:
            row = conn.execute(sql, params).fetchone()
            if row is not None and row[0] is not None:
                return row[0], None
            now = seen(conn, state_sql, params)
            if now is None:  # a fenced move's task is gone: its holder's lease is lost
                fenced = "run" in params
                raise task_gone(params["id"], "move") if fenced else unknown_task(params["id"])
            return None, now

        return await self.run(op, promise=promise)

    def missed(self, conn: Conn, claim: Claim, now: float, verb: str) -> Exception:
        """Why ``claim``'s fence missed, read now on ``conn``."""
        return stale_lease(seen(conn, self.sql.cas_state, fence(claim, now)), claim, now, verb)

    def restarted_at(self, conn: Conn, now: float) -> float | None:
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
        if self.host.reach.lost(self.host.clock()):
            log.warning(
                "PostgreSQL at %s unreachable (%s): store calls wait for it; leases that run "
                "out meanwhile are not held against their holders",
                self.dsn_shown,
                why,
            )

    def _reachable(self) -> None:
        """One line when an outage ends: the holders have a lease from now to renew."""
        outage = self.host.reach.reached(self.host.clock())
        if outage is not None:
            log.warning(
                "PostgreSQL at %s reachable again after %s; leases that ran out meanwhile "
                "lapse only if not renewed by %s",
                self.dsn_shown,
                duration(outage),
                clock_time(self.host.clock() + self.host.lease_s),
            )
