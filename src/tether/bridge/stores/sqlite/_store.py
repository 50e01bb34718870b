"""SqliteStore: the embedded custody store (one file, WAL, one writer thread, group commit).

Every transition is a single ``UPDATE ... WHERE`` naming the state it expects (and for leases
the owner, the attempt and a live ``lease_until``), so it either moves the task or changes
nothing; the rowcount says which. Queries read the state set and the "in custody" predicate from
``custody._rules``; the schema's CHECK constraint refuses any other state.

Durability: by default every connection runs ``journal_mode=WAL`` and ``synchronous=FULL``, so
SQLite fsyncs the WAL before a commit returns and a returned transition survives power loss or
an OS crash (SQLite's guarantee for that pair; a test pins the settings, none can pull the
plug). ``synchronous="NORMAL"`` still survives a *process* crash (the page cache outlives a
SIGKILL), which is all ``tests/custody/test_crash.py`` can and does demonstrate, but may
lose the last commits on power loss.

Size (over ~600 lines on purpose): one short method per operation of the store's roles,
each with its SQL beside it, so a reader checks a move's fence where it is written. What is
not a custody operation already lives apart: ``_connect`` (opening the file), ``_writer``
(group commit), ``_pool_sql`` (the lead's statements), ``stores/_common`` (what both backends
share).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

import attrs

from ...._plumbing._sqlite_writer import SqliteWriter
from ...custody import _log as _clog
from ...custody._crashes import (
    DEFAULT_MAX_CRASHES_ALONE,
    Expired,
    check_max_crashes_alone,
    expiry_outcome,
    process_prefix,
)
from ...custody._rooms import RoomPolicy, check_room_policy, superseded_reason
from ...custody._rules import (
    MAX_BODY_BYTES,
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
    Decide,
    JournalEntry,
    LeaseExpiry,
    OperatorOutcome,
    PoolView,
    StallCandidate,
    Suspects,
    WaitingRetries,
    WorkerInfo,
    WorkerRole,
)
from .._common import (
    IN_CUSTODY_SQL,
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
    CANCELLABLE_SQL,
    cancel_outcomes,
    cancel_reason,
    check_contains,
    check_ids,
    redrive_outcomes,
    redrive_reason,
)
from .._rooms_sql import SUPERSEDED_OWNER
from ._access import explain_open_failure
from ._connect import Synchronous as Synchronous
from ._connect import connect_reader, connect_writer
from ._pool_sql import (
    CLAIM_SUSPECT,
    EXPIRED_SELECT,
    PROCESS_BUSY,
    ROOM_GATE,
    SUSPECT_FLAGS,
    assign_one,
    assign_pairs,
    next_due,
    note_room,
    pending_in_order,
    pool_view,
    read_workers,
    ready_pending,
)

T = TypeVar("T")

_TASK_COLS: Final = "id, body, room, priority, headers"
_RECORD_COLS: Final = (
    f"{_TASK_COLS}, state, owner, attempt, lease_until, result, reason, created_at, updated_at, "
    "not_before, crash_count, crashes_alone, suspect"
)
_FENCE: Final = "id = ? AND state = 'claimed' AND owner = ? AND attempt = ? AND lease_until > ?"
_FENCE_NAMED: Final = (
    "id = :id AND state = 'claimed' AND owner = :worker AND attempt = :attempt "
    "AND lease_until > :now"
)


@attrs.define(eq=False)
class SqliteStore:
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
    max_crashes_alone: int = DEFAULT_MAX_CRASHES_ALONE
    """Crashes while it ran alone that prove a task kills its process (``custody._crashes``)."""

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        lease_s: float = 60.0,
        max_attempts: int = 5,
        max_body_bytes: int = MAX_BODY_BYTES,
        synchronous: Synchronous = "FULL",
        max_batch: int = 512,
        busy_timeout_s: float = 10.0,
        max_crashes_alone: int = DEFAULT_MAX_CRASHES_ALONE,
    ) -> SqliteStore:
        """Open (creating and migrating if needed) the store at ``path``.

        The file is created 0600 before SQLite opens it (an existing looser one is tightened)
        and every missing parent directory 0700 (``tether._plumbing._fs``). ``synchronous="FULL"``
        makes every commit survive power loss; ``"NORMAL"`` survives a process crash only.
        ``max_batch`` caps how many transitions share one commit (1 = a commit each).
        """
        if not lease_s > 0:
            raise ValueError(f"lease_s must be > 0, got {lease_s!r}")
        check_limit(max_attempts, "max_attempts")
        check_limit(max_body_bytes, "max_body_bytes")
        check_max_crashes_alone(max_crashes_alone)
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA; got {synchronous!r}")
        check_limit(max_batch, "max_batch")
        db = Path(path)
        writer = SqliteWriter(
            connect=explain_open_failure(
                db, lambda: connect_writer(db, synchronous, busy_timeout_s)
            ),
            max_batch=max_batch,
        )
        await writer.start()  # creates and migrates the file
        reader = SqliteWriter(
            connect=lambda: connect_reader(db, busy_timeout_s),
            max_batch=max_batch,
            name="tether-sqlite-reader",
        )
        try:
            await reader.start()
        except BaseException:
            await writer.close()
            raise
        return cls(
            db,
            clock,
            float(lease_s),
            max_attempts,
            max_body_bytes,
            writer,
            reader,
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

    async def _read(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """Run the read-only ``op`` in one read transaction (a consistent snapshot)."""
        return await self._reader.run(op, readonly=True)

    async def __aenter__(self) -> SqliteStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- ingest -------------------------------------------------------------------------------

    async def ingest(self, task: Task, *, room_policy: RoomPolicy = "concurrent") -> bool:
        [new] = await self.ingest_many([task], room_policy=room_policy)
        return new

    async def ingest_many(
        self, tasks: Sequence[Task], *, room_policy: RoomPolicy = "concurrent"
    ) -> list[bool]:
        policy = check_room_policy(room_policy)
        rows = [self._ingest_row(task) for task in tasks]  # all valid, or nothing is stored
        superseded: list[tuple[str, str]] = []

        def op(conn: sqlite3.Connection) -> list[bool]:
            superseded.clear()  # (a replayed job starts over)
            new = []
            for row in rows:
                fresh = (
                    conn.execute(
                        f"INSERT INTO tasks ({_TASK_COLS}, state, attempt, created_at, "
                        "updated_at, room_policy) SELECT ?, ?, ?, ?, ?, 'pending', 1, ?, ?, ? "
                        "WHERE NOT EXISTS (SELECT 1 FROM tombstones WHERE id = ?) "
                        "ON CONFLICT (id) DO NOTHING",
                        (*row, policy, row[0]),
                    ).rowcount
                    == 1
                )
                new.append(fresh)
            if policy == "replace":  # per room, the newest new task supersedes the older ones
                newest = {
                    row[2]: row for row, fresh in zip(rows, new, strict=True) if fresh and row[2]
                }
                for room, row in newest.items():
                    superseded.extend(_supersede(conn, row[0], room, row[6]))
            return new

        new = await self._writer.run(op) if rows else []
        _clog.ingested((row[0] for row in rows), new)
        for id, by in superseded:
            _clog.moved(id, None, CustodyState.RESULT, reason=superseded_reason(by))
        return new

    def _ingest_row(self, task: Task) -> tuple[Any, ...]:
        headers = ingest_headers(task, self.max_body_bytes)
        now = self.clock()
        return (task.id, task.body, task.room, PRIORITY_RANK[task.priority], headers, now, now)

    async def body_conflicts(self, tasks: Sequence[Task]) -> list[bool]:
        ids = json.dumps(sorted({t.id for t in tasks}))
        sql = "SELECT id, body FROM tasks WHERE id IN (SELECT value FROM json_each(?))"
        stored = (
            dict(await self._read(lambda c: c.execute(sql, (ids,)).fetchall())) if tasks else {}
        )
        return body_conflicts(tasks, stored)

    async def prune_delivered(self, before: float, *, limit: int = 10_000) -> int:
        check_limit(limit)

        def op(conn: sqlite3.Connection) -> int:
            gone = conn.execute(
                "DELETE FROM tasks WHERE rowid IN (SELECT rowid FROM tasks "
                "WHERE state = 'delivered' AND updated_at < ? LIMIT ?) RETURNING id, updated_at",
                (before, limit),
            ).fetchall()
            conn.executemany(
                "INSERT INTO tombstones (id, delivered_at) VALUES (?, ?) "
                "ON CONFLICT (id) DO UPDATE SET delivered_at = excluded.delivered_at",
                gone,
            )
            return len(gone)

        return await self._writer.run(op)

    async def prune_tombstones(self, before: float, *, limit: int = 10_000) -> int:
        check_limit(limit)

        def op(conn: sqlite3.Connection) -> int:
            return conn.execute(
                "DELETE FROM tombstones WHERE id IN (SELECT id FROM tombstones "
                "WHERE delivered_at < ? ORDER BY delivered_at LIMIT ?)",
                (before, limit),
            ).rowcount

        count: int = await self._writer.run(op)
        _clog.pruned(count, before)
        return count

    # -- lead ---------------------------------------------------------------------------------

    async def assign(self, id: str, worker: str) -> None:
        check_task_id(id)
        check_worker(worker)
        now = self.clock()

        def op(conn: sqlite3.Connection) -> None:
            if not assign_one(conn, id, worker, now):
                rec = _require(conn, id)
                raise CustodyConflict(assign_refused(rec, worker, now))

        await self._writer.run(op)
        _clog.moved(id, CustodyState.PENDING, CustodyState.ASSIGNED, worker=worker)

    async def pending(self, *, limit: int = 100) -> Sequence[Task]:
        check_limit(limit)
        now = self.clock()

        def op(conn: sqlite3.Connection) -> list[Task]:
            due = "AND (not_before IS NULL OR not_before <= :now) AND suspect = 0"
            rows = conn.execute(
                f"SELECT {_TASK_COLS} FROM tasks WHERE rowid IN "
                f"({pending_in_order(':limit', due)}) ORDER BY priority, rowid",
                {"now": now, "limit": limit},
            )
            return [_task(r) for r in rows]

        return await self._read(op)

    async def unassign(self, id: str, worker: str) -> bool:
        check_task_id(id)
        check_worker(worker)
        now = self.clock()

        def op(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE tasks SET state = 'pending', owner = NULL, updated_at = ? "
                "WHERE id = ? AND state = 'assigned' AND owner = ?",
                (now, id, worker),
            )
            if cur.rowcount != 1:
                _require(conn, id)
                return False
            return True

        done: bool = await self._writer.run(op)
        if done:
            _clog.moved(id, CustodyState.ASSIGNED, CustodyState.PENDING, worker=worker)
        return done

    async def assign_many(self, pairs: Sequence[tuple[str, str]]) -> list[bool]:
        checked = [(check_task_id(id), check_worker(worker)) for id, worker in pairs]
        if not checked:
            return []
        now = self.clock()
        done, moved = await self._writer.run(lambda conn: assign_pairs(conn, checked, now))
        _clog.assigned(checked, moved)
        return done

    async def return_assignments(self, worker: str) -> Sequence[str]:
        check_worker(worker)
        now = self.clock()

        def op(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "UPDATE tasks SET state = 'pending', owner = NULL, updated_at = ? "
                "WHERE state = 'assigned' AND owner = ? RETURNING id",
                (now, worker),
            ).fetchall()
            return [r[0] for r in rows]

        ids: list[str] = await self._writer.run(op)
        _clog.returned(ids, CustodyState.ASSIGNED, worker=worker, why="assignment given back")
        return ids

    async def pool_view(
        self, *, pending_limit: int = 1000, skip_rooms: Collection[str] = ()
    ) -> PoolView:
        check_limit(pending_limit, "pending_limit")
        if isinstance(skip_rooms, str) or not all(isinstance(r, str) for r in skip_rooms):
            raise TypeError(f"skip_rooms must be a collection of str, got {skip_rooms!r:.80}")
        skip = json.dumps(sorted(skip_rooms))
        at = self.clock()
        return await self._read(lambda conn: pool_view(conn, at, pending_limit, skip))

    async def plan_and_assign(
        self, decide: Decide, *, pending_limit: int = 1000
    ) -> tuple[PoolView, list[bool] | None]:
        check_limit(pending_limit, "pending_limit")
        now = self.clock()

        checked: list[tuple[str, str]] = []

        def op(conn: sqlite3.Connection) -> tuple[PoolView, list[bool] | None, set[str]]:
            view = pool_view(conn, now, pending_limit, "[]")
            pairs = decide(view)
            if pairs is None:
                return view, None, set()
            checked[:] = [(check_task_id(id), check_worker(worker)) for id, worker in pairs]
            done, moved = assign_pairs(conn, checked, now)
            return view, done, moved

        view, done, moved = await self._writer.run(op)
        _clog.assigned(checked, moved)
        return view, done

    # -- liveness -----------------------------------------------------------------------------

    async def beat(self, worker: str, role: WorkerRole, capacity: int) -> Sequence[WorkerInfo]:
        check_worker(worker)
        if role not in WORKER_ROLES:
            raise ValueError(f"role must be 'lead' or 'worker', got {role!r}")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"capacity must be an int >= 0, got {capacity!r}")
        now = self.clock()

        def op(conn: sqlite3.Connection) -> list[WorkerInfo]:
            conn.execute(
                "INSERT INTO workers (name, role, capacity, last_beat, started_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
                "role = excluded.role, capacity = excluded.capacity, "
                "last_beat = excluded.last_beat",
                (worker, role, capacity, now, now),
            )
            return read_workers(conn)

        return await self._writer.run(op)

    async def workers(self) -> Sequence[WorkerInfo]:
        return await self._read(read_workers)

    async def remove_worker(self, worker: str) -> bool:
        check_worker(worker)

        def op(conn: sqlite3.Connection) -> bool:
            return conn.execute("DELETE FROM workers WHERE name = ?", (worker,)).rowcount == 1

        return await self._writer.run(op)

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

        prefix = process_prefix(worker)

        def op(conn: sqlite3.Connection) -> list[Claim]:
            # a suspect runs alone (custody._crashes): first the isolation rule, then the
            # worker's own assignments, then (leaderless) pending tasks, each queue in
            # (priority, age) order; one UPDATE claims each queue's share
            p = {"worker": worker, "prefix": prefix, "now": now, "until": lease_until}
            here, anywhere, waiting, mine = conn.execute(SUSPECT_FLAGS, p).fetchone()
            if here:
                return []  # a suspect runs in this process: nothing else does
            if waiting and not anywhere:
                if conn.execute(PROCESS_BUSY, p).fetchone()[0]:
                    return []  # the process drains, then takes the suspect alone
                rows = conn.execute(CLAIM_SUSPECT, p).fetchall()
                for room in {r[2] for r in rows if r[2] is not None}:
                    note_room(conn, room, worker, now)
                return [Claim(_task(r), worker, r[5], lease_until) for r in rows]
            rows = (
                conn.execute(
                    "UPDATE tasks SET state = 'claimed', owner = ?, lease_until = ?, "
                    "updated_at = ? WHERE rowid IN (SELECT t.rowid FROM tasks t "
                    "WHERE t.state = 'assigned' AND t.owner = ? AND t.suspect = 0 "
                    f"AND {ROOM_GATE} "
                    "ORDER BY t.priority, t.rowid LIMIT ?) "
                    f"RETURNING {_TASK_COLS}, attempt, rowid",
                    (worker, lease_until, now, worker, limit),
                ).fetchall()
                if mine
                else []
            )
            taken = len(rows)
            ready = ready_pending(conn, now, limit - taken) if taken < limit and leaderless else []
            if ready:
                rows += conn.execute(
                    "UPDATE tasks SET state = 'claimed', owner = ?, lease_until = ?, "
                    "not_before = NULL, updated_at = ? "
                    f"WHERE rowid IN ({', '.join('?' * len(ready))}) "
                    f"RETURNING {_TASK_COLS}, attempt, rowid",
                    (worker, lease_until, now, *ready),
                ).fetchall()
            if len(rows) > 1:  # RETURNING order is unspecified: queue order, assignments first
                rows[:taken] = sorted(rows[:taken], key=lambda r: (r[3], r[6]))
                rows[taken:] = sorted(rows[taken:], key=lambda r: (r[3], r[6]))
            for room in {r[2] for r in rows if r[2] is not None}:
                note_room(conn, room, worker, now)  # the claiming worker keeps these rooms
            return [Claim(_task(r), worker, r[5], lease_until) for r in rows]

        claims = await self._writer.run(op)
        for claim in claims:
            _clog.moved(
                claim.task.id, None, CustodyState.CLAIMED, worker=worker, attempt=claim.attempt
            )
        return claims

    async def renew(self, claim: Claim) -> Claim:
        worker, attempt, id = fence_args(claim)
        now = self.clock()
        lease_until = now + self.lease_s

        def op(conn: sqlite3.Connection) -> float:
            row = conn.execute(
                "UPDATE tasks SET lease_until = max(lease_until, ?), updated_at = ? "
                f"WHERE {_FENCE} RETURNING lease_until",
                (lease_until, now, id, worker, attempt, now),
            ).fetchone()
            if row is None:
                raise _stale(conn, claim, now, "renew")
            return float(row[0])

        new_until = await self._writer.run(op)
        return attrs.evolve(claim, lease_until=new_until)

    async def complete(self, claim: Claim, body: str, *, no_send: bool = False) -> None:
        worker, attempt, id = fence_args(claim)
        if not isinstance(body, str):
            raise TypeError(f"a result body must be a str, got {type(body).__name__}")
        check_body(body, self.max_body_bytes, what=f"result of task {id!r}")
        if not isinstance(no_send, bool):
            raise TypeError(f"no_send must be a bool, got {type(no_send).__name__}")
        now = self.clock()

        def op(conn: sqlite3.Connection) -> None:
            cur = conn.execute(
                "UPDATE tasks SET state = 'result', result = ?, no_send = ?, lease_until = NULL, "
                f"suspect = 0, updated_at = ? WHERE {_FENCE}",
                (body, int(no_send), now, id, worker, attempt, now),
            )
            if cur.rowcount != 1:
                raise _stale(conn, claim, now, "complete")

        await self._writer.run(op)
        _clog.moved(id, CustodyState.CLAIMED, CustodyState.RESULT, worker=worker, attempt=attempt)

    async def complete_many(
        self, outcomes: Sequence[tuple[Claim, str]], *, no_send: bool = False
    ) -> list[bool]:
        if not isinstance(no_send, bool):
            raise TypeError(f"no_send must be a bool, got {type(no_send).__name__}")
        rows = [
            (body, int(no_send), *complete_args(claim, body, self.max_body_bytes))
            for claim, body in outcomes
        ]
        if not rows:
            return []
        now = self.clock()

        def op(conn: sqlite3.Connection) -> list[bool]:
            sql = (
                "UPDATE tasks SET state = 'result', result = ?, no_send = ?, lease_until = NULL, "
                f"suspect = 0, updated_at = ? WHERE {_FENCE}"
            )
            return [
                conn.execute(sql, (body, flag, now, id, worker, attempt, now)).rowcount == 1
                for body, flag, worker, attempt, id in rows
            ]

        done = await self._writer.run(op)
        for (_, _, worker, attempt, id), moved in zip(rows, done, strict=True):
            if moved:
                _clog.moved(
                    id, CustodyState.CLAIMED, CustodyState.RESULT, worker=worker, attempt=attempt
                )
        return done

    async def fail(
        self,
        claim: Claim,
        reason: str,
        *,
        retry_after: float = 0.0,
        permanent: bool = False,
    ) -> CustodyState:
        worker, attempt, id = fence_args(claim)
        reason = check_reason(reason)
        delay = check_retry_after(retry_after)
        now = self.clock()
        check_permanent(permanent)
        not_before = now + delay if delay > 0 else None
        fence = {"now": now, "id": id, "worker": worker, "attempt": attempt}

        def op(conn: sqlite3.Connection) -> tuple[bool, str]:
            # the failure budget leaves out the runs lost to crashes (custody._crashes)
            row = conn.execute(f"SELECT crash_count FROM tasks WHERE {_FENCE_NAMED}", fence)
            crashes = row.fetchone()
            if crashes is None:
                raise _stale(conn, claim, now, "fail")
            dead, why = fail_outcome(reason, attempt, self.max_attempts, permanent, crashes[0])
            if dead:
                sql = "state = 'dead', lease_until = NULL"
            else:
                sql = (
                    "state = 'pending', owner = NULL, lease_until = NULL, attempt = attempt + 1, "
                    "not_before = :not_before"
                )
            conn.execute(
                f"UPDATE tasks SET {sql}, suspect = 0, reason = :reason, updated_at = :now "
                f"WHERE {_FENCE_NAMED}",
                {"not_before": not_before, "reason": why, **fence},
            )
            return dead, why

        dead, reason = await self._writer.run(op)
        target = CustodyState.DEAD if dead else CustodyState.PENDING
        _clog.moved(
            id,
            CustodyState.CLAIMED,
            target,
            worker=worker,
            attempt=attempt,
            reason=reason if not_before is None else f"{reason}; retry in {delay:.3f}s",
            level=None if dead else logging.WARNING,
        )
        return target

    async def release(self, claim: Claim) -> None:
        worker, attempt, id = fence_args(claim)
        now = self.clock()

        def op(conn: sqlite3.Connection) -> None:
            cur = conn.execute(
                "UPDATE tasks SET state = 'pending', owner = NULL, lease_until = NULL, "
                f"updated_at = ? WHERE {_FENCE}",
                (now, id, worker, attempt, now),
            )
            if cur.rowcount != 1:
                raise _stale(conn, claim, now, "release")

        await self._writer.run(op)
        _clog.moved(
            id,
            CustodyState.CLAIMED,
            CustodyState.PENDING,
            worker=worker,
            reason="released unfinished",
        )

    # -- stall notices ------------------------------------------------------------------------

    async def stall_candidates(
        self, older_than: float, *, worker: str | None = None, limit: int = 1000
    ) -> Sequence[StallCandidate]:
        check_limit(limit)
        if worker is not None:
            check_worker(worker)

        def op(conn: sqlite3.Connection) -> list[StallCandidate]:
            rows = conn.execute(
                "SELECT t.id, t.room, t.owner, t.created_at FROM tasks t "
                "WHERE t.state = 'claimed' AND t.created_at <= ? AND (? IS NULL OR t.owner = ?) "
                "AND NOT EXISTS (SELECT 1 FROM stall_notices s WHERE s.id = t.id) "
                "ORDER BY t.created_at, t.rowid LIMIT ?",
                (older_than, worker, worker, limit),
            )
            return [StallCandidate(*r) for r in rows]

        return await self._read(op)

    async def mark_stall_notified(self, id: str) -> bool:
        check_task_id(id)
        now = self.clock()

        def op(conn: sqlite3.Connection) -> bool:
            return (
                conn.execute(
                    "INSERT INTO stall_notices (id, notified_at) VALUES (?, ?) "
                    "ON CONFLICT (id) DO NOTHING",
                    (id, now),
                ).rowcount
                == 1
            )

        return await self._writer.run(op)

    async def clear_stall_notice(self, id: str) -> None:
        check_task_id(id)

        def op(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM stall_notices WHERE id = ?", (id,))

        await self._writer.run(op)

    async def prune_stall_notices(self, *, limit: int = 10_000) -> int:
        check_limit(limit)

        def op(conn: sqlite3.Connection) -> int:
            return conn.execute(
                "DELETE FROM stall_notices WHERE id IN (SELECT s.id FROM stall_notices s "
                "LEFT JOIN tasks t ON t.id = s.id "
                f"WHERE t.id IS NULL OR t.state NOT IN ({IN_CUSTODY_SQL}) LIMIT ?)",
                (limit,),
            ).rowcount

        return await self._writer.run(op)

    # -- reconciler ---------------------------------------------------------------------------

    async def expire_leases(self, *, limit: int = 10_000) -> Sequence[LeaseExpiry]:
        check_limit(limit)
        now = self.clock()

        def op(conn: sqlite3.Connection) -> list[LeaseExpiry]:
            # the writer holds the write lock: the evidence read and the updates see the same
            # rows; each lease is settled by custody._crashes (a crash or a failed attempt)
            rows = conn.execute(
                f"{EXPIRED_SELECT} WHERE t.state = 'claimed' AND t.lease_until <= ? "
                "ORDER BY t.lease_until, t.rowid LIMIT ?",
                (now, limit),
            ).fetchall()
            return self._settle(conn, rows, now, restarted=False)

        expiries: list[LeaseExpiry] = await self._writer.run(op)
        _clog.expired(expiries)
        return expiries

    async def recover_claims(self, worker: str) -> Sequence[LeaseExpiry]:
        check_worker(worker)
        now = self.clock()

        def op(conn: sqlite3.Connection) -> list[LeaseExpiry]:
            rows = conn.execute(
                f"{EXPIRED_SELECT} WHERE t.state = 'claimed' AND t.owner = ? ORDER BY t.rowid",
                (worker,),
            ).fetchall()
            return self._settle(conn, rows, now, restarted=True)

        expiries: list[LeaseExpiry] = await self._writer.run(op)
        _clog.expired(expiries)
        return expiries

    def _settle(
        self, conn: sqlite3.Connection, rows: Sequence[Any], now: float, *, restarted: bool
    ) -> list[LeaseExpiry]:
        """Write the outcome ``custody._crashes`` decides for each expired lease read."""
        out: list[LeaseExpiry] = []
        updates: list[dict[str, Any]] = []
        for row in rows:
            id, owner, attempt, until, suspect, crashes, alone, last_beat = row
            e = Expired(id, owner, attempt, until, bool(suspect), crashes, alone, last_beat)
            o = expiry_outcome(
                e,
                now=now,
                lease_s=self.lease_s,
                max_attempts=self.max_attempts,
                max_crashes_alone=self.max_crashes_alone,
                restarted=restarted,
            )
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
                    "was": e.attempt,
                }
            )
            out.append(
                LeaseExpiry(
                    e.id, e.owner, e.attempt, e.lease_until, now, o.state, o.reason, o.crash
                )
            )
        conn.executemany(
            "UPDATE tasks SET state = :state, "
            "owner = CASE WHEN :state = 'dead' THEN owner END, attempt = :attempt, "
            "crash_count = :crashes, crashes_alone = :alone, suspect = :suspect, "
            "reason = :reason, lease_until = NULL, updated_at = :now "
            "WHERE id = :id AND state = 'claimed' AND owner = :owner AND attempt = :was",
            updates,
        )
        return out

    # -- delivery -----------------------------------------------------------------------------

    delivery_leases = False
    """One bridge per file: delivery's look stays a read on the read connection (a lease would
    make it a writer commit). Two bridges on one file may both post a result; the gateway
    absorbs the duplicate."""

    async def ready_results(
        self, *, limit: int = 100, holder: str | None = None, lease_s: float | None = None
    ) -> Sequence[Result]:
        check_limit(limit)
        check_delivery_lease(holder, lease_s)  # checked, then a plain read (no leases here)

        def op(conn: sqlite3.Connection) -> list[Result]:
            rows = conn.execute(
                f"SELECT {_TASK_COLS}, result, owner, attempt, no_send FROM tasks "
                "WHERE state = 'result' ORDER BY priority, rowid LIMIT ?",
                (limit,),
            ).fetchall()
            return [Result(_task(r), r[5], r[6], r[7], bool(r[8])) for r in rows]

        return await self._read(op)

    async def mark_delivered(self, id: str) -> None:
        check_task_id(id)
        now = self.clock()

        def op(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE tasks SET state = 'delivered', updated_at = ? "
                "WHERE id = ? AND state = 'result'",
                (now, id),
            )
            if cur.rowcount != 1:
                rec = _require(conn, id)
                if rec.state is not CustodyState.DELIVERED:
                    raise CustodyConflict(
                        f"cannot mark task {id!r} delivered: it is {rec.state.value}, not result"
                    )
                return False
            return True

        if await self._writer.run(op):
            _clog.moved(id, CustodyState.RESULT, CustodyState.DELIVERED)

    async def mark_delivered_many(self, ids: Sequence[str]) -> list[bool]:
        for id in ids:
            check_task_id(id)
        now = self.clock()

        def op(conn: sqlite3.Connection) -> tuple[list[bool], list[str]]:
            done: list[bool] = []
            moved: list[str] = []
            for id in ids:
                cur = conn.execute(
                    "UPDATE tasks SET state = 'delivered', updated_at = ? "
                    "WHERE id = ? AND state = 'result'",
                    (now, id),
                )
                if cur.rowcount == 1:
                    done.append(True)
                    moved.append(id)
                else:
                    rec = _record(conn, id)
                    done.append(rec is not None and rec.state is CustodyState.DELIVERED)
            return done, moved

        done, moved = await self._writer.run(op)
        for id in moved:
            _clog.moved(id, CustodyState.RESULT, CustodyState.DELIVERED)
        return done

    async def dead_letter(self, id: str, reason: str) -> None:
        check_task_id(id)
        reason = check_reason(reason)
        now = self.clock()

        def op(conn: sqlite3.Connection) -> CustodyState | None:
            before = conn.execute("SELECT state FROM tasks WHERE id = ?", (id,)).fetchone()
            cur = conn.execute(
                "UPDATE tasks SET state = 'dead', lease_until = NULL, not_before = NULL, "
                f"reason = ?, updated_at = ? WHERE id = ? AND state IN ({IN_CUSTODY_SQL})",
                (reason, now, id),
            )
            if cur.rowcount != 1:
                rec = _require(conn, id)
                if rec.state is not CustodyState.DEAD:
                    raise CustodyConflict(
                        f"cannot dead-letter task {id!r}: it is {rec.state.value}"
                    )
                return None
            return CustodyState(before[0])

        source = await self._writer.run(op)
        if source is not None:
            _clog.moved(id, source, CustodyState.DEAD, reason=reason)

    # -- operator -----------------------------------------------------------------------------

    async def redrive(
        self, ids: Sequence[str], *, reason: str | None = None
    ) -> Sequence[OperatorOutcome]:
        checked = check_ids(ids)
        why = redrive_reason(reason)
        now = self.clock()
        moved, seen = await self._writer.run(lambda conn: _redrive(conn, checked, why, now))
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
        why = redrive_reason(reason)
        now = self.clock()
        ids: list[str] = []

        def op(conn: sqlite3.Connection) -> tuple[dict[str, CustodyState], dict[str, CustodyState]]:
            ids[:] = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM tasks WHERE state = 'dead' "
                    "AND (?1 IS NULL OR instr(reason, ?1) > 0) ORDER BY updated_at, rowid LIMIT ?2",
                    (text, limit),
                )
            ]
            return _redrive(conn, ids, why, now)

        moved, seen = await self._writer.run(op)
        for id in moved:
            _clog.moved(id, CustodyState.DEAD, CustodyState.PENDING, reason=why)
        return redrive_outcomes(ids, moved, seen)

    async def cancel(self, ids: Sequence[str], reason: str) -> Sequence[OperatorOutcome]:
        checked = check_ids(ids)
        why = cancel_reason(reason)
        now = self.clock()

        def op(conn: sqlite3.Connection) -> tuple[dict[str, CustodyState], dict[str, CustodyState]]:
            # the writer holds the write lock: the states read here are the ones the UPDATE sees
            seen = _states(conn, checked)
            rows = conn.execute(
                "UPDATE tasks SET state = 'dead', lease_until = NULL, not_before = NULL, "
                "suspect = 0, reason = ?, updated_at = ? "
                "WHERE id IN (SELECT value FROM json_each(?)) "
                f"AND state IN ({CANCELLABLE_SQL}) RETURNING id",
                (why, now, json.dumps(checked)),
            ).fetchall()
            return {r[0]: seen[r[0]] for r in rows}, seen

        moved, seen = await self._writer.run(op)
        for id, source in moved.items():
            _clog.moved(id, source, CustodyState.DEAD, reason=why)
        return cancel_outcomes(checked, moved, seen)

    # -- reads --------------------------------------------------------------------------------

    async def state(self, id: str) -> CustodyState | None:
        check_task_id(id)

        def op(conn: sqlite3.Connection) -> CustodyState | None:
            row = conn.execute("SELECT state FROM tasks WHERE id = ?", (id,)).fetchone()
            return None if row is None else CustodyState(row[0])

        return await self._read(op)

    async def get(self, id: str) -> TaskRecord | None:
        check_task_id(id)
        return await self._read(lambda conn: _record(conn, id))

    async def counts(self) -> Mapping[CustodyState, int]:
        def op(conn: sqlite3.Connection) -> dict[CustodyState, int]:
            counts = dict.fromkeys(CustodyState, 0)
            for state, n in conn.execute("SELECT state, count(*) FROM tasks GROUP BY state"):
                counts[CustodyState(state)] = n
            return counts

        return await self._read(op)

    async def in_flight(self) -> Sequence[str]:
        def op(conn: sqlite3.Connection) -> list[str]:
            return [
                r[0]
                for r in conn.execute(
                    f"SELECT id FROM tasks WHERE state IN ({IN_CUSTODY_SQL}) ORDER BY rowid"
                )
            ]

        return await self._read(op)

    async def records(
        self, state: CustodyState, *, limit: int = 20, newest_first: bool = False
    ) -> Sequence[TaskRecord]:
        state = CustodyState(state)
        order = "updated_at DESC, rowid DESC" if newest_first else "rowid"

        def op(conn: sqlite3.Connection) -> list[TaskRecord]:
            rows = conn.execute(
                f"SELECT {_RECORD_COLS} FROM tasks WHERE state = ? ORDER BY {order} LIMIT ?",
                (state.value, limit),
            )
            return [_record_of(row) for row in rows]

        return await self._read(op)

    # -- dead-letter notices ------------------------------------------------------------------

    async def unreported_dead(self, *, limit: int = 100) -> Sequence[TaskRecord]:
        check_limit(limit)

        def op(conn: sqlite3.Connection) -> list[TaskRecord]:
            rows = conn.execute(
                f"SELECT {_RECORD_COLS} FROM tasks INDEXED BY tasks_dead_unreported "
                "WHERE state = 'dead' AND dead_reported_at IS NULL "
                "ORDER BY updated_at, rowid LIMIT ?",
                (limit,),
            )
            return [_record_of(row) for row in rows]

        return await self._read(op)

    async def mark_dead_reported(self, ids: Sequence[str]) -> list[bool]:
        for id in ids:
            check_task_id(id)
        if not ids:
            return []
        now = self.clock()

        def op(conn: sqlite3.Connection) -> list[bool]:
            done = []
            for id in ids:
                conn.execute(
                    "UPDATE tasks SET dead_reported_at = ? "
                    "WHERE id = ? AND state = 'dead' AND dead_reported_at IS NULL",
                    (now, id),
                )
                row = conn.execute(
                    "SELECT 1 FROM tasks WHERE id = ? AND state = 'dead' "
                    "AND dead_reported_at IS NOT NULL",
                    (id,),
                ).fetchone()
                done.append(row is not None)
            return done

        return await self._writer.run(op)

    async def waiting_retries(self) -> WaitingRetries:
        now = self.clock()

        def op(conn: sqlite3.Connection) -> WaitingRetries:
            (count,) = conn.execute(
                "SELECT count(*) FROM tasks WHERE state = 'pending' AND not_before > ?", (now,)
            ).fetchone()
            return WaitingRetries(int(count), next_due(conn, now))

        return await self._read(op)

    async def journal(self, id: str) -> Sequence[JournalEntry]:
        check_task_id(id)

        def op(conn: sqlite3.Connection) -> list[JournalEntry]:
            rows = conn.execute(
                "SELECT at, src, dst, worker, attempt, reason, actor FROM journal "
                "WHERE id = ? ORDER BY seq",
                (id,),
            )
            return [journal_entry(row) for row in rows]

        return await self._read(op)

    async def suspects(self, *, limit: int = 100) -> Suspects:
        check_limit(limit)

        def op(conn: sqlite3.Connection) -> Suspects:
            custody = f"suspect = 1 AND state IN ({IN_CUSTODY_SQL})"
            (count,) = conn.execute(f"SELECT count(*) FROM tasks WHERE {custody}").fetchone()
            rows = conn.execute(
                f"SELECT {_RECORD_COLS} FROM tasks WHERE {custody} "
                "ORDER BY crashes_alone DESC, crash_count DESC, rowid LIMIT ?",
                (limit,),
            )
            return Suspects(int(count), tuple(_record_of(r) for r in rows))

        return await self._read(op)

    async def unreported_dead_count(self) -> int:
        def op(conn: sqlite3.Connection) -> int:
            (n,) = conn.execute(
                "SELECT count(*) FROM tasks WHERE state = 'dead' AND dead_reported_at IS NULL"
            ).fetchone()
            return int(n)

        return await self._read(op)


# -- helpers (run in the writer thread) ---------------------------------------------------------


def _task(row: Sequence[Any]) -> Task:
    return task_from_row(row, row[1])


def _record(conn: sqlite3.Connection, id: str) -> TaskRecord | None:
    row = conn.execute(f"SELECT {_RECORD_COLS} FROM tasks WHERE id = ?", (id,)).fetchone()
    if row is None:
        return None
    return _record_of(row)


def _record_of(row: Sequence[Any]) -> TaskRecord:
    owner, attempt, lease_until, result, reason, created, updated, not_before = row[6:14]
    return TaskRecord(
        _task(row),
        CustodyState(row[5]),
        owner,
        attempt,
        lease_until,
        result,
        reason,
        created,
        updated,
        not_before,
        crash_count=row[14],
        crashes_alone=row[15],
        suspect=bool(row[16]),
    )


def _require(conn: sqlite3.Connection, id: str) -> TaskRecord:
    rec = _record(conn, id)
    if rec is None:
        raise unknown_task(id)
    return rec


def _states(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, CustodyState]:
    """The state of each of ``ids`` that exists."""
    rows = conn.execute(
        "SELECT id, state FROM tasks WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps(list(ids)),),
    )
    return {id: CustodyState(state) for id, state in rows}


def _redrive(
    conn: sqlite3.Connection, ids: Sequence[str], why: str, now: float
) -> tuple[dict[str, CustodyState], dict[str, CustodyState]]:
    """dead -> pending for those of ``ids`` that are dead: fresh attempts, due now, nothing of
    the dead run kept (owner, lease, stored reply, stall and dead-notice markers, crash counts
    and the suspect mark: the operator vouches for it). Returns
    (moved: id -> dead, seen: every existing id -> its state before)."""
    seen = _states(conn, ids)
    rows = conn.execute(
        "UPDATE tasks SET state = 'pending', owner = NULL, attempt = 1, lease_until = NULL, "
        "not_before = NULL, result = NULL, no_send = 0, dead_reported_at = NULL, "
        "crash_count = 0, crashes_alone = 0, suspect = 0, reason = ?, updated_at = ? "
        "WHERE id IN (SELECT value FROM json_each(?)) AND state = 'dead' RETURNING id",
        (why, now, json.dumps(list(ids))),
    ).fetchall()
    moved = [r[0] for r in rows]
    conn.execute(
        "DELETE FROM stall_notices WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps(moved),),
    )
    return dict.fromkeys(moved, CustodyState.DEAD), seen


def _stale(conn: sqlite3.Connection, claim: Claim, now: float, verb: str) -> Exception:
    rec = _record(conn, claim.task.id)
    seen = (
        None
        if rec is None
        else Seen(rec.state, rec.owner, rec.attempt, rec.lease_until, rec.reason)
    )
    return stale_lease(seen, claim, now, verb)


def _supersede(
    conn: sqlite3.Connection, newer: str, room: str, now: float
) -> list[tuple[str, str]]:
    """``replace``: every older task of ``room`` still waiting or running becomes a no-send
    result "superseded by ``newer``" (a running worker's lease is fenced out: ``Superseded``).
    Returns ``(id, newer)`` per task moved."""
    rows = conn.execute(
        "UPDATE tasks SET state = 'result', result = '', no_send = 1, "
        "owner = coalesce(owner, ?), lease_until = NULL, reason = ?, updated_at = ? "
        "WHERE room = ? AND id <> ? AND state IN ('pending', 'assigned', 'claimed') "
        "AND rowid < (SELECT rowid FROM tasks WHERE id = ?) RETURNING id",
        (SUPERSEDED_OWNER, superseded_reason(newer), now, room, newer, newer),
    ).fetchall()
    return [(r[0], newer) for r in rows]
