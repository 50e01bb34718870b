"""Connections to PostgreSQL: the pool, the per-session time limits, and what a failure means.

psycopg 3's async API does not run on Trio, so the store makes one ``trio.to_thread`` hop per
call into its sync API (``run_on``) with a pooled autocommit connection. No statement may wait
forever (the thread cannot be abandoned: its caller must learn the outcome), so every session
sets ``lock_timeout`` and ``statement_timeout``, and a failure is translated into one of two
errors that say whether the change may have committed.

An outage costs seconds, not minutes, after the server is back: a hop waits at most
``WAIT_HOP_S`` for a connection (``NoConnection``: nothing ran; the store waits and tries
again), the pool tries each reconnection for ``RECONNECT_S`` only, so its backoff never grows
past a second or two (the next caller's wait starts a fresh one), and every connection is
checked before use, so one that died with the server is replaced, not handed out.
"""

from __future__ import annotations

import logging
import math
import select
import time
import weakref
from collections.abc import Callable
from typing import Any, Final, TypeVar

import attrs
import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool, PoolTimeout

from ...._expected import ExpectedFailure
from ._schema import check_current, migrate

T = TypeVar("T")
Conn = psycopg.Connection[TupleRow]


WAIT_HOP_S: Final = 1.0
"""The longest one thread hop waits for a pooled connection (then it returns to Trio)."""
RECONNECT_S: Final = 2.0
"""How long the pool retries one reconnection (its backoff: 1 s, then the rest)."""

# the pool logs each failed reconnection (one a second through an outage); the store says
# once when the server went away and once when it came back (PostgresDb.run)
logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


class NoConnection(Exception):
    """No connection within ``WAIT_HOP_S``: the server is unreachable; nothing ran."""


class StoreTimeout(ExpectedFailure, TimeoutError):
    """A statement waited longer than the store's ``lock_timeout_s``/``statement_timeout_s``
    (another session holds a task's row lock, or the server is overloaded); nothing changed."""


class StoreConnectionLost(ExpectedFailure, ConnectionError):
    """The connection broke during a call: whether its change committed is unknown.

    Safe to retry in the custody model: a lost claim's lease expires and is repooled, a
    repeated ingest is a replay, a repeated complete of a committed result is ``StaleLease``.
    """


def check_timeouts(**seconds: float) -> None:
    """Each session time limit is between 0 and a day (exclusive), in seconds."""
    for name, value in seconds.items():
        if not (isinstance(value, int | float) and 0 < value < 86_400):
            raise ValueError(f"{name} must be between 0 and 86400 seconds, got {value!r}")


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


READ_ONLY_SESSION: Final = b"SET default_transaction_read_only = on"
"""Run on each connection of a store opened to be inspected: the server refuses its writes.

Set once the connection is made, never as a startup option: libpq's
``target_session_attrs=read-write`` (a multi-host DSN that must find the primary) reads the
session's ``default_transaction_read_only`` as it connects, and would refuse the primary
itself."""


def connect_failure(exc: BaseException) -> str:
    """Why a connection could not be made, naming every host tried: psycopg's message for a
    multi-host DSN leads with the last host's failure and lists them all below it."""
    text = str(exc).strip()
    each = [
        line.split(": connection failed: ", 1)[-1].strip()
        for line in text.splitlines()
        if line.startswith("- host:")
    ]
    return "; ".join(each) if each else first_line(exc)


def connection_kwargs(
    schema: str, connect_timeout_s: float, password: str | None
) -> dict[str, Any]:
    """What every connection of the store is opened with (autocommit: one statement, one
    commit; the application name shows the schema in ``pg_stat_activity``)."""
    kwargs: dict[str, Any] = {
        "autocommit": True,
        "connect_timeout": max(1, round(connect_timeout_s)),
        "application_name": f"tether-{schema}",
    }
    if password is not None:
        kwargs["password"] = password
    return kwargs


def connector(
    dsn: str,
    schema: str,
    connect_timeout_s: float,
    password: str | None,
    *,
    read_only: bool = False,
) -> Callable[[], Conn]:
    """A function that opens one more connection like the pool's (the listener uses it;
    ``read_only``: the server refuses every write of the session)."""
    kwargs = connection_kwargs(schema, connect_timeout_s, password)

    def connect() -> Conn:
        conn = psycopg.connect(dsn, **kwargs)
        if read_only:
            conn.execute(READ_ONLY_SESSION)
        return conn

    return connect


CHECK_IDLE_S: Final = 1.0
"""A pooled connection idle this long is checked (one empty round trip) before a hop uses it."""


