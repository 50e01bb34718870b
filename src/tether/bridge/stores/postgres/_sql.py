"""The custody statements of ``PostgresStore`` (the other parts keep theirs in their own
modules), with the schema filled in once.

Kept apart from the parts' logic so each reads on its own: ``_custody.py`` says what a move
checks and returns, this file says how PostgreSQL does it (one statement per transition, the
fence in the ``WHERE``, ``pg_notify`` in the same statement so a wake-up goes out only if the
change commits). The custody predicate comes from ``stores._common.IN_CUSTODY_SQL``.
"""

from __future__ import annotations

from typing import Final

import attrs

from .._common import IN_CUSTODY_SQL
from .._operator import CANCELLABLE_SQL, FORGOTTEN_REASON, REDRIVE_PRIORITY
from .._rooms_sql import room_busy, room_gate

TASK_COLS: Final = "t.id, t.body, t.room, t.priority, t.headers"
QUEUE_ORDER: Final = "priority, fair, seq"
"""The pending queue's order: priority, then turn among the tenants (``custody._tenants``),
then age (``tasks_pending``); ``t.``-qualified where the query names its table ``t``."""
QUEUE_ORDER_T: Final = "t.priority, t.fair, t.seq"
RECORD_COLS: Final = (
    f"{TASK_COLS}, t.state, t.owner, t.attempt, t.lease_until, t.result, t.reason, "
    "t.created_at, t.updated_at, t.not_before, t.crash_count, t.crashes_alone, t.suspect, "
    "t.run_no, t.quarantine_deaths, t.last_quarantine_death"
)
DUE: Final = "(t.not_before IS NULL OR t.not_before <= %(now)s)"
"""A pending task that is not waiting out a retry backoff."""
FENCE: Final = (
    "t.id = %(id)s AND t.state = 'claimed' AND t.owner = %(worker)s AND t.run_no = %(run)s"
)
"""A claim: its task, worker and run number (``Claim.run``; never ``attempt``, which a re-drive
resets), held until the reconciler takes it back: never compared with the time
(``custody._outage``)."""
_IN_PROCESS: Final = (
    "(c.owner = %(worker)s OR (%(prefix)s::text IS NOT NULL "
    "AND left(c.owner, length(%(prefix)s::text)) = %(prefix)s::text))"
)
"""Claim ``c`` is held in the claiming worker's process (``custody._crashes.process_prefix``)."""
_IN_PLAY: Final = "WHERE suspect AND state IN ('pending', 'claimed')"
"""A suspect waiting or running (the partial index ``tasks_suspects`` finds it)."""
QUEUE_WALK: Final = (
    b"SELECT set_config('enable_bitmapscan', 'off', true), "
    b"set_config('enable_seqscan', 'off', true), "
    b"set_config('plan_cache_mode', 'force_generic_plan', true)"
)
"""Run first in a claim's transaction (``true``: for this transaction only): the claim walks
the queue down its index, in its order (priority, turn, age), and stops at its limit, whatever
the statistics say. Statistics taken while few tasks were pending (an idle queue before a
burst) made the planner collect every pending row and sort them to claim a hundred (issue 39:
8,100 rows, 12-21 ms a claim instead of 4-5, growing with the queue's depth). Turning sorts
off instead made the statement 40 times slower. And a prepared claim runs its generic plan
(the same index walk, ``test_postgres_plans``): left to choose, PostgreSQL kept planning the
claim afresh at every call, 0.8 ms of server CPU each, more than the claim itself (issue 50)."""
PENDING_BY_KEY: Final = "t.state COLLATE \"C\" = 'pending'"
"""``t.state = 'pending'`` for rows found by their keys (the same test: equality is bytewise
in every deterministic collation), written so that the planner cannot read ``tasks_pending``
for them instead. Under ``QUEUE_WALK`` it did: statistics taken while few tasks were pending
made the index look like one row, and the lead's assignment of 16 tasks walked all 2,000
pending ones and compared each with the 16 (issue 50: 32,000 comparisons, 3.5 ms a sweep)."""
GENERIC_PLANS: Final = b"SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"
"""Run first in a transaction of prepared reads that PostgreSQL would otherwise plan afresh at
each call (the lead's view: eight reads a sweep, each planned again most times, issue 50)."""
NO_DELIVERY_LEASE: Final = "delivery_holder = NULL, delivery_until = NULL"
"""Every transition out of ``result`` drops the delivery lease (a CHECK insists)."""


def _cas_sql(
    update: str,
    returning: str,
    notify: bool = False,
    also: str = "",
    extra: str = "",
    first: str = "",
) -> str:
    """Wrap ``update`` (aliased ``t``): one row, its RETURNING value or NULL if nothing moved.

    With ``notify`` the same statement signals the listeners when (and only if) it moved;
    ``also`` adds a CTE over ``u`` (whose ``extra`` RETURNING columns it may read); ``first``
    a CTE before ``u`` (which ``update`` may read).
    """
    signal = ", count(pg_notify(%(chan)s, %(payload)s))" if notify else ""
    more = f", {extra}" if extra else ""
    also = f", {also}" if also else ""
    first = f"{first}, " if first else ""
    return (
        f"WITH {first}u AS ({update} RETURNING {returning} AS done{more}){also} "
        f"SELECT min(done){signal} FROM u"
    )


