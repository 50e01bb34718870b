"""The reference gateway's storage: one SQLite file with group commit; a restart loses nothing.

A task moves queued, leased, acked, then answered or closed; an unacked lease runs out or is
released to the queue. See docs/guide/design.md, "Storage".
"""

from __future__ import annotations

import heapq
import json
import logging
import secrets
import sqlite3
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Literal, TypeVar

import attrs
import trio

from .._plumbing._fs import create_private_file, ensure_private_dir, restrict_file
from .._plumbing._sqlite_erase import truncate_wal, zero_deleted_content
from .._plumbing._sqlite_temp import keep_temp_in_memory
from .._plumbing._sqlite_writer import SqliteWriter
from ._history import HistoryPage, read_page

T = TypeVar("T")

SCHEMA_VERSION = 1
WAL_WAIT_S = 5.0
"""How long a forget's WAL truncation waits for a reader on an older snapshot."""

log = logging.getLogger("tether.gateway")

TaskState = Literal["queued", "leased", "acked", "answered", "closed"]
TASK_STATES: tuple[TaskState, ...] = ("queued", "leased", "acked", "answered", "closed")
FINAL_STATES: frozenset[str] = frozenset({"answered", "closed"})

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tasks (
    id          TEXT PRIMARY KEY,
    room        TEXT NOT NULL,
    sender      TEXT NOT NULL,
    body        TEXT NOT NULL,
    created_at  REAL NOT NULL,
    state       TEXT NOT NULL
                CHECK (state IN ('queued', 'leased', 'acked', 'answered', 'closed')),
    lease_until REAL,
    deliveries  INTEGER NOT NULL DEFAULT 0,
    acked_at    REAL,
    reply       TEXT,
    worker      TEXT,
    answered_at REAL,
    leased_to   TEXT,
    priority    TEXT NOT NULL DEFAULT 'normal'
);
CREATE INDEX IF NOT EXISTS tasks_by_state ON tasks (state, lease_until);
CREATE INDEX IF NOT EXISTS tasks_by_room ON tasks (room);
CREATE TABLE IF NOT EXISTS counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS rejections (
    id          TEXT PRIMARY KEY,
    reason      TEXT NOT NULL,
    rejected_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS notices (
    id       TEXT NOT NULL,
    kind     TEXT NOT NULL,
    age_s    REAL NOT NULL,
    detail   TEXT NOT NULL,
    at       REAL NOT NULL,
    PRIMARY KEY (id, kind)
);
CREATE TABLE IF NOT EXISTS messages (
    id    TEXT NOT NULL,
    seq   INTEGER NOT NULL,
    body  TEXT NOT NULL,
    at    REAL NOT NULL,
    PRIMARY KEY (id, seq)
);
CREATE TABLE IF NOT EXISTS clients (
    client           TEXT PRIMARY KEY,
    last_seen        REAL NOT NULL,
    inflight         INTEGER NOT NULL,
    protocol_version INTEGER NOT NULL,
    version          TEXT,
    uptime_s         REAL,
    heartbeats       INTEGER NOT NULL
);
"""

_TASK_COLUMNS = (
    "id, room, sender, body, created_at, state, lease_until, deliveries, acked_at, reply, "
    "worker, answered_at, (SELECT reason FROM rejections r WHERE r.id = tasks.id), priority, "
    "(SELECT at FROM notices n WHERE n.id = tasks.id AND n.kind = 'stall'), "
    "(SELECT age_s FROM notices n WHERE n.id = tasks.id AND n.kind = 'stall'), trace, "
    "(SELECT json_group_array(json_object('seq', m.seq, 'body', m.body, 'at', m.at)) "
    "FROM messages m WHERE m.id = tasks.id), tenant"
)
PRIORITIES = ("urgent", "normal", "low")
_PRIORITY_ORDER = "CASE priority WHEN 'urgent' THEN 0 WHEN 'low' THEN 2 ELSE 1 END"
"""The hand-out order: urgent first, low last, then oldest first."""


class StoreError(Exception):
    """The database file cannot be used (wrong schema version, not a gateway database)."""


class Conflict(Exception):
    """The request contradicts what is stored (HTTP 409)."""


@attrs.frozen
class StoredTask:
    id: str
    room: str
    sender: str
    body: str
    created_at: float
    state: TaskState
    lease_until: float | None
    deliveries: int
    acked_at: float | None
    reply: str | None
    worker: str | None
    answered_at: float | None
    reason: str | None = None
    """Why the worker side closed it without a reply (a rejection), if it did."""
    priority: str = "normal"
    stalled_at: float | None = None
    """When a stall notice about it came (the worker side found it taking long), if one did."""
    stall_age_s: float | None = None
    """How long it had been in the worker side's custody when that notice was sent."""
    trace: str | None = None
    """The W3C ``traceparent`` of its submission, if OpenTelemetry traced it."""
    messages_json: str = "[]"
    """The worker side's messages to the person before the reply (an ask's questions), as a
    JSON array of ``{"seq","body","at"}`` in seq order."""
    tenant: str | None = None
    """Whose message it is (a label), if the submission named one."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = json.loads(self.messages_json or "[]")
        return sorted(found, key=lambda m: int(m["seq"]))


@attrs.frozen
class Claim:
    """What one poll got: the tasks now leased to it, and when the next lease runs out."""

    tasks: list[StoredTask]
    next_expiry: float | None


@attrs.frozen
class ResultOutcome:
    task: StoredTask
    duplicate: bool


@attrs.frozen
class ItemOutcome:
    """One id's outcome in a batch: 200, or the status its single request would have had."""

    id: str
    status: int
    duplicate: bool = False
    error: str | None = None


@attrs.frozen
class ClientInfo:
    client: str
    last_seen: float
    inflight: int
    protocol_version: int
    version: str | None
    uptime_s: float | None
    heartbeats: int


@attrs.frozen
class StoreStats:
    tasks: dict[str, int]
    duplicate_results: int
    deliveries: int
    redeliveries: int
    clients: list[ClientInfo]
    rejected: int = 0
    notices: int = 0
    released: int = 0
    """Leases handed back by their client before they ran out (``release_client``)."""
    reopened: int = 0
    """Rejected (dead) tasks whose real reply came later and replaced the rejection."""


def new_task_id(now: float) -> str:
    """A fresh id that sorts by submission time and satisfies the task id rule."""
    return f"msg-{int(now * 1000):013d}-{secrets.token_hex(5)}"


@attrs.define(eq=False)
class GatewayStore:
    """Open with ``await GatewayStore.open(path)``; ``close()`` when done."""

    path: Path
    _db: sqlite3.Connection
    _writer: SqliteWriter = attrs.field(init=False)
    _started: bool = attrs.field(init=False, default=False)

    def __attrs_post_init__(self) -> None:
        self._writer = SqliteWriter(lambda: self._db, name="tether-gateway-writer")

    @classmethod
    async def open(cls, path: Path) -> GatewayStore:
        db = await trio.to_thread.run_sync(_connect, path)
        store = cls(path, db)
        await store._writer.start()
        store._started = True
        return store

    def close(self) -> None:
        """Close the connection once the operations already queued are done (quick, and safe
        in a cancelled scope: it waits for no Trio task)."""
        if self._started:
            self._writer.close_now()  # the writer thread closes the connection
        else:
            self._db.close()

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._writer.run(lambda _db: fn(*args))

    # -- the user side -----------------------------------------------------------------

    async def submit(
        self,
        room: str,
        sender: str,
        body: str,
        now: float,
        task_id: str | None,
        priority: str = "normal",
        trace: str | None = None,
        tenant: str | None = None,
    ) -> tuple[StoredTask, bool]:
        """Store a new message as a queued task; returns it and whether it is new.

        Re-submitting the same id with the same content (room, sender, text, priority and
        tenant) is a no-op (safe retries); the same id with other content is a ``Conflict``
        (HTTP 409).
        """
        return await self._run(
            self._submit, room, sender, body, now, task_id, priority, trace, tenant
        )

    def _submit(
        self,
        room: str,
        sender: str,
        body: str,
        now: float,
        task_id: str | None,
        priority: str = "normal",
        trace: str | None = None,
        tenant: str | None = None,
    ) -> tuple[StoredTask, bool]:
        if task_id is not None:
            existing = self._get(task_id)
            if existing is not None:
                stored = (existing.room, existing.sender, existing.body, existing.priority)
                if (*stored, existing.tenant) != (room, sender, body, priority, tenant):
                    raise Conflict(f"task id {task_id!r} exists with different content")
                return existing, False
        else:
            task_id = new_task_id(now)
        self._db.execute(
            "INSERT INTO tasks"
            " (id, room, sender, body, created_at, state, priority, trace, tenant)"
            " VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?)",
            (task_id, room, sender, body, now, priority, trace, tenant),
        )
        created = self._get(task_id)
        assert created is not None
        return created, True

    async def get(self, task_id: str) -> StoredTask | None:
        return await self._run(self._get, task_id)

    def _get(self, task_id: str) -> StoredTask | None:
        row = self._db.execute(
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = ?", (task_id,)
        ).fetchone()
        return None if row is None else StoredTask(*row)

    async def add_message(
        self, task_id: str, seq: int, body: str, now: float
    ) -> tuple[StoredTask, bool] | None:
        """Keep message ``seq`` of ``task_id`` (a question before its reply); whether the
        gateway already had that seq (the first body is kept: a repost is absorbed). None for
        an unknown task."""
        return await self._run(self._add_message, task_id, seq, body, now)

    def _add_message(
        self, task_id: str, seq: int, body: str, now: float
    ) -> tuple[StoredTask, bool] | None:
        if self._get(task_id) is None:
            return None
        added = self._db.execute(
            "INSERT INTO messages (id, seq, body, at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (id, seq) DO NOTHING",
            (task_id, seq, body, now),
        ).rowcount
        task = self._get(task_id)
        assert task is not None
        return task, added == 0

    async def room_page(self, room: str, limit: int, before: str | None = None) -> HistoryPage:
        """The room's last ``limit`` messages (before message ``before``), oldest first, cut
        to a bounded page (``_history``); ``UnknownBefore`` if ``before`` is not the room's."""
        return await self._run(read_page, self._db, room, limit, before)

    async def forget_room(self, room: str) -> list[str]:
        """Erase the room's messages (``POST /v1/rooms/<room>/forget``): its tasks (message,
        reply, sender), their questions, rejections and notices, in one transaction, then
        the older pages from the WAL (the connection zeroes what it deletes): nothing of the
        room's text is left in the files. The ids erased (the app drops their progress); a
        later ack or result for one of them is answered as for an unknown id."""
        ids = await self._run(self._forget_room, room)
        if not await trio.to_thread.run_sync(truncate_wal, self.path, WAL_WAIT_S):
            log.warning(
                "gateway: the WAL of %s was busy: the older pages of room %r stay in it until "
                "its next checkpoint",
                self.path,
                room,
            )
        return ids

    def _forget_room(self, room: str) -> list[str]:
        ids = [row[0] for row in self._db.execute("SELECT id FROM tasks WHERE room = ?", (room,))]
        for table in ("messages", "rejections", "notices"):
            self._db.executemany(f"DELETE FROM {table} WHERE id = ?", [(id,) for id in ids])
        self._db.execute("DELETE FROM tasks WHERE room = ?", (room,))
        return ids

    # -- the worker side ---------------------------------------------------------------

    async def claim(self, limit: int, lease: float, now: float, client: str | None = None) -> Claim:
        """Lease up to ``limit`` available tasks (new, or leased and expired), oldest first,
        to ``client`` (None: a poller that did not say who it is; its leases only expire)."""
        return await self._run(self._claim, limit, lease, now, client)

    def _claim(self, limit: int, lease: float, now: float, client: str | None) -> Claim:
        ids = self._in_room_order(limit, now)
        tasks = []
        for task_id in ids:
            self._db.execute(
                "UPDATE tasks SET state = 'leased', lease_until = ?, leased_to = ?,"
                " deliveries = deliveries + 1 WHERE id = ?",
                (now + lease, client, task_id),
            )
            task = self._get(task_id)
            assert task is not None
            tasks.append(task)
        self._bump("deliveries", len(tasks))
        self._bump("redeliveries", sum(1 for task in tasks if task.deliveries > 1))
        (next_expiry,) = self._db.execute(
            "SELECT MIN(lease_until) FROM tasks WHERE state = 'leased'"
        ).fetchone()
        return Claim(tasks, next_expiry)

    def _in_room_order(self, limit: int, now: float) -> list[str]:
        """Up to ``limit`` available tasks, by priority then age, never one whose room has an
        earlier task leased elsewhere and not yet acked, nor one ahead of an earlier task of
        its room: a room's messages reach the bridges (and so their custody stores) in the
        order they were sent, even with several bridges polling. Priority orders the rooms'
        next messages against each other; within a room, arrival order wins. A room's later
        messages wait until the earlier ones are acked (or their lease lapses and they are
        handed out again, first)."""
        # a room is held from its earliest task out on a live lease: one read of the leases,
        # not a look back through the room for every available task (that made a poll's cost
        # grow with the square of a room's backlog: 1.3 s at 20,000 queued in 40 rooms)
        leased_from: dict[str, int] = dict(
            self._db.execute(
                "SELECT room, MIN(rowid) FROM tasks WHERE state = 'leased' AND lease_until > ?"
                " GROUP BY room",
                (now,),
            )
        )
        queues: dict[object, list[tuple[int, int, str]]] = {}
        for rowid, task_id, room, rank in self._db.execute(
            f"SELECT rowid, id, room, {_PRIORITY_ORDER}"
            " FROM tasks WHERE state = 'queued' OR (state = 'leased' AND lease_until <= ?)"
            " ORDER BY rowid",
            (now,),
        ):
            if leased_from.get(room, rowid) < rowid:
                continue  # held, as is everything after it in the room
            key: object = task_id if room is None else room  # a roomless task is its own queue
            queues.setdefault(key, []).append((rank, rowid, task_id))
        heads = [(queue[0], key, 0) for key, queue in queues.items()]
        heapq.heapify(heads)
        ids: list[str] = []
        while heads and len(ids) < limit:
            (_, _, task_id), key, n = heapq.heappop(heads)
            ids.append(task_id)
            queue = queues[key]
            if n + 1 < len(queue):
                heapq.heappush(heads, (queue[n + 1], key, n + 1))
        return ids

    async def release_client(self, client: str) -> int:
        """Queue again every task leased to ``client`` and not acked; returns how many.

        Acked, answered and closed tasks are never touched (the worker side has them). A
        released task keeps its ``deliveries``, so the next poll counts it a redelivery.
        """
        return await self._run(self._release_client, client)

    def _release_client(self, client: str) -> int:
        released = self._db.execute(
            "UPDATE tasks SET state = 'queued', lease_until = NULL, leased_to = NULL"
            " WHERE state = 'leased' AND leased_to = ?",
            (client,),
        ).rowcount
        self._bump("released", released)
        return released

    async def release_tasks(self, ids: list[str]) -> int:
        """Queue again those of ``ids`` still leased (a poll whose client hung up)."""
        return await self._run(self._release_tasks, ids)

    def _release_tasks(self, ids: list[str]) -> int:
        released = 0
        for task_id in ids:
            released += self._db.execute(
                "UPDATE tasks SET state = 'queued', lease_until = NULL, leased_to = NULL"
                " WHERE state = 'leased' AND id = ?",
                (task_id,),
            ).rowcount
        self._bump("released", released)
        return released

    async def ack(self, task_id: str, now: float) -> StoredTask | None:
        """Mark a delivered task acked; None if unknown. Idempotent; a no-op once answered."""
        return await self._run(self._ack, task_id, now)

    def _ack(self, task_id: str, now: float) -> StoredTask | None:
        task = self._get(task_id)
        if task is None:
            return None
        if _never_delivered(task):
            raise Conflict(f"task {task_id!r} was never delivered; poll for it first")
        if task.state in ("leased", "queued"):  # queued: released after its hand-out
            self._db.execute(
                "UPDATE tasks SET state = 'acked', acked_at = ?, lease_until = NULL,"
                " leased_to = NULL WHERE id = ?",
                (now, task_id),
            )
            task = self._get(task_id)
        return task

    async def ack_many(self, ids: list[str], now: float) -> list[ItemOutcome]:
        """Ack every id in one transaction; each gets the outcome its own ack would have."""
        return await self._run(self._ack_many, ids, now)

    def _ack_many(self, ids: list[str], now: float) -> list[ItemOutcome]:
        return [_item_outcome(task_id, partial(self._ack, task_id, now)) for task_id in ids]

    async def record_result(
        self,
        task_id: str,
        body: str,
        no_send: bool,
        worker: str | None,
        now: float,
        room: str | None = None,
    ) -> ResultOutcome | None:
        """Store a task's result once; a second result for it is absorbed and counted.

        None if the task is unknown, unless ``room`` names where the reply of a task the
        bridge made (a schedule's firing) goes: it is a new message there, answered.
        """
        return await self._run(self._record_result, task_id, body, no_send, worker, now, room)

    def _record_result(
        self,
        task_id: str,
        body: str,
        no_send: bool,
        worker: str | None,
        now: float,
        room: str | None = None,
    ) -> ResultOutcome | None:
        task = self._get(task_id)
        if task is None:
            if room is None:
                return None
            self._db.execute(  # the bridge made it: its reply is a message of its own
                "INSERT INTO tasks (id, room, sender, body, created_at, state, acked_at,"
                " reply, worker, answered_at) VALUES (?, ?, 'tether', '', ?, ?, ?, ?, ?, ?)",
                (
                    task_id,
                    room,
                    now,
                    "closed" if no_send else "answered",
                    now,
                    None if no_send else body,
                    worker,
                    now,
                ),
            )
            made = self._get(task_id)
            assert made is not None
            return ResultOutcome(made, duplicate=False)
        reopened = _rejected(task)
        if task.state in FINAL_STATES and not reopened:
            self._bump("duplicate_results", 1)
            return ResultOutcome(task, duplicate=True)
        if _never_delivered(task):
            raise Conflict(f"task {task_id!r} was never delivered; poll for it first")
        if reopened:  # the worker side re-drove a task it had given up on: the reply wins
            self._db.execute("DELETE FROM rejections WHERE id = ?", (task_id,))
            self._bump("reopened", 1)
        self._db.execute(
            "UPDATE tasks SET state = ?, reply = ?, worker = ?, answered_at = ?,"
            " lease_until = NULL, leased_to = NULL, acked_at = COALESCE(acked_at, ?)"
            " WHERE id = ?",
            (
                "closed" if no_send else "answered",
                None if no_send else body,
                worker,
                now,
                now,
                task_id,
            ),
        )
        task = self._get(task_id)
        assert task is not None
        return ResultOutcome(task, duplicate=False)

    async def record_results(
        self, results: list[tuple[str, str, bool, str | None, str | None]], now: float
    ) -> list[ItemOutcome]:
        """Record many ``(id, body, no_send, worker)`` results in one transaction."""
        return await self._run(self._record_results, results, now)

    def _record_results(
        self, results: list[tuple[str, str, bool, str | None, str | None]], now: float
    ) -> list[ItemOutcome]:
        return [
            _item_outcome(
                task_id, partial(self._record_result, task_id, body, no_send, worker, now, room)
            )
            for task_id, body, no_send, worker, room in results
        ]

    async def reject(self, task_id: str, reason: str, now: float) -> StoredTask | None:
        """Close a handed-out task the worker side cannot take, keeping its reason.

        None if unknown; a no-op (first reason kept) once the task is answered or closed.
        """
        return await self._run(self._reject, task_id, reason, now)

    def _reject(self, task_id: str, reason: str, now: float) -> StoredTask | None:
        task = self._get(task_id)
        if task is None:
            return None
        if _never_delivered(task):
            raise Conflict(f"task {task_id!r} was never delivered; poll for it first")
        if task.state in FINAL_STATES:
            return task
        self._db.execute(
            "UPDATE tasks SET state = 'closed', answered_at = ?, lease_until = NULL,"
            " leased_to = NULL WHERE id = ?",
            (now, task_id),
        )
        self._db.execute(
            "INSERT OR IGNORE INTO rejections (id, reason, rejected_at) VALUES (?, ?, ?)",
            (task_id, reason, now),
        )
        self._bump("rejected", 1)
        task = self._get(task_id)
        return task

    async def reject_many(self, rejects: list[tuple[str, str]], now: float) -> list[ItemOutcome]:
        """Reject each ``(id, reason)`` in one transaction; each gets the outcome its own
        reject would have (an id breaking the id rule is one this gateway never handed out:
        404, unknown)."""
        return await self._run(self._reject_many, rejects, now)

    def _reject_many(self, rejects: list[tuple[str, str]], now: float) -> list[ItemOutcome]:
        return [
            _item_outcome(task_id, partial(self._reject, task_id, reason, now))
            for task_id, reason in rejects
        ]

    async def rejection(self, task_id: str) -> str | None:
        """Why the worker side rejected ``task_id`` (None if it did not)."""
        return await self._run(self._rejection, task_id)

    def _rejection(self, task_id: str) -> str | None:
        row = self._db.execute("SELECT reason FROM rejections WHERE id = ?", (task_id,)).fetchone()
        return None if row is None else str(row[0])

    async def notice(
        self, task_id: str, kind: str, age_s: float, detail: str, now: float
    ) -> StoredTask | None:
        """Record a notice about a task (one per id and kind; a repeat updates it)."""
        return await self._run(self._notice, task_id, kind, age_s, detail, now)

    def _notice(
        self, task_id: str, kind: str, age_s: float, detail: str, now: float
    ) -> StoredTask | None:
        task = self._get(task_id)
        if task is None:
            return None
        known = self._db.execute(
            "SELECT 1 FROM notices WHERE id = ? AND kind = ?", (task_id, kind)
        ).fetchone()
        self._db.execute(
            "INSERT INTO notices (id, kind, age_s, detail, at) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (id, kind) DO UPDATE SET age_s = excluded.age_s,"
            " detail = excluded.detail, at = excluded.at",
            (task_id, kind, age_s, detail, now),
        )
        if known is None:
            self._bump("notices", 1)
        return task

    async def heartbeat(
        self,
        client: str,
        inflight: int,
        protocol_version: int,
        version: str | None,
        uptime_s: float | None,
        now: float,
    ) -> None:
        await self._run(self._heartbeat, client, inflight, protocol_version, version, uptime_s, now)

    def _heartbeat(
        self,
        client: str,
        inflight: int,
        protocol_version: int,
        version: str | None,
        uptime_s: float | None,
        now: float,
    ) -> None:
        self._db.execute(
            "INSERT INTO clients"
            " (client, last_seen, inflight, protocol_version, version, uptime_s, heartbeats)"
            " VALUES (?, ?, ?, ?, ?, ?, 1)"
            " ON CONFLICT (client) DO UPDATE SET last_seen = excluded.last_seen,"
            " inflight = excluded.inflight, protocol_version = excluded.protocol_version,"
            " version = excluded.version, uptime_s = excluded.uptime_s,"
            " heartbeats = heartbeats + 1",
            (client, now, inflight, protocol_version, version, uptime_s),
        )

    async def stats(self) -> StoreStats:
        return await self._run(self._stats)

    def _stats(self) -> StoreStats:
        counts: dict[str, int] = dict.fromkeys(TASK_STATES, 0)
        for state, count in self._db.execute("SELECT state, COUNT(*) FROM tasks GROUP BY state"):
            counts[state] = count
        counters = dict(self._db.execute("SELECT name, value FROM counters").fetchall())
        clients = [
            ClientInfo(*row)
            for row in self._db.execute(
                "SELECT client, last_seen, inflight, protocol_version, version, uptime_s,"
                " heartbeats FROM clients ORDER BY client"
            )
        ]
        return StoreStats(
            tasks=counts,
            duplicate_results=counters.get("duplicate_results", 0),
            deliveries=counters.get("deliveries", 0),
            redeliveries=counters.get("redeliveries", 0),
            clients=clients,
            rejected=counters.get("rejected", 0),
            notices=counters.get("notices", 0),
            released=counters.get("released", 0),
            reopened=counters.get("reopened", 0),
        )

    def _bump(self, name: str, by: int) -> None:
        if by:
            self._db.execute(
                "INSERT INTO counters (name, value) VALUES (?, ?)"
                " ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
                (name, by),
            )


def _item_outcome(
    task_id: str, apply: Callable[[], StoredTask | ResultOutcome | None]
) -> ItemOutcome:
    """One id of a batch: what ``apply`` (its single operation) did, as its single request's
    status: 200 (a result may be a duplicate), 404 for an unknown id, 409 for a conflict."""
    try:
        done = apply()
    except Conflict as exc:
        return ItemOutcome(task_id, 409, error=str(exc))
    if done is None:
        return ItemOutcome(task_id, 404, error=f"unknown task id {task_id!r}")
    return ItemOutcome(task_id, 200, duplicate=isinstance(done, ResultOutcome) and done.duplicate)


def _rejected(task: StoredTask) -> bool:
    """Was ``task`` closed by a rejection (a dead notice), with no reply? Such a task is
    reopened by a real result: an operator re-drove the dead task on the worker side
    (``tether store retry``) and its reply replaces the rejection."""
    return task.state == "closed" and task.reason is not None and task.reply is None


def _never_delivered(task: StoredTask) -> bool:
    """Queued and never handed out (a released task is queued but was delivered)."""
    return task.state == "queued" and task.deliveries == 0


class _transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on error) on an autocommit connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self._db.execute("ROLLBACK" if exc_type is not None else "COMMIT")


