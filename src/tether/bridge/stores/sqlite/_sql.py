"""The custody statements of ``SqliteStore`` (the other parts keep theirs in their own
modules) except the ready read's (``_ready``).

``_custody.py`` says what a move checks and returns, this file how SQLite does it: one
``UPDATE ... WHERE`` per transition with the fence in the ``WHERE``, so it moves the task or
changes nothing. The custody predicate comes from ``stores._common.IN_CUSTODY_SQL``.
"""

from __future__ import annotations

from typing import Any, Final

from ...custody._rules import Claim
from .._common import IN_CUSTODY_SQL
from .._operator import CANCELLABLE_SQL, FORGOTTEN_REASON, REDRIVE_PRIORITY
from .._rooms_sql import room_busy, room_gate

TASK_COLS: Final = "id, body, room, priority, headers"
RECORD_COLS: Final = (
    f"{TASK_COLS}, state, owner, attempt, lease_until, result, reason, created_at, updated_at, "
    "not_before, crash_count, crashes_alone, suspect, run_no, quarantine_deaths, "
    "last_quarantine_death"
)
FENCE: Final = "id = ? AND state = 'claimed' AND owner = ? AND run_no = ?"
"""A claim: its task, worker and run number (``Claim.run``; never ``attempt``, which a re-drive
resets), held until the reconciler takes it back: never compared with the time
(``custody._outage``); the parameters: id, worker, run."""
FENCE_NAMED: Final = "id = :id AND state = 'claimed' AND owner = :worker AND run_no = :run"


def fence_params(claim: Claim, now: float) -> dict[str, Any]:
    """A claim's fence as ``FENCE_NAMED``'s parameters, with the time (as PostgreSQL's
    ``_fence``); a statement adds its own values beside them."""
    return {"id": claim.task.id, "worker": claim.worker, "run": claim.run, "now": now}


DUE: Final = "(not_before IS NULL OR not_before <= ?)"
"""A pending task that is not waiting out a retry backoff (the parameter: now)."""
ROOM_GATE: Final = room_gate("t", "tasks", "rowid", "o.no_send = 0")
"""May candidate ``t`` run now, by its room's policy: the lead plans only with those."""
IDS: Final = "(SELECT value FROM json_each(?))"
"""The ids of a JSON list parameter."""

# -- the pending queue: two partial indexes (migration 10), each walked in order --------------

FREE: Final = "state = 'pending' AND (room IS NULL OR room_policy = 'concurrent')"
"""A pending task no room's order holds back (``tasks_pending_free``'s predicate, word for
word, so the planner walks that index)."""
ORDERED: Final = "state = 'pending' AND room IS NOT NULL AND room_policy <> 'concurrent'"
"""A pending task of an ordered room (``tasks_pending_ordered``'s predicate, word for word)."""


QUEUE_ORDER: Final = "priority, fair, rowid"
"""The pending queue's order: priority, then turn among the tenants (``custody._tenants``),
then age; ``t.``-qualified where the query names its table ``t``."""
QUEUE_ORDER_T: Final = "t.priority, t.fair, t.rowid"


def merged(first: str, second: str, limit: str) -> str:
    """The first ``limit`` rows of two queries of ``(priority, fair, rowid)``, each in that
    order, merged in that order (each query walks its own index and stops at its own limit)."""
    return (
        f"SELECT * FROM ({first}) UNION ALL SELECT * FROM ({second}) ORDER BY 1, 2, 3 LIMIT {limit}"
    )


def pending_in_order(limit: str, where: str = "") -> str:
    """A query of the rowids of the first ``limit`` (an SQL expression) pending tasks that
    also meet ``where`` (``AND ...`` on the task's columns), in queue order: the two
    pending queues, each walked in its own index, merged."""
    free, ordered = (
        f"SELECT {QUEUE_ORDER} FROM tasks WHERE {queue} {where} "
        f"ORDER BY {QUEUE_ORDER} LIMIT {limit}"
        for queue in (FREE, ORDERED)
    )
    return f"SELECT rowid FROM ({merged(free, ordered, limit)})"


PENDING: Final = (
    f"SELECT {TASK_COLS} FROM tasks WHERE rowid IN ("
    + pending_in_order(":limit", "AND (not_before IS NULL OR not_before <= :now) AND suspect = 0")
    + f") ORDER BY {QUEUE_ORDER}"
)

