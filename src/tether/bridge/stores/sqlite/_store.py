"""SqliteStore: the embedded custody store (one file, WAL, one writer thread, group commit).

The store is a facade (``stores._facade``) over its parts, one per capability (``_custody``,
``_operator``, ``_retention``, ``_steps``, ``_asks``, ``_limits``, ``_tenants``,
``_conversations``), each over the one ``SqliteDb`` (``_db``) built here: a job on the writer
thread (``_plumbing._sqlite_writer``: many callers' jobs share one durable commit) or a read
on the reader's connection (a WAL snapshot that never waits behind the writer's fsync).

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

import os
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from ...._plumbing._sqlite_writer import SqliteWriter
from ...custody._crashes import DEFAULT_MAX_CRASHES_ALONE
from ...custody._outage import StoreReach
from ...custody._rules import MAX_BODY_BYTES
from ...custody._work_bell import WorkBell
from .._common import check_limit
from .._facade import Parts, StoreFacade, Via
from .._frame import check_settings
from ._access import explain_open_failure
from ._asks import SqliteAsks
from ._connection import Synchronous as Synchronous
from ._connection import connect_reader, connect_writer
from ._conversations import SqliteConversations
from ._custody import SqliteCustody
from ._db import SqliteDb
from ._durable import barrier_for
from ._events import SqliteEvents
from ._limits import SqliteLimits
from ._news import RESULT, WORK, StoreNews, news_path
from ._operator import SqliteOperator
from ._retention import SqliteRetention
from ._schedules import SqliteSchedules
from ._steps import SqliteSteps
from ._tenants import SqliteTenants


@attrs.define(eq=False)
class SqliteStore(StoreFacade):
    """Custody in one SQLite file. Open with ``await SqliteStore.open(path)``."""

    path: Path
    clock: Callable[[], float]
    lease_s: float
    max_attempts: int
    max_body_bytes: int
    db: SqliteDb
    """The one primitive every part runs on (implementer tier: tests and benchmarks reach the
    file's writer and reader through it)."""
    _news: StoreNews
    """What this process's commits made, told to the other processes on the file (``_news``)."""
    max_crashes_alone: int = DEFAULT_MAX_CRASHES_ALONE
    """Crashes while it ran alone that prove a task kills its process (``custody._crashes``)."""
    reach: StoreReach = attrs.field(init=False, factory=StoreReach)
    """A file in this process's reach is not lost to an outage; kept for the one rule."""
    work_bell: WorkBell = attrs.field(init=False, factory=WorkBell)
    parts: Parts = attrs.field(init=False)
    """One part per capability, each over ``db`` (``stores._facade``)."""

    def __attrs_post_init__(self) -> None:
        steps = SqliteSteps(self, self.db)
        self.parts = Parts(
            custody=SqliteCustody(self, self.db),
            operator=SqliteOperator(self, steps, self.db),
            retention=SqliteRetention(self, self.db),
            steps=steps,
            asks=SqliteAsks(self, self.db),
            limits=SqliteLimits(self, self.db),
            tenants=SqliteTenants(self, self.db),
            rooms=SqliteConversations(self, self.db),
            schedules=SqliteSchedules(self, self.db),
            events=SqliteEvents(self, self.db),
        )

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
            SqliteDb(writer, reader, db),
            news,
            max_crashes_alone,
        )

    @property
    def commits(self) -> int:
        """Durable commits so far (each may carry many transitions)."""
        return self.db.writer.commits

    async def aclose(self) -> None:
        try:
            await self.db.writer.close()
        finally:
            await self.db.reader.close()
            self._news.close()

    plan_and_assign = Via("custody", SqliteCustody.plan_and_assign)
    plan_assign_and_claim = Via("custody", SqliteCustody.plan_assign_and_claim)
    """The view, the plan and its assignments in one writer transaction."""

    delivery_leases = False
    """One bridge per file: delivery's look stays a read on the read connection (a lease would
    make it a writer commit). Two bridges on one file may both post a result; the gateway
    absorbs the duplicate."""

    # -- news from other processes (hints; see ``_news``) --------------------------------------

    async def wait_for_work(self, seconds: float, *, worker: str | None = None) -> bool:
        """Sleep until another process on this file made work (a task pending or assigned),
        at most ``seconds``; ``True`` if it did. Only a hint: the caller looks either way."""
        return await self._news.wait(WORK, seconds)

    async def wait_for_results(self, seconds: float) -> bool:
        """Sleep until another process on this file stored a result, at most ``seconds``."""
        return await self._news.wait(RESULT, seconds)