@attrs.define(eq=False)
class IdleCheck:
    """The pool's check of a connection before a hop uses it, only for one idle a while.

    A connection that sat in the pool may have died with a server restart or a network cut;
    a check replaces it before the call instead of the call failing with an unknown outcome.
    Checking every hand-out (``ConnectionPool.check_connection``) cost one more round trip per
    store call, doubling the cost of a short statement (an acquire: 1.76 ms measured, a plain
    read 0.81). A connection back in the pool within ``CHECK_IDLE_S`` was working a moment
    ago: it is checked without a round trip (has the server written to it since?), and should
    the server go in the moment between that look and the statement, the call fails as a call
    does when the server dies under it (``StoreConnectionLost``, retried)."""

    _returned: weakref.WeakKeyDictionary[Conn, float] = attrs.field(
        init=False, factory=weakref.WeakKeyDictionary
    )

    def returned(self, conn: Conn) -> None:
        """The pool's ``reset``: ``conn`` is back in the pool now."""
        self._returned[conn] = time.monotonic()

    def check(self, conn: Conn) -> None:
        """The pool's ``check``: raises if ``conn`` no longer answers, asked of one idle a while
        or one the server has written to while it rested (a backend terminated by a restart,
        a failover or an operator sends its notice and closes the socket)."""
        idle = time.monotonic() - self._returned.get(conn, -math.inf)
        if idle >= CHECK_IDLE_S or _spoke_at_rest(conn):
            ConnectionPool.check_connection(conn)


def _spoke_at_rest(conn: Conn) -> bool:
    """Is there something to read on a connection no statement runs on (no round trip)?"""
    try:
        poll = select.poll()
        poll.register(conn.fileno(), select.POLLIN)
        return bool(poll.poll(0))
    except (OSError, ValueError, psycopg.Error):
        return True  # closed or unusable: the full check says so


def open_pool(
    dsn: str,
    shown: str,
    *,
    schema: str,
    pool_size: int,
    connect_timeout_s: float,
    lock_timeout_s: float,
    statement_timeout_s: float,
    password: str | None,
    create: bool,
    read_only: bool = False,
) -> ConnectionPool[Conn]:
    """Migrate ``schema`` on one connection, then open the pool (blocking: run in a thread).

    ``read_only``: check the schema's version instead (no migration), and every session of the
    pool refuses writes. ``shown`` is the DSN without its password, the only form that appears
    in an error.
    """
    limits = (
        f"SET lock_timeout = {round(lock_timeout_s * 1000)}; "
        f"SET statement_timeout = {round(statement_timeout_s * 1000)}"
    )
    if read_only:
        limits += f"; {READ_ONLY_SESSION.decode()}"

    def configure(conn: Conn) -> None:
        conn.execute(limits.encode())
        # a statement is prepared at its second run on a connection, not its sixth: each of
        # the pool's connections planned the lead's reads and the claims afresh until then
        # (a third of a 2,000-task drain's sweeps, issue 50); a statement of several commands
        # is never prepared (psycopg counts only single results)
        conn.prepare_threshold = 1

    kwargs = connection_kwargs(schema, connect_timeout_s, password)
    idle = IdleCheck()
    try:
        with psycopg.connect(dsn, **kwargs) as conn:
            if read_only:
                conn.execute(READ_ONLY_SESSION)
                check_current(conn, schema)
            else:
                migrate(conn, schema, create=create)
    except psycopg.OperationalError as exc:
        raise ConnectionError(
            f"cannot connect to PostgreSQL at {shown}: {connect_failure(exc)}"
        ) from None
    pool: ConnectionPool[Conn] = ConnectionPool(
        dsn,
        min_size=1,
        max_size=pool_size,
        kwargs=kwargs,
        open=False,
        name=f"tether-{schema}",
        timeout=WAIT_HOP_S,
        reconnect_timeout=RECONNECT_S,
        configure=configure,
        check=idle.check,
        reset=idle.returned,
    )
    try:
        pool.open(wait=True, timeout=connect_timeout_s)
    except BaseException as exc:
        pool.close()
        if isinstance(exc, psycopg.OperationalError):
            raise ConnectionError(
                f"cannot open a connection pool to PostgreSQL at {shown}: {connect_failure(exc)}"
            ) from None
        raise
    return pool


def run_on(pool: ConnectionPool[Conn], fn: Callable[[Conn], T], shown: str) -> T:
    """Run ``fn(conn)`` with a pooled connection (blocking: the body of one thread hop)."""
    used: Conn | None = None
    try:
        with pool.connection() as conn:
            used = conn
            return fn(conn)
    except PoolTimeout as exc:
        if used is not None:
            raise
        raise NoConnection(first_line(exc)) from None
    except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled) as exc:
        raise StoreTimeout(
            f"PostgreSQL at {shown} cancelled a store statement "
            f"({first_line(exc)}); nothing changed"
        ) from exc
    except psycopg.OperationalError as exc:
        if used is None or not used.broken:
            raise
        # the server restarted or the network broke: the pool's other idle
        # connections are likely dead too; replace them now, not one failure each
        pool.check()
        raise StoreConnectionLost(
            f"lost the connection to PostgreSQL at {shown} "
            f"({first_line(exc)}); this call's outcome is unknown, retry it"
        ) from exc