# -- ingest and retention -----------------------------------------------------------------------

INGEST: Final = (
    f"INSERT INTO tasks ({TASK_COLS}, state, attempt, created_at, "
    "updated_at, room_policy, tenant, fair, turn_seq, queue, parent) "
    "SELECT ?, ?, ?, ?, ?, 'pending', 1, ?, ?, ?, ?, ?, "
    "CASE WHEN ?3 IS NOT NULL THEN coalesce((SELECT next_seq FROM conversations "
    "WHERE room = ?3), 0) + 1 END, "
    # a task's queue and parent, read from its headers once (issue #51)
    "CASE WHEN ?5 = '{}' THEN 'default' ELSE coalesce(json_extract(?5, '$.queue'), 'default') "
    "END, CASE WHEN ?5 <> '{}' THEN json_extract(?5, '$.parent') END "
    "WHERE NOT EXISTS (SELECT 1 FROM tombstones WHERE id = ?) "
    "ON CONFLICT (id) DO NOTHING"
)
"""A new task's row; in a room, its message's number there (``turn_seq``): the room's next,
which the ``turns_message`` trigger then counts (issue #49: the message's turn is its row)."""
QUEUED: Final = "state IN ('pending', 'assigned')"
"""A task still waiting for its turn: pending, or assigned by a lead ahead of a worker's free
slots (issue #47, item 2); the predicate of the waiting turns' indexes (issue #56), word for
word, so SQLite's planner reads them."""
TURN_INPUTS: Final = (
    # the queue's clock: the earliest tenant turn waiting at the priority (a seek in
    # ``tasks_queued_turns``) ...
    f"SELECT (SELECT fair FROM tasks WHERE {QUEUED} AND fair > 0 AND priority = :priority "
    "ORDER BY fair LIMIT 1), "
    # ... the tenant's last turn waiting there (a seek in ``tasks_tenant_queued``), its weight
    f"(SELECT max(fair) FROM tasks WHERE {QUEUED} AND tenant IS NOT NULL "
    "AND tenant = :tenant AND priority = :priority), "
    "(SELECT weight FROM tenants WHERE tenant = :tenant)"
)
"""What a tenant's new task's turn is made of (``custody._tenants.next_turn``), in one read of
two seeks, however many tasks are pending or assigned (issue #56, item 6): PostgreSQL's
``Sql.turns`` reads the same for a whole ingest."""
SET_TENANT_WEIGHT: Final = (
    "INSERT INTO tenants (tenant, weight) VALUES (?, ?) "
    "ON CONFLICT (tenant) DO UPDATE SET weight = excluded.weight"
)
TENANT_VIEWS: Final = (
    "SELECT tenant, max(weight), sum(pending) FROM ("
    "SELECT tenant, weight, 0 AS pending FROM tenants UNION ALL "
    f"SELECT tenant, NULL, count(*) FROM tasks WHERE {QUEUED} AND tenant IS NOT NULL "
    "AND state = 'pending' GROUP BY tenant) GROUP BY tenant ORDER BY tenant"
)
SUPERSEDE: Final = (
    "UPDATE tasks SET state = 'result', result = '', no_send = 1, "
    "owner = coalesce(owner, ?), lease_until = NULL, reason = ?, updated_at = ? "
    "WHERE room = ? AND id <> ? AND state IN ('pending', 'assigned', 'claimed') "
    "AND rowid < (SELECT rowid FROM tasks WHERE id = ?) RETURNING id"
)
HOLD: Final = "UPDATE tasks SET not_before = ? WHERE id = ?"
"""A burst's newest message waits out the room's debounce (issue #52)."""
ABSORB: Final = (
    "UPDATE tasks SET state = 'result', result = '', no_send = 1, "
    "owner = coalesce(owner, :owner), lease_until = NULL, not_before = NULL, reason = :why, "
    "updated_at = :now "
    "WHERE room = :room AND id <> :id AND state = 'pending' AND run_no = 0 "
    "AND (not_before > :now OR id IN (SELECT value FROM json_each(:batch))) "
    "AND rowid < (SELECT rowid FROM tasks WHERE id = :id) RETURNING id"
)
"""The room's older messages still waiting out their debounce (never claimed) end as
no-send results: the burst's newest answers them."""
BODIES: Final = f"SELECT id, body FROM tasks WHERE id IN {IDS}"
PRUNE: Final = (
    "DELETE FROM tasks WHERE rowid IN (SELECT rowid FROM tasks c "
    "WHERE c.state = 'delivered' AND c.updated_at < ? AND (c.parent IS NULL OR NOT EXISTS "
    "(SELECT 1 FROM tasks p WHERE p.id = c.parent "
    "AND p.state IN ('pending', 'assigned', 'claimed', 'waiting'))) LIMIT ?) "
    "RETURNING id, updated_at"
)
"""Delivered tasks past retention, but a child whose parent still runs: its join may not have
read it yet (issue #51)."""
TOMBSTONE: Final = (
    "INSERT INTO tombstones (id, delivered_at) VALUES (?, ?) "
    "ON CONFLICT (id) DO UPDATE SET delivered_at = excluded.delivered_at"
)
PRUNE_TOMBSTONES: Final = (
    "DELETE FROM tombstones WHERE id IN (SELECT id FROM tombstones "
    "WHERE delivered_at < ? ORDER BY delivered_at LIMIT ?)"
)