@attrs.frozen
class Sql:
    """Every statement of the store, with the schema filled in once."""

    s: str

    @property
    def ingest(self) -> str:
        """The new tasks, each message of a room numbered after the room's last turn (its
        ``turn_seq``: its user turn, issue #49) and counted, in one statement. The rooms'
        conversation rows were locked first (``lock_rooms_sql``), so the numbers read here
        are the rooms' own; a row not inserted (a replay) leaves its number unused, and the
        room's counter moves on by the rows inserted only."""
        return (
            "WITH v AS (SELECT v.*, c.next_seq + row_number() OVER (PARTITION BY v.room "
            "ORDER BY v.ord) AS turn "
            "FROM unnest(%(ids)s::text[], %(bodies)s::bytea[], %(rooms)s::text[], "
            "%(ranks)s::smallint[], %(headers)s::text[], %(tenants)s::text[], "
            "%(fairs)s::float8[], %(queues)s::text[], %(parents)s::text[]) WITH ORDINALITY "
            "AS v (id, body, room, priority, headers, tenant, fair, queue, parent, ord) "
            f"LEFT JOIN {self.s}.conversations c ON c.room = v.room "
            f"WHERE NOT EXISTS (SELECT 1 FROM {self.s}.tombstones b WHERE b.id = v.id)), "
            f"ins AS (INSERT INTO {self.s}.tasks AS t "
            "(id, body, room, priority, headers, state, attempt, created_at, updated_at, "
            "room_policy, tenant, fair, turn_seq, queue, parent) "
            "SELECT id, body, room, priority, headers, 'pending', 1, %(now)s, %(now)s, "
            "%(policy)s, tenant, fair, turn, queue, parent FROM v ORDER BY ord "
            "ON CONFLICT (id) DO NOTHING RETURNING id, room, turn_seq), "
            f"n AS (UPDATE {self.s}.conversations c SET next_seq = m.last, "
            "turns = c.turns + m.n FROM (SELECT room, max(turn_seq) AS last, count(*) AS n "
            "FROM ins WHERE turn_seq IS NOT NULL GROUP BY room) m WHERE c.room = m.room) "
            "SELECT id, pg_notify(%(chan)s, 'pending')::text FROM ins"
        )

    @property
    def turns(self) -> str:
        """For each (tenant, priority) of an ingest: the queue's clock at that priority (its
        earliest tenant turn waiting: pending, or assigned ahead of a worker's free slots),
        the tenant's last turn waiting there, its weight (``custody._tenants``); each one
        seek in an index of the waiting turns (``tasks_queued_turns``,
        ``tasks_tenant_queued``), however many tasks are pending or assigned (issue #56)."""
        queued = f"FROM {self.s}.tasks WHERE state IN ('pending', 'assigned')"
        return (
            "SELECT v.tenant, v.rank, "
            f"(SELECT fair {queued} AND fair > 0 AND priority = v.rank ORDER BY fair LIMIT 1), "
            f"(SELECT max(fair) {queued} AND tenant IS NOT NULL AND tenant = v.tenant "
            "AND priority = v.rank), "
            f"(SELECT weight FROM {self.s}.tenants WHERE tenant = v.tenant) "
            "FROM unnest(%(tenants)s::text[], %(ranks)s::smallint[]) AS v (tenant, rank)"
        )

    @property
    def set_tenant_weight(self) -> str:
        return (
            f"INSERT INTO {self.s}.tenants (tenant, weight) VALUES (%(tenant)s, %(weight)s) "
            "ON CONFLICT (tenant) DO UPDATE SET weight = excluded.weight"
        )

    @property
    def tenant_views(self) -> str:
        return (
            "SELECT tenant, max(weight), sum(pending) FROM ("
            f"SELECT tenant, weight, 0 AS pending FROM {self.s}.tenants UNION ALL "
            f"SELECT tenant, NULL, count(*) FROM {self.s}.tasks "
            "WHERE state = 'pending' AND tenant IS NOT NULL GROUP BY tenant) x "
            "GROUP BY tenant ORDER BY tenant"
        )

    @property
    def bodies(self) -> str:
        return f"SELECT id, body FROM {self.s}.tasks WHERE id = ANY(%(ids)s::text[])"

    @property
    def supersede(self) -> str:
        # replace: per room, the newest of the new tasks turns the room's older tasks still
        # waiting or running into no-send results (a concurrent claim is waited for, then the
        # row re-checked); returns (superseded id, newer id)
        return (
            f"WITH n AS (SELECT DISTINCT ON (room) room, id, seq FROM {self.s}.tasks "
            "WHERE id = ANY(%(ids)s::text[]) AND room IS NOT NULL ORDER BY room, seq DESC) "
            f"UPDATE {self.s}.tasks t SET state = 'result', result = ''::bytea, no_send = true, "
            "owner = coalesce(t.owner, %(owner)s), lease_until = NULL, "
            f"{NO_DELIVERY_LEASE}, reason = %(prefix)s || n.id, updated_at = %(now)s "
            "FROM n WHERE t.room = n.room AND t.seq < n.seq "
            "AND t.state IN ('pending', 'assigned', 'claimed') RETURNING t.id, n.id"
        )

    @property
    def burst(self) -> str:
        # a room's debounce (issue #52): per room, the newest of the new tasks waits it out,
        # and the room's older messages still waiting out theirs (never claimed; or new in
        # this batch) become no-send results answered by it; returns (absorbed id, newest id)
        return (
            f"WITH n AS (SELECT DISTINCT ON (room) room, id, seq FROM {self.s}.tasks "
            "WHERE id = ANY(%(ids)s::text[]) AND room IS NOT NULL ORDER BY room, seq DESC), "
            f"h AS (UPDATE {self.s}.tasks t SET not_before = %(now)s + %(debounce)s "
            "FROM n WHERE t.id = n.id RETURNING t.id) "
            f"UPDATE {self.s}.tasks t SET state = 'result', result = ''::bytea, no_send = true, "
            "owner = coalesce(t.owner, %(owner)s), lease_until = NULL, not_before = NULL, "
            f"{NO_DELIVERY_LEASE}, reason = %(burst)s || n.id, updated_at = %(now)s "
            "FROM n WHERE t.room = n.room AND t.seq < n.seq AND t.state = 'pending' "
            "AND t.run_no = 0 AND (t.not_before > %(now)s OR t.id = ANY(%(ids)s::text[])) "
            "RETURNING t.id, n.id"
        )

    @property
    def prune(self) -> str:
        # the deleted rows leave tombstones in the same statement (one transaction)
        return (
            # ... but a child whose parent still runs: its join may not have read it (#51)
            f"WITH gone AS (DELETE FROM {self.s}.tasks WHERE id IN (SELECT c.id "
            f"FROM {self.s}.tasks c WHERE c.state = 'delivered' AND c.updated_at < %(before)s "
            f"AND (c.parent IS NULL OR NOT EXISTS (SELECT FROM {self.s}.tasks p "
            "WHERE p.id = c.parent AND p.state IN ('pending', 'assigned', 'claimed', 'waiting'))) "
            "LIMIT %(limit)s FOR UPDATE OF c SKIP LOCKED) RETURNING id, updated_at) "
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
            f"SELECT {TASK_COLS} FROM {self.s}.tasks t WHERE t.state = 'pending' AND {DUE} "
            f"AND NOT t.suspect ORDER BY {QUEUE_ORDER_T} LIMIT %(limit)s"
        )

    @property
    def room_gate(self) -> str:
        """May candidate ``t`` run now, by its room's policy (``stores._rooms_sql``)."""
        return room_gate("t", f"{self.s}.tasks", "seq", "NOT o.no_send")

    @property
    def pending_by_queue(self) -> str:
        return (
            f"SELECT queue, count(*) FROM {self.s}.tasks WHERE state = 'pending' "
            'GROUP BY queue ORDER BY queue COLLATE "C"'
        )

    @property
    def served_queues(self) -> str:
        """Is task ``t`` in a queue served by a worker that beat within the lease (any queue
        while none did), and not in ``%(skip_queues)s``? The lead reads only those: a
        backlog nobody serves (or whose workers are full) never fills its window ahead of the
        tasks somebody can take (issue #51)."""
        served = (
            "SELECT unnest(coalesce(string_to_array(w.queues, ','), ARRAY['default'])) "
            f"FROM {self.s}.workers w WHERE w.role = 'worker' "
            "AND w.last_beat >= %(now)s - %(lease)s"
        )
        return (
            f"(t.queue IN ({served}) OR NOT EXISTS (SELECT FROM {self.s}.workers w "
            "WHERE w.role = 'worker' AND w.last_beat >= %(now)s - %(lease)s)) "
            "AND NOT (t.queue = ANY(%(skip_queues)s::text[]))"
        )

    def pool_view(self, skip: bool) -> str:
        """Everything a lead's sweep reads, in one statement (one plan, one snapshot): the
        ready pending tasks in queue order (with ``skip``, none of the rooms ``%(skip)s``
        names), the affinities of their rooms, the members, the assignments, the claims per
        worker, the busy rooms and the next retry due, each as a JSON array. Eight statements
        a sweep before, each planned and run on its own (issue 50: most of an idle lead's
        cost)."""
        s = self.s
        skipping = "AND (t.room IS NULL OR NOT (t.room = ANY(%(skip)s::text[]))) " if skip else ""
        return (
            "WITH p AS (SELECT id, room, priority, fair, seq, queue "
            f"FROM {s}.tasks t WHERE t.state = 'pending' AND {DUE} AND NOT t.suspect "
            f"AND {self.served_queues} "
            f"{skipping}AND {self.room_gate} ORDER BY {QUEUE_ORDER_T} LIMIT %(limit)s) "
            "SELECT (SELECT json_agg(json_build_array(id, room, priority, queue) "
            "ORDER BY priority, fair, seq) FROM p), "
            f"(SELECT json_agg(json_build_array(room, worker)) FROM {s}.rooms "
            "WHERE room IN (SELECT room FROM p WHERE room IS NOT NULL)), "
            "(SELECT json_agg(json_build_array(name, role, capacity, last_beat, started_at, "
            f'queues) ORDER BY name COLLATE "C") FROM {s}.workers), '
            "(SELECT json_agg(json_build_array(id, owner, room, updated_at) "
            f"ORDER BY updated_at, seq) FROM {s}.tasks WHERE state = 'assigned'), "
            "(SELECT json_agg(json_build_array(owner, n)) FROM (SELECT owner, count(*) AS n "
            f"FROM {s}.tasks WHERE state = 'claimed' GROUP BY owner) c), "
            f"(SELECT json_agg(room) FROM ({room_busy(f'{s}.tasks')}) b), "
            f"(SELECT min(not_before) FROM {s}.tasks "
            "WHERE state = 'pending' AND not_before > %(now)s)"
        )

    @property
    def assign(self) -> str:
        return _cas_sql(
            f"UPDATE {self.s}.tasks t SET state = 'assigned', owner = %(worker)s, "
            "not_before = NULL, updated_at = %(now)s "
            f"WHERE t.id = %(id)s AND t.state = 'pending' AND {DUE} AND NOT t.suspect",
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
            "not_before = NULL, updated_at = %(now)s FROM v "
            f"WHERE t.id = v.id AND {PENDING_BY_KEY} AND {DUE} AND NOT t.suspect "
            "RETURNING t.id, t.room, v.worker, v.ord), "
            # one row per room (ON CONFLICT cannot touch a row twice): the last pair wins
            f"r AS (INSERT INTO {self.s}.rooms AS r (room, worker, at) "
            "SELECT DISTINCT ON (room) room, worker, %(now)s FROM u WHERE room IS NOT NULL "
            "ORDER BY room, ord DESC "
            "ON CONFLICT (room) DO UPDATE SET worker = excluded.worker, at = excluded.at) "
            # a worker of the lead's own process (``quiet``) is rung in the process instead
            "SELECT id, CASE WHEN worker = ANY(%(quiet)s::text[]) THEN NULL "
            "ELSE pg_notify(%(chan)s, 'assigned ' || worker)::text END FROM u"
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
    def workers(self) -> str:
        # COLLATE "C": byte order, as SQLite sorts, whatever the database's locale
        return (
            "SELECT name, role, capacity, last_beat, started_at, queues "
            f'FROM {self.s}.workers ORDER BY name COLLATE "C"'
        )

    @property
    def beat_many(self) -> str:
        """The beats of one or more members (``_merge``: a process's workers beat on one
        grid), every member's row read back once for all of them; the outer SELECT reads the
        statement's snapshot (before the upsert), so the beaten rows come from ``b``."""
        return (
            "WITH v AS (SELECT * FROM unnest(%(workers)s::text[], %(roles)s::text[], "
            "%(capacities)s::integer[], %(queues)s::text[]) AS v(name, role, capacity, queues)), "
            f"b AS (INSERT INTO {self.s}.workers AS w "
            "(name, role, capacity, last_beat, started_at, queues) "
            "SELECT name, role, capacity, %(now)s, %(now)s, queues FROM v "
            "ON CONFLICT (name) DO UPDATE SET role = excluded.role, "
            "capacity = excluded.capacity, last_beat = excluded.last_beat, "
            "queues = excluded.queues "
            "RETURNING name, role, capacity, last_beat, started_at, queues) "
            "SELECT * FROM (SELECT name, role, capacity, last_beat, started_at, queues "
            f"FROM {self.s}.workers WHERE name <> ALL(%(workers)s::text[]) "
            "UNION ALL SELECT * FROM b) m "
            'ORDER BY name COLLATE "C"'
        )

    @property
    def remove_worker(self) -> str:
        return f"DELETE FROM {self.s}.workers WHERE name = %(worker)s"

    @property
    def release(self) -> str:
        return _cas_sql(
            f"UPDATE {self.s}.tasks t SET state = 'pending', owner = NULL, lease_until = NULL, "
            f"updated_at = %(now)s WHERE {FENCE}",
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
            f"WHERE t.id IS NULL OR t.state NOT IN ({IN_CUSTODY_SQL}) LIMIT %(limit)s "
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
    def claim_many(self) -> str:
        """The usual claim: while no suspect is in play (pending or claimed) anywhere."""
        return self._claim_many(f"AND NOT EXISTS (SELECT FROM {self.s}.tasks {_IN_PLAY}) ")

    @property
    def claim_many_among_suspects(self) -> str:
        """The claim of non-suspect work while suspects are in play (under the locks)."""
        return self._claim_many("")

    @property
    def claim_assigned_for_many(self) -> str:
        """``claim_many`` of assigned tasks only (no leaderless part) for several workers in
        one statement (``_merge``): each worker up to its limit, by its own queue order,
        while no suspect is in play; the rows come back with their worker (``owner``)."""
        tasks = f"{self.s}.tasks"
        return (
            "WITH h AS (SELECT * FROM unnest(%(workers)s::text[], %(limits)s::integer[]) "
            "AS h(worker, lim)), "
            f"mine AS (SELECT x.id FROM h CROSS JOIN LATERAL (SELECT t.id FROM {tasks} t "
            "WHERE t.state = 'assigned' AND t.owner = h.worker AND NOT t.suspect "
            f"AND {self.room_gate} AND NOT EXISTS (SELECT FROM {tasks} {_IN_PLAY}) "
            f"ORDER BY {QUEUE_ORDER_T} LIMIT h.lim FOR UPDATE SKIP LOCKED) x), "
            # found by their keys, as ``_claim_many``'s picks are (not joined)
            f"u AS (UPDATE {tasks} t SET state = 'claimed', lease_until = %(until)s, "
            "run_no = t.run_no + 1, not_before = NULL, updated_at = %(now)s "
            "WHERE t.id = ANY(ARRAY(SELECT id FROM mine)) AND t.state = 'assigned' "
            f"RETURNING {TASK_COLS}, t.attempt, t.run_no, t.priority AS rank, "
            "t.fair AS turn, t.seq, t.owner), "
            # one row per room (ON CONFLICT cannot touch a row twice): its newest claim's worker
            f"r AS (INSERT INTO {self.s}.rooms AS r (room, worker, at) "
            "SELECT DISTINCT ON (room) room, owner, %(now)s FROM u WHERE room IS NOT NULL "
            "ORDER BY room, seq DESC "
            "ON CONFLICT (room) DO UPDATE SET worker = excluded.worker, at = excluded.at) "
            "SELECT * FROM u ORDER BY owner, rank, turn, seq"
        )

    def _claim_many(self, guard: str) -> str:
        # ``claim`` for up to %(limit)s rows: own assignments first, then (leaderless) pending
        # ones to make up the rest, returned in that order (priority, then age, in each)
        tasks = f"{self.s}.tasks"
        return (
            f"WITH mine AS (SELECT id FROM {tasks} t WHERE state = 'assigned' "
            f"AND owner = %(worker)s AND NOT t.suspect AND {self.room_gate} {guard}"
            f"ORDER BY {QUEUE_ORDER} LIMIT %(limit)s FOR UPDATE SKIP LOCKED), "
            f"pool AS (SELECT id FROM {tasks} t WHERE %(leaderless)s AND state = 'pending' "
            f"AND {DUE} AND NOT t.suspect AND {self.room_gate} {guard}"
            "AND t.queue = ANY(%(queues)s::text[]) "
            f"ORDER BY {QUEUE_ORDER} LIMIT greatest(0, %(limit)s - (SELECT count(*) FROM mine)) "
            "FOR UPDATE SKIP LOCKED), "
            "pick AS (SELECT id, 0 AS grp FROM mine UNION ALL SELECT id, 1 FROM pool), "
            # the picked rows are found by their keys (``= ANY``, an index probe each), not
            # joined: the planner guesses a tenth of the table for a LIMIT it cannot fold
            # and then hashed the whole table to update ten rows (issue 39: 25 ms a claim at
            # 50,000 rows, growing with the table)
            f"u AS (UPDATE {tasks} t SET state = 'claimed', owner = %(worker)s, "
            "lease_until = %(until)s, run_no = t.run_no + 1, not_before = NULL, "
            "updated_at = %(now)s WHERE t.id = ANY(ARRAY(SELECT id FROM pick)) "
            "AND t.state IN ('assigned', 'pending') "
            f"RETURNING {TASK_COLS}, t.attempt, t.run_no, t.priority AS rank, "
            "t.fair AS turn, t.seq), "
            # one row per room (ON CONFLICT cannot touch a row twice)
            f"r AS (INSERT INTO {self.s}.rooms AS r (room, worker, at) "
            "SELECT DISTINCT room, %(worker)s, %(now)s FROM u WHERE room IS NOT NULL "
            "ON CONFLICT (room) DO UPDATE SET worker = excluded.worker, at = excluded.at) "
            "SELECT u.* FROM u JOIN pick ON pick.id = u.id ORDER BY pick.grp, rank, turn, seq"
        )

    @property
    def renew(self) -> str:
        return _cas_sql(
            f"UPDATE {self.s}.tasks t SET lease_until = greatest(t.lease_until, %(until)s), "
            f"updated_at = %(now)s WHERE {FENCE}",
            "t.lease_until",
        )

    @property
    def complete(self) -> str:
        # the room's conversation row first (``lk``), as ``complete_many`` and every other
        # writer of a room's tasks and counter take them: the trigger counting the reply
        # takes it after the task's row otherwise, the other order from a prune's or an
        # operator's erasure (issue #49: they write the room's task rows under its lock)
        return _cas_sql(
            f"UPDATE {self.s}.tasks t SET state = 'result', result = %(body)s, "
            f"no_send = %(no_send)s, lease_until = NULL, suspect = false, reason = NULL, "
            f"updated_at = %(now)s WHERE {FENCE} AND (SELECT count(*) FROM lk) >= 0",
            "1",
            notify=True,
            first=f"lk AS (SELECT c.room FROM {self.s}.conversations c WHERE c.room = "
            f"(SELECT room FROM {self.s}.tasks WHERE id = %(id)s) FOR UPDATE OF c)",
        )

    @property
    def complete_many(self) -> str:
        # ``complete`` for many claims in one statement: the fences ride in as parallel arrays
        # (one row each, fences distinct) and each row is fenced on its own; the fences that
        # moved come back. pg_notify per moved row: PostgreSQL folds identical notifications of one
        # transaction into one, sent only if it commits. The rooms' conversation rows are taken
        # first, in the rooms' order (``lk``, before the AFTER triggers that count each room's
        # turns under its row): two batches sharing rooms would otherwise lock them in their
        # batches' orders, a deadlock (as ingest's ``lock_rooms_sql`` avoids)
        return (
            "WITH v AS (SELECT * FROM unnest(%(ids)s::text[], %(workers)s::text[], "
            "%(runs)s::integer[], %(bodies)s::bytea[]) AS v(id, worker, run, body)), "
            f"lk AS (SELECT c.room FROM {self.s}.conversations c WHERE c.room IN "
            f"(SELECT t.room FROM {self.s}.tasks t WHERE t.id = ANY(%(ids)s::text[]) "
            "AND t.room IS NOT NULL) ORDER BY c.room FOR UPDATE OF c), "
            f"u AS (UPDATE {self.s}.tasks t SET state = 'result', result = v.body, "
            "no_send = %(no_send)s, lease_until = NULL, suspect = false, reason = NULL, "
            "updated_at = %(now)s FROM v "
            "WHERE t.id = v.id AND t.state = 'claimed' AND t.owner = v.worker "
            "AND t.run_no = v.run AND (SELECT count(*) FROM lk) >= 0 "
            "RETURNING t.id, v.worker, v.run) "
            "SELECT u.id, u.worker, u.run, pg_notify(%(chan)s, %(payload)s)::text FROM u"
        )

    @property
    def fenced_crash_count(self) -> str:
        return f"SELECT t.crash_count FROM {self.s}.tasks t WHERE {FENCE} FOR UPDATE"

    @property
    def fail_repool(self) -> str:
        return _cas_sql(
            f"UPDATE {self.s}.tasks t SET state = 'pending', owner = NULL, lease_until = NULL, "
            "attempt = t.attempt + 1, not_before = %(not_before)s, reason = %(reason)s, "
            f"suspect = false, updated_at = %(now)s WHERE {FENCE}",
            "1",
            notify=True,
        )

    @property
    def fenced_quarantine_deaths(self) -> str:
        return f"SELECT t.quarantine_deaths FROM {self.s}.tasks t WHERE {FENCE} FOR UPDATE"

    @property
    def quarantine_death(self) -> str:
        dead = "%(state)s = 'dead'"
        return _cas_sql(
            f"UPDATE {self.s}.tasks t SET state = %(state)s, "
            f"owner = CASE WHEN {dead} THEN t.owner END, "
            f"attempt = CASE WHEN {dead} THEN t.attempt ELSE t.attempt + 1 END, "
            "crash_count = t.crash_count + 1, quarantine_deaths = t.quarantine_deaths + 1, "
            "last_quarantine_death = %(death)s, "
            f"suspect = NOT {dead}, lease_until = NULL, reason = %(reason)s, "
            f"updated_at = %(now)s WHERE {FENCE}",
            "1",
            notify=True,
        )

    @property
    def fail_dead(self) -> str:
        return _cas_sql(
            f"UPDATE {self.s}.tasks t SET state = 'dead', lease_until = NULL, suspect = false, "
            f"reason = %(reason)s, updated_at = %(now)s WHERE {FENCE}",
            "1",
        )

    # -- crashes and suspects (custody._crashes) -------------------------------------------

    @property
    def expired_claims(self) -> str:
        """Leases that ran out by ``%(cutoff)s`` (``custody._outage``) with their holder's last
        beat, locked for this transaction."""
        return (
            f"{self._expired_select} WHERE t.state = 'claimed' AND t.lease_until <= %(cutoff)s "
            "ORDER BY t.lease_until, t.seq LIMIT %(limit)s FOR UPDATE OF t SKIP LOCKED"
        )

    @property
    def claims_of(self) -> str:
        """Every claim held under ``%(worker)s``, locked (its new process recovers them)."""
        return (
            f"{self._expired_select} WHERE t.state = 'claimed' AND t.owner = %(worker)s "
            "ORDER BY t.seq FOR UPDATE OF t"
        )

    @property
    def _expired_select(self) -> str:
        return (
            "SELECT t.id, t.owner, t.attempt, t.lease_until, t.suspect, t.crash_count, "
            "t.crashes_alone, w.last_beat, t.run_no, t.quarantined, "
            f"(SELECT min(lw.key) FROM {self.s}.limit_waiters lw "
            "WHERE lw.task_id = t.id AND lw.until >= w.last_beat) "
            f"FROM {self.s}.tasks t LEFT JOIN {self.s}.workers w ON w.name = t.owner"
        )

    @property
    def settle_expired(self) -> str:
        """Write each expired lease's outcome (parallel arrays), fenced on (claimed, run)."""
        return (
            "WITH v AS (SELECT * FROM unnest(%(ids)s::text[], %(states)s::text[], "
            "%(attempts)s::integer[], %(crashes)s::integer[], %(alone)s::integer[], "
            "%(suspects)s::boolean[], %(reasons)s::text[], %(was)s::integer[]) "
            "AS v(id, state, attempt, crashes, alone, suspect, reason, was)) "
            f"UPDATE {self.s}.tasks t SET state = v.state, "
            "owner = CASE WHEN v.state = 'dead' THEN t.owner END, attempt = v.attempt, "
            "crash_count = v.crashes, crashes_alone = v.alone, suspect = v.suspect, "
            "reason = v.reason, lease_until = NULL, updated_at = %(now)s FROM v "
            "WHERE t.id = v.id AND t.state = 'claimed' AND t.run_no = v.was"
        )

    @property
    def _suspect_ready(self) -> str:
        return (
            f"t.state = 'pending' AND t.suspect AND {DUE} AND {self.room_gate} "
            "AND t.queue = ANY(%(queues)s::text[])"
        )

    @property
    def suspects_in_play(self) -> str:
        return f"SELECT EXISTS (SELECT FROM {self.s}.tasks {_IN_PLAY})"

    @property
    def suspects_unclaimed(self) -> str:
        """Is a suspect pending while none is claimed? (Read before any lock: it says which
        locks the claim takes.)"""
        return (
            f"SELECT EXISTS (SELECT FROM {self.s}.tasks WHERE suspect AND state = 'pending') "
            f"AND NOT EXISTS (SELECT FROM {self.s}.tasks WHERE suspect AND state = 'claimed')"
        )

    @property
    def suspect_flags(self) -> str:
        """A suspect claimed in the worker's process; one claimed anywhere; one ready."""
        return (
            f"SELECT EXISTS (SELECT FROM {self.s}.tasks c WHERE c.suspect "
            f"AND c.state = 'claimed' AND {_IN_PROCESS}), "
            f"EXISTS (SELECT FROM {self.s}.tasks c WHERE c.suspect AND c.state = 'claimed'), "
            f"EXISTS (SELECT FROM {self.s}.tasks t WHERE {self._suspect_ready})"
        )

    @property
    def process_busy(self) -> str:
        return (
            f"SELECT EXISTS (SELECT FROM {self.s}.tasks c WHERE c.state = 'claimed' "
            f"AND {_IN_PROCESS})"
        )

    @property
    def claim_suspect(self) -> str:
        """The next suspect, most crashed first (a poison task is convicted right after a
        restart), claimed alone."""
        tasks = f"{self.s}.tasks"
        return (
            f"WITH pick AS (SELECT id FROM {tasks} t WHERE {self._suspect_ready} "
            "ORDER BY t.crashes_alone DESC, t.crash_count DESC, t.priority, t.seq LIMIT 1 "
            "FOR UPDATE SKIP LOCKED), "
            f"u AS (UPDATE {tasks} t SET state = 'claimed', owner = %(worker)s, "
            "lease_until = %(until)s, run_no = t.run_no + 1, quarantined = %(quarantined)s, "
            "not_before = NULL, updated_at = %(now)s FROM pick "
            f"WHERE t.id = pick.id AND t.state = 'pending' RETURNING {TASK_COLS}, t.attempt, "
            "t.run_no), "
            f"{self._note_room('u.room', '%(worker)s')} "
            "SELECT * FROM u"
        )

    @property
    def lock_shared(self) -> str:
        return "SELECT pg_advisory_xact_lock_shared(hashtext(%(key)s))"

    @property
    def lock(self) -> str:
        return "SELECT pg_advisory_xact_lock(hashtext(%(key)s))"

    @property
    def suspects_count(self) -> str:
        return f"SELECT count(*) FROM {self.s}.tasks WHERE suspect AND state IN ({IN_CUSTODY_SQL})"

    @property
    def suspects(self) -> str:
        return (
            f"SELECT {RECORD_COLS} FROM {self.s}.tasks t "
            f"WHERE t.suspect AND t.state IN ({IN_CUSTODY_SQL}) "
            "ORDER BY t.crashes_alone DESC, t.crash_count DESC, t.seq LIMIT %(limit)s"
        )

    @property
    def ready(self) -> str:
        return (
            f"SELECT {TASK_COLS}, t.result, t.owner, t.attempt, t.no_send FROM {self.s}.tasks t "
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
            f"RETURNING {TASK_COLS}, t.result, t.owner, t.attempt, t.no_send, "
            "t.priority AS rank, t.seq) "
            "SELECT * FROM u ORDER BY rank, seq"
        )

    @property
    def deliver(self) -> str:
        return _cas_sql(
            f"UPDATE {self.s}.tasks t SET state = 'delivered', {NO_DELIVERY_LEASE}, "
            "updated_at = %(now)s WHERE t.id = %(id)s AND t.state = 'result'",
            "1",
        )

    @property
    def deliver_many(self) -> str:
        return (
            f"UPDATE {self.s}.tasks t SET state = 'delivered', {NO_DELIVERY_LEASE}, "
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
            f"UPDATE {self.s}.tasks t SET state = 'dead', lease_until = NULL, not_before = NULL, "
            f"{NO_DELIVERY_LEASE}, reason = %(reason)s, updated_at = %(now)s "
            f"WHERE t.id = %(id)s AND t.state IN ({IN_CUSTODY_SQL})",
            "1",
        )

    @property
    def cas_state(self) -> str:
        return (
            "SELECT state, owner, attempt, lease_until, reason, run_no "
            f"FROM {self.s}.tasks WHERE id = %(id)s"
        )

    @property
    def state(self) -> str:
        return f"SELECT state FROM {self.s}.tasks WHERE id = %(id)s"

    @property
    def get(self) -> str:
        return f"SELECT {RECORD_COLS} FROM {self.s}.tasks t WHERE t.id = %(id)s"

    @property
    def records_oldest(self) -> str:
        return (
            f"SELECT {RECORD_COLS} FROM {self.s}.tasks t WHERE t.state = %(state)s "
            "ORDER BY t.seq LIMIT %(limit)s"
        )

    @property
    def records_newest(self) -> str:
        return (
            f"SELECT {RECORD_COLS} FROM {self.s}.tasks t WHERE t.state = %(state)s "
            "ORDER BY t.updated_at DESC, t.seq DESC LIMIT %(limit)s"
        )

    @property
    def counts(self) -> str:
        """The base counts plus the moves not yet folded (migration 16 -> 17): rows in
        proportion to the statements since the last fold, not to the tasks kept."""
        return (
            f"SELECT state, sum(n)::bigint FROM (SELECT state, n FROM {self.s}.task_counts "
            f"UNION ALL SELECT state, n FROM {self.s}.task_count_moves) c GROUP BY state"
        )

    @property
    def fold_counts(self) -> str:
        """The moves so far into the base, in one statement (a concurrent fold takes the
        others: a moved row is deleted once)."""
        return (
            f"WITH moved AS (DELETE FROM {self.s}.task_count_moves RETURNING state, n), "
            "summed AS (SELECT state, sum(n) AS n FROM moved GROUP BY state) "
            f"UPDATE {self.s}.task_counts c SET n = c.n + summed.n FROM summed "
            "WHERE c.state = summed.state"
        )

    @property
    def in_flight(self) -> str:
        return f"SELECT id FROM {self.s}.tasks WHERE state IN ({IN_CUSTODY_SQL}) ORDER BY seq"

    @property
    def unreported_dead(self) -> str:
        return (
            f"SELECT {RECORD_COLS} FROM {self.s}.tasks t "
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
    def journal(self) -> str:
        return (
            f"SELECT at, src, dst, worker, attempt, reason, actor FROM {self.s}.journal "
            "WHERE id = %(id)s ORDER BY seq"
        )

    @property
    def waiting_retries(self) -> str:
        return (
            f"SELECT count(*), min(not_before) FROM {self.s}.tasks "
            "WHERE state = 'pending' AND not_before > %(now)s"
        )

    @property
    def unreported_dead_count(self) -> str:
        return (
            f"SELECT count(*) FROM {self.s}.tasks WHERE state = 'dead' AND dead_reported_at IS NULL"
        )

    # -- operator (re-drive, cancel): one statement each, rows locked as they are read, so the
    # state an outcome names is the one the move was decided on

    def _operator_move(self, pick: str, update: str, expect: str, notify: bool) -> str:
        signal = (
            ", CASE WHEN u.id IS NOT NULL THEN pg_notify(%(chan)s, 'pending') END::text"
            if notify
            else ""
        )
        return (
            f"WITH pick AS ({pick} FOR UPDATE), "
            f"u AS (UPDATE {self.s}.tasks t SET {update}, updated_at = %(now)s FROM pick "
            f"WHERE t.id = pick.id AND t.state IN ({expect}) RETURNING t.id), "
            f"gone AS (DELETE FROM {self.s}.stall_notices n USING u WHERE n.id = u.id) "
            f"SELECT pick.id, pick.state, u.id IS NOT NULL{signal} "
            "FROM pick LEFT JOIN u ON u.id = pick.id"
        )

    _REDRIVE = (  # a re-driven task queues as low priority (issue 33): see REDRIVE_PRIORITY
        "state = 'pending', owner = NULL, attempt = 1, lease_until = NULL, not_before = NULL, "
        f"priority = greatest(priority, {REDRIVE_PRIORITY}), "
        f"result = NULL, no_send = false, dead_reported_at = NULL, {NO_DELIVERY_LEASE}, "
        "crash_count = 0, crashes_alone = 0, suspect = false, quarantined = false, "
        "quarantine_deaths = 0, last_quarantine_death = NULL, reason = %(reason)s"
    )

    @property
    def redrive(self) -> str:
        pick = f"SELECT id, state FROM {self.s}.tasks WHERE id = ANY(%(ids)s::text[])"
        return self._operator_move(pick, self._REDRIVE, "'dead'", notify=True)

    @property
    def redrive_dead(self) -> str:
        pick = (
            f"SELECT id, state FROM {self.s}.tasks WHERE state = 'dead' "
            f"AND reason IS DISTINCT FROM '{FORGOTTEN_REASON}' "
            "AND (%(text)s::text IS NULL OR strpos(reason, %(text)s::text) > 0) "
            "AND (%(skip)s::text IS NULL OR reason IS NULL "
            "OR left(reason, length(%(skip)s::text)) <> %(skip)s::text) "
            "ORDER BY updated_at, seq LIMIT %(limit)s"
        )
        return self._operator_move(pick, self._REDRIVE, "'dead'", notify=True)

    @property
    def cancel(self) -> str:
        pick = f"SELECT id, state FROM {self.s}.tasks WHERE id = ANY(%(ids)s::text[])"
        update = (
            "state = 'dead', lease_until = NULL, not_before = NULL, suspect = false, "
            f"{NO_DELIVERY_LEASE}, reason = %(reason)s"
        )
        return self._operator_move(pick, update, CANCELLABLE_SQL, notify=False)


# -- helpers -------------------------------------------------------------------------------------