def _connect(path: Path) -> sqlite3.Connection:
    ensure_private_dir(path.parent)
    # 0600 before sqlite3.connect creates it (SQLite gives -wal/-shm the database's mode)
    if not create_private_file(path):
        restrict_file(path)
    # check_same_thread=False: trio's thread cache may run successive calls on different
    # threads; the store's limiter guarantees one call at a time.
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        keep_temp_in_memory(db)
        zero_deleted_content(db)  # a forgotten room leaves no copy in the file
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("PRAGMA busy_timeout = 5000")
        with _transaction(db):
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            _check_schema_version(db, path)
            _add_leased_to(db)
            _add_priority(db)
            _add_trace(db)
            _add_tenant(db)
    except sqlite3.DatabaseError as exc:
        db.close()
        raise StoreError(f"cannot use {path} as the gateway database: {exc}") from None
    except BaseException:
        db.close()
        raise
    return db


def _check_schema_version(db: sqlite3.Connection, path: Path) -> None:
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        db.execute(
            "INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
        )
    elif row[0] != str(SCHEMA_VERSION):
        raise StoreError(
            f"gateway database {path} has schema version {row[0]}; "
            f"this tether reads version {SCHEMA_VERSION}"
        )


def _add_leased_to(db: sqlite3.Connection) -> None:
    """Give a database made before lease release its ``leased_to`` column (additive: an
    older gateway reading the file names its columns and never sees it)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(tasks)")}
    if "leased_to" not in columns:
        db.execute("ALTER TABLE tasks ADD COLUMN leased_to TEXT")


def _add_priority(db: sqlite3.Connection) -> None:
    """Give a database made before priorities its ``priority`` column (additive, like
    ``leased_to``: every older task is ``normal``)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(tasks)")}
    if "priority" not in columns:
        db.execute("ALTER TABLE tasks ADD COLUMN priority TEXT NOT NULL DEFAULT 'normal'")


def _add_trace(db: sqlite3.Connection) -> None:
    """Give a database made before traces its ``trace`` column (additive, like ``priority``:
    an older task has none, and its bridge starts its trace at ingest)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(tasks)")}
    if "trace" not in columns:
        db.execute("ALTER TABLE tasks ADD COLUMN trace TEXT")


def _add_tenant(db: sqlite3.Connection) -> None:
    """Give a database made before tenants its ``tenant`` column (additive, like ``trace``:
    an older task has none, and is served as no tenant's)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(tasks)")}
    if "tenant" not in columns:
        db.execute("ALTER TABLE tasks ADD COLUMN tenant TEXT")