# -- lead -----------------------------------------------------------------------------------------

ASSIGN: Final = (
    "UPDATE tasks SET state = 'assigned', owner = ?, not_before = NULL, updated_at = ? "
    f"WHERE id = ? AND state = 'pending' AND {DUE} AND suspect = 0 RETURNING room"
)
ASSIGN_MANY: Final = (
    "UPDATE tasks SET state = 'assigned', owner = v.worker, not_before = NULL, "
    "updated_at = ? "
    "FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS worker "
    "FROM json_each(?)) AS v "
    "WHERE tasks.id = v.id AND tasks.state = 'pending' AND tasks.suspect = 0 "
    "AND (tasks.not_before IS NULL OR tasks.not_before <= ?) "
    "RETURNING tasks.id, tasks.room, tasks.owner"
)
NOTE_ROOM: Final = (
    "INSERT INTO rooms (room, worker, at) VALUES (?, ?, ?) "
    "ON CONFLICT (room) DO UPDATE SET worker = excluded.worker, at = excluded.at"
)
UNASSIGN: Final = (
    "UPDATE tasks SET state = 'pending', owner = NULL, updated_at = ? "
    "WHERE id = ? AND state = 'assigned' AND owner = ?"
)
RETURN_ASSIGNMENTS: Final = (
    "UPDATE tasks SET state = 'pending', owner = NULL, updated_at = ? "
    "WHERE state = 'assigned' AND owner = ? RETURNING id"
)
VIEW_PENDING: Final = (
    "SELECT t.id, t.room, t.priority, r.worker, t.queue FROM tasks t "
    "LEFT JOIN rooms r ON r.room = t.room "
    f"WHERE t.rowid IN {IDS} ORDER BY {QUEUE_ORDER_T}"
)
VIEW_ASSIGNED: Final = (
    "SELECT id, owner, room, updated_at FROM tasks "
    "WHERE state = 'assigned' ORDER BY updated_at, rowid"
)
VIEW_CLAIMS: Final = "SELECT owner, count(*) FROM tasks WHERE state = 'claimed' GROUP BY owner"
VIEW_BUSY_ROOMS: Final = room_busy("tasks")
NEXT_DUE: Final = "SELECT min(not_before) FROM tasks WHERE state = 'pending' AND not_before > ?"
"""The earliest not-before still ahead of now (the ``tasks_waiting`` index)."""

# -- liveness -------------------------------------------------------------------------------------

BEAT: Final = (
    "INSERT INTO workers (name, role, capacity, last_beat, started_at, queues) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
    "role = excluded.role, capacity = excluded.capacity, "
    "last_beat = excluded.last_beat, queues = excluded.queues"
)
WORKERS: Final = (
    "SELECT name, role, capacity, last_beat, started_at, queues FROM workers ORDER BY name"
)
REMOVE_WORKER: Final = "DELETE FROM workers WHERE name = ?"

# -- worker ---------------------------------------------------------------------------------------

CLAIM_ASSIGNED: Final = (
    "UPDATE tasks SET state = 'claimed', owner = ?, lease_until = ?, run_no = run_no + 1, "
    "updated_at = ? WHERE rowid IN (SELECT t.rowid FROM tasks t "
    "WHERE t.state = 'assigned' AND t.owner = ? AND t.suspect = 0 "
    f"AND {ROOM_GATE} "
    f"ORDER BY {QUEUE_ORDER_T} LIMIT ?) "
    f"RETURNING {TASK_COLS}, attempt, rowid, run_no, fair"
)


def claim_ready(count: int) -> str:
    """Claim the ``count`` ready pending tasks whose rowids follow the lease's parameters."""
    return (
        "UPDATE tasks SET state = 'claimed', owner = ?, lease_until = ?, run_no = run_no + 1, "
        "not_before = NULL, updated_at = ? "
        f"WHERE rowid IN ({', '.join('?' * count)}) "
        f"RETURNING {TASK_COLS}, attempt, rowid, run_no, fair"
    )


RENEW: Final = (
    "UPDATE tasks SET lease_until = max(lease_until, ?), updated_at = ? "
    f"WHERE {FENCE} RETURNING lease_until"
)
COMPLETE: Final = (  # a result clears the reason (the journal keeps it): none goes stale
    "UPDATE tasks SET state = 'result', result = ?, no_send = ?, lease_until = NULL, "
    f"suspect = 0, reason = NULL, updated_at = ? WHERE {FENCE}"
)
FENCED_CRASH_COUNT: Final = f"SELECT crash_count FROM tasks WHERE {FENCE_NAMED}"
_FAILED: Final = f", suspect = 0, reason = :reason, updated_at = :now WHERE {FENCE_NAMED}"
FAIL_DEAD: Final = f"UPDATE tasks SET state = 'dead', lease_until = NULL{_FAILED}"
FAIL_REPOOL: Final = (
    "UPDATE tasks SET state = 'pending', owner = NULL, lease_until = NULL, "
    f"attempt = attempt + 1, not_before = :not_before{_FAILED}"
)
FENCED_QUARANTINE_DEATHS: Final = f"SELECT quarantine_deaths FROM tasks WHERE {FENCE_NAMED}"
QUARANTINE_DEATH: Final = (
    "UPDATE tasks SET state = :state, owner = CASE WHEN :state = 'dead' THEN owner END, "
    "attempt = CASE WHEN :state = 'dead' THEN attempt ELSE attempt + 1 END, "
    "crash_count = crash_count + 1, quarantine_deaths = quarantine_deaths + 1, "
    "last_quarantine_death = :death, "
    "suspect = CASE WHEN :state = 'dead' THEN 0 ELSE 1 END, lease_until = NULL, "
    f"reason = :reason, updated_at = :now WHERE {FENCE_NAMED}"
)
RELEASE: Final = (
    "UPDATE tasks SET state = 'pending', owner = NULL, lease_until = NULL, "
    f"updated_at = ? WHERE {FENCE}"
)

# -- crashes and suspects (custody._crashes): named parameters :worker, :prefix, :now, :until ---

_DUE_T: Final = "(t.not_before IS NULL OR t.not_before <= :now)"
_IN_PROCESS: Final = (
    "(c.owner = :worker OR (:prefix IS NOT NULL AND substr(c.owner, 1, length(:prefix)) = :prefix))"
)
IN_QUEUES: Final = "(:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues)))"
"""Is the task in one of ``:queues`` (a JSON list; NULL: any queue, the lead's view)?"""
_SUSPECT_READY: Final = (
    f"t.state = 'pending' AND t.suspect = 1 AND {_DUE_T} AND {ROOM_GATE} "
    f"AND {IN_QUEUES.replace('queue IN', 't.queue IN')}"
)
SUSPECT_FLAGS: Final = (
    "SELECT EXISTS (SELECT 1 FROM tasks c WHERE c.suspect = 1 AND c.state = 'claimed' "
    f"AND {_IN_PROCESS}), "
    "EXISTS (SELECT 1 FROM tasks c WHERE c.suspect = 1 AND c.state = 'claimed'), "
    f"EXISTS (SELECT 1 FROM tasks t WHERE {_SUSPECT_READY}), "
    "EXISTS (SELECT 1 FROM tasks a WHERE a.state = 'assigned' AND a.owner = :worker)"
)
"""A suspect claimed in the worker's process; one claimed anywhere; one waiting to run; an
assignment of the worker's (none: its claim skips the UPDATE of its assignments)."""
PROCESS_BUSY: Final = (
    f"SELECT EXISTS (SELECT 1 FROM tasks c WHERE c.state = 'claimed' AND {_IN_PROCESS})"
)
CLAIM_SUSPECT: Final = (
    "UPDATE tasks SET state = 'claimed', owner = :worker, lease_until = :until, "
    "run_no = run_no + 1, quarantined = :quarantined, not_before = NULL, updated_at = :now "
    "WHERE rowid = (SELECT t.rowid FROM tasks t "
    f"WHERE {_SUSPECT_READY} "
    "ORDER BY t.crashes_alone DESC, t.crash_count DESC, t.priority, t.rowid LIMIT 1) "
    "RETURNING id, body, room, priority, headers, attempt, rowid, run_no"
)
"""The next suspect, most crashed first (a poison task is convicted right after a restart);
``:quarantined``: 1 if it runs in a quarantine child."""
_EXPIRED_SELECT: Final = (
    "SELECT t.id, t.owner, t.attempt, t.lease_until, t.suspect, t.crash_count, "
    "t.crashes_alone, w.last_beat, t.run_no, t.quarantined, "
    "(SELECT min(lw.key) FROM limit_waiters lw "
    "WHERE lw.task_id = t.id AND lw.until >= w.last_beat) "
    "FROM tasks t LEFT JOIN workers w ON w.name = t.owner"
)
"""An expired lease's evidence for ``custody._crashes.Expired`` (the last: a permit its run
waited for when its holder was last seen alive)."""
EXPIRED_CLAIMS: Final = (
    f"{_EXPIRED_SELECT} WHERE t.state = 'claimed' AND t.lease_until <= ? "  # the cutoff
    "ORDER BY t.lease_until, t.rowid LIMIT ?"
)
CLAIMS_OF: Final = f"{_EXPIRED_SELECT} WHERE t.state = 'claimed' AND t.owner = ? ORDER BY t.rowid"
SETTLE_EXPIRED: Final = (
    "UPDATE tasks SET state = :state, "
    "owner = CASE WHEN :state = 'dead' THEN owner END, attempt = :attempt, "
    "crash_count = :crashes, crashes_alone = :alone, suspect = :suspect, "
    "reason = :reason, lease_until = NULL, updated_at = :now "
    "WHERE id = :id AND state = 'claimed' AND owner = :owner AND run_no = :run"
)

# -- stall notices --------------------------------------------------------------------------------

STALL_CANDIDATES: Final = (
    "SELECT t.id, t.room, t.owner, t.created_at FROM tasks t "
    "WHERE t.state = 'claimed' AND t.created_at <= ? AND (? IS NULL OR t.owner = ?) "
    "AND NOT EXISTS (SELECT 1 FROM stall_notices s WHERE s.id = t.id) "
    "ORDER BY t.created_at, t.rowid LIMIT ?"
)
MARK_STALL_NOTIFIED: Final = (
    "INSERT INTO stall_notices (id, notified_at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING"
)
CLEAR_STALL_NOTICE: Final = "DELETE FROM stall_notices WHERE id = ?"
PRUNE_STALL_NOTICES: Final = (
    "DELETE FROM stall_notices WHERE id IN (SELECT s.id FROM stall_notices s "
    "LEFT JOIN tasks t ON t.id = s.id "
    f"WHERE t.id IS NULL OR t.state NOT IN ({IN_CUSTODY_SQL}) LIMIT ?)"
)

# -- delivery and dead letters --------------------------------------------------------------------

READY: Final = (
    f"SELECT {TASK_COLS}, result, owner, attempt, no_send FROM tasks "
    "WHERE state = 'result' ORDER BY priority, rowid LIMIT ?"
)
DELIVER: Final = (
    "UPDATE tasks SET state = 'delivered', updated_at = ? WHERE id = ? AND state = 'result'"
)
STATE: Final = "SELECT state FROM tasks WHERE id = ?"
DEAD_LETTER: Final = (
    "UPDATE tasks SET state = 'dead', lease_until = NULL, not_before = NULL, "
    f"reason = ?, updated_at = ? WHERE id = ? AND state IN ({IN_CUSTODY_SQL})"
)
UNREPORTED_DEAD: Final = (
    f"SELECT {RECORD_COLS} FROM tasks INDEXED BY tasks_dead_unreported "
    "WHERE state = 'dead' AND dead_reported_at IS NULL "
    "ORDER BY updated_at, rowid LIMIT ?"
)
MARK_DEAD_REPORTED: Final = (
    "UPDATE tasks SET dead_reported_at = ? "
    "WHERE id = ? AND state = 'dead' AND dead_reported_at IS NULL"
)
DEAD_REPORTED: Final = (
    "SELECT 1 FROM tasks WHERE id = ? AND state = 'dead' AND dead_reported_at IS NOT NULL"
)
UNREPORTED_DEAD_COUNT: Final = (
    "SELECT count(*) FROM tasks WHERE state = 'dead' AND dead_reported_at IS NULL"
)

# -- operator -------------------------------------------------------------------------------------

STATES: Final = f"SELECT id, state FROM tasks WHERE id IN {IDS}"
REDRIVE: Final = (  # a re-driven task queues as low priority (issue 33): see REDRIVE_PRIORITY
    "UPDATE tasks SET state = 'pending', owner = NULL, attempt = 1, lease_until = NULL, "
    f"priority = max(priority, {REDRIVE_PRIORITY}), "
    "not_before = NULL, result = NULL, no_send = 0, dead_reported_at = NULL, "
    "crash_count = 0, crashes_alone = 0, suspect = 0, quarantined = 0, quarantine_deaths = 0, "
    "last_quarantine_death = NULL, "
    "reason = ?, updated_at = ? "
    f"WHERE id IN {IDS} AND state = 'dead' RETURNING id"
)
REDRIVE_CLEAR_STALLS: Final = f"DELETE FROM stall_notices WHERE id IN {IDS}"
DEAD_MATCHING: Final = (
    f"SELECT id FROM tasks WHERE state = 'dead' AND reason IS NOT '{FORGOTTEN_REASON}' "
    "AND (?1 IS NULL OR instr(reason, ?1) > 0) "
    "AND (?3 IS NULL OR reason IS NULL OR substr(reason, 1, length(?3)) != ?3) "
    "ORDER BY updated_at, rowid LIMIT ?2"
)
CANCEL: Final = (
    "UPDATE tasks SET state = 'dead', lease_until = NULL, not_before = NULL, "
    "suspect = 0, reason = ?, updated_at = ? "
    f"WHERE id IN {IDS} "
    f"AND state IN ({CANCELLABLE_SQL}) RETURNING id"
)

# -- reads ----------------------------------------------------------------------------------------

GET: Final = f"SELECT {RECORD_COLS} FROM tasks WHERE id = ?"
COUNTS: Final = "SELECT state, n FROM task_counts"
"""Kept by triggers in the moves' own transactions (issue #56): 7 rows at any size."""
IN_FLIGHT: Final = f"SELECT id FROM tasks WHERE state IN ({IN_CUSTODY_SQL}) ORDER BY rowid"
RECORDS_OLDEST: Final = (
    f"SELECT {RECORD_COLS} FROM tasks WHERE state = ? ORDER BY rowid ASC LIMIT ?"
)
RECORDS_NEWEST: Final = (
    f"SELECT {RECORD_COLS} FROM tasks WHERE state = ? ORDER BY updated_at DESC, rowid DESC LIMIT ?"
)
WAITING_RETRIES: Final = "SELECT count(*) FROM tasks WHERE state = 'pending' AND not_before > ?"
PENDING_BY_QUEUE: Final = (
    "SELECT queue, count(*) FROM tasks WHERE state = 'pending' GROUP BY queue ORDER BY queue"
)
JOURNAL: Final = (
    "SELECT at, src, dst, worker, attempt, reason, actor FROM journal "
    "WHERE born = (SELECT created_at FROM tasks WHERE id = :id) AND id = :id ORDER BY seq"
)
"""A task's entries, found by (born, id) (the journal's order since migration 23): a task's
journal lives exactly as long as its row (``journal_prune``)."""
_SUSPECT_CUSTODY: Final = f"suspect = 1 AND state IN ({IN_CUSTODY_SQL})"
SUSPECTS_COUNT: Final = f"SELECT count(*) FROM tasks WHERE {_SUSPECT_CUSTODY}"
SUSPECTS: Final = (
    f"SELECT {RECORD_COLS} FROM tasks WHERE {_SUSPECT_CUSTODY} "
    "ORDER BY crashes_alone DESC, crash_count DESC, rowid LIMIT ?"
)
